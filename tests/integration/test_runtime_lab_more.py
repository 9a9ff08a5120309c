"""OpenCode and Gemini CLI in their role images on a lab host, through ``fleet.up``, against a stand-in of their
vendor's API: the same run as test_runtime_lab.py's (its docstring), in a module of its own so that the four
runtimes' runs share two workers. Gemini CLI's stand-in serves HTTPS with a certificate of the test's own
authority, given to the agent as ``api_ca``."""

from __future__ import annotations

import pytest

from .conftest import module_lab
from .test_runtime_lab import RUNTIMES, run_runtime

MORE = [r for r in RUNTIMES if r[0] in ("opencode", "gemini")]


@pytest.fixture(scope="module")
def rlab():
    yield from module_lab("rm", 1, shared=True)


@pytest.mark.parametrize(("role", "credential", "header", "port", "tls"), MORE, ids=[r[0] for r in MORE])
def test_a_runtime_in_its_image_works_asks_and_hands_off_through_fleet_up(rlab, tmp_path, monkeypatch, role: str,
                                                                          credential: str, header: str, port: int,
                                                                          tls: bool):  # fmt: skip
    run_runtime(rlab, tmp_path, monkeypatch, role, credential, header, port, tls)
