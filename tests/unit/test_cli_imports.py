"""The CLI's start is part of every command's latency: the `inv` process never loads pyinfra or gevent.

pyinfra (and gevent, which it needs patched) belong to the engine child process and the deploys only.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tasks_module_loads_neither_pyinfra_nor_gevent() -> None:
    code = (
        "import sys, tasks; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyinfra', 'gevent'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_status_plan_and_up_paths_load_neither_pyinfra_nor_gevent() -> None:
    """What fleet.status, fleet.plan and fleet.up import in the inv process (the state read, the
    in-process plan with every command builder, the engine client): no pyinfra, no gevent."""
    code = (
        "import sys, tasks; "
        "import jackin.cli, jackin.fleet, jackin.hostplan, jackin.status, jackin.runs, jackin.engine, "
        "jackin.snapshots.auto, jackin.snapshots.final, jackin.snapshots.api, jackin.state, jackin.daemon; "
        "from jackin.operations import changes, cow, credentials, firewall, fleet, host, files; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyinfra', 'gevent'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
