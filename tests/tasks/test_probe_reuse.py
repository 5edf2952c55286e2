"""Saved probes and Zhao et al. 2020 §4.4.2: setup (a) scores saved probes on a fine-tuned model's features,
setup (b) probes a fine-tuned model folder like any other encoder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from probing.errors import ConfigError, ProbingError
from probing.probes.saved import METADATA_KEY, PROBES_FILE, file_metadata, load_probes
from tests.helpers import run_script
from tests.helpers.runs import fake_finetuned_model, probe_in_process, tiny_model

QUICK = ("trainer.max_epochs=3",)


@pytest.fixture(scope="module")
def finetuned_tiny(tmp_path_factory, tiny_bert_path) -> Path:
    return fake_finetuned_model(tiny_bert_path, tmp_path_factory.mktemp("pos_run") / "model", "pos")


@pytest.fixture(scope="module")
def pretrained_run(tmp_path_factory, tiny_bert_path) -> tuple[Path, dict]:
    """A probe run of layer 1 of the tiny BERT: its folder and results."""
    tmp_path = tmp_path_factory.mktemp("pretrained")
    results = probe_in_process(tmp_path, "layer1", *tiny_model(tiny_bert_path), "layer=1", *QUICK)
    return tmp_path / "layer1" / "run", results


def test_a_windowed_run_records_its_window_and_policy_and_its_probes_fit_only_that_policy(tmp_path, tiny_bert_path):
    window = ("layer=1", "features.attention_window=1", *QUICK)
    results = probe_in_process(tmp_path, "positional", *tiny_model(tiny_bert_path), *window,
                             "features.attention_policy=positional")
    about = load_probes(tmp_path / "positional" / "run" / PROBES_FILE).about
    assert (results["attention_window"], results["attention_policy"]) == (1, "positional")
    assert (about["attention_window"], about["attention_policy"]) == (1, "positional")
    with pytest.raises(ConfigError, match="attention_policy: 'positional' \\(saved\\) vs 'sink' \\(this run\\)"):
        probe_in_process(tmp_path, "sink", *tiny_model(tiny_bert_path), *window,  # the default policy
                       f"probe.reuse={tmp_path / 'positional' / 'run'}")


def test_a_probe_run_saves_its_probes_with_what_they_were_trained_on(pretrained_run):
    run_dir, results = pretrained_run
    saved = load_probes(run_dir / PROBES_FILE)
    assert results["probes_file"] == str(run_dir / PROBES_FILE)
    about = saved.about
    assert about["layer"] == 1 and about["representation"] == "1" and about["pooling"] == "mean"
    assert about["context_size"] is None and about["attention_window"] is None and about["feature_dim"] == 32
    assert about["attention_policy"] is None and results["attention_policy"] is None  # no window: no policy
    assert about["classes"] == results["classes"] and about["level"] == "context"
    assert about["weights_sha256"] == results["weights_sha256"] and len(about["weights_sha256"]) == 64
    assert about["best_epoch"] == results["best_epoch"] and about["seed"] == 0
    assert about["module"]["hidden_dim"] == 1024 and about["module"]["input_dim"] == 32
    heads = {name.rsplit(".", 2)[0] for name in saved.state_dict}  # <head>.mlps.<weight>
    assert heads == {"probes", "parts.control.probes"}


def test_reusing_the_probes_on_the_same_model_reproduces_the_run(tmp_path, pretrained_run, tiny_bert_path):
    """The saved weights are the best-dev ones the run was scored with: scoring them again gives the same numbers."""
    run_dir, trained = pretrained_run
    reused = probe_in_process(tmp_path, "again", *tiny_model(tiny_bert_path), "layer=1", *QUICK,
                            f"probe.reuse={run_dir}")
    for split in ("dev", "test"):
        for key in ("micro_f1", "context_accuracy", "control_micro_f1", "control_context_accuracy"):
            assert reused[split][key] == pytest.approx(trained[split][key], abs=1e-6), (split, key)
    assert reused["epochs_trained"] == 0 and reused["best_epoch"] is None and "probes_file" not in reused
    assert reused["reused_probes"]["path"] == str(run_dir / PROBES_FILE)
    assert not (tmp_path / "again" / "run" / PROBES_FILE).exists()  # nothing was trained, nothing to save
    assert reused["bits"]["selected_by"].startswith("none: saved probes") and reused["bits"]["epochs"] == {}
    assert trained["bits"]["selected_by"] == "dev cross-entropy"


def test_setups_a_and_b_on_a_fine_tuned_model(tmp_path, pretrained_run, finetuned_tiny, tiny_bert_path):
    run_dir, trained = pretrained_run
    overrides = (*tiny_model(tiny_bert_path), f"model.name_or_path={finetuned_tiny}", "layer=1", *QUICK)
    setup_a = probe_in_process(tmp_path, "a", *overrides, f"probe.reuse={run_dir.parent.parent}")  # found below
    setup_b = probe_in_process(tmp_path, "b", *overrides)
    for results in (setup_a, setup_b):
        assert results["model_name_or_path"] == str(finetuned_tiny.resolve()) and results["finetuned_task"] == "pos"
        assert results["weights_sha256"] != trained["weights_sha256"]
    assert setup_a["reused_probes"]["weights_sha256"] == trained["weights_sha256"]
    assert setup_a["reused_probes"]["finetuned_task"] is None
    # the moved weights change what the old probes see: (a) scores differ from the pretrained run's (argmax over
    # the probes; on the tiny model's features the thresholded micro-F1 stays 0 and the real head's argmax is the
    # majority class, so the control head shows the change)
    def scores(results):
        return results["test"]["context_accuracy"], results["test"]["control_context_accuracy"]

    assert scores(setup_a) != scores(trained)
    # (b) extracted features of its own, in a store named by the folder and its weights hash
    store = Path(setup_b["stores"]["train"])
    assert store != Path(trained["stores"]["train"])
    assert store.parent.parent.name.endswith(setup_b["weights_sha256"][:10])
    assert store.parent.parent.name.startswith("pos_run")
    assert load_probes(tmp_path / "b" / "run" / PROBES_FILE).about["weights_sha256"] == setup_b["weights_sha256"]


@pytest.mark.parametrize("change, named", [("layer=2", "layer: 1 (saved) vs 2"),
                                           ("context_size=2", "context_size: None (saved) vs 2"),
                                           ("features.pooling=last", "pooling: 'mean' (saved) vs 'last'")])
def test_probes_of_other_features_are_refused(tmp_path, pretrained_run, tiny_bert_path, change, named):
    run_dir, _ = pretrained_run
    with pytest.raises(ConfigError, match="probe.reuse") as error:
        probe_in_process(tmp_path, "refused", *tiny_model(tiny_bert_path), "layer=1", *QUICK, change,
                       f"probe.reuse={run_dir}")
    assert named in str(error.value)


def test_reuse_of_a_folder_without_probes_is_one_error_line(tmp_path, tiny_bert_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_script("probe.py", *tiny_model(tiny_bert_path), "layer=1", *QUICK, f"probe.reuse={empty}",
                        cwd=tmp_path)
    assert result.returncode == 2
    assert f"probe.reuse={empty}" in result.stderr and PROBES_FILE in result.stderr
    assert "Traceback" not in result.stderr


def copied_probes(run_dir: Path, folder: Path, change_tensors=None, change_module=None) -> Path:
    """The probes of `run_dir` in `folder`, rewritten with changed tensors or module settings and a hash that
    matches (as a file written by another version or tool would be)."""
    tensors = load_file(run_dir / PROBES_FILE)
    with safe_open(str(run_dir / PROBES_FILE), framework="pt") as handle:
        about = json.loads(handle.metadata()[METADATA_KEY])
    (change_tensors or (lambda _: None))(tensors)
    about["module"] |= change_module or {}
    folder.mkdir(parents=True)
    save_file(tensors, folder / PROBES_FILE, metadata=file_metadata(about, tensors))
    return folder


@pytest.mark.parametrize("change_tensors, change_module, named", [
    (lambda tensors: tensors.update({"probes.mlps.w1": torch.zeros(tensors["probes.mlps.w1"].shape[0], 100, 33)}),
     None, "probes.mlps.w1 ("),
    (None, {"hidden_dim": "abc"}, "module settings"),
])
def test_saved_probes_that_do_not_fit_their_own_settings_are_one_error(tmp_path, pretrained_run, tiny_bert_path,
                                                                       change_tensors, change_module, named):
    run_dir, _ = pretrained_run
    folder = copied_probes(run_dir, tmp_path / "odd", change_tensors, change_module)
    with pytest.raises(ProbingError) as error:
        probe_in_process(tmp_path, "reused", *tiny_model(tiny_bert_path), "layer=1", *QUICK, f"probe.reuse={folder}")
    message = str(error.value)
    assert "\n" not in message and str(folder / PROBES_FILE) in message and named in message, message


def test_probes_whose_layer_was_edited_in_their_metadata_are_refused(tmp_path, pretrained_run, tiny_bert_path):
    """Layer-1 probes relabelled as layer 2 (metadata edited, tensors and hash kept) are not scored on layer 2."""
    run_dir, _ = pretrained_run
    folder = tmp_path / "edited"
    folder.mkdir()
    with safe_open(str(run_dir / PROBES_FILE), framework="pt") as handle:
        metadata = handle.metadata()
    about = json.loads(metadata[METADATA_KEY]) | {"layer": 2, "representation": "2"}
    save_file(load_file(run_dir / PROBES_FILE), folder / PROBES_FILE,
              metadata={**metadata, METADATA_KEY: json.dumps(about)})
    with pytest.raises(ProbingError) as error:
        probe_in_process(tmp_path, "reused", *tiny_model(tiny_bert_path), "layer=2", *QUICK, f"probe.reuse={folder}")
    message = str(error.value)
    assert "\n" not in message and str(folder / PROBES_FILE) in message, message
    assert "do not match the hash recorded when the file was written (the file is damaged or was changed)" in message
    assert not (tmp_path / "reused" / "run" / "results.json").exists()
    assert not (tmp_path / "reused" / "stores").exists()  # refused before any extraction
