"""Serve the train/dev/test features of a probing run to a Lightning Trainer.

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from probing.data.splits import SEEN, TEST_SPLITS
from probing.errors import ConfigError
from probing.features.store import FeatureStore
from probing.probes.bits.mdl import OnlineCode
from probing.probes.controls import class_distribution, control_classes, seen_rows

ALL_LAYERS = "all"


class TensorSplit(Dataset):
    """Named tensors with one row per example; features stay in their stored dtype (float16 halves the memory)
    and are served as float32."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        lengths = {name: len(tensor) for name, tensor in tensors.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"tensors of a split must have the same length, got {lengths}")
        self.tensors = dict(tensors)

    def __len__(self) -> int:
        return len(self.tensors["features"])

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.tensors["features"].shape[1:])

    def __getitem__(self, index: int | list[int]) -> dict[str, torch.Tensor]:
        """One example, or a whole batch when `index` is a list (one gather instead of a Python-level collate)."""
        batch = {name: tensor[index] for name, tensor in self.tensors.items()}
        batch["features"] = batch["features"].float()
        return batch


class ProbingDataModule(L.LightningDataModule):
    """Train/dev/test splits; dev is Lightning's validation set; training batches are shuffled."""

    def __init__(self, splits: Mapping[str, TensorSplit] | None = None, batch_size: int = 256):
        super().__init__()
        self.splits: dict[str, TensorSplit] = dict(splits or {})
        self.batch_size = batch_size

    @property
    def feature_dim(self) -> int:
        return self.splits["train"].feature_shape[-1]

    @property
    def num_layers(self) -> int | None:
        """Layers per example for the scalar mix, None for single-layer features."""
        shape = self.splits["train"].feature_shape
        return shape[0] if len(shape) == 2 else None

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        dataset = self.splits[split]
        order = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        return DataLoader(dataset, sampler=BatchSampler(order, batch_size=self.batch_size, drop_last=False),
                          batch_size=None)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def train_dataloader_in_order(self) -> DataLoader:
        """The training examples in their stored order, unshuffled (to encode the MDL blocks)."""
        return self._loader("train", shuffle=False)

    def val_dataloader(self) -> DataLoader:
        return self._loader("dev", shuffle=False)

    def test_dataloader(self) -> DataLoader | list[DataLoader]:
        """The test split; with a `seen` split, [test, seen] (dataloader_idx indexes TEST_SPLITS)."""
        if SEEN not in self.splits:
            return self._loader("test", shuffle=False)
        return [self._loader(split, shuffle=False) for split in TEST_SPLITS]


class StoreDataModule(ProbingDataModule):
    """One layer (`layer=int`) or every layer (`layer="all"`, for the scalar mix) of the split stores.

    With `control_seed` set, each context also gets its word's control class (Hewitt & Liang 2019), drawn from
    the class distribution of the training contexts, and the control combination is the word itself.
    `seen_fraction` (> 0, with the control task) moves that share of the training contexts, drawn by
    `probing.probes.controls.seen_rows` from `control_seed`, into a `seen` split scored after training.
    `expected_layers`: the number of layers the run needs in every store (the scalar mix needs all of them).
    With `online_code` (probing.probes.bits.mdl.OnlineCode), the training contexts get their position in its seeded
    order (`order`), which cuts them into the blocks of the MDL online code.
    """

    def __init__(self, stores: Mapping[str, str | Path], layer: int | str, batch_size: int = 256,
                 control_seed: int | None = None, expected_layers: int | None = None, seen_fraction: float = 0.0,
                 online_code: OnlineCode | None = None):
        super().__init__(batch_size=batch_size)
        if seen_fraction and control_seed is None:
            raise ValueError("a seen split is drawn and scored for the control task: give control_seed too")
        self.stores, self.layer = dict(stores), layer
        self.control_seed, self.expected_layers, self.seen_fraction = control_seed, expected_layers, seen_fraction
        self.online_code = online_code

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        read = {name: self._read(Path(path)) for name, path in self.stores.items()}
        class_lists = {name: tuple(classes) for name, (_, classes, _) in read.items()}
        if len(set(class_lists.values())) != 1:
            raise ValueError(f"the stores disagree on the class inventory: {class_lists}")
        if self.control_seed is not None:
            train_tensors, classes, _ = read["train"]
            counts = np.bincount(train_tensors["label"].numpy(), minlength=len(classes))
            probabilities = class_distribution(counts)
            for tensors, _, words in read.values():
                add_control_labels(tensors, words, probabilities, self.control_seed)
        by_split = {name: tensors for name, (tensors, _, _) in read.items()}
        if self.seen_fraction:
            train = by_split["train"]
            by_split["train"], by_split[SEEN] = split_rows(
                train, seen_rows(train["word"].numpy(), self.seen_fraction, self.control_seed))
        if self.online_code is not None:
            train = by_split["train"]
            train["order"] = torch.from_numpy(self.online_code.order(len(train["label"])))
        self.splits = {name: TensorSplit(tensors) for name, tensors in by_split.items()}

    def _read(self, path: Path) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
        with FeatureStore(path) as store:
            check_layers(store, self.expected_layers)
            features = store.read_all_layers(dtype=None) if self.layer == ALL_LAYERS else \
                store.read_layer(self.layer, dtype=None)
            tensors = {
                "features": torch.from_numpy(features),
                "label": torch.from_numpy(store.labels()).long(),
                "combination": torch.from_numpy(store.combination_ids()).long(),
                "word": torch.from_numpy(store.word_ids()).long(),
            }
            return tensors, store.class_names, store.words


def check_layers(store: FeatureStore, expected: int | None) -> None:
    """A store read for the scalar mix must hold every layer of the model (`expected`; None: any)."""
    if expected is not None and store.num_layers != expected:
        raise ConfigError(
            f"{store.path} holds {store.num_layers} layer(s), but this run needs all {expected} "
            f"layers of the model (layer=mix mixes every layer). Fix: delete the store so that it is rebuilt "
            f"with every layer, or probe single layers (layer=0..{expected - 1})")


def read_every_word_store(path: Path, layer: int | str, expected_rows: int,
                          expected_layers: int | None = None) -> tuple[torch.Tensor, np.ndarray]:
    """An every-word store's vectors of `layer` (or of every layer, ALL_LAYERS) in their stored dtype, and for each
    of the `expected_rows` words of the every-word order its row among them (-1 for a word the featurizer
    skipped)."""
    with FeatureStore(path) as store:
        check_layers(store, expected_layers)
        vectors = store.read_all_layers(dtype=None) if layer == ALL_LAYERS else store.read_layer(layer, dtype=None)
        kept = store.row_ids()
    row_of_word = np.full(expected_rows, -1, dtype=np.int64)
    row_of_word[kept] = np.arange(len(kept))
    return torch.from_numpy(vectors), row_of_word


def add_control_labels(tensors: dict[str, torch.Tensor], words: list[str], probabilities: np.ndarray,
                       seed: int) -> None:
    """control_label = the control class of each row's word; control_combination = the word id."""
    per_word = torch.from_numpy(control_classes(words, probabilities, seed))
    tensors["control_label"] = per_word[tensors["word"]]
    tensors["control_combination"] = tensors["word"].clone()


def split_rows(tensors: dict[str, torch.Tensor], mask: np.ndarray) -> tuple[dict, dict]:
    """(rows where mask is False, rows where it is True) of every tensor."""
    chosen = torch.from_numpy(mask)
    return ({name: tensor[~chosen] for name, tensor in tensors.items()},
            {name: tensor[chosen] for name, tensor in tensors.items()})
