"""Inventory and fleet spec: models and the line-aware loader."""

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
