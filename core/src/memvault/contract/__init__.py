"""Layer 1, the contract: the types every hook exchanges and every error memvault raises.

* :mod:`memvault.contract.errors`: the error hierarchy;
* :mod:`memvault.contract.terms`: what a search term is;
* :mod:`memvault.contract.models`: requests, results, enums, caps, labels;
* :mod:`memvault.contract.lifecycle`: what crosses the lifecycle hooks;
* :mod:`memvault.contract.scanning`: the check a provider runs on the stored body of an append;
* :mod:`memvault.contract.forking`: what a provider resets in a forked child;
* :mod:`memvault.contract.registration`: the registration callbacks' protocols;
* :mod:`memvault.contract.clock`: the one clock expiry decisions read (``use_clock`` for tests);
* :mod:`memvault.contract.retention`: retention policies, durations, the sweep's request and result;
* :mod:`memvault.contract.wire`: the one cattrs converter (JSON for the HTTP wire,
  config, export files and stored quarantine records).

May import: nothing from another layer of memvault.
"""
