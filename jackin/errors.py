"""Errors that reach the operator, and the exit codes they map to.

    JackinError                  exit 1   something failed; message says what and where
    ├── SpecError (ValueError)   exit 2   an inventory or argument is invalid; nothing was touched
    │   ├── CredentialError      exit 2   a credential's source is missing or unusable (spec.credentials)
    │   ├── WorkError            exit 2   an agent's repository or task cannot be used (work.bundles)
    │   ├── TaskProblem          exit 2   a queued task's repository or ref cannot be used (work.loop: its class task)
    │   └── PlacementError       exit 2   the fleet does not fit on its hosts, or a move cannot be made (plan.placement)
    ├── ConnectError             exit 3   a host could not be reached
    │   └── HostKeyError         exit 3   its host key is not the pinned one (never retried)
    ├── RemoteCommandError       exit 1   the host answered, but a command on it failed
    │   └── CheckpointError      exit 1   a checkpoint command failed (snapshots.cow)
    │       └── CheckpointRefused    refused, nothing changed: the agent's container runs
    ├── LabError                 exit 1   the local lab (Docker engine, image build) failed
    ├── BusyError                exit 1   another run holds the lock
    ├── NotImplementedYet        exit 1   a task a later issue owns
    ├── Refused (ValueError)     exit 1   a builder will not act on a host as it is (operations.files)
    ├── StateError (ValueError)  exit 1   a host's state read is malformed (facts.state)
    ├── TransferError            exit 1   a snapshot repository could not be copied (snapshots.mirror)
    ├── NotBlocked               exit 1   agent.answer: the agent is not waiting for an answer (agents.answer)
    ├── BundleRefused            exit 1   an agent's bundle failed git fsck --strict; nothing fetched (work.quarantine)
    ├── LoginError               exit 1   a shared login could not be refreshed (net.logins)
    └── RollbackStopped          exit 1   a later step of fleet.rollback could not run (lifecycle.rollback)

Anything else escaping to the CLI is a bug and may show its traceback.

Exit 4 (EXIT_NOT_ENFORCED) is not an error but a finding of ``fleet.status``: an agent's egress
policy is not enforced on a reachable host, or its credential gateway is down there. It wins over 3 when a host is also unreachable.
"""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_SPEC = 2
EXIT_CONNECT = 3
EXIT_NOT_ENFORCED = 4  # fleet.status: an agent's egress policy is not enforced on a reachable host


class JackinError(Exception):
    """Base error: a message, an optional hint (what to do next) and host."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, hint: str | None = None, host: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.host = host

    def __str__(self) -> str:
        prefix = f"{self.host}: " if self.host else ""
        return f"{prefix}{self.message}"


class SpecError(JackinError, ValueError):
    """Invalid inventory or arguments. ``problems`` holds one line per problem."""

    exit_code = EXIT_SPEC

    def __init__(self, message: str, *, problems: list[str] | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.problems = problems or []


class ConnectError(JackinError, ConnectionError):
    exit_code = EXIT_CONNECT


class HostKeyError(ConnectError):
    exit_code = EXIT_CONNECT


class RemoteCommandError(JackinError):
    """A command ran on a reachable host and failed: a failure (exit 1), never "unreachable"."""

    exit_code = EXIT_FAILED


def worst(codes: Iterable[int]) -> int:
    """The exit code of a task over several hosts, from each host's code: 1 when any
    host failed otherwise than by connection (a failure outranks an unreachable
    host), 3 when the only failures are unreachable hosts, 0 when none failed."""
    failed = set(codes) - {EXIT_OK}
    if not failed:
        return EXIT_OK
    return EXIT_CONNECT if failed == {EXIT_CONNECT} else max(failed - {EXIT_CONNECT})


class LabError(JackinError, RuntimeError):
    exit_code = EXIT_FAILED


class BusyError(JackinError):
    exit_code = EXIT_FAILED


class NotImplementedYet(JackinError):
    exit_code = EXIT_FAILED
