"""Serve a word or word-pair task to a Lightning Trainer, its vectors gathered from the every-word stores.

See docs/word_tasks.md, 'Probes'.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from probing.probes.bits.mdl import OnlineCode
from probing.probes.controls import class_distribution, control_classes
from probing.probes.datamodule import ProbingDataModule, read_every_word_store


class GatheredSplit(Dataset):
    """Examples as row indices into one matrix of word vectors; `tensors` holds the per-example values."""

    def __init__(self, vectors: torch.Tensor, rows: torch.Tensor, second: torch.Tensor | None,
                 tensors: Mapping[str, torch.Tensor], pair_product: bool = False):
        lengths = {len(rows), *(len(tensor) for tensor in tensors.values())}
        if second is not None:
            lengths.add(len(second))
        if len(lengths) != 1:
            raise ValueError(f"rows and tensors of a split must have the same length, got {sorted(lengths)}")
        self.vectors, self.rows, self.second, self.pair_product = vectors, rows, second, pair_product
        self.tensors = dict(tensors)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int | list[int]) -> dict[str, torch.Tensor]:
        batch = {name: tensor[index] for name, tensor in self.tensors.items()}
        batch["features"] = self.features(self.rows[index], None if self.second is None else self.second[index])
        return batch

    def features(self, rows: torch.Tensor, second: torch.Tensor | None) -> torch.Tensor:
        first = self.vectors[rows].float()
        if second is None:
            return first
        other = self.vectors[second].float()
        return torch.cat([first, other, first * other] if self.pair_product else [first, other], dim=-1)

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.features(self.rows[:1], None if self.second is None else self.second[:1]).shape[1:])


class ConcatenatedSplit(Dataset):
    """The examples of two `GatheredSplit`s of the same words, their features joined as [X; R] (conditional probing,
    `probing.probes.bits.information`): read from the parts' own vectors, no new matrix. The parts must hold the same
    examples with the same labels (a ValueError otherwise); the batch keys but `features` are R's."""

    def __init__(self, conditioning: GatheredSplit, probed: GatheredSplit):
        if len(conditioning) != len(probed) or not torch.equal(conditioning.tensors["label"], probed.tensors["label"]):
            raise ValueError(f"the conditioning representation has {len(conditioning)} examples and the probed one "
                             f"{len(probed)}, or their labels differ: they must read the same words")
        self.conditioning, self.probed = conditioning, probed
        self.tensors = probed.tensors

    def __len__(self) -> int:
        return len(self.probed)

    def __getitem__(self, index: int | list[int]) -> dict[str, torch.Tensor]:
        batch = self.probed[index]
        batch["features"] = torch.cat([self.conditioning[index]["features"], batch["features"]], dim=-1)
        return batch

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self[[0]]["features"].shape[1:])

    @property
    def conditioning_dim(self) -> int:
        return self.conditioning.feature_shape[-1]


class WordTaskDataModule(ProbingDataModule):
    """The train/dev/test splits of a `WordTaskData`, their vectors read from the every-word store of each split.

    Examples whose word (or, for pairs, either word) the featurizer could not represent (flagged in the store, e.g.
    a word without wordpieces) are left out and counted in `dropped`. With `control_seed`, every example gets the
    control label of its word type: one label per type, drawn from the label distribution of the training examples
    (probing.probes.controls), unseen words by the same rule. With `online_code`
    (probing.probes.bits.mdl.OnlineCode), the training examples get their position in its seeded order (`order`), which
    cuts them into the MDL blocks.
    """

    def __init__(self, stores: Mapping[str, str | Path], data, layer: int | str, batch_size: int = 256,
                 control_seed: int | None = None, expected_layers: int | None = None, pair_product: bool = False,
                 online_code: OnlineCode | None = None):
        super().__init__(batch_size=batch_size)
        self.stores, self.data, self.layer = dict(stores), data, layer
        self.control_seed, self.expected_layers = control_seed, expected_layers
        self.pair_product, self.online_code = pair_product, online_code
        self.dropped: dict[str, int] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        train = self.data.splits["train"]
        probabilities = None
        if self.control_seed is not None:
            probabilities = class_distribution(np.bincount(train.label, minlength=len(self.data.labels)))
        for name, path in self.stores.items():
            self.splits[name] = self._split(name, Path(path), probabilities)

    def _split(self, name: str, path: Path, probabilities: np.ndarray | None) -> GatheredSplit:
        split = self.data.splits[name]
        word_count = sum(len(tokens) for tokens in split.sentences)
        vectors, position = read_every_word_store(path, self.layer, word_count, self.expected_layers)
        rows = position[split.every_word_rows()]
        second = position[split.every_second_rows()] if split.second is not None else None
        kept = rows >= 0 if second is None else (rows >= 0) & (second >= 0)
        self.dropped[name] = int((~kept).sum())
        tensors = {"label": torch.from_numpy(split.label[kept].astype(np.int64))}
        if probabilities is not None:
            types = [word for word, keep in zip(split.word_types(), kept) if keep]
            tensors["control_label"] = torch.from_numpy(control_classes(types, probabilities, self.control_seed))
        if self.online_code is not None and name == "train":
            tensors["order"] = torch.from_numpy(self.online_code.order(int(kept.sum())))
        return GatheredSplit(vectors, torch.from_numpy(rows[kept]),
                             None if second is None else torch.from_numpy(second[kept]), tensors, self.pair_product)
