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
# the modules run longest first, so parallel workers (pytest-xdist, --dist loadscope) end together.
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
# Modules that share a session fixture share a worker, so that one worker makes it once.
TOGETHER = {"tests/integration/test_fleet_up.py": "tests/integration/test_lab.py"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The costliest integration modules first, the unit tests last, where they fill the gaps; the order
    within a module is kept (its tests run in file order, each building on the last)."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(path: str) -> float:
        if "/integration/" not in f"/{path}":
            return -1.0
        return COST.get(path.rsplit("/", 1)[-1], COST_UNKNOWN)

    order = sorted(modules, key=cost, reverse=True)  # stable: equal costs keep the collection order
    items[:] = [item for path in order for item in modules[path]]


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_ByModule(), "jackin-by-module")


class _ByModule:
    """``--dist loadscope`` keeps each module on one worker (its module-scoped lab and fleet, its tests in
    file order); this adds the pairs in TOGETHER. (``--dist loadgroup`` does not work here: xdist 3.8 names
    a group by rewriting ``item._nodeid``, which pytest 9 no longer reads, so every test became its own
    group and a module's tests ran on both workers, out of order.)"""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") != "loadscope":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class Scheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                module = super()._split_scope(nodeid).split("::", 1)[0]
                return TOGETHER.get(module, module)

        return Scheduling(config, log)
