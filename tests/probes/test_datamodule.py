"""The DataModule serves one layer of the train/dev/test stores: exact values, float32, each row once per epoch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probing.data.records import WordInContext
from probing.errors import ConfigError
from probing.features.store import FeatureStore, StoreWriter
from probing.probes.controls import control_classes
from probing.probes.datamodule import ProbingDataModule, StoreDataModule, TensorSplit
from tests.helpers.stores import CLASSES, features_of, make_records, metadata


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


def build_store_of(path, records, skipped=()):
    """A 3-layer store of `records` with features_of(row) and the `skipped` rows left out."""
    records = [WordInContext(("the", word, "."), (1,), word, sclass, f"toy:{i + 1}")
               for i, (word, sclass) in enumerate(records)]
    FeatureStore.create(path, metadata(len(records)), records, CLASSES)
    kept = [row for row in range(len(records)) if row not in skipped]
    with StoreWriter(path) as writer:
        writer.write_rows(kept, features_of(kept))
        writer.mark_skipped(list(skipped))
    return path


# dev: other words first, so that the word ids of the shared words differ from train's
DEV_RECORDS = [("oak", "plant"), ("larch", "plant"), ("apple", "food"), ("juice", "organization"), ("pine", "plant"),
               ("apple", "organization"), ("oak", "plant")]


def test_control_labels_are_the_word_classes_drawn_from_the_train_distribution(tmp_path):
    # train keeps food 4 / organization 2 / plant 0 (its plant rows are skipped): plant is never a control class
    stores = {"train": build_store(tmp_path / "train.h5", skipped=(2, 5, 7, 9)),
              "dev": build_store_of(tmp_path / "dev.h5", DEV_RECORDS), "test": build_store(tmp_path / "test.h5")}
    datamodule = StoreDataModule(stores, layer=0, batch_size=3, control_seed=0)
    datamodule.setup()
    train_distribution = np.array([2 / 3, 1 / 3, 0.0])
    dev_distribution = np.array([1 / 7, 2 / 7, 4 / 7])
    control_of_word = {}
    for split, path in stores.items():
        with FeatureStore(path) as store:
            words, word_ids = store.words, store.word_ids()
        tensors = datamodule.splits[split].tensors
        expected = control_classes(words, train_distribution, seed=0)[word_ids]
        assert tensors["control_label"].tolist() == expected.tolist()
        assert tensors["control_combination"].tolist() == word_ids.tolist()
        assert 2 not in tensors["control_label"].tolist()
        for word_id, label in zip(word_ids, tensors["control_label"].tolist()):
            assert control_of_word.setdefault(words[word_id], label) == label  # one class per word in every split
    assert set(control_of_word.values()) == {0, 1}
    assert 2 in control_classes(list(control_of_word), dev_distribution, seed=0)  # dev's own would differ
    with FeatureStore(stores["dev"]) as dev, FeatureStore(stores["train"]) as train:
        assert dev.words[:2] == ["oak", "larch"] and train.words[0] == "apple"  # ids differ between the stores
    batch = next(iter(datamodule.val_dataloader()))
    assert {"control_label", "control_combination"} <= batch.keys() and len(batch["control_label"]) == 3


def test_without_control_seed_there_are_no_control_labels(tmp_path):
    stores = {split: build_store(tmp_path / f"{split}.h5") for split in ("train", "dev", "test")}
    datamodule = StoreDataModule(stores, layer=1)
    datamodule.setup()
    assert set(datamodule.splits["dev"].tensors) == {"features", "label", "combination", "word"}


def test_all_layers_are_served_for_the_scalar_mix(tmp_path):
    stores = {split: build_store(tmp_path / f"{split}.h5", skipped=(4,) if split == "test" else ())
              for split in ("train", "dev", "test")}
    datamodule = StoreDataModule(stores, layer="all", batch_size=4, expected_layers=3)
    datamodule.setup()
    assert datamodule.num_layers == 3 and datamodule.feature_dim == 4
    dev = list(datamodule.val_dataloader())
    assert [tuple(b["features"].shape) for b in dev] == [(4, 3, 4), (4, 3, 4), (2, 3, 4)]
    features = torch.cat([b["features"] for b in dev])
    assert features.dtype == torch.float32
    torch.testing.assert_close(features, torch.from_numpy(features_of(range(10))), rtol=0, atol=0)
    test = torch.cat([b["features"] for b in datamodule.test_dataloader()])
    kept = [0, 1, 2, 3, 5, 6, 7, 8, 9]
    torch.testing.assert_close(test, torch.from_numpy(features_of(kept)), rtol=0, atol=0)


def test_stores_with_too_few_layers_for_the_mix_are_refused(tmp_path):
    stores = {split: build_store(tmp_path / f"{split}.h5") for split in ("train", "dev", "test")}
    with pytest.raises(ConfigError, match=r"holds 3 layer\(s\), but this run needs all 5.*layer=mix.*layer=0\.\.4"):
        StoreDataModule(stores, layer="all", expected_layers=5).setup()


def test_tensor_split_serves_float32_batches_and_checks_lengths():
    split = TensorSplit({"features": torch.arange(12, dtype=torch.float16).reshape(4, 3),
                         "label": torch.tensor([0, 1, 2, 1])})
    batch = split[[3, 0]]
    assert batch["features"].dtype == torch.float32 and batch["features"].tolist() == [[9, 10, 11], [0, 1, 2]]
    assert batch["label"].tolist() == [1, 0] and len(split) == 4
    assert split.tensors["features"].dtype == torch.float16  # stored as given, converted per batch
    with pytest.raises(ValueError, match="same length"):
        TensorSplit({"features": torch.zeros(4, 3), "label": torch.zeros(3)})
    datamodule = ProbingDataModule({"train": split, "dev": split}, batch_size=3)
    assert datamodule.num_layers is None and datamodule.feature_dim == 3
    assert [len(b["label"]) for b in datamodule.val_dataloader()] == [3, 1]


def test_seen_split_takes_training_contexts_of_words_that_stay_in_training(tmp_path):
    # train rows by word: apple 0 1 3 6, pine 2 5, juice 4 8, oak 7 9; a fraction just below 1 leaves each word's
    # first row in training and moves every other row to the seen split
    stores = {split: build_store(tmp_path / f"{split}.h5") for split in ("train", "dev", "test")}
    datamodule = StoreDataModule(stores, layer=0, batch_size=4, control_seed=0, seen_fraction=1 - 1e-12)
    datamodule.setup()
    rows = {split: datamodule.splits[split].tensors["features"][:, 0].float().tolist() for split in ("train", "seen")}
    assert rows == {"train": [0, 2, 4, 7], "seen": [1, 3, 5, 6, 8, 9]}
    seen = datamodule.splits["seen"].tensors
    assert seen["label"].tolist() == [1, 0, 2, 1, 0, 2]  # each row keeps its own label and control label
    with FeatureStore(stores["train"]) as store:
        expected_control = control_classes(store.words, np.array([0.4, 0.2, 0.4]), seed=0)[store.word_ids()]
    assert seen["control_label"].tolist() == expected_control[[1, 3, 5, 6, 8, 9]].tolist()
    test, seen_loader = datamodule.test_dataloader()  # [test, seen]: the module scores both after training
    assert len(list(test)) == 3 and sum(len(b["label"]) for b in seen_loader) == 6


def test_seen_split_needs_the_control_task(tmp_path):
    stores = {split: build_store(tmp_path / f"{split}.h5") for split in ("train", "dev", "test")}
    with pytest.raises(ValueError, match="control_seed"):
        StoreDataModule(stores, layer=0, seen_fraction=0.2)
    datamodule = StoreDataModule(stores, layer=0, control_seed=0)
    datamodule.setup()
    assert "seen" not in datamodule.splits and not isinstance(datamodule.test_dataloader(), list)
