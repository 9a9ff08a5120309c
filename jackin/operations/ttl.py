"""Commands that enforce a fleet's time-to-live on a host, and remove it (pure: no pyinfra).

The deadline (epoch seconds, fixed at the fleet's first ``fleet.up``: jackin/plan/ttl.py) is written to
``/var/lib/jackin/ttl/<fleet>`` (root 0600) and enforced by two systemd units:

- ``jackin-ttl-<fleet>.timer``: ``OnCalendar=`` the deadline in UTC, ``Persistent=true``. An absolute
  calendar time survives a reboot: a host that was off (or rebooting) when the deadline passed fires
  the timer at boot (``Persistent``: systemd keeps the timer's stamp from its first activation). A
  relative ``OnActiveSec=`` would start counting again at every boot, so a host rebooting daily
  would never expire.
- ``jackin-ttl-<fleet>.service``: stops the fleet's containers (``docker stop``); it acts only once
  the deadline in the file has passed on the host's clock, so a timer fired early (a clock set
  back and forth) stops nothing. A container stopped by ``docker stop`` with restart
  ``unless-stopped`` stays stopped, even across a reboot.

Clock skew: the deadline is the operator's clock; the host's may differ. The state read gives the
host's clock, and the deadline written there is shifted by the difference (beyond ``TOLERANCE``
seconds, which also absorbs the read's own latency), so the host stops its agents at the right
moment of real time. A file within ``TOLERANCE`` of the wanted deadline is left as it is: an
unchanged deadline changes nothing.
"""

from __future__ import annotations

import hashlib
import shlex
import time

from pydantic import BaseModel, ConfigDict

from jackin.operations.files import Command, Refused, write_files
from jackin.plan.fleet import STATE_DIR, FleetPlan

TTL_DIR = f"{STATE_DIR}/ttl"
UNIT_DIR = "/etc/systemd/system"
TOLERANCE = 30  # seconds of clock difference (and read latency) taken as none


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
        have = [(self.file, deadline_file(fleet)), (self.timer is not None, unit_path(fleet, "timer")),
                (self.service is not None, unit_path(fleet, "service"))]  # fmt: skip
        return [path for present, path in have if present]


def deadline_file(fleet: str) -> str:
    return f"{TTL_DIR}/{fleet}"


def unit_name(fleet: str, kind: str) -> str:
    return f"jackin-ttl-{fleet}.{kind}"


def unit_path(fleet: str, kind: str) -> str:
    return f"{UNIT_DIR}/{unit_name(fleet, kind)}"


def calendar(deadline: int) -> str:
    """systemd's calendar form of ``deadline``, in UTC (the host's time zone does not matter)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline))


def timer_unit(fleet: str, deadline: int) -> str:
    return f"""[Unit]
Description=jackin: stop fleet {fleet}'s agents when its time-to-live passes ({calendar(deadline)})

[Timer]
OnCalendar={calendar(deadline)}
Persistent=true
AccuracySec=1s
Unit={unit_name(fleet, "service")}

[Install]
WantedBy=timers.target
"""


def service_unit(fleet: str) -> str:
    """The stop: only once the deadline in the file has passed (``$$`` and ``%%``: a literal ``$`` and ``%``
    for systemd, which expands both in ``ExecStart``)."""
    label = shlex.quote(f"label=jackin.fleet={fleet}")
    check = (f'd=$$(head -c 32 {deadline_file(fleet)} 2>/dev/null) && [ -n "$$d" ] && [ "$$(date +%%s)" -ge "$$d" ] '
             f"|| {{ echo 'jackin: the time-to-live of fleet {fleet} has not passed: nothing stopped'; exit 0; }}; "
             f"ids=$$(docker ps -q --filter {label}); "
             f'[ -z "$$ids" ] || docker stop $$ids')  # fmt: skip
    return f"""[Unit]
Description=jackin: stop fleet {fleet}'s agents (its time-to-live passed)
After=docker.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c {shlex.quote(check)}
"""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def host_deadline(deadline: int, state: TtlState, now: float) -> int:
    """``deadline`` (operator's clock) on the host's clock; the file's value when within ``TOLERANCE``."""
    skew = 0 if state.now is None else state.now - int(now)
    wanted = deadline + (skew if abs(skew) > TOLERANCE else 0)
    if state.deadline is not None and abs(state.deadline - wanted) <= TOLERANCE:
        return state.deadline
    return wanted


def ttl_commands(plan: FleetPlan, state: TtlState, *, now: float) -> list[Command]:
    """Commands that bring the fleet's time-to-live on the host to the plan: the deadline file and
    both units written and the timer enabled and started; nothing when they already are. No ttl in
    the plan: whatever is left of one is removed. A deadline already passed is refused (a fleet.up
    after its time-to-live: fleet.down ends the fleet, or a longer ttl moves the deadline)."""
    fleet, deadline = plan.fleet, plan.ttl_deadline
    if deadline is None:
        return [*teardown_commands(fleet, state)]
    if deadline <= now:
        raise Refused(f"the time-to-live of fleet {fleet} passed at {calendar(deadline)}: its agents are stopped "
                      "there; fleet.down ends the fleet (a later fleet.up starts a new time-to-live), or raise "
                      "the spec's ttl to move the deadline")  # fmt: skip
    at = host_deadline(deadline, state, now)
    timer, service = timer_unit(fleet, at), service_unit(fleet)
    if (state.deadline, state.timer, state.service, state.enabled, state.active) == (
            at, sha(timer), sha(service), "enabled", "active"):  # fmt: skip
        return []
    q = shlex.quote
    files = {deadline_file(fleet): f"{at}\n", unit_path(fleet, "timer"): timer, unit_path(fleet, "service"): service}
    return [
        f"[ -d {STATE_DIR} ] || install -d -m 0700 {STATE_DIR}",
        f"install -d -m 0700 -o root -g root {TTL_DIR}",
        *write_files(
            files,
            modes={
                deadline_file(fleet): "0600",
                unit_path(fleet, "timer"): "0644",
                unit_path(fleet, "service"): "0644",
            },
        ),  # fmt: skip
        "systemctl daemon-reload",
        f"systemctl enable {q(unit_name(fleet, 'timer'))}",
        f"systemctl restart {q(unit_name(fleet, 'timer'))}",
        # A deadline that passed between the plan and now would never fire the timer: stop the agents at once.
        f'[ "$(date +%s)" -lt {at} ] || systemctl start --no-block {q(unit_name(fleet, "service"))}',
    ]


def teardown_commands(fleet: str, state: TtlState) -> list[str]:
    """Stop and remove the timer, its service and the deadline file (fleet.down, with or without --keep-data)."""
    if not state.present:
        return []
    timer, service = shlex.quote(unit_name(fleet, "timer")), shlex.quote(unit_name(fleet, "service"))
    return [
        f"systemctl disable --now {timer} 2>/dev/null || true",
        f"systemctl stop {service} 2>/dev/null || true",
        f"rm -f {shlex.quote(unit_path(fleet, 'timer'))} {shlex.quote(unit_path(fleet, 'service'))} "
        f"{shlex.quote(deadline_file(fleet))}",
        f"rmdir {TTL_DIR} 2>/dev/null || true",
        "systemctl daemon-reload",
        f"systemctl reset-failed {timer} {service} 2>/dev/null || true",
    ]


def state_section(fleet: str, *, systemd: bool = True) -> str:
    """``##ttl``: ``key=value`` lines (root-only paths jackin names; no agent-chosen name).
    ``systemd=False``: without the timer's ``enabled``/``active`` (``jackin.facts.state`` reads them in its one
    ``systemctl show``)."""
    f, t, s = (shlex.quote(p) for p in (deadline_file(fleet), unit_path(fleet, "timer"), unit_path(fleet, "service")))
    timer = shlex.quote(unit_name(fleet, "timer"))
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
