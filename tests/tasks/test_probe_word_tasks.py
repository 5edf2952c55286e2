"""probe.py on word and word-pair tasks as a user runs it (the bundled UD sample, a JSONL file of one's own, imported
ELMo-layout vectors), with the results contract of word probes and the online code, and the refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from probing.errors import ProbingError
from probing.tasks import extract, probe
from tests.helpers import run_script
from tests.helpers.runs import compose_job, probe_in_process, tiny_model

SPLIT_KEYS = {"accuracy", "macro_f1", "per_label_f1", "n_examples", "control_accuracy", "control_macro_f1",
              "selectivity"}


@pytest.fixture
def tiny(tiny_bert_path):
    return tiny_model(tiny_bert_path)


def without_logger(overrides: list[str]) -> list[str]:
    """The tiny model's overrides for extract.py, which has no logger, or for the default logger."""
    return [override for override in overrides if not override.startswith("logger=")]


def write_task(path: Path) -> Path:
    """A JSONL task: labels D, N, V in train; dev holds the label X, which train never saw, twice."""
    lines = [{"split": "train", "tokens": ["the", "cat", "sat"], "labels": ["D", "N", "V"]}] * 6 + \
            [{"split": "dev", "tokens": ["a", "dog", "ran"], "labels": ["D", "N", "X"]}] * 2 + \
            [{"split": "test", "tokens": ["the", "dog", "sat"], "labels": ["D", "N", "V"]}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path



def test_upos_with_a_rank_constrained_linear_probe_and_the_online_code(tmp_path, tiny):
    r = probe_in_process(tmp_path, "upos", "task=upos", "layer=1", "probe=linear", "probe.rank=4", "probe.mdl=true",
                       "trainer.max_epochs=2", *tiny)
    assert (r["task"], r["probe_family"], r["rank"], r["pair"], r["layer"]) == ("upos", "linear", 4, False, 1)
    for split in ("dev", "test"):
        block = r[split]
        assert set(block) >= SPLIT_KEYS
        assert block["selectivity"] == pytest.approx(block["accuracy"] - block["control_accuracy"])
        assert 0 <= block["macro_f1"] <= 1 and block["n_examples"] > 100
    labels, code = r["labels"], r["mdl"]
    n = code["block_ends"][-1]
    assert n == r["data_summary"]["train"]["examples"]  # the kept examples (dropped_examples left out)
    assert code["uniform_codelength_bits"] == pytest.approx(n * math.log2(len(labels)))
    assert code["codelength_bits"] == pytest.approx(code["block_ends"][0] * math.log2(len(labels))
                                                    + sum(code["block_bits"]))
    assert code["compression"] == pytest.approx(code["uniform_codelength_bits"] / code["codelength_bits"])
    assert code["control_compression"] == pytest.approx(code["uniform_codelength_bits"]
                                                        / code["control_codelength_bits"])
    assert code["block_fractions"][-1] == 1.0 and len(code["block_bits"]) == len(code["block_ends"]) - 1


def test_deprel_pairs_on_a_scalar_mix(tmp_path, tiny):
    r = probe_in_process(tmp_path, "deprel", "task=deprel", "layer=mix", "probe=mlp2", "probe.module.hidden_dim=16",
                       "probe.pair_product=true", "trainer.max_epochs=2", *tiny)
    assert r["pair"] is True and r["pair_product"] is True and r["probe_family"] == "mlp2"
    weights = r["mix_weights"]
    assert len(weights) == 3 and sum(weights) == pytest.approx(1.0)
    assert r["center_of_gravity"] == pytest.approx(sum(layer * weight for layer, weight in enumerate(weights)))
    assert "nsubj" in r["labels"] and "root" not in r["labels"]  # root arcs have no head word


def test_a_users_jsonl_task_counts_labels_train_never_saw(tmp_path, tiny):
    path = write_task(tmp_path / "mine.jsonl")
    r = probe_in_process(tmp_path, "jsonl", "task=jsonl", f"task.path={path}", "layer=2", "trainer.max_epochs=2",
                       *tiny)
    assert r["task"] == "jsonl" and r["labels"] == ["D", "N", "V"]
    assert r["unseen_labels"]["dev"] == {"X": 2} and r["dev"]["n_examples"] == 4


def test_ner_from_a_conll2003_folder_probes_entity_types(tmp_path, tiny):
    rows = {"John": "B-PER", "Smith": "I-PER", "visited": "O", "Paris": "B-LOC", "and": "O", "Acme": "B-ORG"}
    sentence = "\n".join(f"{word} NNP B-NP {tag}" for word, tag in rows.items())
    for name, copies in (("train.txt", 8), ("valid.txt", 2), ("test.txt", 2)):
        (tmp_path / name).write_text("-DOCSTART- -X- -X- O\n\n" + "\n\n".join([sentence] * copies) + "\n")
    r = probe_in_process(tmp_path, "ner", "task=ner", f"data.data_dir={tmp_path}", "layer=1", "trainer.max_epochs=2",
                       *tiny)
    assert r["task"] == "ner" and r["labels"] == ["LOC", "O", "ORG", "PER"]  # IOB2 tags -> entity types
    assert r["data_summary"]["test"]["examples"] == 2 * len(rows) and r["unseen_labels"]["test"] == {}


def test_sclass_probes_get_the_online_code_of_their_binary_decisions(tmp_path, tiny):
    r = probe_in_process(tmp_path, "sclass", "layer=1", "probe.mdl=true", "probe.module.hidden_dim=8",
                       "trainer.max_epochs=2", *tiny)
    code, classes = r["mdl"], r["classes"]
    n = code["block_ends"][-1]
    assert code["uniform_codelength_bits"] == pytest.approx(n * len(classes))  # C binary decisions per context
    assert code["codelength_bits"] == pytest.approx(code["block_ends"][0] * len(classes) + sum(code["block_bits"]))
    assert "control_codelength_bits" in code and r["test"]["micro_f1"] >= 0


def test_exported_stores_imported_back_give_the_same_probe(tmp_path, tiny):
    """extract.py export_elmo= writes the every-word stores in the ELMo layout; model=imported reads the folder back:
    the probe trained on it is the probe trained on the encoder's own stores."""
    folder, task = tmp_path / "elmo", f"task.path={write_task(tmp_path / 'mine.jsonl')}"
    extract.run(compose_job("extract", tmp_path / "export", "task=jsonl", task, f"export_elmo={folder}",
                            *without_logger(tiny)))
    assert sorted(path.name for path in folder.iterdir()) == ["dev.hdf5", "export.json", "test.hdf5", "train.hdf5"]
    settings = ("task=jsonl", task, "layer=2", "trainer.max_epochs=3", "logger=csv")
    own = probe_in_process(tmp_path, "own", *settings, *without_logger(tiny))
    imported = probe_in_process(tmp_path, "imported", *settings, "model=imported", f"model.path={folder}")
    assert imported["model"] == "imported" and imported["stores"]["train"] != own["stores"]["train"]
    for split in ("dev", "test"):
        assert imported[split]["accuracy"] == own[split]["accuracy"]
        assert imported[split]["control_accuracy"] == own[split]["control_accuracy"]


@pytest.mark.parametrize("overrides,message", [
    (["task=sst2"], "classifies whole sentences"),
    (["task=upos", "probe.level=type"], "probe.level=type is a setting of the s-class task"),
    (["task=upos", "probe.pair_product=true"], "probe.pair_product=true multiplies the two words of a pair, and "
                                               "task=upos has no word pairs. Fix: probe.pair_product=false"),
    (["task=upos", "probe.control_task.seen_fraction=0.2"],
     "probe.control_task.seen_fraction holds out s-class contexts; task=upos's dev and test already hold words seen "
     "in training. Fix: probe.control_task.seen_fraction=0"),
    (["probe.pair_product=true"], "task=sclass has no word pairs"),
    (["probe.mdl=true", "probe.level=type", "layer=rand"], "probe.mdl=true sends the labels of the training contexts; "
                                                             "probe.level=type has one example per word"),
    (["task=upos", "probe=linear", "probe.rank=0"], "rank"),
    (["task=deprel", "probe=linear", "probe.rank=65"], "probe.rank=65 exceeds the feature dimension 64"),
    (["task=upos", "probe.mdl_fractions=[0.5,0.2,1.0]"], "probe.mdl_fractions=[0.5, 0.2, 1.0] must increase"),
    (["task=jsonl", "task.path=/nonexistent/task.jsonl"], "task.jsonl"),
    (["export_elmo=/tmp/never"], None),
])
def test_bad_requests_are_user_errors_with_a_fix(tmp_path, tiny, overrides, message):
    if message is None:  # an extract.py setting: refused for the s-class task before any store is made
        with pytest.raises(ProbingError, match="export_elmo=/tmp/never writes every word"):
            extract.run(compose_job("extract", tmp_path, *overrides, *without_logger(tiny)))
        assert not (tmp_path / "stores").exists()
        return
    with pytest.raises(ProbingError, match="Fix:") as error:
        probe.run(compose_job("probe", tmp_path, *overrides, *tiny))
    assert message in str(error.value) and not (tmp_path / "run" / "results.json").exists()


def test_a_task_with_one_label_is_refused_before_the_model_loads(tmp_path):
    """The bundled EWT sample's Poss feature has one value: refused from the data alone (the model path named here
    does not exist, so loading it first would fail otherwise), and no store is made."""
    with pytest.raises(ProbingError, match="task.feature=Poss: the training split has only the label 'Yes'"):
        probe.run(compose_job("probe", tmp_path, "task=feats", "task.feature=Poss",
                              f"model.name_or_path={tmp_path / 'no-model'}", "logger=csv"))
    assert not (tmp_path / "stores").exists()


def test_the_default_logger_runs_a_word_task_as_typed(tmp_path, tiny):
    """`python probe.py task=upos layer=1` with W&B offline, the default logger."""
    run_dir = tmp_path / "run"
    result = run_script("probe.py", "task=upos", "layer=1", "trainer.max_epochs=1", *without_logger(tiny),
                        f"hydra.run.dir={run_dir}", f"paths.store_dir={tmp_path / 'stores'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["task"] == "upos"
    assert list((run_dir / "wandb").glob("offline-run-*"))
