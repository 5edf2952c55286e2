"""analyze.py as a user runs it: attention-map similarity of a model and its "fine-tuned" copy (csv, heatmap,
results.json), a sweep over compared models with its side-by-side figure, and models that cannot be compared refused
with one error line."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel

from probing.analysis import Analysis, build_analysis
from probing.errors import ConfigError
from probing.report import OTHER_SECTIONS, analysis_section_modules
from probing.tasks import analyze
from tests.helpers import CONFIG_DIR, TINY_VOCAB, run_script
from tests.helpers.runs import compose_job

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def tiny(tiny_bert_path):
    return [f"model.name_or_path={tiny_bert_path}", "model.name=tiny", "analysis.max_sentences=8",
            "analysis.batch_size=4"]


def changed_copy(source: Path, folder: Path, layer: int = 2, **config_changes) -> Path:
    """The tiny BERT's folder copied to `folder`, with the query weights of transformer layer `layer` (from 1)
    changed, or with a config of its own (`config_changes`, freshly initialised weights)."""
    shutil.copytree(source, folder)
    if config_changes:
        config = BertConfig.from_pretrained(source)
        for name, value in config_changes.items():
            setattr(config, name, value)
        BertModel(config).save_pretrained(folder)
        return folder
    model = BertModel.from_pretrained(source)
    with torch.no_grad():
        query = model.encoder.layer[layer - 1].attention.self.query.weight
        query.add_(torch.randn(query.shape, generator=torch.Generator().manual_seed(0)))
    model.save_pretrained(folder)
    return folder


@pytest.fixture
def finetuned(tmp_path, tiny_bert_path) -> Path:
    """<train run>/model as train.py leaves it: the model folder with task.json, the run's results.json beside it."""
    model = changed_copy(tiny_bert_path, tmp_path / "train_run" / "model")
    (tmp_path / "train_run" / "results.json").write_text(json.dumps({"task": "pos", "model_dir": str(model)}))
    (model / "task.json").write_text(json.dumps({"task": "pos", "kind": "token", "labels": ["NN"]}))
    return model


def test_a_fine_tuned_copy_gets_its_csv_heatmap_and_results(tmp_path, tiny, finetuned):
    results = analyze.run(compose_job("analyze", tmp_path, *tiny, f"compare_to={finetuned}"))
    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["analysis"] == "attention_similarity" and results["compare_to_task"] == "pos"
    assert results["model_task"] is None and results["sentences"] == 8 and results["sentence_source"] == "pos dev"
    assert results["weights_sha256"] != results["compare_to_weights_sha256"]
    assert (results["layers"], results["heads"]) == (2, 2) and results["sentences_cut"] == 0
    assert results["max_length"] == 64  # the tiny model's max_position_embeddings
    layer_one, layer_two = results["cosine"]
    assert layer_one == pytest.approx([1.0, 1.0], abs=1e-9) and max(layer_two) < 1 - 1e-3
    assert results["layer_means"] == pytest.approx([sum(layer_one) / 2, sum(layer_two) / 2])
    with open(run / "attention_similarity.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["layer"], row["head"]) for row in rows] == [("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")]
    assert float(rows[3]["cosine"]) == pytest.approx(layer_two[1], abs=1e-6)
    assert (run / "attention_similarity.png").read_bytes().startswith(PNG_MAGIC)
    before = (run / "results.json").stat().st_mtime_ns
    assert analyze.run(compose_job("analyze", tmp_path, *tiny, f"compare_to={finetuned}")) == results  # not rerun
    assert (run / "results.json").stat().st_mtime_ns == before


def test_a_sweep_over_compared_models_ends_with_the_side_by_side_figure(tmp_path, tiny, tiny_bert_path, finetuned):
    other = changed_copy(tiny_bert_path, tmp_path / "other" / "model", layer=1)
    sweep = tmp_path / "sweep"
    result = run_script("analyze.py", "-m", f"compare_to={finetuned},{other}", *tiny, f"hydra.sweep.dir={sweep}",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [json.loads(path.read_text()) for path in sorted(sweep.glob("*/results.json"))]
    assert sorted(r["compare_to"] for r in runs) == sorted([str(finetuned), str(other)])
    assert all((path.parent / "attention_similarity.png").is_file() for path in sweep.glob("*/results.json"))
    assert (sweep / "attention_similarity_by_model.png").read_bytes().startswith(PNG_MAGIC)
    report = (sweep / "report.md").read_text()
    assert "# Attention-map similarity" in report and "S-class probing" not in report
    assert "| layer | tiny vs POS-finetuned | tiny vs other/model |" in report


def tokenizer_of_another_vocabulary(source: Path, folder: Path) -> Path:
    from transformers import BertTokenizerFast

    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join([*TINY_VOCAB, "juices"]) + "\n", encoding="utf-8")
    BertTokenizerFast.from_pretrained(folder, do_lower_case=True).save_pretrained(folder)
    BertModel(BertConfig.from_pretrained(source)).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind,message", [
    ("tokenizer", "has another tokenizer than"),
    ("layers", "has 3 layers x 2 heads"),
])
def test_models_that_cannot_be_compared_are_refused_in_one_line(tmp_path, tiny, tiny_bert_path, kind, message):
    if kind == "tokenizer":
        other = tokenizer_of_another_vocabulary(tiny_bert_path, tmp_path / "other")
    else:
        other = changed_copy(tiny_bert_path, tmp_path / "other", num_hidden_layers=3)
    result = run_script("analyze.py", *tiny, f"compare_to={other}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(errors) == 1 and message in errors[0] and f"compare_to={other}" in errors[0] and "Fix:" in errors[0]
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_train_run_folder_or_a_missing_model_as_compare_to_is_refused(tmp_path, tiny, finetuned):
    with pytest.raises(ConfigError, match=f"Fix: compare_to={finetuned} ") as error:
        analyze.run(compose_job("analyze", tmp_path, *tiny, f"compare_to={finetuned.parent}"))
    assert "is the folder of a train.py run" in str(error.value)
    with pytest.raises(ConfigError, match="Fix:") as error:
        analyze.run(compose_job("analyze", tmp_path, *tiny, f"compare_to={tmp_path / 'nowhere'}"))
    assert str(error.value).startswith(f"compare_to={tmp_path / 'nowhere'}: ") and "\n" not in str(error.value)


@pytest.mark.parametrize("overrides,message", [
    ([], "compare_to is not set"),
    (["compare_to=x", "analysis.split=test"], "analysis.split=test"),
    (["compare_to=x", "analysis.batch_size=0"], "analysis.batch_size=0 is not an integer >= 1"),
    (["compare_to=x", "analysis.device=tpu9"], "analysis.device=tpu9"),
    (["compare_to=x", "analysis.name=nothing"], "analysis.name='nothing' is no analysis"),
    (["compare_to=x", "layer=3"], "layer=3: analysis=attention_similarity does not read `layer` (it compares the "
                                  "attention maps of every layer and head). Fix: leave layer unset (layer=null)"),
])
def test_bad_settings_are_refused_before_any_model_is_loaded(tmp_path, tiny, overrides, message):
    with pytest.raises(ConfigError, match="Fix:") as error:
        analyze.run(compose_job("analyze", tmp_path, *tiny, *overrides))
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "run" / "results.json").exists()


ANALYSES = sorted(path.stem for path in Path(CONFIG_DIR, "analysis").glob("*.yaml"))
# What an analysis needs beside its name to build (the neuron analysis ranks a word task's neurons).
REQUIRED_SETTINGS = {"neurons": ["task=upos"]}


@pytest.mark.parametrize("name", ANALYSES)
def test_each_analysis_config_builds_its_component_with_its_report_section(tmp_path, name):
    config = compose_job("analyze", tmp_path, f"analysis={name}", *REQUIRED_SETTINGS.get(name, []))
    component = build_analysis(config.analysis, **analyze.job_settings(config))  # as analyze.py builds it
    assert isinstance(component, Analysis) and component.name == component.report.ANALYSIS == name
    is_kind, *_ = component.report.SECTION
    assert component.report.SECTION in OTHER_SECTIONS and is_kind({"analysis": name})


def test_the_report_finds_the_section_of_every_analysis_and_of_nothing_else():
    assert sorted(module.ANALYSIS for module in analysis_section_modules()) == ANALYSES


@pytest.mark.parametrize("override", ["trainer.max_epochs=2", "+callbacks.stop.patience=1", "probe.batch_size=8"])
def test_an_override_of_what_no_analysis_reads_is_refused(override):
    refused = rf"^{re.escape(override)}: analyze.py reads no `\w+`.*would ignore it \(its probes train for "
    with pytest.raises(ConfigError, match=refused + r"analysis.epochs\). Fix: leave it out"):
        analyze.refuse_unread_overrides(["analysis=neurons", "task=upos", override], "neurons")
    analyze.refuse_unread_overrides(["analysis=neurons", "analysis.epochs=2", "layer=3"], "neurons")
