"""Network isolation: the nftables egress policy, the DNS filter, the policy guard, probes from inside."""
