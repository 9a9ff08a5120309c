"""The credential gateway's records, as a host's reads find them (pure: shell text, models and parsers).

The gateway (``jackin/net/gatewayd.py``) keeps per agent ``<instance>.json`` in its state directory: what it
counted (requests, tokens, cost, status codes, bytes, upstreams), what it refused and why, and whether the
agent's budget is spent. It writes them as its own user; they are read as that user, bounded, and parsed
strictly, never trusted as root's.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

from jackin import hostpaths
from jackin.facts.sections import read_sections

MAX_TOKENS = 10**12
MAX_COST = 1e6  # USD
MAX_ACCOUNT = 256 * 1024  # bytes of a gateway account read


class GatewayDenial(BaseModel):
    model_config = ConfigDict(extra="ignore")
    time: float = Field(ge=0, allow_inf_nan=False)
    kind: str = Field(max_length=40)
    detail: str = Field(max_length=400)


class GatewayAccount(BaseModel):
    """An agent's record at its host's credential gateway (``jackin/net/gatewayd.py``: STATE/<instance>.json):
    its API usage read from the responses, its audit trail and its budget's state. Written by the gateway's
    own user, never by the agent; bounded and parsed strictly all the same."""

    model_config = ConfigDict(extra="ignore")
    requests: int = Field(0, ge=0, le=MAX_TOKENS)
    input_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    usd: float = Field(0.0, ge=0, le=MAX_COST, allow_inf_nan=False)
    unpriced: list[str] = Field(default_factory=list, max_length=20)
    statuses: dict[str, int] = Field(default_factory=dict, max_length=100)
    bytes_up: int = Field(0, ge=0)
    bytes_down: int = Field(0, ge=0)
    upstreams: dict[str, int] = Field(default_factory=dict, max_length=20)
    denials: list[GatewayDenial] = Field(default_factory=list, max_length=100)
    denied: int = Field(0, ge=0)
    spent: str = Field("", max_length=400)  # "budget spent: tokens 1032 of 1000" while it is
    last: float = Field(0.0, ge=0, allow_inf_nan=False)

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented use on a property
    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def label(self) -> str:
        """``3 requests, 36 in, 21 out, $0.0006``."""
        cost = f", ${self.usd:.4f}" if self.usd else ""
        return f"{self.requests} requests, {self.input_tokens} in, {self.output_tokens} out{cost}"

    @property
    def summary(self) -> str:
        """The label, and how many requests were refused: ``3 requests, 36 in, 21 out; 2 refused``."""
        return self.label + (f"; {self.denied} refused" if self.denied else "")

    @classmethod
    def parse(cls, raw: bytes | None) -> GatewayAccount | None:
        if not raw or len(raw) > MAX_ACCOUNT:
            return None
        try:
            return cls.model_validate_json(raw)
        except ValidationError:
            return None


MAX_SECTION = 8 * 1024 * 1024  # bytes of the whole section (hex): what a host's read may cost


def gateway_files(fleet: str) -> str:
    """Shell: ``##gateway-files``, one line per JSON file of the fleet's credential gateway's state directory
    (``<instance>.json``, ``gateway.json``): its name and its first MAX_ACCOUNT
    bytes in hex. Read as the gateway's user (its directory is 0700), never as root, in at most 5 seconds: a
    link or a FIFO there can cost nothing but this section. What that user's process prints reaches the read
    only through root's filter (``NAME.json HEX`` lines, MAX_SECTION bytes), so a compromised gateway writing
    into its pipe cannot forge another section."""
    d, user = shlex.quote(hostpaths.gateway_state(fleet)), shlex.quote(hostpaths.gateway_user(fleet))
    each = ('cd "$1" || exit 0; for f in *.json; do case "$f" in *[!a-z0-9.-]*) continue;; esac; '
            f'[ -f "$f" ] || continue; printf "%s " "$f"; head -c {MAX_ACCOUNT} -- "$f" '
            '| od -An -v -tx1 | tr -d " \\n"; echo; done')  # fmt: skip
    return (f"echo '##gateway-files'; if [ -d {d} ] && id -u {user} >/dev/null 2>&1; then {{ setpriv --reuid={user} "
            f"--regid={user} --clear-groups -- timeout 5 sh -c {shlex.quote(each)} sh {d} 2>/dev/null "
            f"| LC_ALL=C grep -aE '^[a-z0-9.-]+[.]json [0-9a-f]*$' | head -c {MAX_SECTION}; }} || true; fi; ")  # fmt: skip


def gateway_accounts(output: str) -> dict[str, bytes]:
    """The ``##gateway-files`` section: file name -> bytes (lines that are not ``NAME HEX`` are dropped)."""
    found: dict[str, bytes] = {}
    for line in read_sections(output).get("gateway-files", []):
        name, _, data = line.partition(" ")
        try:
            found[name] = bytes.fromhex(data.strip())
        except ValueError:
            continue
    return found
