"""extract.py as a user runs it: one process by default (no Fabric), sharded over two DDP processes on the CPU (gloo)
into the very store of a single process, trainer settings it cannot honour (more devices than the machine has) as one
error line, and `export_elmo=` refused before extraction where it could not write or would replace a user's file, and
as one unit (a re-export stopped midway is refused by the import)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from probing.errors import ConfigError, StoreMismatchError
from probing.features.elmo_hdf5 import ElmoFileFeaturizer
from probing.features.store import FeatureStore
from probing.tasks import extract
from tests.helpers import FIXTURE_STREUSLE, run_script
from tests.helpers.runs import compose_job
from tests.helpers.stores import assert_one_line_error, stop_after_the_first_exported_move


@pytest.fixture
def tiny(tiny_bert_path):
    """The tiny BERT on the mini STREUSLE file, float32 features, batches small enough for several per split."""
    return [f"model.name_or_path={tiny_bert_path}", f"data.source.paths=[{FIXTURE_STREUSLE}]", "features.dtype=float32",
            "features.max_tokens_per_batch=24"]


def assert_same_features(path: Path, expected: Path) -> None:
    with FeatureStore(path) as store, FeatureStore(expected) as wanted:
        assert store.metadata | {"created": None} == wanted.metadata | {"created": None}
        assert np.array_equal(store.row_ids(), wanted.row_ids())
        assert np.array_equal(store.labels(), wanted.labels())
        for layer in range(wanted.num_layers):
            assert np.array_equal(store.read_layer(layer), wanted.read_layer(layer)), layer


def test_two_ddp_processes_write_the_store_of_a_single_process(tmp_path, tiny):
    # Lightning gives each of the 2 processes half the cores; float32 kernels may round differently with another
    # number of threads, so the single process runs with as many
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // 2))
    try:
        single = extract.run(compose_job("extract", tmp_path / "single", *tiny))
    finally:
        torch.set_num_threads(threads)
    result = run_script("extract.py", *tiny, "trainer=ddp", "trainer.devices=2", "trainer.accelerator=cpu",
                        f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for split, path in single.items():
        sharded = tmp_path / "stores" / path.relative_to(tmp_path / "single" / "stores")
        assert_same_features(sharded, path)
        assert not sharded.with_name(sharded.name + ".shards").exists(), split


def test_an_error_met_by_every_ddp_process_is_printed_once(tmp_path, tiny_bert_path):
    broken = tmp_path / "broken.conllulex"
    broken.write_text(FIXTURE_STREUSLE.read_text(encoding="utf-8") + "# sent_id = x\n1\tbroken\n\n", encoding="utf-8")
    result = run_script("extract.py", f"model.name_or_path={tiny_bert_path}", f"data.source.paths=[{broken}]",
                        "trainer=ddp", "trainer.devices=2", "trainer.accelerator=cpu",
                        f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(broken) in errors[0] and "Traceback" not in result.stderr, result.stderr


def test_the_default_trainer_extracts_in_this_process_without_fabric(tmp_path, tiny, monkeypatch):
    monkeypatch.setattr(extract, "Fabric", None)  # calling it would fail
    paths = extract.run(compose_job("extract", tmp_path, *tiny, "splits=[dev]"))
    assert FeatureStore(paths["dev"]).is_complete


def test_more_devices_than_the_machine_has_is_one_error_line(tmp_path, tiny):
    devices = (os.cpu_count() or 1) + 1
    cfg = compose_job("extract", tmp_path, *tiny, "trainer=ddp", f"trainer.devices={devices}",
                      "trainer.accelerator=cpu")
    with pytest.raises(ConfigError) as error:
        extract.run(cfg)
    assert_one_line_error(error.value, f"trainer.devices={devices}, but this machine has")
    assert not (tmp_path / "stores").exists()


def test_a_gpu_trainer_on_a_machine_without_a_gpu_is_one_error_line(tmp_path, tiny, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError) as error:
        extract.run(compose_job("extract", tmp_path, *tiny, "trainer=gpu"))  # one process: the encoder is on the CPU
    assert_one_line_error(error.value, "trainer.accelerator=gpu asks for a GPU, but torch sees none on this machine",
                          "Fix: trainer=cpu")
    assert not (tmp_path / "stores").exists()


@pytest.mark.parametrize("devices", ["0", "-1", "abc", "1.5"])
def test_a_device_count_lightning_cannot_start_is_one_error_line(tmp_path, tiny, devices):
    cfg = compose_job("extract", tmp_path, *tiny, "trainer=ddp", f"trainer.devices={devices}",
                      "trainer.accelerator=cpu")
    with pytest.raises(ConfigError) as error:
        extract.run(cfg)
    assert_one_line_error(error.value, f"trainer.devices={devices} is not a number of devices",
                          "Fix: trainer.devices=N, a number of processes from 1 to")
    assert not (tmp_path / "stores").exists()


@pytest.mark.parametrize(("overrides", "message"), [
    (["trainer.strategy=fsdp"], "trainer.strategy=fsdp: extraction runs in one process or in DDP processes"),
    (["trainer.precision=bf16-mixed"], "trainer.precision=bf16-mixed does not set the precision of extraction"),
])
def test_trainer_settings_extraction_cannot_honour_are_refused(tmp_path, tiny, overrides, message):
    cfg = compose_job("extract", tmp_path, *tiny, "trainer=ddp", "trainer.accelerator=cpu", *overrides)
    with pytest.raises(ConfigError) as error:
        extract.run(cfg)
    assert_one_line_error(error.value, message)


@pytest.fixture
def word_task(tiny_bert_path, tmp_path):
    """The tiny BERT on a JSONL word task of three sentences (one per split), float32 features."""
    lines = [{"split": split, "tokens": tokens, "labels": ["D", "N", "V"]} for split, tokens in
             [("train", ["the", "cat", "sat"]), ("dev", ["a", "dog", "ran"]), ("test", ["the", "dog", "sat"])]]
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return [f"model.name_or_path={tiny_bert_path}", "task=jsonl", f"task.path={task}", "features.dtype=float32"]


def below_a_file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("mine\n")
    return tmp_path / "file" / "export"


def read_only(tmp_path: Path) -> Path:
    (tmp_path / "locked").mkdir(mode=0o500)
    return tmp_path / "locked"


def below_read_only(tmp_path: Path) -> Path:
    return read_only(tmp_path) / "export"


@pytest.mark.parametrize("folder_of", [
    below_a_file,
    pytest.param(read_only, marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes any folder")),
    pytest.param(below_read_only, marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes any folder")),
])
def test_an_export_folder_that_cannot_be_written_is_refused_before_extraction(tmp_path, word_task, folder_of):
    folder = folder_of(tmp_path)
    with pytest.raises(ConfigError) as error:
        extract.run(compose_job("extract", tmp_path, *word_task, f"export_elmo={folder}"))
    assert_one_line_error(error.value, f"export_elmo={folder}: the folder cannot be created or written to (",
                          "Fix: make it writable, or export into another folder")
    assert not (tmp_path / "stores").exists()


def test_an_export_never_replaces_a_file_it_did_not_write_and_refuses_before_extraction(tmp_path, word_task):
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "train.hdf5").write_bytes(b"my own vectors")
    with pytest.raises(ConfigError) as error:
        extract.run(compose_job("extract", tmp_path, *word_task, f"export_elmo={folder}"))
    assert_one_line_error(error.value, f"{folder / 'train.hdf5'}: the export would replace this file, which an export "
                                       "of this tool did not write", "Fix: export into another folder")
    assert (folder / "train.hdf5").read_bytes() == b"my own vectors" and not (tmp_path / "stores").exists()


def test_a_re_export_stopped_after_its_first_split_is_refused_by_the_import(tmp_path, word_task, monkeypatch):
    """Export one model's stores, then another's over them, stopped right after "train exported": the folder holds
    one model's train split and the other's dev and test, which the import refuses instead of probing."""
    folder = tmp_path / "export"
    extract.run(compose_job("extract", tmp_path / "random", *word_task, "model.random_init=true",
                            f"export_elmo={folder}"))
    moved = stop_after_the_first_exported_move(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        extract.run(compose_job("extract", tmp_path / "trained", *word_task, f"export_elmo={folder}"))
    monkeypatch.undo()
    assert moved == ["train.hdf5"]
    assert sorted(path.name for path in folder.iterdir()) == ["dev.hdf5", "test.hdf5", "train.hdf5"]
    with pytest.raises(StoreMismatchError) as error:
        ElmoFileFeaturizer(folder)
    assert_one_line_error(error.value, f"{folder}: train.hdf5 is from another export than dev.hdf5/test.hdf5",
                          "Fix: run the export again")


def test_two_ddp_processes_export_once(tmp_path, word_task):
    """Every DDP process returns from the extraction; only the first exports (two would write the same files)."""
    folder = tmp_path / "export"
    result = run_script("extract.py", *word_task, "trainer=ddp", "trainer.devices=2", "trainer.accelerator=cpu",
                        f"export_elmo={folder}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(path.name for path in folder.iterdir()) == ["dev.hdf5", "export.json", "test.hdf5", "train.hdf5"]
    with ElmoFileFeaturizer(folder) as featurizer:  # the manifest vouches for every file
        assert len(featurizer.sentence_to_index) == 3
