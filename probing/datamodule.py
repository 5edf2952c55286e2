"""Serve one layer of the train/dev/test feature stores to a Lightning Trainer."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from probing.store import FeatureStore


class LayerFeatures(Dataset):
    """One layer of one split, held in memory in the store's dtype (float16 by default, half the memory of
    float32) and served as float32: {"features", "label", "combination"} per context."""

    def __init__(self, path: str | Path, layer: int):
        with FeatureStore(path) as store:
            self.features = torch.from_numpy(store.read_layer(layer, dtype=None))
            self.labels = torch.from_numpy(store.labels()).long()
            self.combinations = torch.from_numpy(store.combination_ids()).long()
            self.class_names = store.class_names

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int | list[int]) -> dict[str, torch.Tensor]:
        """One context, or a whole batch when `index` is a list (one gather instead of a Python-level collate)."""
        return {"features": self.features[index].float(), "label": self.labels[index],
                "combination": self.combinations[index]}


class StoreDataModule(L.LightningDataModule):
    """Train/dev/test features of one layer; dev is Lightning's validation set, shuffled batches for training only."""

    def __init__(self, stores: dict[str, str | Path], layer: int, batch_size: int = 256):
        super().__init__()
        self.stores, self.layer, self.batch_size = stores, layer, batch_size
        self.splits: dict[str, LayerFeatures] = {}

    def setup(self, stage: str | None = None) -> None:
        if not self.splits:
            self.splits = {name: LayerFeatures(path, self.layer) for name, path in self.stores.items()}
            class_lists = {name: split.class_names for name, split in self.splits.items()}
            if len({tuple(c) for c in class_lists.values()}) != 1:
                raise ValueError(f"the stores disagree on the class inventory: {class_lists}")

    @property
    def feature_dim(self) -> int:
        return self.splits["train"].features.shape[1]

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        dataset = self.splits[split]
        order = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        batches = BatchSampler(order, batch_size=self.batch_size, drop_last=False)
        return DataLoader(dataset, sampler=batches, batch_size=None)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("dev", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
