"""The one parser of a host read's ``##<section>`` output (status, agent state, the gateway's records): each
section's non-empty lines, stripped, in order. Pure."""

from __future__ import annotations


def read_sections(output: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.split("\n"):
        if line.startswith("##"):
            current = sections.setdefault(line[2:].strip(), [])
        elif current is not None and line.strip():
            current.append(line.strip())
    return sections
