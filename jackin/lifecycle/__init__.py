"""A fleet's lifecycle: up (and its per-host plan, ``hostplan``), down, gc, teardown reads, providers, rollback,
status, recorded runs, the run loop."""
