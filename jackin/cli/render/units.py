"""Durations and sizes, short and alike in every table."""

from __future__ import annotations


def duration(seconds: float | None) -> str:
    """3d4h, 2h5m, 7m30s, 42s."""
    if seconds is None:
        return "-"
    s = int(seconds)
    days, hours, minutes = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{s % 60}s"
    return f"{s}s"


def size(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return str(value)
