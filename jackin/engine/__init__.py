"""The pyinfra engine, run in a child process.

pyinfra parallelises with gevent and needs gevent's monkey-patching; patching
the ``inv`` process would break Invoke and Fabric. So ``run`` starts
``python -m jackin.engine.runner``, hands it an ``EngineRequest`` on stdin (one
line; credential values, if any, follow on a second line: ``jackin.engine.secrets``)
and reads back one JSON event a line (``Event``), which the CLI renders.
"""

from jackin.engine.client import run
from jackin.engine.protocol import EngineRequest, Event, HostResult, RunResult

__all__ = ["EngineRequest", "Event", "HostResult", "RunResult", "run"]
