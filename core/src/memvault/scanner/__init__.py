"""Layer 5, the built-in prompt-injection scanner (contract P29-P31).

* :mod:`memvault.scanner.normalise`: the views of a text (folding, confusables);
* :mod:`memvault.scanner.rules`: the rule families and their data;
* :mod:`memvault.scanner.engine`: :func:`~memvault.scanner.engine.scan` and the policy;
* :mod:`memvault.scanner.quarantine`: the ``read`` placeholder and operator access to kept copies;
* :mod:`memvault.scanner.plugin`: :class:`~memvault.scanner.plugin.BuiltinScanner`, the hook wrappers.

May import: :mod:`memvault.contract` and :mod:`memvault.hooks`.
"""
