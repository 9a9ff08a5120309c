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
        "import jackin.cli.fleet, jackin.lifecycle.fleet, jackin.lifecycle.hostplan, jackin.lifecycle.status, jackin.lifecycle.runs, jackin.engine, "
        "jackin.snapshots.auto, jackin.snapshots.final, jackin.snapshots.api, jackin.facts.state, jackin.facts.daemon; "
        "from jackin.operations import changes, cow, credentials, firewall, fleet, host, files; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyinfra', 'gevent'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_tasks_module_leaves_what_commands_need_to_their_first_use() -> None:
    """`inv --list` (and every command's start) executes neither the fleet API nor what only fleet.up, plan or
    rollback need (jackin.lazy stand-ins); each stand-in becomes the real module on its first use."""
    code = (
        "import sys, tasks; from importlib.util import _LazyModule; "
        "loaded = lambda n: n in sys.modules and not isinstance(sys.modules[n], _LazyModule); "
        "names = ['jackin.lifecycle.fleet', 'jackin.lifecycle.down', 'jackin.plan.contract', 'jackin.plan.launch', 'jackin.lifecycle.rollback', 'jackin.lifecycle.rollback_choice', 'jackin.net.probes', 'jackin.snapshots.final', "
        "'jackin.lifecycle.hostplan', 'jackin.lab.providers', 'jackin.cli.fleet', 'jackin.cli.snapshot', 'jackin.cli.rollback', "
        "'jackin.cli.run', 'jackin.cli.work', 'jackin.cli.agent', 'jackin.cli.lab', 'jackin.cli.role']; "
        "print(sorted(n for n in names if loaded(n))); "
        "tasks.fleet_cli.fleet_api.status; print(loaded('jackin.lifecycle.fleet')); "
        "import jackin.plan.launch as c; c.current; print(loaded('jackin.plan.launch'))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:3] == ["[]", "True", "True"]


def test_fleet_status_loads_neither_the_fleet_api_nor_the_engine() -> None:
    """fleet.status reads through jackin.lifecycle.status: neither jackin.lifecycle.fleet (and the models of fleet.up's
    results it names: host plans, snapshots, the state read) nor the engine's protocol is executed; nor
    paramiko and Fabric (jackin.transport.ssh), which only the reads OpenSSH does not serve and lab.up load."""
    code = (
        "import sys, tasks; from importlib.util import _LazyModule; "
        "import jackin.cli.fleet as cli, jackin.lifecycle.status as status; "
        "from jackin.spec import Inventory; "
        "status.read = lambda spec: status.FleetStatus(fleet=spec.fleet.name, at=0, hosts=[]); "
        "loaded = lambda n: n in sys.modules and not isinstance(sys.modules[n], _LazyModule); "
        "names = ['jackin.lifecycle.fleet', 'jackin.lifecycle.down', 'jackin.engine', 'jackin.engine.protocol', 'jackin.lifecycle.hostplan', 'jackin.facts.state', "
        "'jackin.snapshots.auto', 'jackin.snapshots.final', 'jackin.lifecycle.gc', 'jackin.images.build', 'jackin.plan.contract', 'jackin.plan.launch', "
        "'jackin.transport.ssh', 'paramiko', 'fabric', 'cryptography']; "
        "code = cli.fleet_status('inventory/lab.yaml', watch=False, json=True); "
        "print(code, sorted(n for n in names if loaded(n)))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "0 []"


def test_the_up_path_loads_neither_paramiko_nor_fabric_nor_cryptography() -> None:
    """fleet.up and fleet.plan read over OpenSSH and run the engine in a child: the inv process loads
    no SSH library (~50 ms) unless a read falls back to Fabric (jump hosts, JACKIN_SSH=paramiko)."""
    code = (
        "import sys, tasks; "
        "import jackin.cli.fleet, jackin.cli.rollback, jackin.cli.run, jackin.lifecycle.fleet, jackin.lifecycle.down, jackin.lifecycle.hostplan, jackin.lifecycle.runs, jackin.engine, jackin.lifecycle.teardown, "
        "jackin.snapshots.auto, jackin.snapshots.final, jackin.facts.state, jackin.plan.launch, jackin.images.build, "
        "jackin.spec.credentials, jackin.work.bundles, jackin.lab.providers, jackin.transport.remote, jackin.transport.openssh; "
        "tops = {m.split('.')[0] for m in sys.modules}; "
        "print(sorted(tops & {'paramiko', 'fabric', 'cryptography'}), 'jackin.transport.ssh' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] False"


def test_the_library_loads_neither_rich_nor_the_cli() -> None:
    """Only jackin/cli prints: every library package imported whole loads neither rich nor jackin.cli (the
    import-linter contracts check the imports as written; this checks what importing really loads)."""
    code = (
        "import sys, importlib, pathlib; "
        "names = ['.'.join(p.with_suffix('').parts).removesuffix('.__init__') for p in pathlib.Path('jackin').rglob('*.py')]; "
        "names = [n for n in names if not n.startswith('jackin.cli') and n != 'jackin.engine.runner']; "
        "[importlib.import_module(n) for n in names]; "
        "print(len(names), sorted(m for m in sys.modules if m.split('.')[0] == 'rich' or m.startswith('jackin.cli')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    count, loaded = done.stdout.strip().split(" ", 1)
    assert int(count) > 100 and loaded == "[]"
