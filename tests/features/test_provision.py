"""Store provisioning (probing.features.provision): the store folder, and each split's store made ready with the
settings the caller passes (nothing read from a config)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from probing.data.records import SkipCounter, WordInContext
from probing.data.sources import WordInContextData
from probing.data.text import sha256_file
from probing.errors import ConfigError, StoreMismatchError
from probing.features.provision import ensure_features, store_root
from probing.features.store import FeatureStore, records_fingerprint, store_path
from tests.features.test_extraction import FakeEncoder
from tests.helpers.stores import file_state


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
    assert paths == {split: store_path(tmp_path / "stores", "tiny", "toy", split, "mean", None, fingerprint, "float32")
                     for split in ("train", "dev")}
    assert paths["train"].name == f"train.mean.ctx-all.{fingerprint[:10]}.float32.h5"
    assert [path for path, _ in calls] == [paths["train"], paths["dev"]]
    settings = calls[0][1]
    assert (settings["dtype"], settings["max_tokens_per_batch"], settings["lock_wait_s"]) == ("float32", 64, 5.0)
    assert settings["metadata_extra"]["data_files"][0][0] == "corpus.txt"
    with pytest.raises(ConfigError, match="the test split of toy is empty"):
        ensure_features(data, featurizer, store_dir=tmp_path / "stores", dtype="float32", max_tokens_per_batch=64,
                        lock_wait_s=0.0, splits=["test"], extract=extract)


class NamedFakeEncoder(FakeEncoder):
    """The fake encoder of the extraction tests, with the names that place its stores."""

    store_name, store_kind = "fake", "mean"


def word_task_file(path: Path, label: str) -> Path:
    """A JSONL word task of one sentence, whose first word has `label`."""
    path.write_text(json.dumps({"split": "train", "tokens": ["w", "w", "w"], "labels": [label, "b", "b"]}) + "\n")
    return path


def words_data(files: list[Path]) -> WordInContextData:
    """Every word of the task's sentence as a record (labels are not part of them), read from `files`."""
    records = [WordInContext(("w",) * 3, (i,), "w", "word", f"fake:{i}") for i in range(3)]
    return WordInContextData("words", ["word"], {"train": records}, files, SkipCounter())


def provide(data: WordInContextData, store_dir: Path) -> Path:
    return ensure_features(data, NamedFakeEncoder(), store_dir=store_dir, dtype="float32", max_tokens_per_batch=64,
                           lock_wait_s=0.0, splits=["train"])["train"]


def test_data_without_files_is_identified_by_its_records_and_reuses_its_store(tmp_path):
    """Every-word data passes no files: editing a label (the sentences unchanged) reuses the store instead of
    refusing it for a different request."""
    task = word_task_file(tmp_path / "task.jsonl", "a")
    path = provide(words_data([]), tmp_path / "stores")
    with FeatureStore(path) as store:
        assert store.is_complete and "data_files" not in store.metadata
    before = file_state(path)
    word_task_file(task, "c")
    assert provide(words_data([]), tmp_path / "stores") == path and file_state(path) == before


def test_a_store_that_records_its_data_files_is_reused_by_data_without_files(tmp_path):
    """Every-word stores extracted by earlier versions recorded the task's files."""
    task = word_task_file(tmp_path / "task.jsonl", "a")
    path = provide(words_data([task]), tmp_path / "stores")
    with FeatureStore(path) as store:
        assert store.metadata["data_files"] == json.dumps([["task.jsonl", sha256_file(task)]])
    before = file_state(path)
    word_task_file(task, "c")
    assert provide(words_data([]), tmp_path / "stores") == path and file_state(path) == before


def test_data_with_files_is_refused_a_store_of_other_file_contents(tmp_path):
    """Data that names its files (the s-class data, whose class list comes from every file) keeps their hashes
    compared."""
    task = word_task_file(tmp_path / "task.jsonl", "a")
    provide(words_data([task]), tmp_path / "stores")
    word_task_file(task, "c")
    with pytest.raises(StoreMismatchError, match=r"data_files: store has '\[\[\"task.jsonl\""):
        provide(words_data([task]), tmp_path / "stores")
