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
