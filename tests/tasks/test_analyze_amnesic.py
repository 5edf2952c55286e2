"""analyze.py analysis=amnesic as a user runs it, on the tiny BERT: a tagger exported as train.py exports one and a
masked LM, each scored with no erasure, the concept erased and the random controls (results.json, the bar plot, the
report section); and settings that cannot work refused with one error line before the model is loaded."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest
from hydra.errors import ConfigCompositionException

from probing.data.task_records import NER_LABELS
from probing.data.task_sources import PosSource, bundled_pos_paths
from probing.errors import ConfigError, ModelLoadError
from probing.report import write_report
from probing.tasks import analyze
from tests.helpers import FIXTURES
from tests.helpers.amnesic import exported_finetuned, saved_masked_lm
from tests.helpers.runs import compose_job
from tests.helpers.stores import assert_one_line_error

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FAST = ["analysis=amnesic", "model.name=tiny", "erase.concept=upos", "analysis.max_sentences=6",
        "analysis.batch_size=8"]
MINI_CONCEPT = f"analysis.concept_paths=[{FIXTURES / 'data' / 'conllu'}]"  # 5 training words: fast, rank >= 1


@pytest.fixture(scope="module")
def tagger(tiny_bert_path, tmp_path_factory):
    """A POS tagger of the bundled data's tags, exported as train.py exports one (<run>/model)."""
    folder = tmp_path_factory.mktemp("train_run") / "model"
    return exported_finetuned(tiny_bert_path, folder, "pos", PosSource().load().labels)


@pytest.fixture(scope="module")
def small_treebank(tmp_path_factory):
    """The first sentences of the bundled EWT sample's train (60) and dev (20) files: enough words for INLP."""
    folder = tmp_path_factory.mktemp("treebank")
    for path in bundled_pos_paths():
        sentences = path.read_text(encoding="utf-8").split("\n\n")
        count = 60 if "train" in path.name else 20
        (folder / path.name).write_text("\n\n".join(sentences[:count]) + "\n\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def masked_lm(tiny_bert_path, tmp_path_factory):
    return saved_masked_lm(tiny_bert_path, tmp_path_factory.mktemp("mlm"))


def test_a_fine_tuned_tagger_scored_without_erasure_erased_and_against_random_controls(tmp_path, tagger):
    results = analyze.run(compose_job("analyze", tmp_path, *FAST, MINI_CONCEPT, f"model.name_or_path={tagger}",
                                      "layer=1"))
    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    assert (results["analysis"], results["objective"], results["layer"], results["concept"]) == (
        "amnesic", "pos", 1, "upos")
    assert (results["metric"], results["headline"], results["data"], results["examples"]) == (
        "accuracy", "accuracy", "pos dev", 6)
    eraser = results["eraser"]
    assert eraser["method"] == "leace" and 1 <= eraser["rank"] < len(results["concept_labels"])
    assert results["controls"] == {"method": "random", "rank": eraser["rank"], "seeds": [0, 1, 2]}
    scores = results["scores"]
    random = scores["random"]
    assert [row["seed"] for row in random["per_seed"]] == [0, 1, 2]
    accuracies = [row["accuracy"] for row in random["per_seed"]]
    assert random["mean"]["accuracy"] == pytest.approx(statistics.fmean(accuracies))
    assert random["std"]["accuracy"] == pytest.approx(statistics.stdev(accuracies))
    assert all(0 <= scores[condition]["accuracy"] <= 1 for condition in ("none", "erased"))
    assert (run / "amnesic.png").read_bytes().startswith(PNG_MAGIC)
    write_report(run)
    report = (run / "report.md").read_text()
    assert "# Amnesic probing (Elazar et al. 2021)\n\n1 runs" in report
    none = f"{scores['none']['accuracy']:.3f}"
    assert f"| tiny | pos, pos dev | 1 | upos | leace, rank {eraser['rank']} | accuracy | {none} |" in report


def test_a_masked_lm_gets_word_accuracy_and_kl_against_the_controls_with_inlp(tmp_path, masked_lm, small_treebank):
    results = analyze.run(compose_job("analyze", tmp_path, *FAST, f"model.name_or_path={masked_lm}", "layer=-1",
                                      "erase=inlp", "erase.eraser.max_iterations=2", "analysis.control_seeds=[5]",
                                      "erase.concept=deprel", f"analysis.concept_paths=[{small_treebank}]"))
    assert (results["objective"], results["metric"], results["layer"], results["concept"]) == (
        "masked_lm", "masked_lm", 2, "deprel")
    assert results["sentences"] == 6 and results["masked_words"] > 6
    assert results["eraser"]["method"] == "inlp" and results["eraser"]["iterations"] == 2
    assert results["eraser"]["rank"] > 0 and results["controls"]["rank"] == results["eraser"]["rank"]
    scores = results["scores"]
    assert scores["none"]["kl"] == 0.0 and scores["erased"]["kl"] > 0
    assert [row["seed"] for row in scores["random"]["per_seed"]] == [5]
    assert scores["random"]["std"] == {"accuracy": None, "kl": None}


def test_a_sentence_classifier_scored_on_its_own_data_with_entity_types_erased(tmp_path, tiny_bert_path):
    model = exported_finetuned(tiny_bert_path, tmp_path / "sst2_run" / "model", "sst2", ["0", "1"], kind="sentence")
    results = analyze.run(compose_job(
        "analyze", tmp_path, *FAST, f"model.name_or_path={model}", "layer=0", "erase.concept=ner",
        f"analysis.concept_paths={FIXTURES / 'data' / 'conll2003'}", "erase=mean_projection",
        "analysis/sentences=sst2", f"analysis.sentences.data_dir={FIXTURES / 'data' / 'glue' / 'SST-2'}"))
    assert (results["objective"], results["concept"], results["data"], results["examples"]) == (
        "sst2", "ner", "sst2 dev", 2)
    assert results["eraser"]["method"] == "mean_projection" and results["eraser"]["rank"] >= 1
    assert set(results["scores"]["erased"]) == {"accuracy"}


@pytest.mark.parametrize("recorded", [True, False])
def test_a_ner_tagger_is_scored_on_the_test_split_by_entity_f1(tmp_path, tiny_bert_path, recorded):
    conll = FIXTURES / "data" / "conll2003"  # train.txt, valid.txt and test.txt
    model = exported_finetuned(tiny_bert_path, tmp_path / "ner_run" / "model", "ner", list(NER_LABELS),
                               metric="entity_f1")
    if not recorded:  # exported before task.json recorded the metric (and the export its hashes): the task's own
        about = json.loads((model / "task.json").read_text())
        (model / "task.json").write_text(json.dumps({key: about[key] for key in about if key != "metric"}))
        (model / "export.sha256").unlink()
    results = analyze.run(compose_job("analyze", tmp_path, *FAST, f"model.name_or_path={model}", "layer=2",
                                      "analysis/sentences=ner", f"analysis.sentences.data_dir={conll}",
                                      "erase.concept=ner", f"analysis.concept_paths={conll}"))
    assert (results["metric"], results["headline"], results["data"]) == ("entity_f1", "f1", "ner test")
    assert set(results["scores"]["none"]) == set(results["scores"]["random"]["mean"]) == {"accuracy", "f1"}


@pytest.mark.parametrize(("overrides", "message"), [
    (["layer=null"], "layer=null: analysis=amnesic erases the concept from one hidden state. Fix: layer=N"),
    (["layer=1", "erase.concept=null"], "erase.concept=null: analysis=amnesic has no task of its own to erase. "
                                        "Fix: erase.concept=upos"),
    (["layer=1", "erase=none"], "erase.concept=upos is set, but erase=none erases nothing. Fix: erase=leace"),
    (["layer=1", "erase.concept=feats"], "erase.concept=feats has no data of its own. Fix: "
                                         "erase.concept=upos (one of upos, xpos, deprel, ner)"),
    (["layer=1", "erase=random"], "erase=random: random directions are the control"),
    (["layer=1", "erase.concept=ner", "analysis.concept_paths=[/data/a,/data/b]"],
     "analysis.concept_paths=['/data/a', '/data/b']: erase.concept=ner reads one CoNLL-2003 folder (train.txt, "
     "valid.txt[, test.txt]), not 2 paths. Fix: analysis.concept_paths=/path/to/conll2003"),
    # analyze.py's `erase` node does not hold probe.py's own settings; added by hand, they are still refused
    (["layer=1", "+erase.control_seed=3"], "erase.control_seed=3 is a setting of probe.py's erasure, which "
                                           "analysis=amnesic does not read (its random controls are "
                                           "analysis.control_seeds)"),
    (["layer=1", "+erase.fresh_probe_epochs=5"], "erase.fresh_probe_epochs=5 is a setting of probe.py's erasure"),
    (["layer=1", "analysis.control_seeds=[0,0]"], "analysis.control_seeds=[0, 0] repeats a seed"),
    (["layer=1", "model.random_init=true"], "model.random_init=true: amnesic probing measures what a trained"),
    (["layer=3"], "layer=3 is not a layer of tiny: its hidden states are 0..2"),
    (["layer=1", "analysis/sentences=sst2", f"analysis.sentences.data_dir={FIXTURES / 'data' / 'glue' / 'SST-2'}"],
     "analysis.sentences reads sst2 data, but the model was fine-tuned on pos (its task.json). Fix: "
     "analysis/sentences=pos"),
    # offline, GLUE's SST-2 cannot be downloaded: the mismatch is still what is named (it came after the hub's error)
    (["layer=1", "analysis/sentences=sst2", "analysis.sentences.data_dir=null"],
     "analysis.sentences reads sst2 data, but the model was fine-tuned on pos (its task.json). Fix: "
     "analysis/sentences=pos"),
])
def test_settings_that_cannot_work_are_one_error_line(tmp_path, tagger, overrides, message):
    with pytest.raises(ConfigError) as error:
        analyze.run(compose_job("analyze", tmp_path, *FAST, MINI_CONCEPT, f"model.name_or_path={tagger}", *overrides))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_each_job_composes_the_erasure_settings_it_reads(tmp_path):
    analyze_erase = compose_job("analyze", tmp_path, "analysis=amnesic", "erase=inlp").erase
    assert set(analyze_erase) == {"_target_", "concept", "device", "eraser"}
    probe_erase = compose_job("probe", tmp_path, "erase=inlp").erase
    assert set(probe_erase) == {*analyze_erase, "path", "control_seed", "fresh_probe_epochs"}
    assert set(compose_job("probe", tmp_path).erase) == {"_target_", "concept", "device", "path", "control_seed",
                                                         "fresh_probe_epochs"}  # erase=none
    with pytest.raises(ConfigCompositionException, match="erase.control_seed"):
        compose_job("analyze", tmp_path, "analysis=amnesic", "erase.control_seed=3")


def test_an_export_whose_labels_were_reordered_is_refused_not_scored(tmp_path, tagger):
    model = shutil.copytree(tagger, tmp_path / "train_run" / "model")
    about = json.loads((model / "task.json").read_text())
    labels = about["labels"]
    (model / "task.json").write_text(json.dumps({**about, "labels": labels[1:] + labels[:1]}))  # every tag misnamed
    with pytest.raises(ModelLoadError) as error:
        analyze.run(compose_job("analyze", tmp_path, *FAST, MINI_CONCEPT, f"model.name_or_path={model}", "layer=1"))
    assert_one_line_error(error.value, f"{model / 'task.json'} is not the file that train.py exported")
    assert not (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize("changed", ["weights", "task.json"])
def test_a_relaunch_refuses_the_results_of_an_exported_model_changed_since(tmp_path, tiny_bert_path, changed):
    """The tagger exported again (another head and encoder) or its task.json edited after the analysis: a relaunch
    into the run folder would return the old model's scores."""
    labels = PosSource().load().labels
    model = exported_finetuned(tiny_bert_path, tmp_path / "train_run" / "model", "pos", labels)
    cfg = compose_job("analyze", tmp_path, *FAST, MINI_CONCEPT, f"model.name_or_path={model}", "layer=1")
    analyze.run(cfg)
    out = tmp_path / "run" / "results.json"
    before = out.read_text()
    assert analyze.run(cfg) == json.loads(before)
    if changed == "weights":
        exported_finetuned(tiny_bert_path, model, "pos", labels, seed=1)
    else:
        about = json.loads((model / "task.json").read_text())
        (model / "task.json").write_text(json.dumps({**about, "labels": about["labels"][::-1]}))
    with pytest.raises(ConfigError) as error:
        analyze.run(cfg)
    named = "its weights have changed since" if changed == "weights" else "task.json as it was then"
    assert f"{out} holds the results of this configuration computed from" in str(error.value)
    assert named in str(error.value) and f"delete the run folder {out.parent}" in str(error.value)
    assert "\n" not in str(error.value) and out.read_text() == before
