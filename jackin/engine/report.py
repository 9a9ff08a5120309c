"""What a deploy reports back to the operator, from inside the engine process.

Deploys call ``report.facts(host, distro=..., kernel=...)``; the engine turns
it into a ``facts`` event. Outside the engine (``pyinfra`` CLI) it logs instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

_sink: Callable[[str, dict[str, Any]], object] | None = None


def facts(host: Any, **data: Any) -> None:
    if _sink is not None:
        _sink(host.name, data)
    else:
        logging.getLogger("jackin").info("%s: %s", host.name, data)
