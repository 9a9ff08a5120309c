"""Fleet rendering: status, clean check, up summary and dry-run plan printed into
a fixed-width console and compared as exact text; the duration and size formats."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from jackin.cli.render import fleet as ui
from jackin.cli.render.status import status_table
from jackin.cli.render.units import duration, size
from jackin.engine import HostResult, RunResult
from jackin.lifecycle.down import CleanCheck
from jackin.lifecycle.status import AgentStatus, FleetStatus, HostStatus


def render(renderable: object) -> list[str]:
    console = Console(file=io.StringIO(), width=140, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


# --- status_table ----------------------------------------------------------------

RUNNING = AgentStatus(instance="coder-1", container="jk-demo--coder-1", state="running", uid=60000, uptime=7500,
                      cpu_percent=12.345, memory=20971520, memory_limit=1073741824, disk=5242880,
                      disk_limit=67108864)  # fmt: skip
EXITED = AgentStatus(instance="reviewer-1", container="jk-demo--reviewer-1", state="exited", restarts=4,
                     error="OCI runtime create failed [x]")  # fmt: skip


def host(name: str, *agents: AgentStatus, reachable: bool = True, error: str | None = None) -> HostStatus:
    return HostStatus(host=name, address="192.0.2.10", port=22, reachable=reachable, error=error, agents=list(agents))


def test_status_table() -> None:
    status = FleetStatus(fleet="demo", at=0, hosts=[
        host("web-1", RUNNING, EXITED),
        host("web-2", reachable=False, error="timed out after 8s"),
        host("web-3"),
    ])  # fmt: skip
    assert render(status_table(status)) == [
        "fleet demo",
        "┏━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━━━━┓",
        "┃ host  ┃ agent      ┃ state       ┃ uptime ┃   cpu ┃           memory ┃             disk ┃ restarts ┃ egress ┃ dropped ┃ last error       ┃",
        "┡━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━━━━┩",
        "│ web-1 │ coder-1    │ running     │   2h5m │ 12.3% │ 20.0MiB / 1.0GiB │ 5.0MiB / 64.0MiB │        0 │ -      │       - │                  │",
        "│ web-1 │ reviewer-1 │ exited      │      - │     - │                - │                - │        4 │ -      │       - │ OCI runtime      │",
        "│       │            │             │        │       │                  │                  │          │        │         │ create failed    │",
        "│       │            │             │        │       │                  │                  │          │        │         │ [x]              │",
        "│ web-2 │ -          │ unreachable │      - │     - │                - │                - │        - │ -      │       - │ timed out after  │",
        "│       │            │             │        │       │                  │                  │          │        │         │ 8s               │",
        "│ web-3 │ -          │ no agents   │      - │     - │                - │                - │        - │ -      │       - │                  │",
        "└───────┴────────────┴─────────────┴────────┴───────┴──────────────────┴──────────────────┴──────────┴────────┴─────────┴──────────────────┘",
        "                                                  2/3 hosts reachable, 1/2 agents running",
    ]


def test_status_table_caption_counts() -> None:
    status = FleetStatus(fleet="demo", at=0, hosts=[
        host("a", RUNNING, RUNNING.model_copy(update={"instance": "coder-2"})),
        host("b", EXITED), host("c", reachable=False, error="refused"), host("d", reachable=False),
    ])  # fmt: skip
    assert render(status_table(status))[-1].strip() == "2/4 hosts reachable, 2/3 agents running"


def test_status_table_of_no_hosts() -> None:
    lines = render(status_table(FleetStatus(fleet="demo", at=0, hosts=[])))
    assert lines[0] == "fleet demo"
    assert lines[-1].strip() == "0/0 hosts reachable, 0/0 agents running"


def test_status_table_memory_without_limit() -> None:
    agent = RUNNING.model_copy(update={"memory": 512, "memory_limit": None, "cpu_percent": 0.0, "uptime": 59})
    row = render(status_table(FleetStatus(fleet="demo", at=0, hosts=[host("web-1", agent)])))[4]
    assert row.split("│")[4:7] == ["    59s ", " 0.0% ", "   512B "]


# --- clean_table -----------------------------------------------------------------


def test_clean_table() -> None:
    checks = [
        CleanCheck(host="web-1", clean=True),
        CleanCheck(host="web-2", clean=False, leftovers={"users": ["jk-demo--coder-1"], "containers": ["a", "b"]}),
        CleanCheck(host="web-3", clean=False, error="timed out"),
    ]
    assert render(ui.clean_table(checks)) == [
        "clean check",
        "┏━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓",
        "┃ host  ┃ result    ┃ left behind                               ┃",
        "┡━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩",
        "│ web-1 │ clean     │ nothing                                   │",
        "│ web-2 │ LEFTOVERS │ users: jk-demo--coder-1; containers: a, b │",
        "│ web-3 │ UNKNOWN   │ timed out                                 │",
        "└───────┴───────────┴───────────────────────────────────────────┘",
    ]


# --- up_table --------------------------------------------------------------------

UP = RunResult(hosts=[
    HostResult(host="web-1", connected=True, ops=9, changed=3, elapsed=4.4,
               facts={"agents": 3, "distro": "Debian 12", "kernel": "6.1.0", "hostname": "web-1"}),
    HostResult(host="web-2", connected=False, error="cannot reach root@192.0.2.11:22: refused", elapsed=0.1),
], elapsed=5.0)  # fmt: skip


def test_up_table() -> None:
    assert render(ui.up_table(UP, title="fleet.up demo")) == [
        "fleet.up demo",
        "┏━━━━━━━┳━━━━━━━━┳━━━━━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓",
        "┃ host  ┃ status ┃ agents ┃ changed ┃ failed ┃ time ┃ detail                                   ┃",
        "┡━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩",
        "│ web-1 │ ok     │      3 │       3 │      0 │ 4.4s │ Debian 12 6.1.0                          │",
        "│ web-2 │ FAILED │      - │       0 │      0 │ 0.1s │ cannot reach root@192.0.2.11:22: refused │",
        "└───────┴────────┴────────┴─────────┴────────┴──────┴──────────────────────────────────────────┘",
        "                                1 ok, 1 failed, 3 changed, 5.0s",
    ]


def test_up_table_dry_run_and_planned_agents() -> None:
    lines = render(ui.up_table(UP.model_copy(update={"dry_run": True}), title="t", agents=7))
    assert lines[5] == "│ web-2 │ FAILED │      7 │       0 │      0 │ 0.1s │ cannot reach root@192.0.2.11:22: refused │"
    assert lines[-1].strip() == "1 ok, 1 failed, 3 would change, 5.0s"


# --- formats ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0, "0s"), (0.9, "0s"), (59, "59s"), (59.99, "59s"), (60, "1m0s"), (450, "7m30s"),
     (3599, "59m59s"), (3600, "1h0m"), (7500, "2h5m"), (86399, "23h59m"), (86400, "1d0h"),
     (3 * 86400 + 4 * 3600, "3d4h"), (3 * 86400 + 4 * 3600 + 59 * 60, "3d4h"), (400 * 86400, "400d0h")],
)  # fmt: skip
def test_duration(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "-"), (0, "0B"), (1023, "1023B"), (1024, "1.0KiB"), (1536, "1.5KiB"), (1024**2 - 1, "1024.0KiB"),
     (1024**2, "1.0MiB"), (20971520, "20.0MiB"), (1024**3, "1.0GiB"), (5 * 1024**4, "5120.0GiB")],
)  # fmt: skip
def test_bytes(value: int | None, text: str) -> None:
    assert size(value) == text
