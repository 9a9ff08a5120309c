"""The operator's state: the SQLite ledger."""
