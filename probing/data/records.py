"""The word-in-context record every reader produces and every later stage consumes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class WordInContext:
    """One annotated occurrence of a word (or multiword name) in a sentence.

    tokens:  the sentence, whitespace tokens as in the source file.
    target:  sorted positions in `tokens` of the annotated word (several for a multiword name).
    word:    the word type used for word-s-class combinations and word-disjoint splits
             (lower-cased; multiword names joined by "_", as in Wiki-PSE).
    sclass:  the semantic class of this occurrence.
    source:  "file:line" of the occurrence, for error messages and provenance.
    """

    tokens: tuple[str, ...]
    target: tuple[int, ...]
    word: str
    sclass: str
    source: str = ""

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ValueError(f"{self.source}: empty sentence")
        if not self.target or list(self.target) != sorted(set(self.target)):
            raise ValueError(f"{self.source}: target positions must be a non-empty sorted set, got {self.target}")
        if self.target[0] < 0 or self.target[-1] >= len(self.tokens):
            raise ValueError(f"{self.source}: target {self.target} outside sentence of {len(self.tokens)} tokens")

    @property
    def combination(self) -> tuple[str, str]:
        """The word-s-class combination (Zhao et al. 2020 §3.1), e.g. ("apple", "organization")."""
        return (self.word, self.sclass)


@dataclass
class SkipCounter:
    """Counts documented skips (reason -> count), and values read in a normalised form, so none is silent."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def skip(self, reason: str, where: str = "") -> None:
        self.counts[reason] += 1
        self.examples.setdefault(reason, where)

    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict:
        counts = sorted(self.counts.items())
        return {reason: {"count": n, "first": self.examples.get(reason, "")} for reason, n in counts}

    def summary(self) -> str:
        if not self.counts:
            return "no skips"
        counts = sorted(self.counts.items())
        return ", ".join(f"{n} {reason} (first at {self.examples[reason]})" for reason, n in counts)
