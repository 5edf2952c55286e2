"""analyze.py analysis=neurons on the tiny BERT: the issue's sweep over rankings as a user types it (one job per
ranking, the sweep's report, the CSV metrics of the default logger), the untrained control on a CoNLL-2003 sample
whose labels are partly absent from training, and settings that cannot work refused with one error line before any
model loads."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from probing.errors import ConfigError
from probing.probes.neurons.rankings import k_values
from probing.report.neurons import full_accuracy, k_to_reach
from probing.tasks import analyze
from tests.helpers import FIXTURES, run_script
from tests.helpers.runs import compose_job

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FAST = ["analysis=neurons", "model.name=tiny", "model.num_layers=3", "analysis.epochs=1",
        "analysis.cross_check_hidden_dim=8", "analysis.sparse_k=[1,2]", "analysis.sparse_candidates=4"]


TEMPLATES = [[("the", "DET"), ("apple", "NOUN"), ("is", "AUX"), ("healthy", "ADJ")],
             [("she", "PRON"), ("eats", "VERB"), ("a", "DET"), ("juice", "NOUN")],
             [("the", "DET"), ("stock", "NOUN"), ("rises", "VERB"), ("in", "ADP"), ("new", "ADJ"), ("york", "PROPN")]]


def small_treebank(folder, sentences: dict[str, int]) -> str:
    """CoNLL-U files <folder>/mini-<split>.conllu of `sentences[split]` sentences drawn from TEMPLATES (seeded), each
    ending in "." (PUNCT): a UPOS task of a few hundred words, in the tiny BERT's vocabulary."""
    rng = np.random.default_rng(0)
    folder.mkdir()
    for split, count in sentences.items():
        blocks = []
        for _ in range(count):
            words = [*TEMPLATES[rng.integers(len(TEMPLATES))], (".", "PUNCT")]
            lines = [[str(i), form, form, tag, "_", "_", str(min(i - 1, 1)), "dep" if i > 1 else "root", "_", "_"]
                     for i, (form, tag) in enumerate(words, start=1)]
            blocks.append("\n".join("\t".join(line) for line in lines))
        (folder / f"mini-{split}.conllu").write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return f"data.source.paths=[{folder}]"


def check_run(results: dict, ranking: str) -> None:
    """What every run holds, consistent with itself."""
    width = results["neurons"]
    assert width == 32 and results["ks"] == k_values(32) == [1, 2, 4, 8, 16, 32]
    assert list(results["rankings"]) == [ranking, "random"]
    for order in results["rankings"].values():
        assert sorted(order) == list(range(width))
    assert results["majority"]["label"] in results["labels"] and 0 < results["majority"]["test_accuracy"] < 1
    ablation, count = results["ablation"], len(results["ks"])
    assert ablation["fill"] == "mean" and len(ablation["random"]) == count
    assert len(ablation[ranking]["top"]) == len(ablation[ranking]["bottom"]) == count
    # every neuron replaced by its mean: the same input for every ranking
    assert ablation[ranking]["top"][-1] == ablation[ranking]["bottom"][-1] == ablation["random"][-1]
    for group in ("retrained", "cross_check"):
        target = 0.95 * full_accuracy(results, group)
        assert set(results[group]) == {ranking, "random", "best_epochs", "epochs_run"}
        assert results[group]["epochs_run"] == 1
        for name in (ranking, "random"):
            assert len(results[group][name]) == count and all(0 <= value <= 1 for value in results[group][name])
            assert results["k_to_95"][group][name] == k_to_reach(results[group][name], results["ks"], target)
            assert results[group]["best_epochs"][name] == [0] * count  # one epoch: its weights
    sparse = results["sparse"]
    assert sparse["k"] == [1, 2] and sparse["labels"]
    for probes in sparse["labels"].values():
        assert probes["neurons"][0] == [probes["best_neuron"]] and len(probes["neurons"][1]) == 2
        assert len(probes["f1"]) == 2 and all(0 <= f1 <= 1 for f1 in probes["f1"])


def test_the_rankings_swept_as_the_issue_types_them(tmp_path, tiny_bert_path):
    sweep = tmp_path / "sweep"
    data = small_treebank(tmp_path / "treebank", {"train": 80, "dev": 20})
    done = run_script("analyze.py", *FAST, f"model.name_or_path={tiny_bert_path}", "task=upos", "layer=1", data,
                      "analysis.ranking=probe,probeless", "analysis.per_label=true", f"hydra.sweep.dir={sweep}",
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = {results["config"]["analysis"]["ranking"]: results
            for results in (json.loads(path.read_text()) for path in sweep.glob("*/results.json"))}
    assert set(runs) == {"probe", "probeless"}
    for ranking, results in runs.items():
        check_run(results, ranking)
        assert results["analysis"] == "neurons" and results["task"] == "upos" and results["layer"] == 1
        assert all("every-word" in path for path in results["stores"].values())  # probe.py's stores of the task
        labels = results["labels"]
        assert set(results["per_label"]) == set(labels)
        for rows in results["per_label"].values():
            assert list(rows) == [ranking] and len(rows[ranking]["neurons"]) == 10
            assert rows[ranking]["scores"] == sorted(rows[ranking]["scores"], reverse=True)
    report = (sweep / "report.md").read_text()
    assert "Neuron-level analysis" in report and "| probeless |" in report and "Top neurons of each label" in report
    for figure in ("neurons_ablation.png", "neurons_retrained.png"):
        assert (sweep / figure).read_bytes().startswith(PNG_MAGIC)
    [job] = [path.parent for path in sweep.glob("*ranking=probe,*/results.json")]
    with open(job / "csv" / "metrics.csv", newline="") as handle:
        logged = list(csv.DictReader(handle))
    assert logged[0]["step"] == "0" and float(logged[0]["probe/test_accuracy"]) == runs["probe"]["probe"][
        "test_accuracy"]
    curve = [float(row["retrained/probe"]) for row in logged[1:]]
    assert [int(row["step"]) for row in logged[1:]] == runs["probe"]["ks"]
    np.testing.assert_allclose(curve, runs["probe"]["retrained"]["probe"], rtol=1e-6)


def test_the_untrained_control_on_labels_partly_absent_from_training(tmp_path, tiny_bert_path):
    results = analyze.run(compose_job("analyze", tmp_path, *FAST, f"model.name_or_path={tiny_bert_path}", "task=ner",
                                      f"data.data_dir={FIXTURES / 'data' / 'conll2003'}", "model.random_init=true",
                                      "layer=2", "analysis.ranking=[probeless]", "analysis.ablation=zero"))
    assert json.loads((tmp_path / "run" / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["random_init"] is True and results["task"] == "ner" and results["layer"] == 2
    assert results["unseen_labels"] == {"dev": {}, "test": {}}  # examples left out for a label train never saw
    assert results["ablation"]["fill"] == "zero"
    assert results["ablation"]["probeless"]["top"][-1] == results["ablation"]["random"][-1]
    assert set(results["sparse"]["labels"]) <= set(results["labels"])
    assert (tmp_path / "run" / "neurons_retrained.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(("overrides", "message"), [
    (["layer=1"], "task=null: analysis=neurons ranks the neurons"),
    (["layer=1", "task=sst2"], "task=sst2 is not a word task"),
    (["task=upos"], "layer=null: analysis=neurons ranks the neurons of one layer"),
    (["task=upos", "layer=1", "analysis.ranking=[weights]"], "analysis.ranking=['weights']: weights is no ranking"),
    (["task=upos", "layer=1", "analysis.l1=-1"], "analysis.l1=-1 is not a number"),
    (["task=upos", "layer=1", "analysis.ablation=noise"], "analysis.ablation"),
    (["task=upos", "layer=1", "analysis.sparse_k=[4,2]"], "analysis.sparse_k=[4, 2] must be increasing"),
    (["task=upos", "layer=1", "analysis.sparse_k=5"], "analysis.sparse_k=5 is not a list of neuron counts"),
    (["task=upos", "layer=1", "analysis.patience=0"], "analysis.patience=0"),
    (["task=upos", "layer=1", "analysis.min_delta=-0.1"], "analysis.min_delta=-0.1"),
])
def test_settings_that_cannot_work_are_refused_before_any_model_loads(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        analyze.run(compose_job("analyze", tmp_path, "analysis=neurons", "model.name_or_path=/no/such/model",
                                *overrides))


@pytest.mark.parametrize(("setting", "message"), [
    ("analysis.sparse_k=[1,64]", "analysis.sparse_k=[1, 64]: more than the layer's 32 neurons"),
    ("analysis.sparse_candidates=33", "analysis.sparse_candidates=33: more than the layer's 32 neurons"),
])
def test_sparse_probes_wider_than_the_layer_are_refused_once_its_width_is_known(tmp_path, tiny_bert_path, setting,
                                                                                message):
    data = small_treebank(tmp_path / "treebank", {"train": 8, "dev": 4})
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        analyze.run(compose_job("analyze", tmp_path, *FAST, f"model.name_or_path={tiny_bert_path}", "task=upos",
                                "layer=1", data, setting, f"paths.store_dir={tmp_path / 'stores'}"))
