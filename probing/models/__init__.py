"""Probe models (LightningModules) trained on frozen encoder features."""

from probing.models.components import BatchedBinaryMLPs
from probing.models.sclass_probe import SClassProbe

__all__ = ["BatchedBinaryMLPs", "SClassProbe"]
