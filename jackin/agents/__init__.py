"""Agents at run time: their state, waiting on them, answering them, operator tools, credentials."""
