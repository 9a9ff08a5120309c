"""pyinfra operations of our own (pyinfra has none for fleets or nftables)."""
