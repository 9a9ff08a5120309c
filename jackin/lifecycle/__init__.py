"""A fleet's lifecycle: up, down, gc, teardown reads, providers, rollback, status, recorded runs, the run loop."""
