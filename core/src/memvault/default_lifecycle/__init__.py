"""Layer 5, the default lifecycle: a built-in plugin every vault carries.

* :mod:`memvault.default_lifecycle.plugin`: the lifecycle hooks over the provider verbs;
* :mod:`memvault.default_lifecycle.tools`: the memory tools of a ``memory`` slot;
* :mod:`memvault.default_lifecycle.notes`: numbered notes of a ``notes`` slot (L14).

May import: :mod:`memvault.contract` and :mod:`memvault.hooks`.
"""
