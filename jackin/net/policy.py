"""The egress policy as files on a host: the fleet's table and its lockdown table (``jackin.net.firewall``),
the filtering resolvers (``jackin.net.dns``), the guard and its units (``jackin.net.guard``), the wall under
every fleet's table (``jackin.net.wall``); and their hash,
which tells whether a host has this bundle applied (``jackin.operations.firewall``)."""

from __future__ import annotations

import hashlib

from jackin.hostpaths import DNS_CLEANER, GUARD, NFT_DIR, unit_path
from jackin.net import dns, dnsclean, wall
from jackin.net.firewall import render, render_lockdown, units
from jackin.net.guard import GUARD_SCRIPT, guard_units
from jackin.plan.fleet import FleetPlan


def bundle(plan: FleetPlan) -> dict[str, str]:
    """Every file the firewall needs on a host, by path."""
    files = {
        f"{NFT_DIR}/{plan.fleet}.nft": render(plan),
        f"{NFT_DIR}/{plan.fleet}.lockdown.nft": render_lockdown(plan),
    }
    files.update({unit_path(name): text for name, text in units(plan).items()})
    files.update(dns.files(plan))
    files[GUARD] = GUARD_SCRIPT
    files[DNS_CLEANER] = dnsclean.SCRIPT  # shared by the host's fleets, like the guard
    files.update(guard_units(plan.fleet))
    files.update(wall.files())  # shared by the host's fleets: the same text from each
    return files


def bundle_hash(plan: FleetPlan) -> str:
    digest = hashlib.sha256()
    for path, text in sorted(bundle(plan).items()):
        digest.update(path.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()[:16]
