"""Role images: built on the operator's machine, cached by tag, streamed to the hosts that lack them.

Lab hosts (and many real ones) reach no registry and no package mirror, so an image built here is
carried over the SSH connection:

- build (``ensure_built``): a role with ``image.debootstrap`` is a Debian minbase root from the apt
  mirror this machine uses (``jackin.lab.image.apt_mirror``) with the role's packages, busybox's
  applets linked into /usr/local/bin for every command the root lacks (wget, nc, nslookup...),
  imported as a base image; then a legacy ``docker build`` (offline: ``FROM`` a local image) adds
  roles/common, the role's files, the HEALTHCHECK, the ENTRYPOINT and the command. Tagged
  ``jackin/role-<name>:<hash>`` (jackin/spec/roles.py): a present tag is never rebuilt.
- archive (``archive``): ``docker save | gzip`` once per tag, kept under the state dir (``images/``).
- load (``deliver``): per host whose state read lacks the tag, over strict SSH (Fabric): SFTP into a
  fresh root-only directory, ``docker load``, remove it. Hosts load in parallel; a failure is that
  host's error (it is then not deployed), never the others'.

A role with ``build: host`` is built on the host instead (jackin/operations/host.py
``role_image_commands``: its files by SFTP, ``docker build`` there), which needs the host to reach
the runtime's registries; ``source`` gives that step what it needs.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jackin.engine.protocol import HostResult
from jackin.errors import JackinError, LabError, RemoteCommandError
from jackin.facts.state import HostState
from jackin.hostpaths import RUN_DIR
from jackin.lab.image import _run, apt_mirror
from jackin.operations.files import Refused
from jackin.paths import private_dir, state_dir
from jackin.spec import roles
from jackin.spec.role_checks import dockerfile_instructions
from jackin.spec.roles import dockerfile, suite
from jackin.store import locks
from jackin.transport import fanout

if TYPE_CHECKING:
    from jackin.plan.fleet import FleetPlan
    from jackin.transport.target import SshTarget

# Where a debootstrap root is trimmed: documentation, manuals, translations, apt's caches.
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt", "var/lib/apt/lists")
Log = Callable[[str], None]


def is_role_image(image: str) -> bool:
    return image.startswith(roles.REPOSITORY)


def role_of(image: str) -> str:
    return image[len(roles.REPOSITORY) :].split(":", 1)[0]


# --- build -------------------------------------------------------------------------------------


def _docker(*args: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(["docker", *args], capture_output=True, check=False, **kwargs)
    if check and done.returncode != 0:
        raise LabError(f"docker {args[0]} failed: {done.stderr.decode(errors='replace').strip()[-2000:]}")
    return done


def present(tag: str) -> bool:
    return _docker("image", "inspect", "--format", "ok", tag, check=False).returncode == 0


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One build or archive of a tag at a time on this machine (parallel runs share the Docker engine)."""
    with locks.held(private_dir(state_dir() / "images") / f".{name}.lock"):
        yield


def ensure_built(role: roles.Role, *, log: Log = lambda _: None) -> str:
    """The role's image tag, built here first unless the local Docker engine has it."""
    tag = role.tag
    if present(tag):
        return tag
    with _locked(role.name):
        if present(tag):
            return tag
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="jackin-role-", dir="/var/tmp") as work:
            base = None
            if role.image.build == "host":  # offline, for the lab: its Dockerfile's recipe on the demo's root
                log(f"building {tag} here from its Dockerfile's npm pins, on the demo role's root (offline)")
                context = offline_context(role, Path(work) / "context", base=ensure_built(roles.load("demo"), log=log))
                _docker_build(tag, context)
                log(f"built {tag} in {time.monotonic() - started:.0f}s")
                return tag
            if role.image.debootstrap is not None:
                base = f"{roles.REPOSITORY}{role.name}-base:{tag.split(':')[1]}"
                log(f"building the base of {tag} with debootstrap (a minute or two)")
                _base(role, Path(work) / "root", base)
            context = build_context(role, Path(work) / "context", base=base)
            log(f"building {tag} (docker build)")
            try:
                _docker_build(tag, context)
            finally:
                if base:
                    _docker("rmi", base, check=False)  # its layer stays, under the role's tag
        log(f"built {tag} in {time.monotonic() - started:.0f}s")
    return tag


def _docker_build(tag: str, context: Path) -> None:
    """A legacy ``docker build`` (offline: its ``FROM`` is a local image) of ``context`` as ``tag``."""
    done = subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], capture_output=True,
                          check=False, env={**os.environ, "DOCKER_BUILDKIT": "0"})  # fmt: skip
    if done.returncode != 0:
        raise LabError(f"docker build of {tag} failed:\n{done.stderr.decode(errors='replace')[-3000:]}")


NODE_FROM = re.compile(r"^node:(\d+\.\d+\.\d+)(?:-|$)")


def offline_context(role: roles.Role, context: Path, *, base: str) -> Path:
    """The build context of a ``build: host`` role built here, with no registry (the lab's hosts reach
    none): its Dockerfile's recipe, taken from the Dockerfile itself. Node at the version of its ``FROM
    node:<version>-...`` (npm's ``node-linux-<arch>`` package) and every npm package its ``npm install``
    pins (``jackin.images.pins``), installed by this machine's npm into ``local/`` (the image's
    /usr/local; no install script runs here: a pinned package's own runs in a container,
    ``_install_scripts``); on ``base`` (the demo role's root: Debian minbase, git, busybox), with
    roles/common, the Dockerfile's ``ENV`` lines, the role's user, HEALTHCHECK, ENTRYPOINT and CMD."""
    from jackin.images import pins  # the Dockerfile's pins: only this build needs them

    text = (role.directory / str(role.image.dockerfile)).read_text()
    steps = dockerfile_instructions(text)
    image = next((rest.split()[0] for _, word, rest in steps if word == "FROM"), "")
    node = NODE_FROM.match(image)
    if node is None:
        raise LabError(f"role {role.name}: its Dockerfile's FROM {image!r} is not node:<version>-...: the lab "
                       "cannot build it offline (it takes Node from npm at that version)")  # fmt: skip
    arch = pins.NODE_ARCH.get(os.uname().machine)
    npm = shutil.which("npm")
    if arch is None or npm is None:
        raise LabError(f"role {role.name}: building it here needs npm and a machine npm has Node for "
                       f"(this one: {os.uname().machine}, npm {'found' if npm else 'missing'})",
                       hint="apt-get install npm")  # fmt: skip
    pinned = [p for p in pins.pins() if p.role == role.name]
    packages = [f"node-linux-{arch}@{node.group(1)}", *(f"{p.package}@{p.version}" for p in pinned)]
    context.mkdir(parents=True)
    shutil.copytree(roles.roles_dir() / roles.COMMON, context / roles.COMMON, symlinks=False)
    # No package's install script runs here (on this machine, as this user, beside the operator's
    # credentials): only their files are taken. npm keeps this machine's own settings (its registry, proxy
    # and certificate authorities, from ~/.npmrc and the environment).
    done = subprocess.run([npm, "install", "--global", "--prefix", str(context / "local"), "--no-fund", "--no-audit",
                           "--ignore-scripts", "--loglevel=error", *packages], capture_output=True, timeout=900,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise LabError(f"npm install of {' '.join(packages)} failed (exit {done.returncode}):\n"
                       f"{done.stderr.decode(errors='replace')[-2000:]}")  # fmt: skip
    shutil.rmtree(
        context / "local" / "lib" / "node_modules" / f"node-linux-{arch}" / "include", ignore_errors=True
    )  # C headers: 56 MB
    for pin in pinned:
        _install_scripts(context / "local", pin.package, base=base)
    env = [f"ENV {rest}" for _, word, rest in steps if word == "ENV"]
    lines = [f"FROM {base}", "COPY local/ /usr/local/", "COPY common/ /usr/local/bin/", *env,
             "WORKDIR /workspace", "USER 65534:65534", role.healthcheck.instruction(),
             f"ENTRYPOINT {json.dumps([roles.ENTRYPOINT])}", f"CMD {json.dumps(role.command)}",
             f"LABEL jackin.role={role.name} jackin.recipe={role.tag.split(':')[1]} jackin.build=offline"]  # fmt: skip
    (context / "Dockerfile").write_text("\n".join(lines) + "\n")
    return context


INSTALL_SCRIPTS = ("preinstall", "install", "postinstall")  # npm's order


def _install_scripts(local: Path, package: str, *, base: str) -> None:
    """Run the install scripts of ``package`` (a pinned runtime, not its dependencies), as the host's
    ``npm install -g`` would, but not on this machine: in a container of ``base`` with no network, no
    capabilities, as this machine's user, ``local`` mounted read-only as its /usr/local but for the
    package's own directory (OpenCode's postinstall puts its platform's binary in place;
    without it, its ``opencode`` only says to reinstall without --ignore-scripts). The platform builds
    it did not choose are then removed (``_unchosen``): weight in every host's load."""
    directory = local / "lib" / "node_modules" / package
    try:
        scripts = json.loads((directory / "package.json").read_text()).get("scripts") or {}
    except (OSError, ValueError):
        return
    wanted = [scripts[name] for name in INSTALL_SCRIPTS if isinstance(scripts.get(name), str)]
    if not wanted:
        return
    inside = f"/usr/local/lib/node_modules/{package}"
    name = f"jackin-install-{secrets.token_hex(6)}"
    # As this machine's user, no network, no capabilities, no new privileges, a read-only root and /usr/local;
    # the package's own directory the one place it writes (a postinstall links a binary there).
    argv = ["docker", "run", "--rm", "--name", name, "--network", "none", "--user", f"{os.getuid()}:{os.getgid()}",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only", "--tmpfs", "/tmp",
            "--pids-limit", "256", "--memory", "1g", "-v", f"{local}:/usr/local:ro", "-v", f"{directory}:{inside}",
            "-w", inside, "-e", "PATH=/usr/local/bin:/usr/bin:/bin", "-e", "HOME=/tmp", "--entrypoint", "/bin/sh",
            base, "-ec", " && ".join(wanted)]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        _docker("rm", "-f", name, check=False)
        raise LabError(f"the install script of {package} ran over 300 s in its build container: stopped") from None
    if done.returncode != 0:
        raise LabError(f"the install script of {package} failed in its build container (exit {done.returncode}):\n"
                       f"{done.stderr.decode(errors='replace')[-2000:]}")  # fmt: skip
    # The platform variants the script did not choose: none of their files is linked from the package's own
    for variant in _unchosen(directory):
        shutil.rmtree(variant, ignore_errors=True)


def _unchosen(directory: Path) -> list[Path]:
    """The optional dependencies of the package at ``directory`` (its platform builds) that share no file
    with the package's own files (outside node_modules): the ones its install script did not put in place.
    None when it linked none of them (then it may pick one at run time: all stay)."""
    try:
        optional = json.loads((directory / "package.json").read_text()).get("optionalDependencies") or {}
    except (OSError, ValueError):
        return []
    own = {(f.stat().st_dev, f.stat().st_ino) for f in directory.rglob("*")
           if f.is_file() and not f.is_symlink() and "node_modules" not in f.relative_to(directory).parts}  # fmt: skip
    present = [directory / "node_modules" / name for name in optional if (directory / "node_modules" / name).is_dir()]
    chosen = [d for d in present if any((f.stat().st_dev, f.stat().st_ino) in own for f in d.rglob("*")
                                        if f.is_file() and not f.is_symlink())]  # fmt: skip
    return [d for d in present if d not in chosen] if chosen else []


def _base(role: roles.Role, root: Path, base: str) -> None:
    """A Debian minbase root with the role's packages and busybox's applets, imported as ``base``."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise LabError(f"building role {role.name}'s image needs root and debootstrap on this machine",
                       hint="apt-get install debootstrap, and run as root")  # fmt: skip
    packages = ",".join(role.image.debootstrap or [])
    _run(["debootstrap", "--variant=minbase", f"--include={packages}", suite(), str(root), apt_mirror()],
         "debootstrap")  # fmt: skip
    link_applets(root)
    for part in TRIM:
        shutil.rmtree(root / part, ignore_errors=True)
    for part in role.image.drop:
        if not drop(root, part):
            raise LabError(
                f"role {role.name}: image.drop: {part} is not in the root (a typo, or another architecture?)"
            )
    for directory in ("workspace", RUN_DIR.lstrip("/")):  # the mount points of the workspace and /run/jackin/*
        (root / directory).mkdir(parents=True, exist_ok=True)
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    try:
        done = subprocess.run(["docker", "import", "-", base], stdin=tar.stdout, capture_output=True, check=False)
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
    if done.returncode != 0:
        raise LabError(f"docker import of {base} failed: {done.stderr.decode(errors='replace').strip()}")


def drop(root: Path, part: str) -> int:
    """Remove ``part`` of ``root`` (relative; a ``*`` matches one name) without ever following a link: a
    root holds absolute links (``var/run -> /run``) that point at this machine, where this runs as root.
    A link on the way is not entered; a link that matches is removed itself. Returns how many went."""
    found = [root]
    names = part.split("/")
    for depth, name in enumerate(names):
        last = depth == len(names) - 1
        matches = []
        for parent in found:
            if parent.is_symlink() or not parent.is_dir():
                continue
            matches += sorted(parent.glob(name)) if "*" in name else [parent / name]
        found = [m for m in matches if os.path.lexists(m) and (last or not m.is_symlink())]
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return len(found)


def link_applets(root: Path) -> list[str]:
    """Link each busybox applet the root has no command of into /usr/local/bin (the root's own tools,
    e.g. coreutils, stay first). Returns the applets linked; none without /bin/busybox."""
    busybox = root / "bin" / "busybox"
    if not busybox.exists():
        return []
    listed = subprocess.run(["chroot", str(root), "/bin/busybox", "--list"], capture_output=True, text=True,
                            check=True).stdout.split()  # fmt: skip
    target = root / "usr" / "local" / "bin"
    target.mkdir(parents=True, exist_ok=True)
    linked = []
    for applet in listed:
        if applet == "busybox" or "/" in applet:
            continue
        if any((root / d / applet).exists() or (root / d / applet).is_symlink()
               for d in ("bin", "sbin", "usr/bin", "usr/sbin")):  # fmt: skip
            continue
        (target / applet).symlink_to("/bin/busybox")
        linked.append(applet)
    return linked


def build_context(role: roles.Role, context: Path, *, base: str | None) -> Path:
    """A build context: the role's files at the top, roles/common as ``common/``; for a debootstrap role
    the generated Dockerfile, else the role's own."""
    shutil.copytree(role.directory, context, symlinks=False)
    shutil.copytree(roles.roles_dir() / roles.COMMON, context / roles.COMMON, symlinks=False)
    if base is not None:
        (context / "Dockerfile").write_text(dockerfile(role, base))
    elif role.image.dockerfile != "Dockerfile":
        shutil.copy(context / str(role.image.dockerfile), context / "Dockerfile")
    return context


# --- archive -------------------------------------------------------------------------------------


def archive_path(tag: str) -> Path:
    name, _, digest = tag[len(roles.REPOSITORY) :].partition(":")
    return state_dir() / "images" / f"role-{name}-{digest}.tar.gz"


def archive_size(tag: str) -> int | None:
    """The cached archive's size in bytes, or None before it exists."""
    try:
        return archive_path(tag).stat().st_size
    except OSError:
        return None


def archive(tag: str, *, log: Log = lambda _: None) -> Path:
    """``docker save TAG | gzip`` once, kept under the state dir by tag."""
    path = archive_path(tag)
    if path.exists():
        return path
    private_dir(path.parent)
    with _locked(role_of(tag)):
        if path.exists():
            return path
        log(f"saving {tag} for the hosts (docker save | gzip)")
        partial = path.with_suffix(".partial")
        with open(partial, "wb") as out:
            save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            gzip = subprocess.run(["gzip", "-1"], stdin=save.stdout, stdout=out, check=False)
            assert save.stdout is not None
            save.stdout.close()
            error = save.stderr.read() if save.stderr else b""
            if save.wait() != 0 or gzip.returncode != 0:
                partial.unlink(missing_ok=True)
                raise LabError(f"docker save of {tag} failed: {error.decode(errors='replace').strip()}")
        partial.rename(path)
    return path


# --- delivery ------------------------------------------------------------------------------------


def built_here(image: str) -> bool:
    """Whether a role image is built on the operator's machine for every fleet (``build: operator``)."""
    if not is_role_image(image):
        return False
    try:
        return roles.load(role_of(image)).image.build == "operator"
    except JackinError:
        return True  # prepare() says what is wrong with it


def missing(images: Sequence[str], present_images: Sequence[str]) -> list[str]:
    """The role images of ``images`` a host's state read did not find there."""
    return sorted({i for i in images if is_role_image(i) and i not in present_images})


def prepare(tags: Sequence[str], *, log: Log = lambda _: None) -> dict[str, Path]:
    """Build (if needed) and archive each role image in ``tags``; its archive by tag."""
    out = {}
    for tag in sorted(set(tags)):
        role = roles.load(role_of(tag))
        if role.tag != tag:
            raise JackinError(f"image {tag} is not role {role.name}'s current image ({role.tag})")
        ensure_built(role, log=log)
        out[tag] = archive(tag, log=log)
    return out


def load_one(target: SshTarget, archives: Sequence[Path]) -> None:
    """Send each archive by SFTP into a fresh root-only directory on the host, ``docker load`` it, remove it."""
    from jackin.transport.ssh import connect  # lazy: Fabric and paramiko load only when an image is sent

    with connect(target, timeout=15) as conn:
        made = conn.run("mktemp -d /var/tmp/jackin-image.XXXXXX", hide=True, warn=True)
        if not made.ok:
            raise RemoteCommandError(f"cannot make a directory for the image: {made.stderr.strip()}", host=target.name)
        directory = made.stdout.strip()
        try:
            sftp = conn.sftp()
            for n, path in enumerate(archives):
                remote = f"{directory}/{n}.tar.gz"
                sftp.put(str(path), remote)
                done = conn.run(f"docker load -q -i {shlex.quote(remote)}", hide=True, warn=True, timeout=600)
                if not done.ok:
                    raise RemoteCommandError(f"docker load of {path.name} failed: {done.stderr.strip()[-500:]}",
                                             host=target.name)  # fmt: skip
                conn.run(f"rm -f {shlex.quote(remote)}", hide=True, warn=True)
        finally:
            conn.run(f"rm -rf {shlex.quote(directory)}", hide=True, warn=True)


def deliver(
    wanted: dict[str, list[str]], targets: Sequence[SshTarget], *, log: Log = lambda _: None
) -> dict[str, JackinError]:
    """Load into each host (by name in ``wanted``) the role images it lacks, hosts in parallel.
    Returns the hosts that failed, with their error (a failed build fails them all)."""
    wanted = {name: tags for name, tags in wanted.items() if tags}
    if not wanted:
        return {}
    by_name = {t.name: t for t in targets if t.name in wanted}
    try:
        archives = prepare(sorted({t for tags in wanted.values() for t in tags}), log=log)
    except JackinError as error:
        return {name: error for name in wanted}

    def one(target: SshTarget) -> None:
        started = time.monotonic()
        try:
            load_one(target, [archives[t] for t in wanted[target.name]])
        except JackinError:
            raise
        except Exception as error:  # noqa: BLE001 - paramiko/SFTP raise many kinds; the host fails, not the run
            raise RemoteCommandError(f"loading the image failed: {error}", host=target.name) from None
        log(f"{target.name}: loaded {', '.join(wanted[target.name])} in {time.monotonic() - started:.0f}s")

    hosts = [by_name[name] for name in sorted(by_name)]
    return fanout.each_host(hosts, one, grace=math.inf, workers=8).failed


def source(tag: str, *, here: bool = False) -> dict:
    """What the host's image step needs of a role image (pure of the host): how it is built, the
    archive's size when cached here (``build: operator``, or any role with ``here``: a lab fleet), the
    build context (``build: host``). Refused when ``tag`` is not the role's current image (nothing could
    bring that one to a host)."""
    try:
        role = roles.load(role_of(tag))
    except JackinError as error:
        raise Refused(f"image {tag}: {error.message}") from None
    if role.tag != tag:
        raise Refused(f"image {tag} is not role {role.name}'s current image ({role.tag}) and is not on the host")
    if role.image.build == "operator" or here:
        return {"build": "operator", "size": archive_size(tag)}
    return {"build": "host", "files": context_files(role)}


def context_files(role: roles.Role) -> dict[str, bytes]:
    """``build: host``: the build context's files (path in the context -> bytes), as ``build_context``."""
    files = {p.relative_to(role.directory).as_posix(): p.read_bytes() for p in sorted(role.directory.rglob("*"))
             if p.is_file()}  # fmt: skip
    common = roles.roles_dir() / roles.COMMON
    files.update({f"{roles.COMMON}/{p.relative_to(common).as_posix()}": p.read_bytes()
                  for p in sorted(common.rglob("*")) if p.is_file()})  # fmt: skip
    if role.image.dockerfile and role.image.dockerfile != "Dockerfile":
        files["Dockerfile"] = files[role.image.dockerfile]
    return files


# --- fleet.up (jackin/lifecycle/fleet.py) --------------------------------------------------------------------


class _Split(Protocol):
    """What ``load_missing`` uses of ``jackin.lifecycle.fleet.HostSplit`` (a layer above this module)."""

    run: list[SshTarget]


def _wanted(plan: FleetPlan, states: Mapping[str, object], hosts: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Per readable host (of ``hosts``, default all), the plan's role images built here that its state read
    lacks (a ``build: host`` role's image is built by the host's own step, unless ``plan.images_here``)."""

    def planned(host: str) -> list[str]:  # the images of the agents placed there
        return [a.image for a in plan.at(host) if plan.images_here or built_here(a.image)]

    return {name: missing(planned(name), state.images) for name, state in states.items()
            if isinstance(state, HostState) and (hosts is None or name in hosts)}  # fmt: skip


def prepare_missing(plan: FleetPlan, states: Mapping[str, object], *, log: Log = lambda _: None) -> None:
    """Build and archive here the role images any readable host lacks (before anything changes: a
    failed build raises and no host is touched)."""
    tags = sorted({t for tags in _wanted(plan, states).values() for t in tags})
    if tags:
        prepare(tags, log=log)


def load_missing(
    plan: FleetPlan, split: _Split, states: Mapping[str, object], *, log: Log = lambda _: None
) -> list[HostResult]:
    """Before the deploy: load into each host to be run (``split.run``) the role images it lacks. A host
    that fails is taken out of ``split.run`` and returned as not run (failed, nothing changed there).
    A host that loaded them has them added to its state in ``states`` (the state its deploy is handed)."""
    wanted = _wanted(plan, states, [t.name for t in split.run])
    failed = deliver(wanted, split.run, log=log)
    split.run = [t for t in split.run if t.name not in failed]
    if isinstance(states, dict):  # the state handed to each deploy lists what was just loaded there
        for name, tags in wanted.items():
            if tags and name not in failed:
                states[name] = states[name].model_copy(update={"images": sorted({*states[name].images, *tags})})
    return [HostResult(host=name, connected=True, failed=1,
                       error=f"not changed: loading its agent image failed: {error.message}")
            for name, error in sorted(failed.items())]  # fmt: skip


# --- python -m jackin.images.build: the lab's role images, built once per machine ---------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Build here the lab images of the named roles (default: every role), each once per machine: a tag
    already in the local Docker engine is kept (the tag is the content's hash). Prints each one's tag,
    whether it was built or found, the time and its size, so CI shows the cold build's cost apart from the
    suite's. Exit 1 when one fails to build."""
    import sys

    wanted = list(argv if argv is not None else sys.argv[1:])
    if not wanted:
        wanted = roles.names()
    failed = 0
    for name in wanted:
        started = time.monotonic()
        try:
            role = roles.load(name)
            found = present(role.tag)
            tag = ensure_built(role)
        except JackinError as error:
            print(f"role {name}: not built: {error.message}", file=sys.stderr)
            failed += 1
            continue
        size = _docker("image", "inspect", "--format", "{{.Size}}", tag, check=False).stdout.decode().strip()
        mb = f"{int(size) / 1e6:.0f} MB" if size.isdigit() else "size unknown"
        how = "already built" if found else f"built in {time.monotonic() - started:.0f} s"
        print(f"role {name}: {tag} {how} ({mb})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
