"""analyze.py analysis=static_pc on the tiny BERT: the static_pc block with its coverage (checked against the vectors
file it writes), the store shared with contextuality, a layer multirun with its report section, CSV and offline
W&B logging, and bad settings refused (too few contexts before any model work) with one error line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from probing.errors import ConfigError
from probing.geometry.benchmarks import correlate
from probing.tasks import analyze
from tests.helpers import run_script
from tests.helpers.runs import compose_job

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WORDS = ("the", "a", "of", "and", "to", "in", "is", "xyzzy")


@pytest.fixture
def tiny(tiny_bert_path):
    return [f"model.name_or_path={tiny_bert_path}", "model.name=tiny", "analysis=static_pc",
            "analysis.max_sentences=60"]


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """A similarity file over common words (and one that never occurs), an analogy and a categorisation file."""
    pairs = [(first, second) for i, first in enumerate(WORDS) for second in WORDS[i + 1:]]
    similarity = tmp_path / "sim.txt"
    similarity.write_text("".join(f"{a}\t{b}\t{(7 * i) % 11}\n" for i, (a, b) in enumerate(pairs)), encoding="utf-8")
    analogy = tmp_path / "analogy.csv"
    analogy.write_text(",type,word1,word2,word3,target\n0,x,The,a,of,and\n1,x,to,in,is,xyzzy\n", encoding="utf-8")
    categories = tmp_path / "categories.csv"
    categories.write_text(",category,word\n0,det,the\n1,det,a\n2,prep,of\n3,prep,in\n4,prep,to\n5,det,xyzzy\n",
                          encoding="utf-8")
    return {"benchmarks": similarity, "analogies": analogy, "categorization": categories}


def with_files(files: dict[str, Path]) -> list[str]:
    return [f"analysis.{key}=[{path}]" for key, path in files.items()]


def read_vectors(path: Path) -> dict[str, np.ndarray]:
    lines = path.read_text(encoding="utf-8").splitlines()
    count, dimensions = map(int, lines[0].split())
    vectors = {line.split()[0]: np.array(line.split()[1:], float) for line in lines[1:]}
    assert len(vectors) == count and all(len(vector) == dimensions for vector in vectors.values())
    return vectors


def test_static_pc_scores_and_coverage(tmp_path, tiny, files):
    results = analyze.run(compose_job("analyze", tmp_path, *tiny, "layer=1", *with_files(files)))
    run = tmp_path / "run"
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    block = results["static_pc"]
    assert results["analysis"] == "static_pc" and block["layer"] == results["layer"] == 1
    vectors = read_vectors(run / "static_pc_vectors.txt")
    assert block["words"] == len(vectors) and not block["centered"]
    assert all(np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5) for vector in vectors.values())
    present = [word for word in WORDS if word in vectors]
    assert "xyzzy" not in present and len(present) >= 3
    similarity = block["similarity"][0]
    lines = [line.split("\t") for line in files["benchmarks"].read_text().splitlines()]
    covered = [(a, b, float(score)) for a, b, score in lines if a in present and b in present]
    assert (similarity["pairs"], similarity["covered"]) == (len(lines), len(covered))
    assert similarity["missing_words"] == len(WORDS) - len(present) and similarity["correlation"] == "spearman"
    cosines = np.array([vectors[a] @ vectors[b] for a, b, _ in covered])
    assert similarity["score"] == pytest.approx(correlate(cosines, np.array([s for *_, s in covered]), "spearman"),
                                                abs=1e-4)
    analogy, categories = block["analogy"][0], block["categorization"][0]
    assert analogy["questions"] == 2 and analogy["covered"] == int({"the", "a", "of", "and"} <= set(present))
    assert categories["items"] == 6 and categories["covered"] == len({"the", "a", "of", "in", "to"} & set(present))
    with open(run / "static_pc.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["task"] for row in rows] == ["similarity", "analogy", "categorization"]
    assert int(rows[0]["covered"]) == len(covered)
    with open(run / "csv" / "metrics.csv", newline="") as handle:
        logged = list(csv.DictReader(handle))
    assert logged[0]["step"] == "1" and float(logged[0]["sim/covered"]) == len(covered)


def test_it_reuses_the_contextuality_store_and_centring_changes_the_vectors(tmp_path, tiny):
    stores = f"paths.store_dir={tmp_path / 's'}"
    context = analyze.run(compose_job("analyze", tmp_path / "c", f"model.name_or_path={tiny[0].split('=')[1]}",
                                      "analysis=contextuality", "analysis.max_sentences=60", "analysis.samples=10",
                                      "analysis.sentence_samples=5", stores))
    first = analyze.run(compose_job("analyze", tmp_path / "a", *tiny, "layer=2", stores))
    second = analyze.run(compose_job("analyze", tmp_path / "b", *tiny, "layer=2", "analysis.centered=true", stores))
    assert first["store"] == second["store"] == context["store"]
    uncentred = read_vectors(tmp_path / "a" / "run" / "static_pc_vectors.txt")
    centred = read_vectors(tmp_path / "b" / "run" / "static_pc_vectors.txt")
    assert uncentred.keys() == centred.keys()
    assert not np.allclose(uncentred["the"], centred["the"], atol=1e-3)


def test_too_few_contexts_are_refused_before_any_model_work(tmp_path, tiny):
    with pytest.raises(ConfigError, match="analysis.min_contexts") as raised:
        analyze.run(compose_job("analyze", tmp_path, *tiny, "layer=1", "analysis.min_contexts=500",
                                "model.name_or_path=/no/such/model"))
    assert "Fix:" in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "stores").exists()


@pytest.mark.parametrize("overrides, message", [
    (["layer=3"], "layer=3 is not a layer of tiny: its hidden states are 0..2"),
    ([], "layer=None is not a layer of tiny"),
    (["analysis.correlation=kendall"], "analysis.correlation='kendall' is not one of"),
])
def test_bad_settings_are_config_errors(tmp_path, tiny, overrides, message):
    with pytest.raises(ConfigError, match="Fix:") as raised:
        analyze.run(compose_job("analyze", tmp_path, *tiny, *overrides))
    assert message in str(raised.value)


def test_a_layer_multirun_ends_with_the_report_section(tmp_path, tiny, files):
    sweep = tmp_path / "sweep"
    done = run_script("analyze.py", "-m", *tiny, "layer=0,2", *with_files(files), f"hydra.sweep.dir={sweep}",
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = (sweep / "report.md").read_text()
    assert "# PC static embeddings (Ethayarajh 2019, §4.3)" in report and "S-class probing" not in report
    assert "| tiny | 0 |" in report and "| tiny | 2 |" in report and "sim" in report
    assert (sweep / "static_pc_by_layer.png").read_bytes().startswith(PNG_MAGIC)


def test_offline_wandb_logging(tmp_path, tiny):
    run = tmp_path / "run"
    done = run_script("analyze.py", *tiny, "layer=1", "logger=wandb", f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and not (run / "csv").exists()
    assert json.loads((run / "results.json").read_text())["config"]["logger"]["wandb"]["name"] == (
        "tiny-static_pc-layer1-seed0")
