"""probe.py as a user runs it for the issue's studies: mix, baselines, controls, context sizes, type level, presets."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from probing.cli import probing_cause
from probing.config import build
from probing.errors import ProbingError
from probing.probes.controls import ControlTask
from probing.probes.saved import load_probes
from probing.tasks import probe
from probing.tasks.probe import chosen_representation
from probing.tasks.settings import with_data_settings
from tests.helpers import CONFIG_DIR, FIXTURES, run_script
from tests.helpers.runs import compose_job, probe_in_process, tiny_model

GLOVE_FIXTURE = FIXTURES / "embeddings" / "glove.txt"
BAD_DIMS_FIXTURE = FIXTURES / "embeddings" / "bad_dims.txt"


def results_of(sweep: Path) -> dict:
    return {str(r["representation"]) + f"/ctx-{r['context_size']}": r
            for r in (json.loads(p.read_text()) for p in sweep.glob("*/results.json"))}


@pytest.fixture
def tiny(tiny_bert_path):
    return tiny_model(tiny_bert_path)



def test_layers_mix_and_baselines_in_one_sweep(tmp_path, tiny):
    sweep = tmp_path / "sweep"
    result = run_script("probe.py", "-m", "layer=1,mix,prand,pbert", "trainer.max_epochs=2", *tiny,
                        f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = results_of(sweep)
    assert sorted(results) == ["1/ctx-None", "P-BERT/ctx-None", "P-Rand/ctx-None", "mix/ctx-None"]
    mix = results["mix/ctx-None"]
    assert mix["layer"] == "mix" and len(mix["mix_weights"]) == 3 and sum(mix["mix_weights"]) == pytest.approx(1.0)
    assert isinstance(mix["gamma"], float) and "mix_weights" not in results["1/ctx-None"]
    for r in results.values():  # the control task is on by default
        assert isinstance(r["control_best_epoch"], int) and "seen" not in r
        for split in ("dev", "test"):
            block = r[split]
            assert block["selectivity"] == pytest.approx(block["micro_f1"] - block["control_micro_f1"])
    assert results["P-Rand/ctx-None"]["layer"] == "prand" and results["P-BERT/ctx-None"]["layer"] == "pbert"
    stores = {Path(r["stores"]["train"]).name.split(".")[1] for r in results.values()}
    assert stores == {"mean", "prand", "pbert"}  # the mix reads the layer stores; each baseline has its own
    with h5py.File(results["P-Rand/ctx-None"]["stores"]["train"]) as store:
        assert store["features"].shape[0] == 1 and store["features"].shape[2] == 300
    report = (sweep / "report.md").read_text()
    assert "| micro-F1 | P-Rand | P-BERT | 1 | mix |" in report  # Zhao Table 6 layout, baselines first
    assert (sweep / "mix_weights.png").is_file()


@pytest.mark.parametrize("family,hidden_layers", [("linear", 0), ("mlp1", 1), ("mlp2", 2)])
def test_a_probe_family_on_the_s_class_task_trains_binary_probes_of_that_family(tmp_path, tiny, family, hidden_layers):
    """probe=linear on the s-class task trains C binary probes D -> 2 (it trained Zhao's MLP-1s under the name
    linear); results.json and the saved probes record the family."""
    results = probe_in_process(tmp_path, family, f"probe={family}", "layer=1", "trainer.max_epochs=1", *tiny)
    assert results["probe_family"] == family and results["probe"] == family and results["task"] == "sclass"
    saved = load_probes(Path(results["probes_file"]))
    classes, dim, hidden = len(results["classes"]), saved.about["feature_dim"], 1000  # probe.module.hidden_dim: 1000
    sizes = [dim, *[hidden] * hidden_layers, 2]
    expected = classes * sum(fan_in * fan_out + fan_out for fan_in, fan_out in zip(sizes, sizes[1:]))
    assert sum(tensor.numel() for name, tensor in saved.state_dict.items() if name.startswith("probes.")) == expected
    assert saved.about["module"]["family"] == family


def test_context_sizes_get_their_own_stores_and_report_table(tmp_path, tiny):
    sweep = tmp_path / "sweep"
    result = run_script("probe.py", "-m", "context_size=0,2", "layer=1,2", "trainer.max_epochs=1",
                        "probe.control_task.enabled=false", *tiny, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    results = results_of(sweep)
    assert sorted(results) == ["1/ctx-0", "1/ctx-2", "2/ctx-0", "2/ctx-2"]
    assert "selectivity" not in results["1/ctx-0"]["test"]  # control switched off
    names = {Path(r["stores"]["dev"]).name.split(".")[2] for r in results.values()}
    assert names == {"ctx-0", "ctx-2"}
    with h5py.File(results["1/ctx-2"]["stores"]["dev"]) as store:
        assert store.attrs["context_size"] == 2
    assert "By context size" in (sweep / "report.md").read_text()
    assert (sweep / "micro_f1_by_context_size.png").is_file()


def test_random_init_encoder_has_its_own_store_and_other_features(tmp_path, tiny):
    # init_seed 1: the tiny fixture model itself was initialised from seed 0
    runs = {random_init: probe_in_process(tmp_path, random_init, "layer=1", f"model.random_init={random_init}",
                                        "model.init_seed=1", "trainer.max_epochs=1", *tiny)
            for random_init in ("false", "true")}
    assert runs["true"]["random_init"] is True and runs["false"]["random_init"] is False
    trained, random = (Path(runs[key]["stores"]["dev"]) for key in ("false", "true"))
    assert "random-init-seed1" in str(random.parent) and trained.name == random.name
    with h5py.File(trained) as a, h5py.File(random) as b:
        assert a.attrs["weights_sha256"] != b.attrs["weights_sha256"] and b.attrs["random_init"]
        assert not np.allclose(a["features"][1], b["features"][1])


def test_seen_split_holds_out_training_contexts_and_scores_selectivity_there(tmp_path, tiny):
    r = probe_in_process(tmp_path, "seen", "layer=1", "probe.control_task.seen_fraction=0.3", "trainer.max_epochs=4",
                       *tiny)
    held_out, seen = r["seen_split"], r["seen"]
    train_rows = r["data_summary"]["train"]["contexts"] - r["extraction_skipped_rows"]["train"]
    assert held_out["contexts"] > 0 and held_out["contexts"] + held_out["train_contexts_left"] == train_rows
    assert seen["n_contexts"] == held_out["contexts"] and held_out["words"] <= held_out["contexts"]
    assert seen["selectivity"] == pytest.approx(seen["micro_f1"] - seen["control_micro_f1"])
    assert r["test"]["n_contexts"] == r["data_summary"]["test"]["contexts"] - r["extraction_skipped_rows"]["test"]
    assert r["control_best_epoch"] == r["best_epoch"]  # both heads scored with the weights of the same epoch


def test_type_level_avg_and_static_spaces(tmp_path, tiny):
    spaces = {"avg": ["layer=1"], "glove": ["embeddings=glove", f"embeddings.path={GLOVE_FIXTURE}"]}
    runs = {name: probe_in_process(tmp_path, name, "probe.level=type", *overrides, "trainer.max_epochs=2", *tiny)
            for name, overrides in spaces.items()}
    avg, glove = runs["avg"], runs["glove"]
    assert avg["representation"] == "AVG-1" and avg["level"] == "type" and avg["layer"] == 1
    assert glove["representation"] == "GloVe" and glove["embeddings"] == "glove" and glove["layer"] is None
    for r in (avg, glove):  # one decision per word and class: the words of the split, not their contexts
        assert r["test"]["n_contexts"] == r["data_summary"]["test"]["words"]
        assert r["test"]["n_combinations"] == r["data_summary"]["test"]["decisions_gold"]
        assert "selectivity" in r["test"]
    oov = glove["oov"]["test"]
    assert oov["words"] == glove["data_summary"]["test"]["words"] and oov["oov_words"] >= oov["words"] - 3


@pytest.mark.parametrize("overrides,message", [
    (["layer=mix", "baseline=pbert"], "layer=mix mixes the encoder's layers"),
    (["context_size=-3"], "context_size=-3 is not a context size"),
    (["baseline=pstatic"], "baseline=pstatic needs a static embedding file"),
    (["baseline=nope"], "Unknown baseline 'nope'"),
    (["probe.level=type", "layer=mix"], "probe.level=type needs a word space"),
    (["probe.level=type", "embeddings=static", f"embeddings.path={BAD_DIMS_FIXTURE}"], "bad_dims.txt:3"),
    (["probe.control_task.seen_fraction=0.2", "probe.control_task.enabled=false"],
     "the control task is off. Fix: probe.control_task.enabled=true, or probe.control_task.seen_fraction=0"),
    (["probe.control_task.seen_fraction=0.2", "probe.level=type", "layer=rand"],
     "probe.control_task.seen_fraction=0.2 needs several contexts per word; at the type level each word is one "
     "training row, so no word can be both trained on"),
    (["probe.control_task.seen_fraction=1.5"], "probe.control_task.seen_fraction=1.5 is not a fraction"),
])
def test_bad_requests_are_user_errors_with_a_fix(tmp_path, tiny, overrides, message):
    """Refused before anything is written (the entry scripts print a ProbingError as one line: test_probe_faults),
    the shorthand that names no representation when its choice is built, before the run's folder is used."""
    with pytest.raises(Exception) as error:
        probe.run(compose_job("probe", tmp_path, *overrides, *tiny))
    refusal = probing_cause(error.value)
    assert isinstance(refusal, ProbingError) and "Fix:" in str(refusal), error.value
    assert message in str(refusal) and not (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize("preset,layers", [
    ("zhao2020_table6", "0,1,2,3,4,5,6,mix,prand,pbert,bertw"),
    ("zhao2020_table5", "0,1,2,3,4,5,6,rand,bertw"),
    ("zhao2020_fig5", "0,1,2,3,4,5,6,pbert"),
])
def test_presets_sweep_every_layer_of_the_chosen_model(preset, layers):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        minilm = compose("probe", overrides=[f"experiment={preset}"], return_hydra_config=True)
        bert = compose("probe", overrides=[f"experiment={preset}", "model=bert"], return_hydra_config=True)
    assert minilm.hydra.sweeper.params.layer == layers
    assert bert.hydra.sweeper.params.layer.startswith("0,1,2,3,4,5,6,7,8,9,10,11,12,")
    if preset == "zhao2020_fig5":
        assert minilm.hydra.sweeper.params.context_size == "0,2,4,8,16,32,all"
    assert minilm.probe.level == ("type" if preset == "zhao2020_table5" else "context")


def test_wikipse_type_level_words_follow_the_paper(shared_data, tmp_path):
    """Wiki-PSE's lists without the corpus: Table 2's word counts, 34 classes, the Rand space's 300 dimensions."""
    overrides = ["data=wikipse", f"data.lists_dir={shared_data / 'wiki_pse'}", "probe.level=type", "layer=rand",
                 f"paths.output_dir={tmp_path}"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = with_data_settings(compose("probe", overrides=overrides))  # as probe.py fills data.source
    representation = chosen_representation(cfg)()
    inputs = representation.inputs(build(cfg.data.source, "data.source"), {}, 256, ControlTask(seed=0))
    sizes = {split: len(data) for split, data in inputs.datamodule.splits.items()}
    assert sizes == {"train": 35399, "dev": 8850, "test": 44250} and len(inputs.classes) == 34
    assert inputs.datamodule.feature_dim == 300 and inputs.about["representation"] == "Rand"
    control = inputs.datamodule.splits["test"].tensors["control_targets"]
    assert control.sum(dim=1).eq(1).all()  # one random class per word
