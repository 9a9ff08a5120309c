"""Our operations (pyinfra has none for fleets or nftables): pure command builders of (plan, state),
importable without pyinfra; the pyinfra side is ``ops.py`` and ``script.py``, loaded by deploys only."""
