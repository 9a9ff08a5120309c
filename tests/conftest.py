"""Shared test set-up: every test run keeps its operator state in a temp dir."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _state_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("jackin-state")
    old = os.environ.get("JACKIN_STATE_DIR")
    os.environ["JACKIN_STATE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("JACKIN_STATE_DIR", None)
    else:
        os.environ["JACKIN_STATE_DIR"] = old


# What each integration module costs one worker, in seconds (measured with --durations; rough is enough):
# the modules run longest first, so parallel workers (pytest-xdist, --dist loadgroup) end together.
# A module missing here counts as COST_UNKNOWN.
COST = {
    "test_transport.py": 600,
    "test_fresh_host.py": 400,
    "test_agent_state.py": 300,
    "test_snapshots.py": 300,
    "test_transfer.py": 300,
    "test_fleet_lifecycle.py": 300,
    "test_work.py": 250,
    "test_guard.py": 250,
    "test_point_in_time.py": 250,
    "test_ttl.py": 200,
    "test_checkpoints.py": 200,
    "test_jump_hosts.py": 200,
    "test_network_policy.py": 200,
    "test_dns_filter.py": 200,
    "test_final_pull.py": 200,
    "test_snapshot_tiers.py": 200,
    "test_agent_tools.py": 150,
    "test_credentials.py": 150,
    "test_auto_snapshots.py": 150,
    "test_ownership.py": 150,
    "test_fleet_run.py": 150,
}
COST_UNKNOWN = 100
# Modules that share a session fixture share a group, so that one worker makes it once.
GROUP = {"test_lab.py": "session-lab", "test_fleet_up.py": "session-lab"}


@pytest.hookimpl(tryfirst=True)  # before xdist names the groups from the marks
def pytest_collection_modifyitems(config, items):
    """Each integration module is one xdist group (its module-scoped lab and fleet stay on one worker, and
    its tests run in file order, each building on the last); the costliest modules come first, the unit
    tests last, where they fill the gaps. The order within a module is kept."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(path: str) -> float:
        if "/integration/" not in f"/{path}":
            return -1.0
        return COST.get(path.rsplit("/", 1)[-1], COST_UNKNOWN)

    order = sorted(modules, key=cost, reverse=True)  # stable: equal costs keep the collection order
    items[:] = [item for path in order for item in modules[path]]
    for path in order:
        if cost(path) >= 0:
            for item in modules[path]:
                name = path.rsplit("/", 1)[-1]
                item.add_marker(pytest.mark.xdist_group(GROUP.get(name, name.removesuffix(".py"))))
