"""Plans, computed on the operator's side: the fleet plan, the launch contract, the applied spec, the TTL.

The host plan (what fleet.up does to one host) is jackin/lifecycle/hostplan.py: it is built from the
operations, which themselves render this package's fleet plan.
"""
