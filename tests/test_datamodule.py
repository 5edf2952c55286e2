"""The DataModule serves one layer of the train/dev/test stores: exact values, float32, each row once per epoch."""

from __future__ import annotations

import torch

from probing.datamodule import StoreDataModule
from probing.store import FeatureStore, StoreWriter
from tests.test_store import CLASSES, metadata, make_records, features_of


def build_store(path, skipped=()):
    records = make_records()
    FeatureStore.create(path, metadata(len(records)), records, CLASSES)
    kept = [row for row in range(len(records)) if row not in skipped]
    with StoreWriter(path) as writer:
        writer.write_rows(kept[::-1], features_of(kept[::-1]))  # written in another order than the records
        writer.mark_skipped(list(skipped))
    return path


def test_layer_rows_labels_and_dtype(tmp_path):
    stores = {split: build_store(tmp_path / f"{split}.h5", skipped=(2,) if split == "test" else ())
              for split in ("train", "dev", "test")}
    datamodule = StoreDataModule(stores, layer=2, batch_size=4)
    datamodule.setup()
    assert datamodule.feature_dim == 4

    dev = [batch for batch in datamodule.val_dataloader()]
    assert [len(b["label"]) for b in dev] == [4, 4, 2]
    features = torch.cat([b["features"] for b in dev])
    assert features.dtype == torch.float32
    torch.testing.assert_close(features, torch.from_numpy(features_of(range(10))[:, 2, :]))
    assert torch.cat([b["label"] for b in dev]).tolist() == [0, 1, 2, 0, 0, 2, 1, 2, 0, 2]
    assert torch.cat([b["combination"] for b in dev]).tolist() == [0, 1, 2, 0, 3, 2, 1, 4, 3, 4]

    test_rows = torch.cat([b["features"][:, 0] for b in datamodule.test_dataloader()])
    assert test_rows.tolist() == [r + 0.5 for r in (0, 1, 3, 4, 5, 6, 7, 8, 9)]  # row 2 skipped, left out

    torch.manual_seed(0)
    epoch = torch.cat([b["features"][:, 0] for b in datamodule.train_dataloader()])
    assert sorted(epoch.tolist()) == [r + 0.5 for r in range(10)] and epoch.tolist() != sorted(epoch.tolist())
