"""The CLI: the error edge and exit codes, and rendering. Nothing outside this package imports it or rich."""
