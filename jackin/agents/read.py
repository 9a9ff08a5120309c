"""The agent-state read: what each agent's host shows of it, in one round trip (pure: shell text and parsers).

Per container of the fleet one ``docker inspect`` line (``INSPECT_FORMAT``: state, exit code, restarts,
health with its last output), which the status read shares (``jackin.lifecycle.status``), and the status
file the role's entrypoint keeps, read as the agent. What the facts mean is ``jackin.agents.state``'s.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from jackin.agents import state as derivation
from jackin.agents.state import AgentFacts, AgentState
from jackin.errors import JackinError
from jackin.facts import agent_files as files
from jackin.facts import dockerapi
from jackin.facts.gateway import GatewayAccount, gateway_accounts, gateway_files
from jackin.facts.sections import read_sections
from jackin.hostpaths import ROOT

# One ``docker inspect`` line per container feeds both reads (the status row and the agent state):
# tab-separated, every free-text field JSON (Docker escapes tabs and newlines in it), so a line is
# one container whatever its error or health output holds. The shell reads fields 1, 3, 4 and 6.
INSPECT_FORMAT = ('{{.Id}}\t{{.RestartCount}}\t{{json .Config.User}}\t{{json (index .Config.Labels "jackin.agent")}}'
                  "\t{{json .State}}\t{{.State.Pid}}\t{{json .Name}}\t{{json .HostConfig.NetworkMode}}"
                  "\t{{.HostConfig.Memory}}")  # fmt: skip
INSPECT_FIELDS = 9

# The same lines from the daemon's socket in one perl process (``jackin.facts.dockerapi``: ~25 ms of a
# host's CPU less per docker CLI start saved): the fleet's containers by label, each one's inspect
# document, and from it the INSPECT_FORMAT fields. ``fields`` splits a JSON object into its members'
# raw texts (strings kept whole, nesting counted), so every free-text field stays the JSON Docker
# wrote; numbers that are not plain digits read 0. A container gone before its inspect is skipped;
# a daemon that does not answer the list exits 1 (``##docker`` / ``down``), as ``docker ps`` failing.
STATUS_READ = (
    dockerapi.PRELUDE
    + r"""my $S = qr/"(?:[^"\\]++|\\.)*+"/s;
sub skip { for ($_[0]) { /\G\s*/gc; return 1 if /\G$S/gc;
    if (/\G[\{\[]/gc) { my $d = 1;
      while ($d) { if (/\G$S/gc || /\G[^"\{\}\[\]]+/gc) {} elsif (/\G[\{\[]/gc) { $d++ } elsif (/\G[\}\]]/gc) { $d-- } else { return 0 } }
      return 1 }
    return /\G[^,\}\]\s]+/gc ? 1 : 0 } }
sub fields { my $t = shift; my %h; defined $t && $t =~ /\G\s*\{/gc or return ();
  while ($t =~ /\G\s*($S)\s*:\s*/gc) { my ($k, $at) = ($1, pos $t); skip($t) or last;
    $h{$k} = substr($t, $at, pos($t) - $at); $t =~ /\G\s*,/gc }
  return %h }
sub num { my $v = shift; return defined $v && $v =~ /\A[0-9]+\z/ ? $v : 0 }
my ($c, $list) = get("/containers/json?all=1&filters=" . label_filter($ARGV[0]));
exit 1 unless $c == 200;
for my $id ($list =~ /"Id":\s*"([0-9a-f]{64})"/g) {
  my ($code, $doc) = get("/containers/$id/json"); next unless $code == 200;
  my %d = fields($doc); my %st = fields($d{'"State"'}); my %cf = fields($d{'"Config"'});
  my %lb = fields($cf{'"Labels"'}); my %hc = fields($d{'"HostConfig"'});
  my @row = ($id, num($d{'"RestartCount"'}), $cf{'"User"'} // '""', $lb{'"jackin.agent"'} // "null", $d{'"State"'} // "{}",
    num($st{'"Pid"'}), $d{'"Name"'} // '""', $hc{'"NetworkMode"'} // '""', num($hc{'"Memory"'}));
  tr/\t\r\n/   / for @row;  # only JSON's own whitespace can be a raw tab or newline: a row stays one line
  print join("\t", @row), "\n" }
"""
)


def inspect_command(fleet: str) -> str:
    """Shell: ``$info``, one INSPECT_FORMAT line per container of ``fleet`` (one perl process on the
    daemon's socket, else two docker calls); ``##docker`` / ``down`` when the engine does not answer."""
    label = shlex.quote(f"label=jackin.fleet={fleet}")
    return (f"info=; if {dockerapi.USABLE}; then "
            f"info=$(perl -e {shlex.quote(STATUS_READ)} {shlex.quote(fleet)}) || {{ info=; echo '##docker'; echo down; }}; "
            f"elif ids=$(docker ps -aq --no-trunc --filter {label}); then "
            f"[ -z \"$ids\" ] || info=$(docker inspect --format {shlex.quote(INSPECT_FORMAT)} $ids); "
            "else echo '##docker'; echo down; fi; ")  # fmt: skip


class Inspected(BaseModel):
    """One INSPECT_FORMAT line: what both reads know of a container."""

    model_config = ConfigDict(extra="forbid")

    id: str
    restarts: int
    user: str  # "uid:gid" as configured ("" when none)
    instance: str  # its jackin.agent label ("" when none)
    state: dict[str, Any]  # Docker's State: Status, ExitCode, StartedAt, Error, Health...
    pid: int
    name: str
    network: str
    memory: int

    @property
    def started(self) -> str:
        return str(self.state.get("StartedAt") or "")

    @classmethod
    def of(cls, line: str) -> Inspected:
        """Parsed, or ValueError (also for JSON of the wrong type: pydantic's ValidationError is one)."""
        fields = line.split("\t")
        if len(fields) != INSPECT_FIELDS:
            raise ValueError(f"{len(fields)} fields, not {INSPECT_FIELDS}")
        cid, restarts, user, label, state, pid, name, network, memory = fields
        return cls(id=cid, restarts=int(restarts), user=json.loads(user) or "", instance=json.loads(label) or "",
                   state=json.loads(state), pid=int(pid), name=json.loads(name), network=json.loads(network) or "",
                   memory=int(memory))  # fmt: skip


# --- agent state (issue 10): what each agent is doing ---------------------------------------------
#
# Inside the status read's CPU window (one round trip per host, the same docker inspect lines) and
# read alone by fleet.wait each poll. Per container: its INSPECT_FORMAT line (state, exit code,
# restarts, health with its last output), and the status file read AS THE AGENT, never blocking and
# under a deadline (``jackin.facts.agent_files``: one perl process for the host's agents, a child
# switched to each container's uid:gid), capped and hex-encoded so that NULs, newlines or a "##" line
# in it cannot reach the section parser. Derivation: jackin/agents/state.py.

STATUS_FILE = ".jackin/status.json"  # the status file, under the agent's workspace (/workspace in its container)
READ_WAIT = 2  # seconds one status file's read may take before its reader is killed (it never blocks: a backstop)
READ_BUDGET = 3  # seconds for all of a host's status files (+ the last one's READ_WAIT + 1): the read has 8


def agents_command(fleet: str, *, root: str = ROOT) -> str:
    """The agent-state read of ``fleet``'s containers on one host: sections ``##agents-now`` (the
    host's clock), ``##agents`` (one INSPECT_FORMAT line per container) and ``##agent-files`` (``<id>
    <answer>``, ``jackin.facts.agent_files``: ``+HEX`` of the status file's first MAX_STATUS+1 bytes,
    ``-`` none, ``!PROBLEM`` not read). A uid or gid below 1000, or an instance label that is not a
    plain name, is never read (``-``)."""
    return (f"echo '##agents-now'; date +%s; {inspect_command(fleet)}[ -n \"$info\" ] || exit 0; "
            f"echo '##agents'; printf '%s\\n' \"$info\"; {agent_files(fleet, root=root)}{gateway_files(fleet)}")  # fmt: skip


def agent_files(fleet: str, *, root: str = ROOT) -> str:
    """Shell: ``##agent-files`` for the containers in ``$info`` (INSPECT_FORMAT lines): each status
    file read as its agent (uid and gid from the container's user, both numeric and >= 1000; the
    instance from its label, a plain name), never as root, all of them by one reader."""
    top = shlex.quote(f"{root}/{fleet}")
    reader = files.read_shell(cap=derivation.MAX_STATUS, wait=READ_WAIT, budget=READ_BUDGET)
    return (
        "echo '##agent-files'; printf '%s\\n' \"$info\" | { set --; while IFS='\t' read -r id _r user inst rest; do "
        # user and inst are JSON strings: only "..." is taken, its quotes removed (anything escaped fails below)
        'case "$user" in \\"*\\") user=${user#\\"}; user=${user%\\"};; *) user=-;; esac; '
        'case "$inst" in \\"*\\") inst=${inst#\\"}; inst=${inst%\\"};; *) inst=-;; esac; '
        "u=${user%%:*}; g=${user#*:}; ok=1; "
        'case "$u" in ""|*[!0-9]*) ok=;; esac; case "$g" in ""|*[!0-9]*) ok=;; esac; '
        'case "$inst" in ""|-*|*[!a-z0-9-]*) ok=;; esac; '
        '{ [ -n "$ok" ] && [ "$u" -ge 1000 ] && [ "$g" -ge 1000 ]; } || { echo "$id -"; continue; }; '
        f'set -- "$@" "$id" "$u" "$g" {top}/"$inst"/workspace {STATUS_FILE}; done; '
        f"[ $# -eq 0 ] || {{ {reader}; }}; }}; "
    )


def parse_agents(output: str, *, section: str = "agents") -> dict[str, AgentFacts]:
    """Per instance, the facts ``agents_command`` printed (none when the fleet has no container there).
    A line Docker printed that does not parse fails the host's read (JackinError): it is not the agent's.
    ``section``: where the INSPECT_FORMAT lines are (``rows`` in the combined read, which prints them once)."""
    sections = read_sections(output)
    now_lines = sections.get("agents-now", [])
    if len(now_lines) != 1 or not now_lines[0].isdigit():
        raise JackinError(f"agent state read: no host clock in the output ({now_lines[:1]!r})")
    now = float(now_lines[0])
    answers: dict[str, files.FileRead] = {}
    for line in sections.get("agent-files", []):
        cid, _, answer = line.partition(" ")
        try:
            answers[cid] = files.parse_answer(answer)
        except ValueError:
            raise JackinError(f"agent state read: container {cid[:12]}'s status file answer does not parse") from None
    # a container the section leaves out: its reader was cut short (none without the section: not read)
    unanswered = files.FileRead(problem="not read: the host's read gave no answer for it")
    missing = unanswered if "agent-files" in sections else files.FileRead()
    found: dict[str, AgentFacts] = {}
    accounts = gateway_accounts(output)
    for line in sections.get(section, []):
        instance, facts = _agent_row(line, now, answers, missing)
        if instance:
            account = GatewayAccount.parse(accounts.get(f"{instance}.json"))
            found[instance] = facts.model_copy(update={"gateway": account}) if account else facts
    return found


def _agent_row(line: str, now: float, answers: Mapping[str, files.FileRead], missing: files.FileRead
               ) -> tuple[str | None, AgentFacts]:  # fmt: skip
    """(instance, facts) of one ``INSPECT_FORMAT`` line."""
    try:
        row = Inspected.of(line)
        state, health = row.state, row.state.get("Health") or {}
        log = health.get("Log") or []
        read = answers.get(row.id, missing)
        facts = AgentFacts(
            container=str(state["Status"]), exit_code=int(state["ExitCode"]), restarts=row.restarts,
            health=str(health.get("Status") or "none"), now=now, status=read.data, status_problem=read.problem,
            user=row.user or None, health_output=str(log[-1].get("Output", "")) if log else None,
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise JackinError(
            f"agent state read: a line of docker inspect does not parse ({type(error).__name__})"
        ) from None
    return row.instance or None, facts


def agent_states(facts: Mapping[str, AgentFacts], stale_after: Mapping[str, float]
                 ) -> dict[str, AgentState]:  # fmt: skip
    """Each instance's derived state, with its role's ``stale_after`` (default derivation.STALE_AFTER)."""
    return {i: derivation.derive(f, stale_after=stale_after.get(i, derivation.STALE_AFTER)) for i, f in facts.items()}
