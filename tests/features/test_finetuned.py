"""probing/features/finetuned.py: what a train.py export is (task.json), where the exports of runs and sweeps are,
their labels, and the setups of the fine-tuned vs pretrained comparison (Zhao et al. 2020 §4.4.2), on hand-made
folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probing.errors import ConfigError, ModelLoadError
from probing.features.finetuned import (
    FinetunedModel,
    comparison_setups,
    find_finetuned_models,
    finetuned_task,
    label_of,
    model_folders,
    record_export_hashes,
    setup_model,
    setup_reuse,
    verify_export,
)
from tests.helpers.stores import assert_one_line_error


def export(folder: Path, task: str | None = "pos", text: str | None = None) -> Path:
    """A folder that passes for train.py's export: task.json (and nothing else: these functions read only it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.json").write_text(text if text is not None else json.dumps({"task": task, "kind": "token"}),
                                      encoding="utf-8")
    return folder


@pytest.fixture
def runs(tmp_path) -> Path:
    """runA, runB: pos runs; sweep/{0,1,10}: ner runs (10 unfinished: no model); sst2/: a model folder itself."""
    export(tmp_path / "runA" / "model", "pos")
    export(tmp_path / "runB" / "model", "pos")
    export(tmp_path / "sweep" / "1" / "model", "ner")
    export(tmp_path / "sweep" / "0" / "model", "ner")
    (tmp_path / "sweep" / "10").mkdir()
    export(tmp_path / "sst2", "sst2")
    (tmp_path / "empty").mkdir()
    return tmp_path


def test_the_task_of_an_export_and_none_for_anything_else(tmp_path):
    assert finetuned_task(export(tmp_path / "a", "mrpc")) == "mrpc"
    assert finetuned_task(str(tmp_path / "a")) == "mrpc"
    assert finetuned_task(None) is None
    assert finetuned_task("bert-base-uncased") is None               # a hub name: no folder
    assert finetuned_task(tmp_path) is None                          # a folder without task.json
    assert finetuned_task(export(tmp_path / "b", text="{not json")) is None
    assert finetuned_task(export(tmp_path / "c", text='{"kind": "token"}')) is None   # no task key
    assert finetuned_task(export(tmp_path / "d", text="[1, 2]")) is None              # not an object
    assert finetuned_task(export(tmp_path / "e", text='{"task": 7}')) == "7"


def hashed_export(folder: Path) -> Path:
    """A hand-made export as train.py ends one: task.json, a weights file, and the hashes of both."""
    export(folder, "pos")
    (folder / "model.safetensors").write_bytes(b"weights")
    record_export_hashes(folder)
    return folder


def test_the_hashes_of_an_export_vouch_for_each_of_its_files(tmp_path):
    folder = hashed_export(tmp_path / "model")
    assert (folder / "export.sha256").read_text().splitlines()[1].endswith("  task.json")
    verify_export(folder)
    assert finetuned_task(folder) == "pos"


@pytest.mark.parametrize("change, names, shown", [
    (lambda folder: (folder / "task.json").write_text(json.dumps({"task": "ner", "kind": "token"})), None,
     "task.json is not the file that train.py exported: its SHA-256 is not the one export.sha256 records (the file "
     "is damaged or was changed)"),
    (lambda folder: (folder / "model.safetensors").write_bytes(b"weig"), None,
     "model.safetensors is not the file that train.py exported"),
    (lambda folder: (folder / "model.safetensors").unlink(), None, "model.safetensors is missing (export.sha256 lists "
                                                                   "it)"),
    (lambda folder: None, ["task_head.safetensors"], "task_head.safetensors is not among the files that "
                                                     "export.sha256 lists"),
    (lambda folder: (folder / "export.sha256").write_text("garbled\n"), None, "export.sha256 is not readable as the "
                                                                              "export's hashes (line 1 is not"),
], ids=["task edited", "weights cut short", "weights missing", "not listed", "listing garbled"])
def test_an_export_whose_files_are_not_those_it_recorded_is_refused(tmp_path, change, names, shown):
    folder = hashed_export(tmp_path / "model")
    change(folder)
    with pytest.raises(ModelLoadError) as error:
        verify_export(folder, names)
    assert_one_line_error(error.value, str(folder), shown, "Fix: point model.name_or_path at a <train run>/model "
                                                           "folder that train.py wrote whole")


def test_the_task_of_an_export_is_read_only_from_the_task_json_it_recorded(tmp_path):
    folder = hashed_export(tmp_path / "model")
    (folder / "model.safetensors").write_bytes(b"weig")  # not read here: the encoder's loader refuses it
    assert finetuned_task(folder) == "pos"
    export(folder, "ner")
    with pytest.raises(ModelLoadError, match=r"task.json is not the file that train.py exported"):
        finetuned_task(folder)


def test_an_export_without_hashes_is_read_unchecked_with_a_warning(tmp_path, caplog):
    folder = export(tmp_path / "model", "pos")  # as exports were written before the hashes
    verify_export(folder, ["task.json"])
    assert not caplog.records
    verify_export(folder)
    assert "exported by an older version, which recorded no hashes (export.sha256)" in caplog.text
    verify_export(tmp_path)  # not an export: nothing to check or say
    assert len(caplog.records) == 1


def test_model_folders_of_a_model_a_run_and_a_sweep(runs):
    assert model_folders(runs / "sst2") == [runs / "sst2"]
    assert model_folders(runs / "runA") == [runs / "runA" / "model"]
    assert model_folders(str(runs / "runA" / "model")) == [runs / "runA" / "model"]
    assert model_folders(runs / "sweep") == [runs / "sweep" / "0" / "model", runs / "sweep" / "1" / "model"]
    assert model_folders(runs / "empty") == [] and model_folders(runs / "nowhere") == []


def test_models_of_one_task_are_labelled_by_their_run(runs):
    models = find_finetuned_models([runs / "runA", str(runs / "runB" / "model"), runs / "sst2"])
    assert models == [FinetunedModel((runs / "runA" / "model").resolve(), "pos", "pos-runA"),
                      FinetunedModel((runs / "runB" / "model").resolve(), "pos", "pos-runB"),
                      FinetunedModel((runs / "sst2").resolve(), "sst2", "sst2")]


def test_a_sweep_gives_every_run_and_a_model_named_twice_counts_once(runs):
    models = find_finetuned_models([runs / "sweep", runs / "sweep" / "0", runs / "runA"])
    assert [(model.task, model.label) for model in models] == [("ner", "ner-0"), ("ner", "ner-1"), ("pos", "pos")]
    assert [model.label for model in find_finetuned_models(str(runs / "runB"))] == ["pos"]  # one entry as a string


@pytest.mark.parametrize("entries", [None, [], ()])
def test_no_entry_is_refused_naming_the_setting(entries):
    with pytest.raises(ConfigError, match=r"^compare_to names no fine-tuned model\. Fix: compare_to=\["):
        find_finetuned_models(entries, key="compare_to")


def test_an_entry_without_an_export_is_refused_rather_than_left_out(runs):
    with pytest.raises(ConfigError) as raised:
        find_finetuned_models([runs / "runA", runs / "empty"])
    message = str(raised.value)
    assert message.startswith(f"finetuned: {runs / 'empty'} holds no model exported by train.py "
                              "(<run>/model/task.json)")
    assert "Fix:" in message and "\n" not in message


@pytest.mark.parametrize("folder, shared, label", [
    ("/x/run7/model", False, "pos"),
    ("/x/run7/model", True, "pos-run7"),
    ("/x/my model", True, "pos-my_model"),                            # a model folder itself: its own name
    ("/x/lr=0.1,seed=2 (b)/model", True, "pos-lr=0.1_seed=2__b_"),    # safe in a folder name
])
def test_label_of(folder, shared, label):
    assert label_of(Path(folder), "pos", shared) == label


def test_the_comparison_runs_the_pretrained_model_first_then_setups_a_and_b_per_model(runs):
    assert comparison_setups([runs / "runA", runs / "runB", runs / "sst2"]) == [
        "pretrained", "pos-runA-a", "pos-runA-b", "pos-runB-a", "pos-runB-b", "sst2-a", "sst2-b"]
    with pytest.raises(ConfigError, match="finetuned names no fine-tuned model"):
        comparison_setups(None)


def test_the_model_of_each_setup(runs):
    entries = [str(runs / "runA"), str(runs / "runB")]
    assert setup_model("pretrained", entries, "bert-base-uncased") == "bert-base-uncased"
    assert setup_model("pretrained", None, "bert-base-uncased") == "bert-base-uncased"  # needs no fine-tuned model
    assert setup_model("pos-runB-a", entries, "bert") == str((runs / "runB" / "model").resolve())
    assert setup_model("pos-runA-b", entries, "bert") == str((runs / "runA" / "model").resolve())


@pytest.mark.parametrize("setup", ["pos-runA-c", "pos-runC-a", "pos", "sst2-a"])
def test_a_setup_outside_the_comparison_is_refused_listing_the_setups(runs, setup):
    with pytest.raises(ConfigError) as raised:
        setup_model(setup, [runs / "runA", runs / "runB"], "bert")
    assert str(raised.value) == (f"comparison_setup={setup} is not a setup of this comparison. Fix: one of "
                                 "pretrained, pos-runA-a, pos-runA-b, pos-runB-a, pos-runB-b")


def test_only_setup_a_reuses_the_pretrained_probes_of_the_sweep(tmp_path):
    assert setup_reuse("pos-runA-a", tmp_path) == str(tmp_path / "pretrained")
    assert setup_reuse("sst2-a", str(tmp_path)) == str(tmp_path / "pretrained")
    assert setup_reuse("pos-runA-b", tmp_path) is None
    assert setup_reuse("pretrained", tmp_path) is None
