"""Plans, computed on the operator's side: the fleet plan, the host plan, the launch contract, the applied spec, the TTL."""
