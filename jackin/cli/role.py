"""The ``role`` collection: ``role.list`` and ``role.validate``: what the roles are, and whether each one is valid.

Kept apart from jackin/spec/roles.py and jackin/spec/role_checks.py (the model and its checks) so those stay
data and logic; this one only renders (rich tables, or JSON for scripts) and returns the exit code.
"""

from __future__ import annotations

from jackin.cli import render as ui
from jackin.cli.render.role import roles_table
from jackin.errors import EXIT_OK, EXIT_SPEC
from jackin.spec import role_checks, roles


def role_list(*, json: bool) -> int:
    """Every role: name, how its image is built, its credentials and egress (and its tag and command).
    A role file that does not validate is reported on stderr; exit 2 then."""
    found, errors = roles.rows()
    if json:
        ui.print_json({"roles": [r.model_dump() for r in found],
                       "invalid": [{"error": e.message, "problems": e.problems} for e in errors]})  # fmt: skip
    else:
        ui.out.print(roles_table(found, directory=roles.roles_dir()))
        for error in errors:
            ui.err.print(f"[red]invalid:[/red] {error.message} (inv role.validate)")
    return EXIT_SPEC if errors else EXIT_OK


def role_validate(name: str | None, *, json: bool) -> int:
    """Every role file (or NAME's) and its image recipe; problems as FILE:LINE: message; exit 2 if any."""
    checks = role_checks.validate(name)
    if json:
        ui.print_json({"roles": [{**c.model_dump(), "ok": c.ok} for c in checks]})
    else:
        for check in checks:
            if check.ok:
                ui.out.print(f"{check.file}: ok (role {check.name})")
            else:
                ui.err.print(f"[red]{check.file}: invalid role {check.name} ({len(check.problems)} problem(s))[/red]")
                for problem in check.problems:
                    ui.err.print(problem, soft_wrap=True)
    return EXIT_OK if all(c.ok for c in checks) else EXIT_SPEC
