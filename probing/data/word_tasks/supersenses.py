"""STREUSLE supersense units (the units of the s-class task) as one multi-class word task, split at random (seeded)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from probing.data import streusle
from probing.data.records import SkipCounter
from probing.data.settings import path_list, require_bool, require_int
from probing.data.sources import packaged_streusle_paths
from probing.data.splits import SPLIT_NAMES
from probing.data.word_tasks.records import (
    NO_SECOND,
    RawSentence,
    WordTaskData,
    any_labelled,
    build_word_task,
    require_fraction,
)
from probing.errors import ConfigError, DataFormatError, setting


class StreusleWordTask:
    """STREUSLE supersenses (the units of the default s-class task: noun supersenses, and verb ones with
    `include_verbs`) as one multi-class word task: one example per supersense unit, label = its supersense.

    word = the LAST word of a multiword unit ("salad bar" -> "bar"; for a discontinuous unit, its last word): the
    English head of a nominal compound is usually last. `paths`: STREUSLE .conllulex files; None uses the packaged
    ones. STREUSLE has no split here: its sentences are split at random (seeded) into `test_fraction` test,
    `dev_fraction` dev and the rest train, whole sentences.
    """

    name = "supersense"
    pair = False

    def __init__(
        self,
        paths: str | Sequence[str] | None = None,
        include_verbs: bool = False,
        dev_fraction: float = 0.2,
        test_fraction: float = 0.2,
        seed: int = 0,
    ):
        self.paths = path_list(setting("paths"), paths) if paths is not None else packaged_streusle_paths()
        self.include_verbs = require_bool(setting("include_verbs"), include_verbs)
        self.dev_fraction = require_fraction(setting("dev_fraction"), dev_fraction)
        self.test_fraction = require_fraction(setting("test_fraction"), test_fraction)
        if self.dev_fraction + self.test_fraction >= 1.0:
            total = self.dev_fraction + self.test_fraction
            dev, test = setting("dev_fraction"), setting("test_fraction")
            raise ConfigError(f"{dev} + {test} = {total:g} leaves no training data. Fix: {dev}=0.2 {test}=0.2")
        self.seed = require_int(setting("seed"), seed)

    def load_word_task(self) -> WordTaskData:
        skips = SkipCounter()
        targets = set(streusle.streusle_classes(self.include_verbs))
        sentences = [sentence for path in self.paths for sentence in self._read(path, targets, skips)]
        origin = ", ".join(str(path) for path in self.paths)
        fix = "give more STREUSLE sentences with n.* (or v.*) supersenses in SS, or other data.source.dev_fraction / " \
              "data.source.test_fraction / data.source.seed"
        order = list(range(len(sentences)))
        random.Random(self.seed).shuffle(order)
        n_test = max(1, round(self.test_fraction * len(order)))
        n_dev = max(1, round(self.dev_fraction * len(order)))
        chosen = {index: "test" for index in order[:n_test]} | {index: "dev" for index in order[n_test:n_test + n_dev]}
        raw: dict[str, list[RawSentence]] = {split: [] for split in SPLIT_NAMES}
        for index, sentence in enumerate(sentences):
            raw[chosen.get(index, "train")].append(sentence)
        empty = [split for split in SPLIT_NAMES if not any_labelled(raw[split])]
        if empty:
            raise DataFormatError(origin, None, f"no supersense unit in the {empty[0]} sentences of the split", fix)
        return build_word_task(self.name, False, raw, list(self.paths), skips, self.dev_fraction, self.seed, origin,
                               fix)

    def _read(self, path: Path, targets: set[str], skips: SkipCounter):
        n_sentences = 0
        # The reader of probing.data.streusle, so that the units are exactly those of the s-class task.
        for tokens in streusle._read_sentences(path, "data.source.paths", skips):
            n_sentences += 1
            units = _Units()
            streusle._add_sentence_records(units, tokens, targets, path, skips)
            forms = tuple(token.form for token in tokens)
            yield RawSentence(forms, f"{path}:{tokens[0].line}", units.examples)
        if not n_sentences:
            problem = "no token lines: the file is empty or holds only comments and blank lines"
            raise DataFormatError(path, None, problem, streusle.EMPTY_FILE_FIX)


class _Units:
    """Takes the units the STREUSLE reader adds (its RecordTableBuilder.add) as examples: last word, supersense."""

    def __init__(self) -> None:
        self.examples: list[tuple[int, int, str]] = []

    def add(self, tokens: Sequence[str], target: Sequence[int], word: str, sclass: str, source: str = "") -> None:
        self.examples.append((max(target), NO_SECOND, sclass))
