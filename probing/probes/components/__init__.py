"""Building blocks of the probe models."""

from probing.probes.components.batched_probes import BatchedProbes
from probing.probes.components.probe_head import ProbeHead
from probing.probes.components.scalar_mix import ScalarMix

__all__ = ["BatchedProbes", "ProbeHead", "ScalarMix"]
