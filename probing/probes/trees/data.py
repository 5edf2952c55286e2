"""Serve a tree task (`probing.data.trees.TreeData`) to a Lightning Trainer, a batch of whole sentences at a time, the
word vectors read from the every-word stores (`probing.data.every_word`: one row per word of every sentence).

See docs/structural.md, 'Probes and training'.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

from probing.data.trees import TreeData, TreeSplit, control_heads, tree_depths, tree_distances
from probing.probes.controls import control_classes
from probing.probes.datamodule import ProbingDataModule, read_every_word_store

CONTROL_BEHAVIOURS = 3  # attach to nothing, to the first word, to the last word (`probing.data.trees.control_heads`)


class SentenceSplit(Dataset):
    """The sentences of one split: `vectors` (rows, ...) and each sentence's index in its `TreeSplit`, first row and
    length; its gold and control gold tensors and punctuation masks."""

    def __init__(self, vectors: torch.Tensor, sentence_ids: list[int], starts: list[int], lengths: list[int],
                 gold: list[torch.Tensor], punctuation: list[torch.Tensor],
                 control_gold: list[torch.Tensor] | None = None):
        self.vectors, self.sentence_ids, self.starts, self.lengths = vectors, sentence_ids, starts, lengths
        self.gold, self.punctuation, self.control_gold = gold, punctuation, control_gold

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int | list[int]) -> dict[str, torch.Tensor]:
        indices = [index] if isinstance(index, int) else list(index)
        batch = {
            "features": pad_sequence([self.vectors[self.starts[i]:self.starts[i] + self.lengths[i]].float()
                                      for i in indices], batch_first=True),
            "lengths": torch.tensor([self.lengths[i] for i in indices]),
            "punctuation": pad_sequence([self.punctuation[i] for i in indices], batch_first=True),
            "gold": pad_gold([self.gold[i] for i in indices]),
        }
        if self.control_gold is not None:
            batch["control_gold"] = pad_gold([self.control_gold[i] for i in indices])
        return batch


def pad_gold(values: list[torch.Tensor]) -> torch.Tensor:
    """Distance matrices (n, n) padded to (B, T, T), or depth vectors (n,) to (B, T); zeros in the padding."""
    longest = max(len(value) for value in values)
    out = torch.zeros(len(values), *([longest] * values[0].dim()))
    for row, value in enumerate(values):
        out[row][tuple(slice(0, size) for size in value.shape)] = value
    return out


class TreeDataModule(ProbingDataModule):
    """The train/dev/test splits of a `TreeData` for the probe of `kind` ("distance" or "depth"), their vectors read
    from the every-word store of each split (`stores`), layer `layer` (or ALL_LAYERS). With `control_seed`, each word
    type gets one control behaviour (uniform over the three, fixed by the seed and the word, `control_classes`), and
    each sentence its control tree."""

    def __init__(self, stores: Mapping[str, str | Path], data: TreeData, layer: int | str, kind: str,
                 batch_size: int = 20, control_seed: int | None = None, expected_layers: int | None = None):
        super().__init__(batch_size=batch_size)
        self.stores, self.data, self.layer, self.kind = dict(stores), data, layer, kind
        self.control_seed, self.expected_layers = control_seed, expected_layers
        self.dropped: dict[str, int] = {}

    @property
    def feature_dim(self) -> int:
        return self.splits["train"].vectors.shape[-1]

    @property
    def num_layers(self) -> int | None:
        vectors = self.splits["train"].vectors
        return vectors.shape[1] if vectors.dim() == 3 else None

    def setup(self, stage: str | None = None) -> None:
        if not self.splits:
            self.splits = {name: self._split(name, Path(path)) for name, path in self.stores.items()}

    def _split(self, name: str, path: Path) -> SentenceSplit:
        split = self.data.splits[name]
        word_count = sum(len(words) for words in split.sentences)
        vectors, row_of_word = read_every_word_store(path, self.layer, word_count, self.expected_layers)
        ids, starts, lengths, gold, punctuation, control = [], [], [], [], [], []
        first = 0
        for index, words in enumerate(split.sentences):
            rows = row_of_word[first:first + len(words)]
            first += len(words)
            if (rows < 0).any():  # a word without a vector: no complete tree
                continue
            ids.append(index)
            starts.append(int(rows[0]))
            lengths.append(len(words))
            gold.append(torch.from_numpy(self.gold_of(split.heads[index]).astype(np.float32)))
            punctuation.append(torch.from_numpy(split.punctuation(index)))
            if self.control_seed is not None:
                control.append(torch.from_numpy(self.gold_of(self.control_tree(words)).astype(np.float32)))
        self.dropped[name] = len(split) - len(starts)
        return SentenceSplit(vectors, ids, starts, lengths, gold, punctuation,
                             control if self.control_seed is not None else None)

    def gold_of(self, heads: np.ndarray) -> np.ndarray:
        return tree_distances(heads) if self.kind == "distance" else tree_depths(heads)

    def control_tree(self, words: tuple[str, ...]) -> np.ndarray:
        """The heads of a sentence's control tree: each word's behaviour, drawn once per word type."""
        uniform = np.full(CONTROL_BEHAVIOURS, 1 / CONTROL_BEHAVIOURS)
        return control_heads(control_classes(list(words), uniform, self.control_seed))


def tree_split_summary(split: TreeSplit, dropped: int) -> dict[str, int]:
    """Sentences and words of a split, and the sentences left out because a word had no vector."""
    return {"sentences": len(split) - dropped, "words": sum(len(words) for words in split.sentences),
            "dropped_sentences": dropped}
