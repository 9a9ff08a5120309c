"""What goes to the engine child process and what comes back (one JSON object a line)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jackin.transport.target import SshTarget

EventKind = Literal[
    "start",        # the engine has the request; hosts = [names]
    "connected",    # host connected
    "connect_error",  # host could not connect; error
    "facts",        # a deploy reported facts for host; data
    "op_start",     # op started on host
    "op_ok",        # op succeeded on host
    "op_error",     # op failed on host; error
    "host_done",    # per-host result; result = HostResult
    "error",        # the engine failed as a whole; error
    "done",         # last event
]  # fmt: skip


class EngineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    deploy: str = Field(description="path of a pyinfra deploy file")
    targets: list[SshTarget]
    data: dict[str, Any] = Field(default_factory=dict, description="given to the deploy as host.data.jackin")
    host_data: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per target name, given to that host's deploy as host.data.jackin_host "
        "(e.g. the state fleet.up read just before the run, so the deploy need not read it again)")  # fmt: skip
    dry_run: bool = False
    connect_timeout: int = Field(10, ge=1, le=300)
    command_timeout: int = Field(900, ge=1, description="seconds for each remote command: a wedged host fails alone")
    parallel: int = Field(0, ge=0, description="0: one greenlet per host, up to pyinfra's limit")


class PlannedChange(BaseModel):
    """An operation a dry run predicts will change the host, with its commands."""

    model_config = ConfigDict(extra="forbid")

    op: str
    commands: list[str] = Field(default_factory=list)


class HostResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    connected: bool = False
    ops: int = 0
    changed: int = 0
    failed: int = 0
    error: str | None = None
    facts: dict[str, Any] = Field(default_factory=dict)
    elapsed: float = 0.0
    changes: list[PlannedChange] = Field(default_factory=list, description="dry runs only")

    @property
    def ok(self) -> bool:
        return self.connected and self.failed == 0 and self.error is None


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event: EventKind
    t: float
    host: str | None = None
    op: str | None = None
    error: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    result: HostResult | None = None


class RunResult(BaseModel):
    """Per-host results are data: one failed host never hides the others."""

    model_config = ConfigDict(extra="forbid")

    hosts: list[HostResult]
    error: str | None = None
    elapsed: float = 0.0
    dry_run: bool = False

    @property
    def failed(self) -> list[HostResult]:
        return [h for h in self.hosts if not h.ok]

    @property
    def succeeded(self) -> list[HostResult]:
        return [h for h in self.hosts if h.ok]
