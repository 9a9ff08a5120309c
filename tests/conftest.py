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


# What each integration module costs one worker, in seconds (measured with --durations=0 in a four-worker run,
# setup, call and teardown summed; rough is enough):
# the modules run longest first, so parallel workers (pytest-xdist, --dist loadscope) end together.
# A module missing here counts as COST_UNKNOWN.
COST = {
    "test_transport.py": 246,
    "test_fresh_host.py": 227,
    "test_point_in_time.py": 210,
    "test_snapshots.py": 185,
    "test_fleet_lifecycle.py": 156,
    "test_network_policy.py": 149,
    "test_ownership.py": 114,
    "test_guard.py": 97,
    "test_agent_paths.py": 96,
    "test_agent_state.py": 94,
    "test_jump_hosts.py": 89,
    "test_dns_filter.py": 80,
    "test_final_pull.py": 71,
    "test_transfer.py": 69,
    "test_runtime_lab.py": 100,  # Claude Code (then agent.attach) and Codex in their images (built before the suite: .ci/run)
    "test_runtime_lab_more.py": 100,  # OpenCode and Gemini CLI (its stand-in over TLS) in their images
    "test_gateway_login.py": 80,  # a 2-host lab of its own, 6 Claude Code agents on one shared login
    "test_fleet_work.py": 115,  # a 2-host lab of its own, 33 tasks through fleet.work (the loop killed once), fleet.run
    "test_gateway.py": 55,  # Claude Code through the credential gateway
    "test_exit_codes.py": 58,
    "test_checkpoints.py": 57,
    "test_snapshot_tiers.py": 56,
    "test_rollback.py": 50,
    "test_fleet_run.py": 50,
    "test_always_denied.py": 47,
    "test_ttl.py": 47,
    "test_own_bridge.py": 46,
    "test_work.py": 43,
    "test_auto_snapshots.py": 40,
    "test_credentials.py": 39,
    "test_lab.py": 38,
    "test_rollback_snapshots.py": 33,
    "test_agent_tools.py": 31,
    "test_fleet_up.py": 27,
    "test_placement.py": 90,  # a 3-host lab of its own (4, 2 and 1 GiB), 7 agents placed, one moved with its workspace
    "test_fleet_plan.py": 20,
    "test_roles.py": 18,
    "test_contract.py": 17,
    "test_runtime_claude_code.py": 12,
    "test_runtime_local.py": 30,  # Codex CLI, OpenCode and Gemini CLI on this machine
}
COST_UNKNOWN = 10
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
