"""``daemon_config``: our address pools merged into the host's daemon.json, or None when in place."""

from __future__ import annotations

import json

import pytest

from jackin.operations.host import DAEMON_JSON, daemon_config
from jackin.spec.models import AddressPool

POOLS = [AddressPool(base="10.213.0.0/16", size=24), AddressPool(base="10.214.0.0/16", size=26)]
WANTED = [{"base": "10.213.0.0/16", "size": 24}, {"base": "10.214.0.0/16", "size": 26}]


@pytest.mark.parametrize("current", [None, "", "  \n", "{}"], ids=["missing", "empty", "blank", "empty-object"])
def test_new_config(current: str | None) -> None:
    assert daemon_config(current, POOLS) == (
        "{\n"
        '  "default-address-pools": [\n'
        "    {\n"
        '      "base": "10.213.0.0/16",\n'
        '      "size": 24\n'
        "    },\n"
        "    {\n"
        '      "base": "10.214.0.0/16",\n'
        '      "size": 26\n'
        "    }\n"
        "  ]\n"
        "}\n"
    )


def test_merges_into_the_existing_settings() -> None:
    current = '{"log-driver": "journald", "live-restore": true, "storage-driver": "overlay2"}'
    new = daemon_config(current, POOLS)
    assert new is not None and new.endswith("}\n")
    assert json.loads(new) == {"log-driver": "journald", "live-restore": True, "storage-driver": "overlay2",
                               "default-address-pools": WANTED}  # fmt: skip
    assert list(json.loads(new)) == ["default-address-pools", "live-restore", "log-driver", "storage-driver"]


def test_replaces_other_pools() -> None:
    current = json.dumps({"default-address-pools": [{"base": "172.80.0.0/16", "size": 24}], "debug": False})
    assert json.loads(daemon_config(current, POOLS) or "") == {"default-address-pools": WANTED, "debug": False}


@pytest.mark.parametrize(
    "current",
    [json.dumps({"default-address-pools": WANTED}),
     json.dumps({"debug": True, "default-address-pools": [{"size": 24, "base": "10.213.0.0/16"},
                                                          {"size": 26, "base": "10.214.0.0/16"}]}, indent=4)],
    ids=["same", "same-reordered-keys"],
)  # fmt: skip
def test_unchanged_is_none(current: str) -> None:
    assert daemon_config(current, POOLS) is None


def test_its_own_output_is_unchanged() -> None:
    assert daemon_config(daemon_config('{"debug": true}', POOLS), POOLS) is None


def test_pool_order_matters() -> None:
    assert daemon_config(json.dumps({"default-address-pools": WANTED[::-1]}), POOLS) is not None


@pytest.mark.parametrize("current", ["[]", "42", '"text"', "null", "true", "{", "{'single': 1}", "not json"])
def test_non_object_is_refused(current: str) -> None:
    with pytest.raises(ValueError) as caught:
        daemon_config(current, POOLS)
    assert str(caught.value) == f"{DAEMON_JSON} is not a JSON object; fix it by hand first"
