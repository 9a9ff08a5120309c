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
