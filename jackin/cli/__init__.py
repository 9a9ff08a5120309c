"""The CLI: the only package that prints (rich) or decides an exit code. Nothing outside it imports it or rich.

``edge``: the guard around every task (our errors as one message and a documented exit code) ·
``ask``: the one confirmation a command asks · one module per task collection (``lab``, ``fleet``,
``agent``, ``snapshot``, ``role``; the fleet's larger flows apart: ``rollback``, ``run``, ``work``;
``contract``: the launch-contract gate of ``fleet.up`` and ``fleet.rollback``) · ``render/``: the
output streams, and per area the tables and lines the commands print.
"""
