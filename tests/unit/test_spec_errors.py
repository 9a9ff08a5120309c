"""Every malformed inventory under tests/fixtures/bad/ is refused with a SpecError
that lists each problem on its own line, as ``FILE:LINE: field.path: message``.

Each fixture declares what it expects in its leading comment block:

    # expect: <substring>        must appear in the problems (repeatable)
    # expect-line: N             the first problem is reported on line N
    # expect-field: a.b[0].c     a problem names this field path (repeatable)
    # expect-count: N            exactly N problems are reported
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jackin.errors import EXIT_SPEC, JackinError, SpecError
from jackin.spec import load_inventory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bad"
PATHS = sorted(FIXTURES.glob("*.yaml"))

_DIRECTIVE = re.compile(r"^#\s*(expect|expect-line|expect-field|expect-count):\s?(.*)$")


@dataclass
class Expectations:
    substrings: list[str] = field(default_factory=list)
    line: int | None = None
    fields: list[str] = field(default_factory=list)
    count: int | None = None


def expectations(path: Path) -> Expectations:
    """Read the directives from the fixture's leading comment block."""
    found = Expectations()
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw.startswith("#"):
            break
        match = _DIRECTIVE.match(raw)
        if not match:
            continue
        kind, value = match.group(1), match.group(2).rstrip()
        if kind == "expect":
            found.substrings.append(value)
        elif kind == "expect-line":
            found.line = int(value)
        elif kind == "expect-field":
            found.fields.append(value)
        else:
            found.count = int(value)
    return found


def problems_for(path: Path) -> tuple[SpecError, list[str]]:
    with pytest.raises(SpecError) as caught:
        load_inventory(str(path))
    return caught.value, caught.value.problems


def test_there_are_at_least_twenty_fixtures():
    assert len(PATHS) >= 20, [p.name for p in PATHS]


def test_fixtures_are_distinct():
    texts = [p.read_text(encoding="utf-8") for p in PATHS]
    assert len(set(texts)) == len(texts)
    names = [re.sub(r"^\d+-", "", p.stem) for p in PATHS]
    assert len(set(names)) == len(names)


def test_some_fixtures_hold_several_problems():
    several = [p.name for p in PATHS if (expectations(p).count or 0) >= 3]
    assert len(several) >= 3, several


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_fixture_declares_expectations(path: Path):
    expected = expectations(path)
    assert expected.substrings, f"{path.name}: no '# expect:' line in its leading comments"
    assert all(expected.substrings), f"{path.name}: an empty '# expect:' line"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_bad_inventory_is_refused(path: Path):
    expected = expectations(path)
    error, problems = problems_for(path)
    filename = str(path)

    # The error type and exit code the CLI relies on.
    assert isinstance(error, ValueError)
    assert isinstance(error, JackinError)
    assert error.exit_code == EXIT_SPEC == 2

    # One line per problem, each located in the file.
    assert isinstance(problems, list) and problems, "no problems listed"
    located = re.compile(re.escape(filename) + r":(\d+)(?::\d+)?: \S")
    lines = []
    for problem in problems:
        assert isinstance(problem, str)
        assert "\n" not in problem and "\r" not in problem, f"multi-line problem: {problem!r}"
        assert problem.startswith(f"{filename}:"), problem
        match = located.match(problem)
        assert match, f"problem without a line number: {problem!r}"
        lines.append(int(match.group(1)))
    assert lines == sorted(lines), "problems are not in file order"

    # The summary names the file and the number of problems.
    count = len(problems)
    assert str(error) == f"{filename}: invalid inventory ({count} problem{'s' if count > 1 else ''})"

    text = "\n".join(problems)
    for substring in expected.substrings:
        assert substring in text, f"{substring!r} not in:\n{text}"
    if expected.line is not None:
        assert f":{expected.line}:" in problems[0], f"first problem not on line {expected.line}:\n{text}"
        assert problems[0].startswith(f"{filename}:{expected.line}:"), text
    for field_path in expected.fields:
        assert any(f": {field_path}: " in p for p in problems), f"field {field_path!r} not named in:\n{text}"
    if expected.count is not None:
        assert len(problems) == expected.count, text


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_problems_do_not_repeat(path: Path):
    _, problems = problems_for(path)
    assert len(set(problems)) == len(problems), problems


def test_secret_value_is_never_echoed():
    path = FIXTURES / "19-secret-in-credential.yaml"
    _, problems = problems_for(path)
    error_text = "\n".join(problems)
    assert "sk-ant-not-a-real-key-0000" not in error_text
