"""Building blocks of the probe models."""

from probing.probes.components.binary_mlps import BatchedBinaryMLPs
from probing.probes.components.scalar_mix import ScalarMix

__all__ = ["BatchedBinaryMLPs", "ScalarMix"]
