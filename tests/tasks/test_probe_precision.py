"""The weights' dtype and the forward's precision are part of the features' identity: a probe run on the tiny BERT
records them (null at float32), its saved probes and eraser carry them, and a later run on features of another
precision or dtype is refused those files in one line naming each field that differs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from probing.erasure.file import load_eraser
from probing.errors import ConfigError
from probing.probes.saved import PROBES_FILE, load_probes
from tests.helpers.runs import probe_in_process, tiny_model

SCLASS = ("task=sclass", "layer=1", "probe=linear", "trainer.max_epochs=1")  # its probes are saved
# The bundled statements, their own labels erased (a binary concept: the guardedness report's probes are quick).
TRUTH = ("task=truth", "layer=1", "probe=linear", "trainer.max_epochs=1", "erase=mean_projection",
         "erase.fresh_probe_epochs=1")
BF16_FORWARD = ("features.precision=bf16", "features.allow_emulated_bf16=true")  # emulated on a CPU without bf16


@pytest.fixture(scope="module")
def bf16_probes(tmp_path_factory, tiny_bert_path) -> tuple[Path, dict]:
    """An s-class probe run on features computed under bf16 autocast: its folder (with probes.safetensors) and
    results."""
    folder = tmp_path_factory.mktemp("bf16_probes")
    results = probe_in_process(folder, "bf16", *tiny_model(tiny_bert_path), *SCLASS, *BF16_FORWARD)
    return folder / "bf16" / "run", results


@pytest.fixture(scope="module")
def bf16_eraser(tmp_path_factory, tiny_bert_path) -> dict:
    """The results of a statement probe run whose eraser was fitted on features computed under bf16 autocast."""
    return probe_in_process(tmp_path_factory.mktemp("bf16_eraser"), "bf16", *tiny_model(tiny_bert_path), *TRUTH,
                            *BF16_FORWARD)


def test_a_bf16_run_records_its_precision_in_its_results_and_its_probes(bf16_probes):
    run_dir, results = bf16_probes
    assert (results["weights_dtype"], results["forward_precision"]) == (None, "bf16")
    assert ".bf16." in Path(results["stores"]["train"]).name  # the features it read were computed so
    about = load_probes(run_dir / PROBES_FILE).about
    assert (about["weights_dtype"], about["forward_precision"]) == (None, "bf16")


def test_an_eraser_fitted_on_bf16_features_records_their_precision(bf16_eraser):
    _, fitted_on = load_eraser(Path(bf16_eraser["erasure"]["eraser_file"]))
    assert (bf16_eraser["forward_precision"], fitted_on["weights_dtype"], fitted_on["forward_precision"]) == (
        "bf16", None, "bf16")


def test_probes_trained_on_bf16_features_are_refused_on_float32_features(tmp_path, bf16_probes, tiny_bert_path):
    run_dir, _ = bf16_probes
    with pytest.raises(ConfigError) as error:
        probe_in_process(tmp_path, "fp32", *tiny_model(tiny_bert_path), *SCLASS, f"probe.reuse={run_dir}")
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"probe.reuse={run_dir}: ")
    assert (f"({run_dir / PROBES_FILE}) differs in forward_precision: 'bf16' (saved) vs None (this run). Fix: "
            in message)


def test_an_eraser_fitted_on_bf16_features_is_refused_on_float32_features(tmp_path, bf16_eraser, tiny_bert_path):
    eraser = bf16_eraser["erasure"]["eraser_file"]
    with pytest.raises(ConfigError) as error:
        probe_in_process(tmp_path, "fp32", *tiny_model(tiny_bert_path), *TRUTH, f"erase.path={eraser}")
    message = str(error.value)
    assert "\n" not in message
    assert re.match(rf"erase.path={re.escape(eraser)} was fitted on other features, concept or settings than this "
                    r"run's: forward_precision: 'bf16' \(saved\) vs None \(this run\)\. Fix: ", message), message


def test_probes_of_a_bf16_forward_are_refused_on_features_of_bf16_weights(tmp_path, bf16_probes, tiny_bert_path):
    """bf16 weights with a float32 forward are other features again: both fields differ, each named."""
    run_dir, _ = bf16_probes
    with pytest.raises(ConfigError) as error:
        probe_in_process(tmp_path, "weights", *tiny_model(tiny_bert_path), *SCLASS, "model.dtype=bf16",
                         "features.allow_emulated_bf16=true", f"probe.reuse={run_dir}")
    assert ("differs in weights_dtype: None (saved) vs 'bf16' (this run); forward_precision: 'bf16' (saved) vs None "
            "(this run). Fix: ") in str(error.value)
