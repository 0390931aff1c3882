"""Layer 7, the ``memvault`` command line.

* :mod:`memvault.cli.common`: the context object, error exit and output helpers;
* :mod:`memvault.cli.quarantine`: ``memvault quarantine``;
* :mod:`memvault.cli.transfer`: ``memvault export``, ``import`` and ``inspect``;
* :mod:`memvault.cli.main`: the group, the verb commands and ``main`` (the console script).

May import: every layer below.
"""
