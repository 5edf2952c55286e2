"""probe.py erase=...: a concept erased from a word task's vectors before the probe trains, as a user runs it on the
tiny model and the bundled UD sample; the guardedness report, the saved eraser and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from probing.errors import ConfigError
from tests.helpers.runs import probe_in_process, tiny_model

FRESH_PROBES = {"linear_before", "linear_erased", "mlp1_erased", "linear_random_control"}


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Path:
    """One store folder for the module's runs: the tiny model's vectors of the bundled sample are extracted once."""
    return tmp_path_factory.mktemp("stores")


def quick(tiny_bert_path: Path, stores: Path) -> list[str]:
    """The tiny model, two epochs of the probe and of the guardedness report's MLP, the module's stores."""
    return [*tiny_model(tiny_bert_path), "trainer.max_epochs=2", "erase.fresh_probe_epochs=2",
            f"paths.store_dir={stores}"]


@pytest.fixture
def tiny(tiny_bert_path, stores):
    return quick(tiny_bert_path, stores)


@pytest.fixture(scope="module")
def leace_run(tmp_path_factory, tiny_bert_path, stores):
    folder = tmp_path_factory.mktemp("leace")
    # svd_tol tiny and the trace left free: the exact LEACE edit, which leaves no covariance at all
    results = probe_in_process(folder, "fit", "task=upos", "layer=1", "probe=linear", "erase=leace",
                               "erase.concept=upos", "erase.eraser.svd_tol=1e-9",
                               "erase.eraser.constrain_cov_trace=false", *quick(tiny_bert_path, stores))
    return folder, results


def test_leace_before_probing_records_what_it_erased_and_what_it_guards_against(leace_run):
    folder, r = leace_run
    erasure = r["erasure"]
    labels = r["labels"]
    assert (erasure["concept"], erasure["method"], erasure["loaded_from"]) == ("upos", "leace", None)
    assert 1 <= erasure["rank"] <= len(labels) - 1 and erasure["control_rank"] == erasure["rank"]
    assert erasure["fitted_on_words"] == r["data_summary"]["train"]["examples"]
    guarded = erasure["guardedness"]
    assert guarded["train"]["cross_covariance"] < 1e-6  # LEACE leaves no covariance with the concept where fitted
    assert guarded["train"]["class_mean_spread_after"] < 1e-6 < guarded["train"]["class_mean_spread_before"]
    assert set(guarded["fresh_probes"]) == FRESH_PROBES
    assert all(set(scores) == {"dev", "test"} for scores in guarded["fresh_probes"].values())
    majority = guarded["majority_rate"]
    assert set(majority) == {"train", "dev", "test"} and all(0 < rate < 1 for rate in majority.values())
    assert Path(erasure["eraser_file"]) == folder / "fit" / "run" / "eraser.safetensors"
    assert Path(erasure["eraser_file"]).is_file()
    saved = json.loads((folder / "fit" / "run" / "results.json").read_text())
    assert saved["erasure"] == json.loads(json.dumps(erasure))


def test_a_saved_eraser_applied_again_gives_the_same_probe(leace_run, tiny_bert_path, stores):
    folder, first = leace_run
    again = probe_in_process(folder, "again", "task=upos", "layer=1", "probe=linear", "erase=leace",
                             "erase.concept=upos", f"erase.path={first['erasure']['eraser_file']}",
                             "erase.eraser.svd_tol=1e-9", "erase.eraser.constrain_cov_trace=false",
                             *quick(tiny_bert_path, stores))
    assert again["erasure"]["loaded_from"] == first["erasure"]["eraser_file"]
    assert again["erasure"]["rank"] == first["erasure"]["rank"]
    assert again["test"]["accuracy"] == first["test"]["accuracy"]  # the same erased features, the same training


AS_FITTED = ("erase=leace", "erase.eraser.svd_tol=1e-9", "erase.eraser.constrain_cov_trace=false")


@pytest.mark.parametrize("overrides, differs", [
    (("layer=2", *AS_FITTED), r"layer: 1 \(saved\) vs 2 \(this run\)"),
    (("layer=1", "erase.concept=xpos", *AS_FITTED), r"concept: 'upos' \(saved\) vs 'xpos' \(this run\)"),
    (("layer=1", "model.random_init=true", *AS_FITTED), r"weights_sha256: '\w+' \(saved\) vs '\w+' \(this run\)"),
    (("layer=1", "erase=inlp"), r"method: 'leace' \(saved\) vs 'inlp' \(this run\)"),
    (("layer=1", "erase=leace"), r"eraser.svd_tol: 1e-09 \(saved\) vs 0.01 \(this run\)"),
], ids=["layer", "concept", "weights", "method", "setting"])
def test_a_saved_eraser_is_refused_where_it_was_fitted_otherwise(leace_run, tiny_bert_path, stores, overrides,
                                                                  differs):
    folder, first = leace_run
    with pytest.raises(ConfigError, match=r"^erase.path=.*eraser.safetensors was fitted on other features, concept "
                                          r"or settings than this run's: .*" + differs):
        probe_in_process(folder, "refused", "task=upos", "probe=linear", *overrides,
                         f"erase.path={first['erasure']['eraser_file']}", *quick(tiny_bert_path, stores))


def test_deprel_after_erasing_upos_and_the_random_control_of_leaces_rank(tmp_path, tiny, caplog):
    with caplog.at_level("WARNING", logger="probing.probes.task_probes"):
        leace = probe_in_process(tmp_path, "deprel", "task=deprel", "layer=1", "erase=leace", "erase.concept=upos",
                                 *tiny)
    assert leace["erasure"]["concept"] == "upos" and leace["pair"] is True and leace["probe_family"] == "mlp1"
    assert leace["erasure"]["device"] == ("cuda" if torch.cuda.is_available() else "cpu")  # erase.device=auto
    assert any("guards against linear probes only" in record.message for record in caplog.records)
    random = probe_in_process(tmp_path, "random", "task=deprel", "layer=1", "erase=random", "erase.concept=upos", *tiny)
    assert random["erasure"]["method"] == "random"
    assert random["erasure"]["rank"] == leace["erasure"]["rank"]


@pytest.mark.parametrize("overrides,message", [
    (("task=tree_distance",), r"^erase= erases a concept from the vectors of labelled words, and task=tree_distance "
                               r"has trees"),
    (("task=sclass", "erase.concept=upos"), r"^erase.concept=upos: task=sclass erases its own labels"),
    (("task=upos", "layer=mix"), r"^erase= fits an eraser on one layer's word vectors"),
    (("task=upos", "erase.concept=ner"), r"^erase.concept=ner has no data in task=upos's corpus"),
    (("task=upos", "layer=1", "erase=random", "erase.eraser.rank=1000"),
     r"^erase.eraser.rank=1000: more directions than the \d+ feature dimensions that vary\. Fix: set "
     r"erase.eraser.rank to at most that$"),
])
def test_what_an_erasure_cannot_do_is_refused(tmp_path, tiny, overrides, message):
    with pytest.raises(ConfigError, match=message):
        probe_in_process(tmp_path, "refused", "erase=leace", *overrides, *tiny)


@pytest.mark.skipif(torch.cuda.is_available(), reason="refused only where there is no CUDA GPU")
def test_an_erasure_device_this_machine_lacks_is_refused(tmp_path, tiny):
    with pytest.raises(ConfigError, match=r"^erase.device=cuda, but this machine has no CUDA GPU. Fix: "
                                          r"erase.device=auto$"):
        probe_in_process(tmp_path, "no_gpu", "task=upos", "erase=leace", "erase.device=cuda", *tiny)


def test_a_concept_set_without_an_eraser_is_refused_not_ignored(tmp_path, tiny):
    with pytest.raises(ConfigError, match=r"^erase.concept=upos is set, but erase=none erases nothing"):
        probe_in_process(tmp_path, "ignored", "task=upos", "erase.concept=upos", *tiny)


def test_the_s_class_task_erases_its_own_classes(tmp_path, tiny):
    r = probe_in_process(tmp_path, "sclass", "task=sclass", "layer=1", "erase=mean_projection", *tiny)
    erasure = r["erasure"]
    assert (erasure["concept"], erasure["method"]) == ("sclass", "mean_projection")
    assert 1 <= erasure["rank"] <= len(r["classes"]) - 1
    assert erasure["guardedness"]["train"]["class_mean_spread_after"] < 1e-6  # the classes' means made equal
    assert Path(erasure["eraser_file"]).is_file()

