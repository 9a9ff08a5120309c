"""Credential values inside the engine child process: handed over on its stdin, never in the request data.

The request (``EngineRequest``, whose ``data`` is the plan) is the first line of the child's
stdin; the credential values (``jackin.spec.credentials.Secrets.to_wire``) follow on the second,
so they never enter ``host.data``, the plan, pyinfra's operation arguments or any event.
Deploys take them with ``get()``.
"""

from __future__ import annotations

from jackin.spec.credentials import Secrets

_secrets: Secrets | None = None


def load(text: str) -> None:
    global _secrets
    _secrets = Secrets.from_wire(text) if text.strip() else None


def get() -> Secrets:
    """The run's credential values; empty when none were handed over (e.g. a deploy run by hand)."""
    return _secrets if _secrets is not None else Secrets({}, b"")
