"""The spec's value types and parsers: names, sizes, durations, addresses, host keys and allow entries.

Below the models (``jackin.spec.models``) and the roles (``jackin.spec.roles``), which both use them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

SLUG = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"  # no "--": names join with "--" (jk-<fleet>--<instance>)
Slug = Annotated[str, Field(pattern=SLUG, max_length=24)]
HostName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=63)]

HOST_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b)?$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML ``true`` must not become 1 in a numeric field (pydantic's lax mode allows it)."""
        if isinstance(value, bool) and info.field_name:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = set(get_args(annotation)) or {annotation}
            if bool not in kinds and kinds & {int, float}:
                raise ValueError("expected a number, got a boolean")
        return value


# --- value types -------------------------------------------------------------


def parse_size(value: str | int) -> int:
    """``512m``, ``2g``, ``1.5GiB`` or a byte count -> bytes."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 512m or 2g")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("expected a positive size")
        return value
    match = _SIZE.match(str(value).strip())
    if not match:
        raise ValueError("expected a size such as 512m or 2g")
    number = float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]
    if number < 1:
        raise ValueError("expected a positive size")
    return int(number)


def parse_duration(value: str | int) -> int:
    """``90m``, ``8h``, ``1d12h`` or seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30m, 8h or 2d")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("expected a positive duration")
        return value
    text = str(value).strip().lower()
    if text.isdigit():
        return parse_duration(int(text))
    match = _DURATION.match(text)
    if not match or not any(match.groups()):
        raise ValueError("expected a duration such as 30m, 8h or 2d")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError("expected a positive duration")
    return total


def parse_timeout(value: str | float | None) -> int | None:
    """An optional ``--timeout``: None when not given (None or empty), else ``parse_duration``'s
    seconds (``90``, ``10m``, ``1h30m``); a ValueError saying why not."""
    if value is None or value == "":
        return None
    return parse_duration(value if isinstance(value, int) else str(value))


def _check_host_key(value: str) -> str:
    parts = value.split()
    if len(parts) < 2 or parts[0] not in HOST_KEY_TYPES:
        raise ValueError(
            "expected a public host key such as 'ssh-ed25519 AAAA...' (the line from /etc/ssh/ssh_host_ed25519_key.pub)"
        )
    if not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", parts[1]) or len(parts[1]) < 16:
        raise ValueError("the key's base64 part is not valid")
    return " ".join(parts[:2])


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _ip(value: str) -> str:
    """An IP address without a scope (``fe80::1%eth0`` is refused: it ends up in shell and nft text)."""
    if "%" in value:
        raise ValueError("scoped IPv6 addresses are not supported")
    return str(ipaddress.ip_address(value))


def _check_address(value: str) -> str:
    if "%" in value:
        raise ValueError("scoped IPv6 addresses are not supported")
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.split(".")
    if labels[-1].isdigit():
        raise ValueError("expected an IP address or a DNS name")  # a name cannot end in a number
    if len(value) <= 253 and all(_LABEL.fullmatch(label) for label in labels):
        return value
    raise ValueError("expected an IP address or a DNS name")


HostKey = Annotated[str, AfterValidator(_check_host_key)]
Address = Annotated[str, AfterValidator(_check_address)]


IpAddress = Annotated[str, AfterValidator(_ip)]


def decode_utf8(data: bytes) -> str:
    """``data`` as UTF-8 text, or ValueError naming the first byte that is not UTF-8 and its offset (from 0):
    ``byte 0xff at byte offset 4 (invalid start byte)``, for the caller to say what was not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"byte 0x{data[error.start]:02x} at byte offset {error.start} ({error.reason})") from None


# --- allow entries (the egress policy's ``allow``) ------------------------------------------------


def _check_allow_entry(value: str) -> str:
    """CIDR, ``host:port``, ``CIDR:port``, domain, ``domain:port``; IPv6 in brackets."""
    target, port = value, None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError("unclosed '[' in IPv6 entry")
        target, rest = value[1:end], value[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError("expected '[IPv6]:port'")
            port = rest[1:]
    elif value.count(":") == 1:
        target, port = value.split(":")
    if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise ValueError(f"port {port!r} is not a number from 1 to 65535")
    try:
        ipaddress.ip_network(target, strict=True)
        return value
    except ValueError as error:
        if re.fullmatch(r"[0-9a-fA-F.:/]+", target) and any(c.isdigit() for c in target):
            raise ValueError(f"{target!r} is not a valid address or CIDR ({error})") from None
    if target.startswith("*."):
        raise ValueError(
            "wildcard domains cannot be enforced (each agent's filtering resolver allows exact names only: list each name)"
        )
    if _DOMAIN.match(target.lower()):
        return value
    raise ValueError("expected a CIDR, host:port, CIDR:port, or a domain name (optionally :port)")


AllowEntry = Annotated[str, AfterValidator(_check_allow_entry)]


# --- a runtime's API base URL (jackin/spec/roles.py ``api``, the spec's ``api_url``) ---------------------

_API_URL = re.compile(r"(https?)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::([1-9][0-9]{0,4}))?(/[A-Za-z0-9._~/%+-]*)?")
# Always denied to agents (jackin/net/firewall.py): a URL there could never be reached.
_DENIED_API = ("168.63.129.16", "100.100.100.200", "fd00:ec2::254")


def _check_api_url(value: str) -> str:
    """``http(s)://host[:port][/path]``: a domain, an IPv4 address or an [IPv6] one; no user, query or
    fragment, nothing after the path (not even a newline); not an address every agent is denied."""
    match = _API_URL.fullmatch(value)
    if not match:
        raise ValueError("expected http(s)://host[:port][/path] (no user, query or fragment)")
    host, port = match.group(2), match.group(3)
    if port is not None and not 1 <= int(port) <= 65535:
        raise ValueError(f"port {port!r} is not a number from 1 to 65535")
    bracketed = host.startswith("[")
    bare = host[1:-1] if bracketed else host
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        if bracketed:
            raise ValueError(f"{host} is not an IPv6 address") from None
        _check_allow_entry(host)  # a valid domain name, as an allow entry takes it
        return value
    if (address.version == 6) != bracketed:
        raise ValueError("an IPv6 address goes in brackets ([2001:db8::1]), an IPv4 address without")
    if address.is_link_local or str(address) in _DENIED_API:
        raise ValueError(f"{bare} is always denied to agents (link-local and cloud metadata addresses)")
    return value


ApiUrl = Annotated[str, AfterValidator(_check_api_url)]


def api_entry(url: str) -> str:
    """The allow entry an API base URL needs: ``host:port`` (443 for https, 80 for http by default)."""
    match = _API_URL.fullmatch(url)
    if not match:
        raise ValueError(f"not an API URL: {url!r}")
    scheme, host, port = match.group(1), match.group(2), match.group(3)
    return f"{host}:{port or (443 if scheme == 'https' else 80)}"


@dataclass(frozen=True)
class Entry:
    """One parsed allow entry."""

    family: str  # "ip", "ip6" or "domain"
    target: str
    port: int | None


def parse_entry(value: str) -> Entry:
    target, port = value, None
    if value.startswith("["):
        end = value.index("]")
        target, rest = value[1:end], value[end + 1 :]
        port = int(rest[1:]) if rest else None
    elif value.count(":") == 1:
        target, raw = value.split(":")
        port = int(raw)
    try:
        network = ipaddress.ip_network(target, strict=True)
    except ValueError:
        return Entry("domain", target.lower(), port)
    return Entry("ip" if network.version == 4 else "ip6", str(network), port)
