"""analyze.py analysis=contextuality as a user runs it, on the tiny BERT: the results contract, the CSV and the
figure, the report section, store reuse, and bad settings refused with one error line."""

from __future__ import annotations

import csv
import json

import pytest

from probing.errors import ConfigError
from probing.report import write_report
from probing.tasks import analyze
from tests.helpers import run_script
from tests.helpers.runs import compose_job

MEASURES = ("anisotropy", "self_similarity", "intra_similarity", "mev")


@pytest.fixture
def tiny(tiny_bert_path):
    return [f"model.name_or_path={tiny_bert_path}", "model.name=tiny", "analysis=contextuality",
            "analysis.max_sentences=60", "analysis.samples=40", "analysis.sentence_samples=10"]


def test_contextuality_run_writes_every_measure_per_layer(tmp_path, tiny):
    results = analyze.run(compose_job("analyze", tmp_path, *tiny))
    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["analysis"] == "contextuality" and results["seed"] == 0 and results["samples"] == 40
    assert [row["layer"] for row in results["layers"]] == [0, 1, 2]
    assert results["sentences_sampled"] == 10 and results["baseline_occurrences"] == 40
    assert 0 < results["words_sampled"] <= 40 and results["words_available"] >= results["words_sampled"]
    for row in results["layers"]:
        for key in MEASURES[1:]:
            baseline = row["mev_baseline"] if key == "mev" else row["anisotropy"]
            assert row[f"{key}_adjusted"] == pytest.approx(row[key] - baseline)
    assert (run / "contextuality.png").read_bytes()[:4] == b"\x89PNG"
    assert (run / "contextuality.csv").read_text().splitlines()[0].startswith("layer,anisotropy,self_similarity")
    with open(run / "csv" / "metrics.csv", newline="") as handle:  # the CSV logger: a row per layer
        logged = list(csv.DictReader(handle))
    assert [row["step"] for row in logged] == ["0", "1", "2"]
    assert float(logged[2]["mev_adjusted"]) == pytest.approx(results["layers"][2]["mev_adjusted"])
    write_report(run)
    assert "# Contextuality (Ethayarajh 2019)" in (run / "report.md").read_text()
    assert (run / "contextuality_by_model.png").exists()


def test_a_second_run_reuses_the_store_and_centred_mev_differs(tmp_path, tiny):
    first = analyze.run(compose_job("analyze", tmp_path / "a", *tiny, "paths.store_dir=" + str(tmp_path / "s")))
    second = analyze.run(compose_job("analyze", tmp_path / "b", *tiny, "paths.store_dir=" + str(tmp_path / "s"),
                                     "analysis.mev_centered=true", "analysis.layers=[2]"))
    assert second["store"] == first["store"] and [row["layer"] for row in second["layers"]] == [2]
    assert second["layers"][0]["self_similarity"] == pytest.approx(first["layers"][2]["self_similarity"])
    assert second["layers"][0]["mev"] != pytest.approx(first["layers"][2]["mev"])


@pytest.mark.parametrize("override, message", [
    ("analysis.layers=[3]", "analysis.layers=3 is not a layer of tiny: its hidden states are 0..2"),
    ("analysis.min_contexts=500", r"no word of the .* Fix: use more sentences \(analysis.max_sentences=null, "
                                  r"analysis.split=all, or a larger analysis.sentences\) or lower "
                                  r"analysis.min_contexts$"),
    ("analysis.samples=1", "analysis.samples=1 is not an integer >= 2"),
])
def test_bad_settings_are_config_errors(tmp_path, tiny, override, message):
    with pytest.raises(ConfigError, match=message):
        analyze.run(compose_job("analyze", tmp_path, *tiny, override))


def test_a_layer_outside_the_model_is_one_error_line(tmp_path, tiny):
    done = run_script("analyze.py", *tiny, "analysis.layers=[7]", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "analysis.layers=7 is not a layer of tiny" in errors[0]
    assert "Traceback" not in done.stderr


def test_a_top_level_layer_is_refused_in_one_line_before_any_work(tmp_path, tiny):
    """contextuality measures analysis.layers: a layer=3 that nothing reads is refused, not silently ignored."""
    done = run_script("analyze.py", *tiny, "layer=3", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert errors == ["error: layer=3: analysis=contextuality does not read `layer` (it measures the hidden states of "
                      "analysis.layers, null = every one). Fix: analysis.layers=[3], and leave layer unset"]
    assert not (tmp_path / "stores").exists() and not (tmp_path / "run" / "results.json").exists()
