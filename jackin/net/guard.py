"""The guard that keeps a fleet's egress policy loaded on its host, and its systemd units.

An administrator's ``nft -f /etc/nftables.conf`` (it starts with ``flush ruleset``),
``nft flush ruleset`` or ``systemctl stop nftables`` removes every table, ours
included. The guard puts it back within a moment, without polling:

    jackin-nft-guard-<fleet>.service   follows ``nft monitor``; any change to the fleet's
                                       table (not its set elements) wakes a check
    jackin-nft-check-<fleet>.timer     the same check every CHECK_EVERY: the backstop, should the
                                       monitor miss an event or die
    jackin-nft-<fleet>.service         loads the table at boot; Docker *requires* it (a drop-in),
                                       so no agent container starts before the table or the lockdown

A check compares a digest of the loaded table (``nft -s list table``: no counters,
and no elements of the sets filled at runtime) with the digest recorded when the
table was loaded. Missing or different: load the policy again; if it does not
load, the lockdown table; if neither loads, stop the fleet's agent containers.
Everything is logged with ``logger -t jackin-nft`` (``journalctl -t jackin-nft``).

The load unit is not ``PartOf=nftables.service`` (it was): with Docker requiring it, stopping
nftables would have stopped Docker and every container on the host. An administrator's
``systemctl stop/restart nftables`` flushes the table and the guard restores it; Docker runs on.

POSIX sh, nft, coreutils and awk only: hosts may lack python3.
"""

from __future__ import annotations

from jackin.hostpaths import (
    GUARD,
    NFT_DIR,
    NFT_RUN_DIR,
    WALL_NFT,
    WALL_TABLE,
    WALL_UNIT,
    guard_paths,
    nft_unit,
    table_name,
)

CHECK_EVERY = "10s"

GUARD_SCRIPT = (
    r"""#!/bin/sh
# Keep a fleet's egress policy (nftables table inet jackin-FLEET) loaded (jackin).
# Usage: nft-guard watch|check|load|verify|record|stopped FLEET [policy|lockdown]
#   watch    follow nft monitor: any change to the table wakes a check (the guard service)
#   check    load the table again if it is missing or altered (the timer's backstop)
#   load     load the policy, else the lockdown table, else stop the fleet's agent containers
#   verify   print enforced, lockdown, missing, altered, unverified or failed; change nothing
#   record   store the digest of the loaded table as KIND (what fleet.up loaded)
#   stopped  the guard service stopped: forget the applied hash so fleet.up restarts the guard
# The digest leaves out counters and the elements of sets filled at runtime (the filtering
# deny chains' denied_* sets); the static sets' elements (always_*, private_*) are part of it.
#        nft-guard wall hold|ready|stop|verify   (the wall under every fleet: jackin/net/wall.py)
set -u
wall="inet @WALL_TABLE@"
held() { nft list table $wall 2>/dev/null | grep -q '^	flags owner$'; }  # the wall is loaded, owned
if [ "${1:-}" = wall ]; then
    case ${2:-} in
    hold)  # the service's main process becomes nft -i: it loads the wall and holds the socket that owns it.
        # Its input is a FIFO it opens for reading and writing: it never reads an end of file, so it
        # never ends by itself. The line is written, and the FIFO's name removed, by a short-lived writer.
        fifo=@RUN_DIR@/wall.in
        mkdir -p @RUN_DIR@ && rm -f "$fifo" && mkfifo -m 0600 "$fifo" || exit 1
        { echo 'include "@WALL_NFT@"'; rm -f "$fifo"; } > "$fifo" &
        exec nft -i <> "$fifo" > /dev/null ;;
    ready)  # the service is started once the wall holds; else it fails, and Docker stays stopped
        i=0
        while [ $i -lt 100 ]; do held && exit 0; i=$((i + 1)); sleep 0.1; done
        logger -t jackin-nft "the wall (table $wall) did not load: Docker, and so every agent, stays stopped"
        exit 1 ;;
    stop)  # before the wall goes: every agent container stops, or with Docker gone every agent process ends
        if [ -z "${MAINPID:-}" ]; then  # the holder ended by itself (killed): the wall is gone already
            logger -t jackin-nft "the wall's holder ended: the agents run on under their fleets' tables"
            exit 0
        fi
        if systemctl is-active --quiet docker.service; then
            ids=$(docker ps -q --filter label=jackin.fleet 2>/dev/null)
            [ -z "$ids" ] || docker stop -t 2 $ids >/dev/null 2>&1
        fi
        uids=$(awk -F: '$5 ~ /^jackin\// { printf "%s%s", s, $3; s = "," }' /etc/passwd)
        [ -z "$uids" ] || pkill -KILL -U "$uids" 2>/dev/null
        logger -t jackin-nft "the wall goes: every agent was stopped first" ;;
    verify) if held; then echo held; else echo missing; fi ;;
    *) echo "usage: nft-guard wall hold|ready|stop|verify" >&2; exit 2 ;;
    esac
    exit 0
fi
cmd=${1:-} fleet=${2:-}
case $fleet in
'' | *[!a-z0-9-]*) echo "usage: nft-guard watch|check|load|verify|record|stopped FLEET" >&2; exit 2 ;;
esac
table="inet jackin-$fleet"
dir=@NFT_DIR@
run=@RUN_DIR@
pending=$run/$fleet.pending
lock=$run/$fleet.worker

log() { logger -t jackin-nft "fleet $fleet: $*"; }

digest() {
    listing=$(nft -s list table $table 2>/dev/null) || { echo missing; return 0; }
    listing=$(printf '%s\n' "$listing" | awk '
        /^\tset [^ ]+ \{$/ { static = ($2 ~ /^(always|private)_/) }
        /^\t}$/ { static = 1 }
        skip { if ($0 ~ /}$/) skip = 0; next }
        /^\t\telements = / && !static { skip = ($0 !~ /}$/); next }
        { print }' | sha256sum)
    echo "${listing%% *}"
}

record() {
    mkdir -p "$run" && printf '%s %s\n' "$1" "$(digest)" > "$run/$fleet.loaded.tmp" \
        && mv "$run/$fleet.loaded.tmp" "$run/$fleet.loaded"
}

# What record stored: $kind and $want (both empty when nothing is recorded). Builtins only: the
# status read runs verify on every host each time.
recorded() {
    kind='' want=''
    if [ -r "$run/$fleet.loaded" ]; then read -r kind want rest < "$run/$fleet.loaded" || true; fi
}

verify() {
    now=$(digest)
    if [ "$now" = missing ]; then echo missing; return 0; fi
    recorded
    if [ -z "$want" ]; then echo unverified
    elif [ "$now" != "$want" ]; then echo altered
    elif [ "$kind" = policy ]; then echo enforced
    else echo "$kind"
    fi
}

stop_agents() {
    # No dockerd, no running agent; and never wake a socket-activated dockerd from here.
    systemctl is-active --quiet docker.service || return 0
    ids=$(docker ps -q --filter "label=jackin.fleet=$fleet" 2>/dev/null)
    [ -n "$ids" ] || return 0
    docker stop -t 2 $ids >/dev/null 2>&1
    log "stopped the fleet's agent containers: $(echo $ids | wc -w) (fleet.up starts them again)"
}

load() {  # load [quiet]
    if err=$(nft -f "$dir/$fleet.nft" 2>&1); then
        record policy
        log "egress policy loaded (table jackin-$fleet)"
        # The reload emptied the domain sets: each agent's filtering resolver caches nothing, so
        # the agent's next lookup fills them again (jackin/net/dns.py).
        return 0
    fi
    [ -n "${1:-}" ] || log "the egress policy does not load: $(printf '%s' "$err" | head -n 2 | tr '\n' ' ')"
    if nft -f "$dir/$fleet.lockdown.nft" >/dev/null 2>&1; then
        record lockdown
        log "lockdown table loaded instead: the fleet's agents have no network until fleet.up"
        return 0
    fi
    [ -n "${1:-}" ] || log "neither the egress policy nor the lockdown table loads: stopping the fleet's agents"
    mkdir -p "$run" && echo "failed missing" > "$run/$fleet.loaded"
    stop_agents
    return 1
}

check() {
    if ! held; then  # its service ended (killed): start it again
        log "the wall (table @WALL_TABLE@) is not held: starting @WALL_UNIT@"
        systemctl start --no-block @WALL_UNIT@ || true
    fi
    state=$(verify)
    case $state in enforced | lockdown) return 0 ;; esac
    recorded
    if [ "$state" = missing ] && [ "$kind" = failed ]; then
        load quiet  # still failing: retry without filling the journal
        return
    fi
    log "table jackin-$fleet is $state: loading it again"
    load
}

worker() {
    while :; do
        while [ -e "$pending" ]; do
            rm -f "$pending"
            sleep 0.3  # let a burst of events (a whole table load) end first
            check
        done
        rm -f "$lock"
        # An event between the last look and the unlock: take the lock again, or its watcher did.
        if [ -e "$pending" ] && (set -C; : > "$lock") 2>/dev/null; then continue; fi
        return 0
    done
}

watch() {
    mkdir -p "$run"
    rm -f "$pending" "$lock"
    check
    # Events are filtered in sh, not awk: mawk buffers its input from a pipe.
    nft monitor | while IFS= read -r event; do
        case $event in
        *" element $table always_"* | *" element $table private_"*) ;;
        *" element "*) continue ;;  # runtime set elements are not a change of the policy
        *" $table "* | *" $table") ;;
        *) continue ;;
        esac
        [ -e "$pending" ] && continue  # a check is already due
        : > "$pending"
        if (set -C; : > "$lock") 2>/dev/null; then (worker < /dev/null &); fi
    done
    log "nft monitor ended: the guard restarts"
    exit 1
}

case $cmd in
watch) watch ;;
check) check ;;
load) load ;;
verify) verify ;;
record) record "${3:-policy}" ;;
stopped)
    # Only a stop by hand: not at shutdown (the table is loaded again at boot, the applied hash still
    # holds), and not when the watcher died (SERVICE_RESULT is not success; Restart=always brings it back).
    if [ "${SERVICE_RESULT:-success}" = success ] && [ "$(systemctl is-system-running 2>/dev/null)" != stopping ]; then
        rm -f "$dir/$fleet.sha"
    fi
    rm -f "$pending" "$lock" ;;
*) echo "usage: nft-guard watch|check|load|verify|record|stopped FLEET" >&2; exit 2 ;;
esac
""".replace("@NFT_DIR@", NFT_DIR)
    .replace("@RUN_DIR@", NFT_RUN_DIR)
    .replace("@WALL_NFT@", WALL_NFT)
    .replace("@WALL_TABLE@", WALL_TABLE)
    .replace("@WALL_UNIT@", WALL_UNIT)
)


def guard_units(fleet: str) -> dict[str, str]:
    """The guard service, its check timer and service, and Docker's drop-in, by path."""
    table, load = table_name(fleet), nft_unit(fleet)
    guard = f"""[Unit]
Description=jackin fleet {fleet}: guard the egress policy (reload table {table} when it is flushed or altered)
After={load} nftables.service

[Service]
Type=simple
ExecStart={GUARD} watch {fleet}
# Stopped by hand: the applied hash is forgotten, so the next fleet.up starts the guard again.
ExecStopPost={GUARD} stopped {fleet}
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
"""
    check = f"""[Unit]
Description=jackin fleet {fleet}: check that table {table} is loaded and unaltered
After={load}

[Service]
Type=oneshot
ExecStart={GUARD} check {fleet}
# A check stopped mid-run (fleet.up stops it while it replaces the table, fleet.down before it removes
# it) ends by SIGTERM, which is no failure for the host: systemd counts it as one for a oneshot, and
# the failed unit outlived the fleet (not-found, failed), leaving the host "degraded" for good.
SuccessExitStatus=SIGTERM
"""
    timer = f"""[Unit]
Description=jackin fleet {fleet}: check the egress policy every {CHECK_EVERY} (the guard's backstop)

[Timer]
OnActiveSec=1s
OnUnitActiveSec={CHECK_EVERY}
AccuracySec=1s

[Install]
WantedBy=timers.target
"""
    dropin = f"""# jackin fleet {fleet}: Docker starts (and so starts agent containers) only after the wall holds
# and the fleet's egress policy, or its lockdown table, is loaded. If either fails, Docker does not start.
[Unit]
Requires={WALL_UNIT} {load}
After={WALL_UNIT} {load}
"""
    return dict(zip(guard_paths(fleet), (guard, check, timer, dropin), strict=True))
