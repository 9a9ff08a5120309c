"""Commands for a fleet's egress policy (pyinfra has no nftables operation); pure, no pyinfra.

The whole bundle (table, lockdown table, the filtering resolvers' configuration, the guard, systemd units)
is written and applied only when its hash differs from the one on the host or
the table is not loaded. Applying checks first (``nft -c -f``) and falls back
to the lockdown table, so a failure leaves agents with less access, never more.
"""

from __future__ import annotations

import shlex

from jackin import hostpaths
from jackin.facts.state import HostState
from jackin.hostpaths import (
    DNS_CLEANER,
    DROPIN_DIR,
    ETC_DIR,
    GUARD,
    LIB_DIR,
    NFT_DIR,
    NFT_RUN_DIR,
    RESOLVER,
    RUN_DIR,
    WALL_NFT,
    WALL_TABLE,
    WALL_UNIT,
    check_service,
    check_timer,
    dns_paths,
    dns_target,
    guard_unit,
    nft_unit,
    resolve_service,
    resolve_timer,
    table_name,
    unit_path,
)
from jackin.net import dns, policy
from jackin.operations.files import Command, write_files
from jackin.plan.fleet import FleetPlan


def apply_commands(plan: FleetPlan, state: HostState) -> list[Command]:
    digest = policy.bundle_hash(plan)
    if state.nft_table and state.nft_hash == digest:
        # The bundle holds; a wall whose holder ended (killed) is started again, which its guard
        # would do at its next check anyway.
        return [] if state.wall_held else [unmarked_check(plan.fleet), f"systemctl start {WALL_UNIT}"]
    fleet = plan.fleet
    base = f"{NFT_DIR}/{fleet}"
    # Before anything is written: the wall this run starts must not cut off another fleet on the host.
    commands: list[Command] = [] if state.wall_held else [unmarked_check(fleet)]
    # Every file of the bundle by SFTP (a 150-agent policy is past Linux's 128 KiB argv limit).
    commands += write_files(policy.bundle(plan))
    guard = f"{guard_unit(fleet)} {check_timer(fleet)}"
    commands += [
        # Their links for boot (--no-reload: every [Install] here is WantedBy= a boot target), then ONE
        # reload for the units just written and those links, before any of them is (re)started.
        f"systemctl enable --no-reload --quiet {WALL_UNIT} {nft_unit(fleet)} {guard} {dns_target(fleet)}",
        "systemctl daemon-reload",
        # The wall under every fleet's table (jackin/net/wall.py): started once, never restarted here
        # (a restart would drop it for a moment); its start waits until it holds.
        f"systemctl start {WALL_UNIT} || {{ echo 'the wall under the egress policy ({WALL_UNIT}: an nftables "
        "table with flags owner, Linux 5.12 or later) did not start; see journalctl -u jackin-wall' >&2; exit 1; }",
        # The guard rests while the table is replaced (it would take our load for an alteration); restarted below.
        f"systemctl stop {guard} {check_service(fleet)} 2>/dev/null || true",
        # Check, then apply in one transaction; on any failure the lockdown table drops all agent traffic,
        # and the guard runs again (it keeps the lockdown loaded) before the run fails.
        f"if nft -c -f {base}.nft && nft -f {base}.nft; then :; else nft -f {base}.lockdown.nft "
        f"&& {GUARD} record {fleet} lockdown || true; systemctl restart {guard}; "
        f"echo 'egress policy rejected by nft: agents of fleet {fleet} are locked down' >&2; exit 1; fi",
        f"{GUARD} record {fleet} policy",  # what the guard compares the loaded table with
        f"systemctl restart {guard}",  # the guard runs the script just written
        *dns.apply_commands(plan, state.files),  # the filtering resolvers fill the table's domain sets
        f"echo {digest} > {base}.sha",
    ]
    return commands


def unmarked_check(fleet: str) -> str:
    """Shell: fail, naming it, when another fleet's table on the host has agents but does not mark their
    packets (an earlier jackin applied it): the wall drops every unmarked agent packet, so starting it
    would cut that fleet's agents off. A lockdown table drops them all anyway."""
    skip = shlex.quote(f"^({table_name(fleet)}|{WALL_TABLE})$")
    why = ("was applied by an earlier jackin: its table does not mark its agents' packets, and the wall this "
           "fleet.up starts would cut them off; run fleet.up for that fleet with this jackin first")  # fmt: skip
    return (f"for t in $(nft list tables inet 2>/dev/null | awk '$3 ~ /^jackin-/ {{print $3}}' | grep -Ev {skip}); do "
            'c=$(nft list chain inet "$t" forward 2>/dev/null) || continue; '
            'case $c in *"jump egress_"*) ;; *) continue ;; esac; '
            'case $c in *"meta mark set"*) continue ;; esac; '
            f'echo "fleet ${{t#jackin-}} on this host {why}" >&2; exit 1; done')  # fmt: skip


def _units(fleet: str) -> list[str]:
    """Every unit of the fleet's firewall by name (the filters' instances aside): the guard, its check,
    the earlier versions' resolver, the filters' target, and last the load unit."""
    return [guard_unit(fleet), check_timer(fleet), check_service(fleet), resolve_timer(fleet), resolve_service(fleet),
            dns_target(fleet), nft_unit(fleet)]  # fmt: skip


def remove_commands(plan: FleetPlan, state: HostState) -> list[str]:
    fleet = plan.fleet
    commands = []
    load = nft_unit(fleet)
    units = any(p.endswith(".service") or p.endswith(".timer") for p in state.files)
    filters = units and any(p in state.files for p in dns_paths(fleet))
    if units:
        # The guard and its timer before the table goes, or they would load it again; the filters'
        # target in the same call (one systemctl: a unit that is not there does not stop the others).
        # Not the load unit: Docker requires it (its drop-in) until the reload below, so stopping it
        # now would stop Docker; it is only disabled here and stopped after the reload.
        commands.append(f"systemctl disable --now --no-reload --quiet {guard_unit(fleet)} "
                        f"{check_timer(fleet)} {check_service(fleet)} "
                        f"{resolve_timer(fleet)} {resolve_service(fleet)}"
                        f"{' ' + dns_target(fleet) if filters else ''} 2>/dev/null || true")  # fmt: skip
        commands.append(f"systemctl disable --no-reload --quiet {load} 2>/dev/null || true")
    commands += dns.remove_commands(fleet, state.files, disabled=filters)
    if state.files:  # Docker's drop-in with the rest, then one reload for every change above
        commands.append("rm -f " + " ".join(shlex.quote(p) for p in state.files))
        commands.append("systemctl daemon-reload")
    if units:
        commands.append(f"systemctl stop {load} 2>/dev/null || true")  # Docker no longer requires it
        # A unit of the fleet that failed (a check killed by an older unit's stop, a filter that gave up)
        # stays loaded as "not-found failed" once its file is gone: the host would stay "degraded" after
        # the fleet. One call: names not loaded are refused, the rest are reset all the same.
        commands.append(
            f"systemctl reset-failed {' '.join(_units(fleet))} "
            f"{shlex.quote(hostpaths.dns_units(fleet))} 2>/dev/null || true"
        )
    if state.nft_table:
        commands.append(f"nft delete table inet {table_name(fleet)}")
    if state.files:
        # The shared scripts and directories go with the last fleet on the host.
        # The wall too, once no fleet's drop-in makes Docker require it (they went above): its stop
        # would stop every agent, and no fleet has one left.
        commands.append(f"ls {NFT_DIR}/*.nft >/dev/null 2>&1 || "
                        f"{{ systemctl disable --now --quiet {WALL_UNIT} 2>/dev/null || true; "
                        f"rm -f {RESOLVER} {GUARD} {DNS_CLEANER} {WALL_NFT} {unit_path(WALL_UNIT)}; systemctl daemon-reload || true; "
                        f"systemctl reset-failed {WALL_UNIT} 2>/dev/null || true; rmdir {NFT_DIR} {ETC_DIR} "
                        f"{LIB_DIR} {NFT_RUN_DIR} {RUN_DIR} {DROPIN_DIR} 2>/dev/null || true; }}")  # fmt: skip
    return commands
