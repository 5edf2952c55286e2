"""Word-in-context data: one record type, readers for each corpus, sampling and splits."""

from probing.data.records import SkipCounter, WordInContext
from probing.data.sources import Conll2003Source, StreusleSource, WikiPseSource, WordInContextData
from probing.data.splits import SplitConfig, make_splits, split_summary
from probing.data.text import read_lines, sha256_file

__all__ = [
    "WordInContext",
    "SkipCounter",
    "WordInContextData",
    "StreusleSource",
    "Conll2003Source",
    "WikiPseSource",
    "SplitConfig",
    "make_splits",
    "split_summary",
    "read_lines",
    "sha256_file",
]
