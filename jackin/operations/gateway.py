"""The commands that install, update and remove a fleet's credential gateway on a host (pure: no pyinfra).

Files and layout: ``jackin.net.gateway``. A changed configuration (an agent, a budget, a value) is written
in place and the running gateway reads it within a second: no restart, no stream cut. Only a new program
or unit restarts it. The values go by SFTP into root's staging directory, then ``install`` gives them to
root and the gateway's group, 0440, and ``mv`` puts them in place: never in a command line or a preview.
"""

from __future__ import annotations

import hashlib
import hmac
import shlex

from jackin.facts.state import HostState
from jackin.hostpaths import (
    GATEWAY_ETC,
    GATEWAY_PROGRAM,
    GATEWAY_STATE,
    LIB_DIR,
    UPLOAD_DIR,
    gateway_dir,
    gateway_state,
    gateway_unit,
    gateway_user,
)
from jackin.net import gateway
from jackin.operations.credentials import SecretUpload
from jackin.operations.files import Command, Upload, write_files
from jackin.plan.fleet import FleetPlan
from jackin.spec.credentials import Secrets


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def gateway_commands(plan: FleetPlan, state: HostState, values: Secrets) -> list[Command]:
    """Bring the fleet's gateway on this host to the plan: installed and running when an agent's credential is
    in gateway mode, removed when none is (and it is there)."""
    fleet, have = plan.fleet, state.gateway
    if not plan.gateway_agents:
        return [*teardown_commands(fleet, state)]
    user, directory = gateway_user(fleet), gateway_dir(fleet)
    config = gateway.config(plan, values)
    program, unit = gateway.program(), gateway.unit(fleet)
    changed_program = have.program != gateway.digest(program) or have.unit != gateway.digest(unit)
    commands: list[Command] = []
    if have.user is None:
        commands.append(f"getent passwd {q(user)} >/dev/null || useradd --system --user-group --no-create-home "
                        f"--home-dir /nonexistent --shell /usr/sbin/nologin --comment {q('jackin-gateway/' + fleet)} "
                        f"{q(user)}")  # fmt: skip
    regrouped = have.dir and (have.gid is None or have.dirgid != have.gid)  # the user made again: another gid
    if not have.dir or regrouped:
        commands += [f"test -d {GATEWAY_ETC} || install -d -m 0755 -o root -g root {GATEWAY_ETC}",
                     q("install", "-d", "-m", "0750", "-o", "root", "-g", user, directory)]  # fmt: skip
    if have.program != gateway.digest(program):
        commands += write_files({GATEWAY_PROGRAM: program}, modes={GATEWAY_PROGRAM: "0755"})
    if have.config != gateway.digest(config) or regrouped:
        # The values first, then the configuration naming them (whose keyed digest of them marks them written).
        secrets = gateway.secrets_blob(plan, values)
        mac = hmac.new(values.sealed(secrets).encode(), b"staging", hashlib.sha256).hexdigest()[:16]
        staging = f"{UPLOAD_DIR}/gateway-{mac}"
        commands += [q("rm", "-rf", staging), q("install", "-d", "-m", "0700", UPLOAD_DIR, staging)]
        for name, data in (("secrets.json", secrets), ("config.json", config.encode())):
            target, new, staged = f"{directory}/{name}", f"{directory}/.{name}.jackin-new", f"{staging}/{name}"
            commands.append(SecretUpload(data, staged, target=target) if name == "secrets.json"
                            else Upload(data, staged, target=target, mode="0440"))  # fmt: skip
            commands += [q("install", "-m", "0440", "-o", "root", "-g", user, "-T", staged, new),
                         q("mv", "-f", "-T", new, target)]  # fmt: skip
        commands.append(q("rm", "-rf", staging))
        commands.append(f"rmdir {shlex.quote(UPLOAD_DIR)} 2>/dev/null || true")
    if have.unit != gateway.digest(unit):
        commands += write_files({gateway.unit_path(fleet): unit})
        commands.append("systemctl daemon-reload")
    if have.enabled != "enabled":
        commands.append(q("systemctl", "enable", "--quiet", gateway_unit(fleet)))
    if changed_program and have.active == "active":
        commands.append(q("systemctl", "restart", gateway_unit(fleet)))
    elif have.active != "active" or changed_program:
        commands.append(q("systemctl", "start", gateway_unit(fleet)))
    return commands


def teardown_commands(fleet: str, state: HostState) -> list[str]:
    """Stop and remove the fleet's gateway: unit, configuration and values, state, user; the program goes with
    the host's last gateway."""
    if not state.gateway.present:
        return []
    unit = gateway_unit(fleet)
    return [
        f"systemctl disable --now --quiet {q(unit)} 2>/dev/null || true",
        q("rm", "-f", gateway.unit_path(fleet)),
        "systemctl daemon-reload",
        f"systemctl reset-failed {q(unit)} 2>/dev/null || true",
        q("rm", "-rf", "--one-file-system", "--", gateway_dir(fleet), gateway_state(fleet)),
        f"rmdir {GATEWAY_ETC} {GATEWAY_STATE} 2>/dev/null || true",
        f"ls {GATEWAY_ETC} >/dev/null 2>&1 || rm -f {GATEWAY_PROGRAM}",
        f"rmdir {LIB_DIR} 2>/dev/null || true",
        f"! getent passwd {q(gateway_user(fleet))} >/dev/null || userdel {q(gateway_user(fleet))}",
        f"! getent group {q(gateway_user(fleet))} >/dev/null || groupdel {q(gateway_user(fleet))}",
    ]


__all__ = ["gateway_commands", "teardown_commands"]
