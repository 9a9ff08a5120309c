"""jackin fleet: disposable Linux servers over SSH for fleets of autonomous coding agents."""

__version__ = "0.1.0"
