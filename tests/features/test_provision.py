"""Store provisioning (probing.features.provision): the store folder, and each split's store made ready with the
settings the caller passes (nothing read from a config)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from probing.data.records import WordInContext
from probing.errors import ConfigError
from probing.features.provision import ensure_features, store_root
from probing.features.store import records_fingerprint, store_path


def test_the_store_folder_is_created_and_a_file_in_its_place_refused(tmp_path):
    assert store_root(tmp_path / "a" / "stores") == tmp_path / "a" / "stores" and (tmp_path / "a" / "stores").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"paths.store_dir=.*file is a file, not a folder\. Fix:"):
        store_root(tmp_path / "file")


def test_each_split_is_extracted_into_its_store_with_the_settings_given(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("apple juice\n")
    record = WordInContext(("apple", "juice"), (0,), "apple", "food")
    data = SimpleNamespace(name="toy", files=[str(corpus)], classes=["food"],
                           splits={"train": [record], "dev": [record], "test": []})
    featurizer = SimpleNamespace(store_name="tiny", store_kind="mean", context_size=None)
    calls = []

    def extract(records, featurizer, path, **settings):
        calls.append((path, settings))

    paths = ensure_features(data, featurizer, store_dir=tmp_path / "stores", dtype="float32", max_tokens_per_batch=64,
                            lock_wait_s=5.0, splits=["train", "dev"], extract=extract)
    fingerprint = records_fingerprint([record])
    assert paths == {split: store_path(tmp_path / "stores", "tiny", "toy", split, "mean", None, fingerprint)
                     for split in ("train", "dev")}
    assert [path for path, _ in calls] == [paths["train"], paths["dev"]]
    settings = calls[0][1]
    assert (settings["dtype"], settings["max_tokens_per_batch"], settings["lock_wait_s"]) == ("float32", 64, 5.0)
    assert settings["metadata_extra"]["data_files"][0][0] == "corpus.txt"
    with pytest.raises(ConfigError, match="the test split of toy is empty"):
        ensure_features(data, featurizer, store_dir=tmp_path / "stores", dtype="float32", max_tokens_per_batch=64,
                        lock_wait_s=0.0, splits=["test"], extract=extract)
