"""The providers' old name: they live in jackin/lab/providers.py (below the snapshots and the agent tools,
which resolve hosts through them). Kept for tasks.py and tests/integration, which import this name."""

from jackin.lab.providers import (  # noqa: F401
    LabProvider,
    Provider,
    Release,
    StaticProvider,
    destroy_lab,
    provider_for,
    static_targets,
    targets,
)
