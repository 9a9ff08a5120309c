"""Reading a host's Docker daemon from its shell in one perl process, instead of docker CLI starts.

Each docker CLI start costs a lab host ~25 ms of CPU; the reads that run on every host at once
(``jackin.facts.state``'s state read, ``jackin.lifecycle.status``'s status read) ask the daemon's socket instead,
with the very API requests the CLI makes. perl-base is Essential on Debian and Ubuntu; when the CLI
could ask another engine (``DOCKER_HOST``, ``DOCKER_CONTEXT`` or ``DOCKER_CONFIG`` set, or any
``currentContext`` in root's ``~/.docker/config.json``, even "default": the shell does not parse
JSON, so it errs toward the CLI), with no socket or no perl (``USABLE`` is false), the reads use the
docker CLI as before. Pure: shell and perl text only. The fleet's name and every other value
reach perl as arguments, never as code.
"""

from __future__ import annotations

from jackin.hostpaths import DOCKER_SOCKET as SOCKET

# Shell: true when the perl reads can be used on this host: the docker CLI would ask the same engine (no
# DOCKER_HOST, DOCKER_CONTEXT or DOCKER_CONFIG, no context chosen in ~/.docker/config.json), it has a
# socket, and there is perl.
USABLE = (
    '[ -z "${DOCKER_HOST:-}${DOCKER_CONTEXT:-}${DOCKER_CONFIG:-}" ] && '
    '{ [ ! -e "$HOME/.docker/config.json" ] || ! grep -q currentContext "$HOME/.docker/config.json"; } && '
    f"[ -S {SOCKET} ] && command -v perl >/dev/null 2>&1"
)

# perl: ``enc`` (URL-encode), ``get`` (one HTTP/1.0 request on the socket: (status, body), (0, "")
# when it fails), ``ids`` (the ids in a list answer), ``label_filter`` (the fleet's label filter).
# The socket by perl's builtins (AF_UNIX is 1 on Linux; SOCK_STREAM is 1, but 2 on MIPS, where the
# first connect fails and Socket's constant is used): loading IO::Socket::UNIX cost a host ~12 ms
# of CPU per read, 5 times perl's own start.
PRELUDE = r"""use strict;
sub enc { my $s = shift; $s =~ s/([^A-Za-z0-9._~:\/\@-])/sprintf("%%%02X", ord $1)/ge; $s }
sub unix { socket(my $s, 1, $_[0], 0) or return; connect($s, pack("S Z*", 1, "SOCKET")) or return; $s }
sub get { my $s = unix(1) || do { require Socket; unix(Socket::SOCK_STREAM()) } or return (0, "");
  my $q = "GET $_[0] HTTP/1.0\r\n\r\n"; (syswrite($s, $q) // -1) == length $q or return (0, "");
  local $/; my $r = <$s>; close $s;
  defined $r && $r =~ m{\AHTTP/1\.[01] (\d{3})[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n(.*?)\s*\z}s or return (0, "");
  return ($1, $2) }
sub ids { my ($c, $b) = get($_[0]); return $c == 200 ? ($b =~ /"Id":\s*"([0-9a-f]{64})"/g) : () }
sub label_filter { (my $name = "jackin.fleet=$_[0]") =~ s/(["\\])/\\$1/g;
  $name =~ s/([\x00-\x1f])/sprintf("\\u%04x", ord $1)/ge; return enc("{\"label\":{\"$name\":true}}") }
""".replace("SOCKET", SOCKET)
