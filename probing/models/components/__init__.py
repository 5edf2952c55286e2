"""Building blocks of the probe models."""

from probing.models.components.binary_mlps import BatchedBinaryMLPs

__all__ = ["BatchedBinaryMLPs"]
