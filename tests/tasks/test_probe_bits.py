"""probe.py's bits (V-information) and conditional probing (probe.condition_on) as a user runs them: the `bits` block
of results.json, H_V(Y) against the labels counted by hand, a representation conditioned on itself, and the
refusals."""

from __future__ import annotations

import math
import shutil
from collections import Counter
from pathlib import Path

import pytest
from omegaconf.errors import InterpolationResolutionError

from probing.errors import ConfigError
from tests.helpers import REPO
from tests.helpers.run_if import run_if
from tests.helpers.runs import probe_in_process, tiny_model

BUNDLED_UD = REPO / "probing" / "resources" / "ud_english_ewt"
SPLIT_BITS = {"h_y", "h_y_given_r", "i_v", "control_h_y", "control_h_y_given_r", "control_i_v", "selectivity_bits"}
CONDITIONAL_BITS = {"h_y_given_x", "h_y_given_xr", "i_v_x", "conditional_i_v"}


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stores")


@pytest.fixture
def tiny(tiny_bert_path, stores):
    return [*tiny_model(tiny_bert_path), "trainer.max_epochs=2", f"paths.store_dir={stores}"]


def test_a_word_probe_run_records_its_bits_and_those_conditional_on_layer_0(tmp_path, tiny):
    results = probe_in_process(tmp_path, "run", "task=upos", "layer=2", "probe=linear", "probe.condition_on=0", *tiny)
    bits = results["bits"]
    assert bits["conditioned_on"] == "0" == results["conditioned_on"] and results["layer"] == 2
    assert set(bits["epochs"]) == {"probes", "control_probes", "baseline_probes", "joint_probes"}
    assert (bits["selected_by"], bits["weight_decay"], bits["prior_smoothing"]) == ("dev cross-entropy", 0.0, 1.0)
    for split in ("dev", "test"):
        assert set(bits[split]) == SPLIT_BITS | CONDITIONAL_BITS
        assert bits[split]["i_v"] <= bits[split]["h_y"]  # H_V(Y|R) >= 0
        assert bits[split]["conditional_i_v"] == pytest.approx(
            bits[split]["h_y_given_x"] - bits[split]["h_y_given_xr"])


def test_conditioning_leaves_the_probe_of_r_as_it_is_without(tmp_path, tiny):
    plain = probe_in_process(tmp_path, "plain", "task=upos", "layer=2", "probe=linear", *tiny)
    conditioned = probe_in_process(tmp_path, "conditioned", "task=upos", "layer=2", "probe=linear",
                                   "probe.condition_on=0", *tiny)
    assert "conditioned_on" not in plain["bits"] and set(plain["bits"]["test"]) == SPLIT_BITS
    assert conditioned["test"] == plain["test"] and conditioned["dev"] == plain["dev"]
    for split in ("dev", "test"):
        assert {key: conditioned["bits"][split][key] for key in SPLIT_BITS} == plain["bits"][split]


def test_sclass_bits_sum_the_binary_decisions(tmp_path, tiny):
    results = probe_in_process(tmp_path, "run", "layer=1", *tiny)
    test = results["bits"]["test"]
    classes = len(results["classes"])
    assert set(test) == SPLIT_BITS
    assert 0 < test["h_y"] < classes  # at most one bit per binary decision


def conllu_labels(path: Path) -> list[str]:
    """The UPOS column of every word line (multiword-token ranges and empty nodes are not words)."""
    labels = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        if len(fields) == 10 and fields[0].isdigit():
            labels.append(fields[3])
    return labels


def test_minilm_conditioned_on_itself_gains_nothing_and_its_prior_is_the_hand_computed_one(tmp_path, minilm_path):
    """The bundled sample with explicit splits (its training file trains, its dev file is dev and test), so that the
    training labels and the test labels can be counted from the files."""
    data = tmp_path / "ud"
    data.mkdir()
    shutil.copy(BUNDLED_UD / "en_ewt-sample-train.conllu", data / "en_ewt-ud-train.conllu")
    for split in ("dev", "test"):
        shutil.copy(BUNDLED_UD / "en_ewt-sample-dev.conllu", data / f"en_ewt-ud-{split}.conllu")
    results = probe_in_process(tmp_path, "run", "task=upos", "layer=3", "probe=linear", "probe.condition_on=3",
                               f"data.source.paths=[{data}]", f"model.name_or_path={minilm_path}", "logger=csv",
                               f"paths.store_dir={tmp_path / 'stores'}")
    train, test = Counter(conllu_labels(data / "en_ewt-ud-train.conllu")), conllu_labels(data / "en_ewt-ud-test.conllu")
    labels = results["labels"]
    total = sum(train.values()) + len(labels)
    by_hand = sum(-math.log2((train[label] + 1) / total) for label in test) / len(test)
    bits = results["bits"]
    assert bits["test"]["h_y"] == pytest.approx(by_hand, abs=1e-9)
    for split in ("dev", "test"):
        assert abs(bits[split]["conditional_i_v"]) < 0.02
        assert 2.5 < bits[split]["i_v"] <= bits[split]["h_y"]


@pytest.mark.parametrize("overrides,message", [
    (["task=sclass", "probe.condition_on=0"], "task=sclass is not a word task"),
    (["task=tree_distance", "probe=linear", "probe.condition_on=0"], "task=tree_distance is not a word task"),
    (["task=upos", "probe.condition_on=0", "erase=leace", "erase.concept=upos"],
     "erase= and probe.condition_on=0 together: an eraser is fitted on one representation, not on a concatenation. "
     "Fix: erase=none or probe.condition_on=null"),
    (["task=upos", "layer=1", "probe.condition_on=9"], "probe.condition_on=9 is not a layer of"),
])
def test_conditioning_where_it_cannot_be_honoured_is_refused(tmp_path, tiny, overrides, message):
    with pytest.raises(ConfigError, match="Fix:") as error:
        probe_in_process(tmp_path, "run", *overrides, *tiny)
    assert message in str(error.value)


@pytest.mark.parametrize("overrides,message", [
    (["probe.condition_on=mix"], "the scalar mix is learned by each probe"),
    (["probe.condition_on=words"], "names no representation"),
    (["probe.condition_on=0", "layer=mix"], "probe.condition_on=0 with layer=mix"),
])
def test_conditioning_on_or_of_what_is_not_one_representation_is_refused(tmp_path, tiny, overrides, message):
    with pytest.raises((ConfigError, InterpolationResolutionError), match=message):
        probe_in_process(tmp_path, "run", "task=upos", *overrides, *tiny)


@pytest.mark.gpu
@run_if(min_gpus=1)
def test_the_bits_of_a_run_on_a_gpu(tmp_path, tiny):
    """Lightning moves the module to the CPU after fitting and back for validating: the heads kept at their
    least-dev-cross-entropy epoch must follow it."""
    results = probe_in_process(tmp_path, "run", "task=upos", "layer=2", "probe=linear", "probe.condition_on=0",
                               "trainer=gpu", *tiny)
    assert set(results["bits"]["test"]) == SPLIT_BITS | CONDITIONAL_BITS
