"""The data of probes trained straight from the forward pass (`probing.probes.online`): each split's records tokenised
once (`prepared_splits`), where a batch's features come from (`forward_source`: the frozen encoder; `stored_source`:
vectors as a store holds them, the reference of the tests), and the Lightning datamodule that serves the batches
(the records' indices and labels, and the control task's shuffled labels). See docs/scale.md, 'Probing without a
store'."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from probing.features.featurizer import PreparedInput
from probing.probes.statement_probes import shuffled_labels

# A source of features: (split, example indices) -> (layers, B, D) float32, the pooled vectors of each probed layer.
FeatureSource = Callable[[str, Tensor], Tensor]


@dataclass
class OnlineSplit:
    """A split's records ready to encode (those the featurizer could represent) and their labels (class indices)."""

    prepared: list[PreparedInput]
    labels: Tensor
    dropped: int = 0

    def __len__(self) -> int:
        return len(self.prepared)


def prepared_splits(featurizer: Any, splits: Mapping[str, Sequence[Any]], classes: Sequence[str]) -> dict[str,
                                                                                                         OnlineSplit]:
    """Each split's records tokenised once (`prepare_many`); a record the featurizer skips is left out and counted in
    `dropped`, as extraction leaves it out of the store. A record's label is its `sclass`, an index into `classes`."""
    index = {name: k for k, name in enumerate(classes)}
    prepared = {}
    for name, records in splits.items():
        records = list(records)
        inputs = featurizer.prepare_many(records)
        kept = [(item, index[record.sclass]) for item, record in zip(inputs, records) if item is not None]
        prepared[name] = OnlineSplit([item for item, _ in kept], torch.tensor([k for _, k in kept], dtype=torch.long),
                                     len(records) - len(kept))
    return prepared


def forward_source(featurizer: Any, splits: Mapping[str, OnlineSplit]) -> FeatureSource:
    """Features computed by the encoder's forward pass for each batch asked for: (layers, B, D) on the encoder's
    device, one row of layers per asked-for layer of the featurizer (`features.layers`), nothing kept between
    batches."""
    def features(split: str, indices: Tensor) -> Tensor:
        prepared = splits[split].prepared
        pooled = featurizer.encode([prepared[i] for i in indices.tolist()], on_device=True)
        # a copy made outside inference mode (encode's), so that autograd may save it for the probes' backward
        return pooled.transpose(0, 1).clone(memory_format=torch.contiguous_format)
    return features


def stored_source(vectors: Mapping[str, Tensor]) -> FeatureSource:
    """Features read from (N, layers, D) tensors per split, as a store holds them: the reference of the online path."""
    return lambda split, indices: vectors[split][indices.cpu()].float().transpose(0, 1).contiguous()


class SeededBatches(Sampler[list[int]]):
    """The training batches of each epoch: the indices 0..size-1 in an order drawn from `seed` (one permutation per
    epoch from one generator kept across epochs), cut into batches of `batch_size`. A stream of its own: nothing else
    that draws random numbers changes the order."""

    def __init__(self, size: int, batch_size: int, seed: int):
        self.size, self.batch_size = size, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[list[int]]:
        for chunk in torch.randperm(self.size, generator=self.generator).split(self.batch_size):
            yield chunk.tolist()

    def __len__(self) -> int:
        return -(-self.size // self.batch_size)


class Rows(Dataset):
    """Named tensors of one row per example; indexed by a list of rows, a whole batch at once."""

    def __init__(self, tensors: Mapping[str, Tensor]):
        self.tensors = dict(tensors)

    def __len__(self) -> int:
        return len(self.tensors["index"])

    def __getitem__(self, rows: list[int]) -> dict[str, Tensor]:
        return {name: tensor[rows] for name, tensor in self.tensors.items()}


class OnlineDataModule(L.LightningDataModule):
    """The prepared splits' batches: `index` (the records' positions in their split, for the feature source), `label`
    and, with `control_seed`, `control_label` (each split's labels shuffled at the same class balance,
    `shuffled_labels` of the split's position, as a stored statement run draws them). Training batches of
    `batch_size` in the order of `SeededBatches(seed)`; dev and test in their order."""

    def __init__(self, splits: Mapping[str, OnlineSplit], batch_size: int, seed: int, control_seed: int | None = None):
        super().__init__()
        self.batch_size = batch_size
        self.rows = {}
        for position, (name, split) in enumerate(splits.items()):
            tensors = {"index": torch.arange(len(split)), "label": split.labels}
            if control_seed is not None:
                tensors["control_label"] = torch.from_numpy(shuffled_labels(split.labels.numpy(), control_seed,
                                                                            position))
            self.rows[name] = Rows(tensors)
        self.order = SeededBatches(len(self.rows["train"]), batch_size, seed)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.rows["train"], sampler=self.order, batch_size=None)

    def in_order(self, split: str) -> DataLoader:
        rows = self.rows[split]
        return DataLoader(rows, sampler=[chunk.tolist() for chunk in torch.arange(len(rows)).split(self.batch_size)],
                          batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return self.in_order("dev")

    def test_dataloader(self) -> DataLoader:
        return self.in_order("test")
