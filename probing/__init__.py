"""probing: measure what contextual word representations know, layer by layer."""

__version__ = "0.1.0"
