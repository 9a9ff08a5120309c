"""Snapshots and rollback: per-agent and fleet snapshots of homes and workspaces.

    models    the data shapes (AgentManifest, SnapshotRecord, results)
    restic    restic's paths and commands on a host (pure builders and parsers)
    host      the work on one host over strict SSH (restic upload, repository, backup, restore)
    api       create (``take`` for the fleet lifecycle), list, show, diff
    restore   restore (pre-restore snapshot, verified staging, swap by rename) and prune

The copy-on-write checkpoint tier (``cow``) and pulling/pushing repositories
(``transfer``) live beside these modules.
"""
