"""Work: each agent's repository and task bundled, collected back, and its handoff."""
