"""Word-in-context data: one record type, readers for each corpus, sampling and splits."""

from probing.data.records import SkipCounter, WordInContext

__all__ = ["WordInContext", "SkipCounter"]
