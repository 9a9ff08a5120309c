"""The query cleaner between an agent's filtering resolver and its upstreams: nothing the agent chooses
reaches a resolver but the allowlisted name itself.

dnsmasq (``jackin.net.dns``) answers only the agent's allowlisted names, but what it forwards for them
is the agent's query: its letter case (``OK.rT.TeSt``), any query type (TXT, 255, 65000), its EDNS
option bytes and its query ID all reached the upstream. dnsmasq 2.89 cannot rebuild a query, so each
filter's dnsmasq forwards to its own cleaner instead, on a loopback address of its own (``listen``:
127.x.y.z from the agent's uid), which no agent can reach: the fleet's input chain lets an agent reach
port 53 only on its own bridge's address, the wall drops what that chain has not seen, and the kernel
drops loopback destinations arriving on a bridge unless ``route_localnet`` is set. The cleaner answers
locally, never forwarding:

    REFUSED   a type other than A, AAAA and CNAME (what an allowlist needs), a class other than IN,
              a name not on the agent's list (dnsmasq never sends one: a second check)
    FORMERR   anything but one plain question (no compression, no answer or authority records)
    NOTIMP    an opcode other than QUERY

and sends the upstream a query of its own making: the name lower-cased, a fresh random ID, recursion
desired, and an EDNS record of its own (UDP size 1232, no options, no DNSSEC bit). The upstream's reply
goes back to dnsmasq with dnsmasq's ID and its question as dnsmasq asked it (the same length: only the
case differs), so dnsmasq matches it, fills the agent's nftables sets and caps the TTL as before. A
truncated reply is asked again over TCP.

The cleaner is the unit's main process (``jackin-dns-<fleet>@<instance>``): it binds its address, then
starts dnsmasq as its child, and ends when dnsmasq ends (systemd restarts both). Upstreams: the spec's
``dns`` servers, else the ``nameserver`` lines of the host's ``/etc/resolv.conf`` when it starts. Perl
from ``perl-base`` (essential on Debian and Ubuntu): hosts may lack python3. Refusals are logged to the
filter's journal (``refused TYPE NAME: why``).
"""

from __future__ import annotations

from jackin.hostpaths import dns_dir
from jackin.plan.fleet import AgentPlan

TYPES = {"A": 1, "AAAA": 28, "CNAME": 5}  # the query types an allowlist needs


def listen_address(uid: int) -> str:
    """The cleaner's address: 127.0.0.0/8 with the uid's low 24 bits (uids are unique on a host;
    an agent's uid is at least 1000, so never 127.0.0.1 or systemd-resolved's 127.0.0.53)."""
    return f"127.{uid >> 16 & 255}.{uid >> 8 & 255}.{uid & 255}"


def conf_path(agent: AgentPlan) -> str:
    return f"{dns_dir(agent.fleet)}/{agent.instance}.clean"


def config(agent: AgentPlan, names: list[str]) -> str:
    """The cleaner's configuration: its address, its upstreams (none: the host's), the allowlisted names."""
    lines = [f"# jackin fleet {agent.fleet}, agent {agent.instance}: the query cleaner (jackin/net/dnsclean.py)",
             f"listen {listen_address(agent.uid)}"]  # fmt: skip
    lines += [f"upstream {server}" for server in agent.policy.dns]
    lines += [f"name {name.lower()}" for name in names]
    return "\n".join(lines) + "\n"


SCRIPT = r"""#!/usr/bin/perl
# jackin: the DNS query cleaner in front of an agent's upstreams (jackin/net/dnsclean.py).
# Usage: dns-clean CONF COMMAND...   binds CONF's address, runs COMMAND (dnsmasq) as its child,
# serves until the child ends. CONF: "listen ADDR[#PORT]", "upstream ADDR[#PORT]"..., "name NAME"...
use strict;
use warnings;
use IO::Socket::IP;  # IPv4 and IPv6 upstreams alike (perl-base has it)
use IO::Select;
use POSIX qw(WNOHANG _exit sigprocmask SIG_BLOCK SIG_SETMASK SIGCHLD);

my %TYPES = (1 => 'A', 28 => 'AAAA', 5 => 'CNAME');
my ($TRY, $MAXKIDS) = (2, 64);  # seconds per upstream; queries in flight at once
my ($conf, @command) = @ARGV;
die "usage: dns-clean CONF COMMAND...\n" unless defined $conf && @command;
my ($listen, @upstreams, %names);
open my $fh, '<', $conf or die "dns-clean: $conf: $!\n";
while (<$fh>) {
    next if /^\s*(#|$)/;
    if (/^listen\s+(\S+)\s*$/) { $listen = $1 }
    elsif (/^upstream\s+(\S+)\s*$/) { push @upstreams, $1 }
    elsif (/^name\s+(\S+)\s*$/) { $names{lc $1} = 1 }
    else { die "dns-clean: $conf: bad line: $_" }
}
close $fh;
die "dns-clean: $conf: no listen address\n" unless $listen;
if (!@upstreams && open my $rc, '<', '/etc/resolv.conf') {
    while (<$rc>) { push @upstreams, $1 if /^\s*nameserver\s+(\S+)/ }
    close $rc;
}
die "dns-clean: no upstream (none in $conf, no nameserver in /etc/resolv.conf)\n" unless @upstreams;
my ($laddr, $lport) = split /#/, $listen;
$lport ||= 53;
my $udp = IO::Socket::IP->new(LocalHost => $laddr, LocalPort => $lport, Proto => 'udp', ReuseAddr => 1)
    or die "dns-clean: cannot bind udp $laddr:$lport: $@\n";
my $tcp = IO::Socket::IP->new(LocalHost => $laddr, LocalPort => $lport, Proto => 'tcp', Listen => 16,
                              ReuseAddr => 1) or die "dns-clean: cannot bind tcp $laddr:$lport: $@\n";
$| = 1;
my (%kids, $child);
# SIGCHLD is blocked around every fork until the child is recorded: a child that ended before it was
# recorded would be reaped unrecorded, and its entry, made after, never removed.
my ($chld, $old) = (POSIX::SigSet->new(SIGCHLD), POSIX::SigSet->new);
sub spawn {
    sigprocmask(SIG_BLOCK, $chld, $old);
    my $pid = fork;
    if (defined $pid && !$pid) { sigprocmask(SIG_SETMASK, $old); $SIG{TERM} = $SIG{CHLD} = 'DEFAULT'; return 0 }
    $kids{$pid} = 1 if $pid && defined $child;
    $child //= $pid;
    sigprocmask(SIG_SETMASK, $old);
    $pid;
}
$SIG{CHLD} = sub {
    while ((my $pid = waitpid(-1, WNOHANG)) > 0) {
        if (defined $child && $pid == $child) {
            print STDERR "dns-clean: $command[0] ended (status $?)\n";
            kill 'TERM', keys %kids;
            exit 1;
        }
        delete $kids{$pid};
    }
};
spawn() // die "dns-clean: fork: $!\n";
if (!$child) { exec @command or _exit(127) }
$SIG{TERM} = $SIG{INT} = sub { kill 'TERM', $child; exit 0 };

sub random_id { open my $r, '<', '/dev/urandom' or return int rand 65536; read $r, my $b, 2; unpack 'n', $b }

# (rcode or undef, question bytes, lower-cased name, type) of a query; rcode set: answer locally.
sub parse {
    my ($q) = @_;
    return (1, '') if length $q < 17;
    my ($id, $flags, $qd, $an, $ns, $ar) = unpack 'n6', $q;
    return (4, '') if (($flags >> 11) & 15) != 0;          # NOTIMP: not a QUERY
    return (1, '') if $flags & 0x8000 or $qd != 1 or $an or $ns;  # FORMERR
    my $pos = 12;
    my (@labels, $len);
    while (1) {
        return (1, '') if $pos >= length $q;
        $len = ord substr $q, $pos, 1;
        last if $len == 0;
        return (1, '') if $len > 63 or $pos + 1 + $len > length $q;  # a pointer or a bad label
        push @labels, lc substr $q, $pos + 1, $len;
        $pos += 1 + $len;
    }
    return (1, '') if $pos + 5 > length $q or $pos - 11 > 255;
    my ($type, $class) = unpack 'nn', substr $q, $pos + 1, 4;
    my $question = substr $q, 12, $pos + 5 - 12;
    my $name = join '.', @labels;
    return (5, $question, $name, $type, 'class') if $class != 1;
    return (5, $question, $name, $type, 'type') unless $TYPES{$type};
    return (5, $question, $name, $type, 'name') unless $names{$name};
    return (undef, $question, $name, $type);
}

sub local_answer {
    my ($q, $rcode, $question) = @_;
    my ($id, $flags) = unpack 'nn', $q . "\0" x 4;
    pack('n6', $id, 0x8080 | ($flags & 0x7900) | $rcode, $question eq '' ? 0 : 1, 0, 0, 0) . $question;
}

sub wire { join('', map { chr(length) . $_ } split /\./, $_[0]) . "\0" }

sub ask_tcp {
    my ($server, $port, $query) = @_;
    my $s = IO::Socket::IP->new(PeerHost => $server, PeerPort => $port, Proto => 'tcp', Timeout => $TRY) or return;
    my $out = pack('n', length $query) . $query;
    return unless defined syswrite $s, $out;
    my ($buf, $want) = ('', undef);
    my $sel = IO::Select->new($s);
    while (!defined $want || length $buf < $want + 2) {
        return unless $sel->can_read($TRY);
        my $got = sysread $s, $buf, 65537, length $buf;
        return unless $got;
        $want = unpack 'n', $buf if !defined $want && length $buf >= 2;
    }
    substr $buf, 2, $want;
}

# The upstream's reply to a fresh query for (name, type), or undef: each upstream in turn.
sub resolve {
    my ($name, $type) = @_;
    my $id = random_id();
    my $lq = wire($name) . pack('nn', $type, 1);
    my $query = pack('n6', $id, 0x0100, 1, 0, 0, 1) . $lq . "\0" . pack('nnNn', 41, 1232, 0, 0);
    for my $up (@upstreams) {
        my ($server, $port) = split /#/, $up;
        $port ||= 53;
        my $s = IO::Socket::IP->new(PeerHost => $server, PeerPort => $port, Proto => 'udp') or next;
        next unless defined send $s, $query, 0;
        my $sel = IO::Select->new($s);
        my $deadline = time + $TRY;
        while ((my $left = $deadline - time) > 0) {
            last unless $sel->can_read($left);
            my $r;
            last unless defined recv $s, $r, 65535, 0;
            next if length $r < 12 + length $lq or unpack('n', $r) != $id or !(unpack('x2 n', $r) & 0x8000)
                or lc(substr $r, 12, length $lq) ne $lq;  # not the reply to this query: wait on
            if (unpack('x2 n', $r) & 0x0200) {  # truncated: the same query over TCP
                my $t = ask_tcp($server, $port, $query);
                $r = $t if defined $t && length $t >= 12 + length $lq && unpack('n', $t) == $id;
            }
            return $r;
        }
    }
    return;
}

# The answer to one query from dnsmasq: the upstream's reply under dnsmasq's ID and question, or local.
sub answer {
    my ($q) = @_;
    my ($rcode, $question, $name, $type, $why) = parse($q);
    if (defined $rcode) {
        # One write per line: the children's lines never interleave.
        syswrite STDERR, "dns-clean: refused " . ($TYPES{$type // 0} // "type " . ($type // '?')) . " "
            . ($name // '?') . ": " . ($why // ($rcode == 4 ? 'opcode' : 'malformed')) . "\n";
        return local_answer($q, $rcode, $question);
    }
    my $r = resolve($name, $type);
    return local_answer($q, 2, $question) unless defined $r;  # SERVFAIL
    substr($r, 0, 2) = substr($q, 0, 2);
    substr($r, 12, length $question) = $question;
    $r;
}

my $sel = IO::Select->new($udp, $tcp);
while (1) {
    my @ready = $sel->can_read;
    for my $s (@ready) {
        if ($s == $udp) {
            my $peer = recv $udp, my $q, 65535, 0;
            next unless defined $peer;
            if (keys %kids >= $MAXKIDS) { send $udp, local_answer($q, 2, ''), 0, $peer; next }
            my $pid = spawn();
            if (defined $pid && !$pid) { send $udp, answer($q), 0, $peer; _exit(0) }
        } else {
            my $c = $tcp->accept or next;
            if (keys %kids >= $MAXKIDS) { close $c; next }
            my $pid = spawn();
            if (defined $pid && !$pid) {
                my $csel = IO::Select->new($c);
                my $buf = '';
                while ($csel->can_read(10)) {
                    my $got = sysread $c, $buf, 65537, length $buf;
                    last unless $got;
                    while (length $buf >= 2 && length $buf >= 2 + unpack 'n', $buf) {
                        my $len = unpack 'n', $buf;
                        my $a = answer(substr $buf, 2, $len);
                        substr($buf, 0, 2 + $len) = '';
                        syswrite $c, pack('n', length $a) . $a;
                    }
                }
                _exit(0);
            }
            close $c;
        }
    }
}
"""
