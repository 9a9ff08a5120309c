"""Agents at run time: their state, reading it from hosts, waiting on them, answering them, operator tools."""
