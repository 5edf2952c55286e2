"""Probing in bits: the MDL online code (its blocks and the prefix probes that send them) and V-information read
from the probes' held-out cross-entropies."""
