"""The time-to-live's part of the state read (``##ttl``): its deadline file and units on a host (pure).

What is written there, and why, is jackin/operations/ttl.py's; the paths are jackin/hostpaths.py's.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, ConfigDict

from jackin.hostpaths import ttl_file, ttl_unit, unit_path


class TtlState(BaseModel):
    """The time-to-live of one fleet on a host, from the state read (``##ttl``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deadline: int | None = None  # the file's epoch seconds (None: no file, or not a number)
    file: bool = False  # the deadline file exists (even unreadable)
    timer: str | None = None  # sha256 of the timer unit file (None: absent)
    service: str | None = None  # sha256 of the service unit file
    enabled: str = ""  # systemctl is-enabled of the timer
    active: str = ""  # systemctl is-active of the timer
    now: int | None = None  # the host's clock at the read

    @property
    def present(self) -> bool:
        return self.file or self.timer is not None or self.service is not None

    def leftovers(self, fleet: str) -> list[str]:
        have = [(self.file, ttl_file(fleet)), (self.timer is not None, unit_path(ttl_unit(fleet, "timer"))),
                (self.service is not None, unit_path(ttl_unit(fleet, "service")))]  # fmt: skip
        return [path for present, path in have if present]


def state_section(fleet: str, *, systemd: bool = True) -> str:
    """``##ttl``: ``key=value`` lines (root-only paths jackin names; no agent-chosen name).
    ``systemd=False``: without the timer's ``enabled``/``active`` (``jackin.facts.state`` reads them in its one
    ``systemctl show``)."""
    f, t, s = (
        shlex.quote(p)
        for p in (ttl_file(fleet), unit_path(ttl_unit(fleet, "timer")), unit_path(ttl_unit(fleet, "service")))
    )
    timer = shlex.quote(ttl_unit(fleet, "timer"))
    return (f"echo '##ttl'; [ -e {f} ] && echo file=yes && echo \"deadline=$(head -c 32 {f} | tr -dc 0-9)\"; "
            f"[ -f {t} ] && echo \"timer=$(sha256sum < {t} | cut -c1-64)\"; "
            f"[ -f {s} ] && echo \"service=$(sha256sum < {s} | cut -c1-64)\"; "
            + (f"echo \"enabled=$(systemctl is-enabled {timer} 2>/dev/null)\"; "
               f"echo \"active=$(systemctl is-active {timer} 2>/dev/null)\"; " if systemd else "")
            + "echo \"now=$(date +%s)\"")  # fmt: skip


def parse_section(lines: list[str]) -> TtlState:
    """The ``##ttl`` lines as a TtlState; a malformed value is dropped."""
    found = dict(line.strip().split("=", 1) for line in lines if "=" in line)

    def number(key: str) -> int | None:
        value = found.get(key, "")
        return int(value) if value.isdigit() and len(value) <= 12 else None

    def digest(key: str) -> str | None:
        value = found.get(key, "")
        return value if len(value) == 64 and all(c in "0123456789abcdef" for c in value) else None

    return TtlState(deadline=number("deadline"), file=found.get("file") == "yes", timer=digest("timer"),
                    service=digest("service"), enabled=found.get("enabled", ""), active=found.get("active", ""),
                    now=number("now"))  # fmt: skip
