"""Reading and writing a file an agent controls, on its host, as the agent: never blocking, never as root.

An agent owns its workspace and every byte in it: a name jackin reads there (the status file, the
handoff) may be a FIFO, a socket, a directory, a link to another file, a sparse file of a terabyte,
or a file that another process holds a lease on. A plain ``head -c`` blocks for ever in ``open`` on
a FIFO (and leaves its process behind when the SSH session that started it ends), follows a link as
whoever runs it and says nothing about why it read nothing. So every such read and write goes
through the perl programs below, on the host (not in the agent's container, whose tools are the
role image's), one process per host read:

- each file is read by a child **forked and switched to the agent's uid and gid** (no other group,
  no capability), the switch checked from the kernel's own account (``/proc/self/status``), and
  never for a uid or gid below 1000;
- opened with ``O_NONBLOCK | O_NOCTTY``: a FIFO opens at once, writer or not, and a leased file is
  refused instead of waited for;
- checked **on the open descriptor**: ``fstat`` says a regular file (else: "is a FIFO, not a regular
  file", or a socket, a directory, a device), and ``/proc/self/fd/N`` says where it really is: inside
  the agent's workspace (a link out of it, even to a file every user may read, is refused; one to a
  file only root reads is not even opened, the open being the agent's);
- read up to ``cap + 1`` bytes (a larger file is the caller's to refuse) and sent hex-encoded, so no
  byte of it can reach the output's parser;
- under a **deadline**: the child has an alarm of ``wait`` seconds, the parent kills it (SIGKILL)
  and reaps it when it has not answered by then, and gives up on the rest of its records once
  ``budget`` seconds have passed; the parent has an alarm too. No process outlives the read.

The answer ``agent.answer`` writes goes the same way (``WRITE``): as the agent, into a directory of
the workspace entered (``chdir``) and checked to be inside it, in a new file of a fresh name created
exclusively (``O_EXCL | O_NOFOLLOW``, so a FIFO or link planted at any name is never opened), then
renamed into place.

Why perl: perl-base is Essential on Debian and Ubuntu (jackin's host reads rely on it already,
``jackin.facts.dockerapi``) and has what this needs (``fork``, ``sysopen`` with flags, ``fstat`` on a
handle, ``alarm``, ``select``) in one process; coreutils has no read that checks the descriptor it
opened (``dd iflag=nonblock`` opens without blocking but reads whatever it opened), a shell's
``exec 3<`` blocks on a FIFO, and python3 is not on every server. A host without perl gets each
file's read refused with that reason, never a blocked read.

Every answer is one line per record: ``KEY +HEX`` (the file's first ``cap + 1`` bytes), ``KEY -``
(no such file) or ``KEY !PROBLEM`` (why it was not read: jackin's own words and the system's error
text, never a byte of the agent's). Pure: program text and parsing only.
"""

from __future__ import annotations

import binascii
import shlex
from collections.abc import Sequence
from typing import NamedTuple

# perl shared by both programs: ``become`` (this process as uid:gid alone, checked; "" or why not) and
# ``kind`` (what the last stat found, in words).
_PRELUDE = r"""use strict; use Fcntl qw(O_RDONLY O_WRONLY O_CREAT O_EXCL O_NOFOLLOW O_NONBLOCK O_NOCTTY O_DIRECTORY);
$| = 1;
sub become { my ($u, $g) = @_;
  return "not an agent's uid:gid" unless "$u:$g" =~ /\A[0-9]{4,10}:[0-9]{4,10}\z/ && $u >= 1000 && $g >= 1000;
  $) = "$g $g"; $( = $g; $> = $u; $< = $u;  # this order leaves no saved uid 0
  open(my $s, "<", "/proc/self/status") or return "cannot check the switch: $!";
  my %k = map { /\A(\w+):\s*(.*?)\s*\z/s ? ($1, $2) : () } <$s>;
  my $ok = ($k{Uid} // "") eq "$u\t$u\t$u\t$u" && ($k{Gid} // "") eq "$g\t$g\t$g\t$g"
    && !grep({ $_ ne $g } split(" ", $k{Groups} // "x")) && ($k{CapPrm} // 1) =~ /\A0+\z/
    && ($k{CapEff} // 1) =~ /\A0+\z/ && ($k{CapAmb} // 0) =~ /\A0+\z/;
  return $ok ? "" : "the switch to uid $u did not take" }
sub kind { -p _ ? "a FIFO" : -S _ ? "a socket" : -d _ ? "a directory" : -c _ ? "a character device"
  : -b _ ? "a block device" : "not a regular file" }
sub real { my $p = readlink("/proc/self/fd/" . fileno($_[0])); return $p }
"""

# argv: CAP WAIT BUDGET, then records of five: KEY UID GID WORKSPACE RELATIVE (any bytes but NUL).
READ = (
    _PRELUDE
    + r"""sub grab { my ($ws, $rel, $cap) = @_;
  sysopen(my $w, $ws, O_RDONLY | O_DIRECTORY | O_NONBLOCK) or return "!not read: the workspace cannot be opened: $!";
  my $top = real($w) // return "!not read: the workspace cannot be resolved: $!";
  my $f; unless (sysopen($f, "$ws/$rel", O_RDONLY | O_NONBLOCK | O_NOCTTY)) {
    return "-" if $!{ENOENT};
    return "!is a socket, not a regular file" if $!{ENXIO} && -S "$ws/$rel";
    return "!cannot be opened: $!" }
  stat($f) or return "!cannot be examined: $!";
  -f _ or return "!is " . kind() . ", not a regular file";
  my $at = real($f) // return "!cannot be resolved: $!";
  index($at, "$top/") == 0 or return "!leads outside the workspace";
  my $d = "";
  while (length($d) <= $cap) { my $n = sysread($f, $d, $cap + 1 - length($d), length($d));
    defined $n or return "!cannot be read: $!"; $n or last }
  return "+" . unpack("H*", $d) }
my ($cap, $wait, $budget, @r) = @ARGV;
my $end = time + $budget; alarm($budget + $wait + 5);
while (@r >= 5) { my ($key, $u, $g, $ws, $rel) = splice(@r, 0, 5);
  if (time >= $end) { print "$key !not read: this host's reads took longer than ${budget}s\n"; next }
  my ($rd, $wr); pipe($rd, $wr) or do { print "$key !not read: $!\n"; next };
  my $pid = fork(); defined $pid or do { print "$key !not read: cannot fork: $!\n"; next };
  unless ($pid) { close $rd; alarm $wait; my $why = become($u, $g);
    print $wr ($why ? "!not read: cannot read as uid $u: $why" : grab($ws, $rel, $cap)), "\n"; close $wr; exit 0 }
  close $wr; my ($got, $stop) = ("", time + $wait + 1);
  while ((my $left = $stop - time) > 0) { my $in = ""; vec($in, fileno($rd), 1) = 1;
    my $n = select($in, undef, undef, $left); next if $n < 0 && $!{EINTR}; last if $n <= 0;
    $n = sysread($rd, $got, 65536, length $got); last unless $n }
  kill("KILL", $pid); waitpid($pid, 0); close $rd;
  print "$key ", ($got =~ /\A[-+!][^\n]*\n\z/ ? $got : "!not read: no answer within ${wait}s (its reader was killed)\n") }
"""
)

# argv: UID GID WORKSPACE DIR NAME CAP WAIT; stdin: the bytes to write to WORKSPACE/DIR/NAME. Prints
# ``ok``; or says why not on stderr and exits 1.
WRITE = (
    _PRELUDE
    + r"""my ($u, $g, $ws, $dir, $name, $cap, $wait) = @ARGV; alarm $wait; umask 077;
sub fail { print STDERR "$_[0]\n"; exit 1 }
my $why = become($u, $g); fail("cannot write as uid $u: $why") if $why;
my $data = do { local $/; <STDIN> } // ""; length($data) <= $cap or fail("more than $cap bytes: not written");
sysopen(my $w, $ws, O_RDONLY | O_DIRECTORY | O_NONBLOCK) or fail("the workspace cannot be opened: $!");
my $top = real($w) // fail("the workspace cannot be resolved: $!");
mkdir("$ws/$dir", 0700) or $!{EEXIST} or fail("cannot make $dir: $!");
chdir("$ws/$dir") or fail("cannot enter $dir: $!");
index(readlink("/proc/self/cwd") // "", "$top/") == 0 or fail("$dir leads outside the workspace: not written");
my ($tmp, $f);
for (1 .. 8) { $tmp = "$name." . join("", map { (0 .. 9, "a" .. "f")[rand 16] } 1 .. 12) . ".tmp";
  last if sysopen($f, $tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0600);
  $!{EEXIST} or fail("cannot create a file in $dir: $!"); undef $f }
$f or fail("cannot create a file of a new name in $dir");
unless ((syswrite($f, $data) // -1) == length($data) && close($f)) { my $e = "$!"; unlink $tmp; fail("cannot write $dir/$tmp: $e") }
rename($tmp, $name) or do { my $e = "$!"; unlink $tmp; fail("cannot rename $dir/$tmp to $dir/$name: $e") };
print "ok\n";
"""
)

NO_PERL = "not read: this host has no perl (perl-base)"


class FileRead(NamedTuple):
    """One record's answer: the bytes (None: no such file, or empty), or why it was not read."""

    data: bytes | None = None
    problem: str | None = None


def read_shell(*, cap: int, wait: int, budget: int) -> str:
    """Shell: the reads of the records in ``"$@"`` (KEY UID GID WORKSPACE RELATIVE, five words each),
    one answer line each; without perl, each answered ``!`` with that reason. ``wait``: at least 1 s
    (an alarm of 0 would be none)."""
    return (f"if command -v perl >/dev/null 2>&1; then perl -e {shlex.quote(READ)} {int(cap)} {max(1, int(wait))} "
            f'{int(budget)} "$@"; else while [ $# -ge 5 ]; do echo "$1 !{NO_PERL}"; shift 5; done; fi')  # fmt: skip


def read_command(records: Sequence[tuple[str, int, int, str, str]], *, cap: int, wait: int = 10,
                 budget: int = 20) -> str:  # fmt: skip
    """Shell: ``read_shell`` of ``records`` (key, uid, gid, workspace, path relative to it); the keys
    are plain words of jackin's, the paths any text (quoted)."""
    words = [str(w) for record in records for w in record]
    return f"set -- {shlex.join(words)}; {read_shell(cap=cap, wait=wait, budget=budget)}"


def parse_answer(text: str) -> FileRead:
    """One answer (the line after its key): ValueError when it is none of ``+HEX``, ``-``, ``!PROBLEM``."""
    if text == "-":
        return FileRead()
    if text.startswith("!"):
        return FileRead(problem=text[1:].strip() or "not read")
    if text.startswith("+"):
        try:
            return FileRead(data=binascii.unhexlify(text[1:]) or None)
        except (binascii.Error, ValueError):
            raise ValueError("not hex") from None
    raise ValueError(f"not a reader's answer: {text[:20]!r}")


def parse_answers(output: str) -> dict[str, FileRead]:
    """Each key's answer in ``output`` (lines ``KEY ANSWER``); ValueError on a line that is none."""
    found = {}
    for line in output.splitlines():
        if line.strip():
            key, _, answer = line.partition(" ")
            found[key] = parse_answer(answer)
    return found


def write_command(uid: int, gid: int, workspace: str, directory: str, name: str, *, cap: int,
                  wait: int = 20) -> str:  # fmt: skip
    """Shell: write stdin (at most ``cap`` bytes) to ``workspace/directory/name`` as uid:gid (``WRITE``)."""
    args = shlex.join([str(int(uid)), str(int(gid)), workspace, directory, name, str(int(cap)), str(max(1, int(wait)))])
    return (f"command -v perl >/dev/null 2>&1 || {{ echo 'not written: this host has no perl (perl-base)' >&2; "
            f"exit 1; }}; exec perl -e {shlex.quote(WRITE)} {args}")  # fmt: skip
