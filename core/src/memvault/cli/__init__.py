"""Layer 7, the ``memvault`` command line.

* :mod:`memvault.cli.common`: the context object, error exit and output helpers;
* :mod:`memvault.cli.quarantine`: ``memvault quarantine``;
* :mod:`memvault.cli.transfer`: ``memvault export``, ``import`` and ``inspect``;
* :mod:`memvault.cli.main`: the group, the verb commands and ``main`` (the console script).

May import: every layer below.
"""

from __future__ import annotations

from memvault.contract.deprecation import forward

# memvault 0.1.0's ``memvault.cli`` was one module holding the commands; each old path
# still gives the same object, with one warning (removed in 1.0.0). ``memvault.cli.main``
# is the module now once it is imported (the console script is ``memvault.cli.main:main``).
__getattr__, __dir__ = forward(
    __name__,
    {
        "render_table": "memvault.cli.common",
        **dict.fromkeys(
            ("cli", "doctor", "forget", "health", "main", "providers", "read", "recall", "retain", "unstructure_check"),
            "memvault.cli.main",
        ),
    },
    whole=False,
)
