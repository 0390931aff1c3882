"""Layer 2, the hook specifications, one module per plugin manager that calls them.

* :mod:`memvault.hooks.markers`: the pluggy markers (``hookspec``, ``hookimpl``);
* :mod:`memvault.hooks.registration`: hooks the registry calls once per plugin;
* :mod:`memvault.hooks.provider`: the provider verbs a vault calls;
* :mod:`memvault.hooks.lifecycle`: the lifecycle phases a vault's slots call.

May import: :mod:`memvault.contract` only.
"""
