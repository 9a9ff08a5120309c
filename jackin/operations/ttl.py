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

from jackin import hostpaths
from jackin.facts.ttl import TtlState
from jackin.hostpaths import STATE_DIR, TTL_DIR
from jackin.hostpaths import ttl_file as deadline_file
from jackin.hostpaths import ttl_unit as unit_name
from jackin.operations.files import Command, Refused, write_files
from jackin.plan.fleet import FleetPlan

TOLERANCE = 30  # seconds of clock difference (and read latency) taken as none


def unit_path(fleet: str, kind: str) -> str:
    return hostpaths.unit_path(unit_name(fleet, kind))


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
