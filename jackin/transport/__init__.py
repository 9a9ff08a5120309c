"""Reaching hosts: targets, strict SSH (Fabric and OpenSSH), the parallel fan-out, Ctrl-C handling."""
