"""The wall: a second layer under every fleet's egress policy that no flush of the host's ruleset reaches.

A fleet's table (``jackin.net.firewall``) is an ordinary nftables table: ``nft flush ruleset``,
``nft -f /etc/nftables.conf``, ``systemctl restart nftables`` and ``nft delete table`` all remove it,
and the guard (``jackin.net.guard``) can only load it again afterwards. Until then, agent traffic
would pass unfiltered. The wall closes that window:

    table inet jackin--wall    flags owner: the kernel ties it to the netlink socket of the process
                               that created it. No other process can change or delete it, and
                               ``flush ruleset`` skips it (Linux 5.12 and later).
    jackin-wall.service        that process: ``nft -i`` reading the wall's file, then holding its
                               socket open for as long as the service runs. Docker requires it
                               (each fleet's drop-in), so no agent container starts without it.

Its rules drop every packet that comes in from an agent bridge (``jk*``) and does not carry
``MARK``, in the forward and input hooks, after the fleets' tables (priority ``filter - 4``).
Each fleet's table sets ``MARK`` on the packets of its own agents' bridges as the first thing it
does: a packet is marked only if its fleet's policy saw it (and dropped or allowed it). With a
fleet's table gone, its agents' packets go unmarked and the wall drops all of them: less access,
never more, until the guard loads the table again.

The wall is shared by every fleet on the host and never changes: ``fleet.up`` starts the service
when it is not running and the last fleet's ``fleet.down`` stops it. Stopping it (by hand, which
also stops Docker, as it requires the wall; or at shutdown, where it stops after Docker) first stops
every agent container, and with Docker already gone kills every process of every agent's Unix user,
so no agent outlives the wall. Should its holder die instead (killed: it never ends by itself, as it
reads a FIFO it also holds open for writing), the agents run on under their fleets' tables alone, and
each fleet's guard starts the wall again at its next check (at once on an nft event, else within the
timer's 10 s), as does the next ``fleet.up``; ``fleet.status`` says "not held" meanwhile (exit 4).

A table an earlier jackin applied does not mark: before the wall's first start on a host, ``fleet.up``
refuses when another fleet's table there has agents and no mark rule
(``jackin.operations.firewall.unmarked_check``), before it writes anything.
"""

from __future__ import annotations

from jackin.hostpaths import GUARD, WALL_NFT, WALL_TABLE, WALL_UNIT, unit_path

MARK = 0x40000000  # set by a fleet's table on its agents' packets; the wall drops agent packets without it
PRIORITY = "filter - 4"  # after the fleets' tables (filter - 5), before Docker's chains (filter)


def mark_rule(bridges: list[str]) -> str:
    """The rule a fleet's table puts first in its forward and input chains: mark its agents' packets."""
    names = ", ".join(f'"{b}"' for b in bridges)
    return f"iifname {{ {names} }} meta mark set meta mark | {MARK:#010x}"


def render() -> str:
    """The wall's table (loaded by the service's ``nft -i``, which owns it)."""
    drop = f'iifname "jk*" meta mark & {MARK:#010x} == 0x00000000 counter drop'
    lines = [f"table inet {WALL_TABLE} {{", "\tflags owner"]
    for hook in ("forward", "input"):
        lines += [f"\tchain {hook} {{", f"\t\ttype filter hook {hook} priority {PRIORITY}; policy accept;",
                  f"\t\t{drop}", "\t}"]  # fmt: skip
    return "\n".join([*lines, "}"]) + "\n"


UNIT = f"""[Unit]
Description=jackin: the wall under every fleet's egress policy (table inet {WALL_TABLE}, held by this service)
DefaultDependencies=no
After=local-fs.target nftables.service
# Docker requires this unit (each fleet's drop-in): no agent starts before the wall holds. At shutdown
# it stops after Docker, and its stop ends every agent before the wall goes.
Before=docker.service network-pre.target shutdown.target
Conflicts=shutdown.target
Wants=network-pre.target

[Service]
Type=simple
ExecStart={GUARD} wall hold
ExecStartPost={GUARD} wall ready
ExecStop={GUARD} wall stop
TimeoutStopSec=60

[Install]
WantedBy=multi-user.target
"""


def files() -> dict[str, str]:
    """The wall's files on a host, by path."""
    return {WALL_NFT: render(), unit_path(WALL_UNIT): UNIT}
