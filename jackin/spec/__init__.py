"""Inventory and fleet spec: value types, models, the line-aware reader and loader, roles, credentials."""

from jackin.spec.loader import DEFAULT_INVENTORY, load_inventory, parse_inventory
from jackin.spec.models import AgentSpec, FleetSpec, HostSpec, Inventory, LabSpec, NetworkPolicy

__all__ = [
    "DEFAULT_INVENTORY",
    "AgentSpec",
    "FleetSpec",
    "HostSpec",
    "Inventory",
    "LabSpec",
    "NetworkPolicy",
    "load_inventory",
    "parse_inventory",
]
