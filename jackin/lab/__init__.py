"""The lab provider: disposable Debian servers on the local Docker engine."""

from jackin.lab.lab import Lab
from jackin.lab.models import LabHost, LabService, LabStatus

__all__ = ["Lab", "LabHost", "LabService", "LabStatus"]
