"""pyinfra facts of our own: what a host has of a fleet, gathered in one round trip."""
