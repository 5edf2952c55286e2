"""probe.py with probe.online=true on a tiny random Llama: one probe per asked-for layer trained from the forward
pass by the job's Trainer, no store written, results of the statement kind with `online: true`, each layer's scores
(with the control task's) in the CSV log; a store-based run of one of those layers with the same seed, epochs and batch
size reaches the same dev and test accuracy and best epoch; and the refusals."""

from __future__ import annotations

import csv

import pytest

from probing.errors import ConfigError
from tests.helpers.runs import probe_in_process
from tests.helpers.tiny_decoders import save_tiny_llama

ONLINE = ("task=truth", "probe=linear", "probe.online=true", "probe.control_task.enabled=false",
          "features.dtype=float32", "trainer.max_epochs=3", "logger=csv")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    path = save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))
    return [f"model.name_or_path={path}", "model.num_layers=4"]


def test_online_probes_write_no_store_and_record_every_layer(tmp_path, tiny_llama):
    with_control = [o for o in ONLINE if o != "probe.control_task.enabled=false"]
    r = probe_in_process(tmp_path, "online", *with_control, "layer=[0,2,3]", *tiny_llama)
    assert (r["kind"], r["online"], r["layer"]) == ("statement_probe", True, [0, 2, 3])
    assert r["control_task"] == {"kind": "shuffled_labels", "seed": 0} and r["epochs_trained"] == 3
    assert set(r["online_layers"]) == {"0", "2", "3"}
    layer0 = r["online_layers"]["0"]
    # the last token of every number comparison is the same piece, so layer 0 reads nothing: the majority rate
    assert layer0["dev"]["accuracy"] == pytest.approx(0.5, abs=0.05)
    for scores in r["online_layers"].values():
        assert 0 <= scores["best_epoch"] < 3 and 0 <= scores["control_best_epoch"] < 3
        for split in ("dev", "test"):
            assert scores[split]["selectivity"] == scores[split]["accuracy"] - scores[split]["control_accuracy"]
    best = max(r["online_layers"].values(), key=lambda scores: scores["dev"]["accuracy"])
    assert r["dev"] == best["dev"] and r["test"] == best["test"]
    assert (r["best_epoch"], r["control_best_epoch"]) == (best["best_epoch"], best["control_best_epoch"])
    assert not list(tmp_path.rglob("*.h5")), "online probing wrote a store"
    with open(tmp_path / "online" / "run" / "csv" / "metrics.csv", encoding="utf-8", newline="") as file:
        logged = [row for row in csv.DictReader(file) if row.get("test/layer3/selectivity")]
    assert float(logged[-1]["test/layer3/selectivity"]) == pytest.approx(r["online_layers"]["3"]["test"]["selectivity"])


def write_statements(path, n: int = 200):
    """`n` statements whose label is their verb (fly: 0, run: 1), as a CSV of text,label."""
    rows = [f"Cats number {i} can {'fly' if i % 2 else 'run'}.,{1 - i % 2}" for i in range(n)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_the_online_probe_of_a_layer_equals_the_one_trained_on_its_store(tmp_path, tiny_llama):
    data = ["task=statements", f"data.path={write_statements(tmp_path / 'cats.csv')}", "features.pooling=mean",
            "trainer.max_epochs=6", "probe.module.optimizer.lr=0.05"]
    online = probe_in_process(tmp_path, "online", *ONLINE, *data, "layer=[3]", *tiny_llama)
    stored = probe_in_process(tmp_path, "stored", *(o for o in ONLINE if o != "probe.online=true"), *data, "layer=3",
                              *tiny_llama)
    # the same vectors (a float32 store) and seeded initialisation (the training orders are two seeded shuffles):
    # the same probe where the task is learned by the same epoch
    assert online["dev"]["n_examples"] == stored["dev"]["n_examples"] == 32
    assert online["dev"]["accuracy"] > 0.75  # it learned something, so that agreeing is not agreeing on chance
    assert (online["dev"]["accuracy"], online["test"]["accuracy"], online["best_epoch"]) == (
        stored["dev"]["accuracy"], stored["test"]["accuracy"], stored["best_epoch"])


@pytest.mark.parametrize("override, named", [
    ("probe.mdl=true", "probe.mdl=false"),
    ("erase=leace", "erase=none"),
    ("probe=mass_mean", "probe=linear"),
    ("probe.eval_on=[smaller_than]", "probe.eval_on=[]"),
    ("layer=mix", "layer=[0,1,2]"),
    ("task=upos", "task=truth"),
    ("trainer.devices=2", "trainer.devices=1"),
])
def test_what_online_probes_cannot_run_is_refused_before_any_work(tmp_path, tiny_llama, override, named):
    with pytest.raises(ConfigError, match=named.replace("[", r"\[").replace("]", r"\]")):
        probe_in_process(tmp_path, "refused", *ONLINE, "layer=[0,2]", *tiny_llama, override)
    assert not list(tmp_path.rglob("results.json"))
