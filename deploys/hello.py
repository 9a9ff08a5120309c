"""The simplest fleet deploy: gather facts and write a marker file.

Run by `inv fleet.up`; also runs by hand with the pyinfra CLI, e.g.
    pyinfra --data jackin='{"fleet": "demo"}' INVENTORY deploys/hello.py
"""

import json
from io import StringIO

from pyinfra import host
from pyinfra.facts.server import Arch, Hostname, KernelVersion, LinuxDistribution
from pyinfra.operations import files

from jackin.engine import report

fleet = host.data.get("jackin", {}).get("fleet", "demo")
distro = host.get_fact(LinuxDistribution)

report.facts(
    host,
    hostname=host.get_fact(Hostname),
    distro=f"{distro['name']} {distro['release_meta'].get('VERSION_ID', '')}".strip(),
    kernel=host.get_fact(KernelVersion),
    arch=host.get_fact(Arch),
)

files.directory(
    name="jackin state directory",
    path="/var/lib/jackin",
    mode="0700",
)

files.put(
    name="fleet marker",
    src=StringIO(json.dumps({"fleet": fleet, "managed_by": "jackin"}, sort_keys=True) + "\n"),
    dest=f"/var/lib/jackin/fleet-{fleet}.json",
    mode="0600",
)
