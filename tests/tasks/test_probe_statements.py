"""probe.py on statement tasks (task=truth, task=statements) as a user runs it, on a tiny random Llama with a byte-level
BPE tokenizer (a causal decoder, built here from a config) and the tiny BERT: the text's vector (its last token or the
mean of its tokens) checked against the model's own forward, the kind's results, the mass-mean probe fitted without
gradient steps, each control (shuffled labels, random-init encoder, layer 0, MDL, V-information, LEACE) and the
refusals."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from probing.data.statements import StatementFile, bundled_statements
from probing.errors import ConfigError
from probing.features.store import FeatureStore
from probing.probes.statement_probes import StatementDataModule, shuffled_labels
from probing.report import write_report
from tests.helpers.runs import compose_job, probe_in_process, tiny_model

SPLIT_KEYS = {"accuracy", "macro_f1", "per_label_f1", "n_examples", "control_accuracy", "control_macro_f1",
              "selectivity"}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A 2-block random Llama (hidden 32) with a byte-level BPE tokenizer trained on the bundled statements."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast, LlamaConfig, LlamaModel

    out = tmp_path_factory.mktemp("tiny_llama")
    with bundled_statements().open(encoding="utf-8") as handle:
        texts = [row["statement"] for row in csv.DictReader(handle)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts + ["The sky is blue. Two is three. Cats can fly."], vocab_size=300,
                            special_tokens=["<|endoftext|>"])
    bpe.save(str(out / "tokenizer.json"))
    tokenizer = GPT2TokenizerFast(tokenizer_file=str(out / "tokenizer.json"), eos_token="<|endoftext|>",
                                  bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    LlamaModel(config).eval().save_pretrained(out)
    return [f"model.name_or_path={out}", "model.num_layers=3", "logger=csv"]


@pytest.fixture
def tiny(tiny_bert_path):
    return tiny_model(tiny_bert_path)


def write_statements(path, n: int = 80):
    """`n` statements, half true, as a CSV of text,label."""
    rows = [f"Cats number {i} can {'fly' if i % 2 else 'run'}.,{1 - i % 2}" for i in range(n)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_truth_on_a_causal_decoder_records_the_kind_and_the_shuffled_control(tmp_path, tiny_llama):
    r = probe_in_process(tmp_path, "truth", "task=truth", "layer=2", "probe=linear", "trainer.max_epochs=2",
                         *tiny_llama)
    assert (r["kind"], r["task"], r["data"], r["pooling"], r["labels"]) == (
        "statement_probe", "truth", "number_comparisons", "last", ["0", "1"])
    assert r["control_task"] == {"kind": "shuffled_labels", "seed": 0}
    assert r["data_split"] == {"seed": 0, "dev_fraction": 0.2, "test_fraction": 0.2}
    assert r["data_summary"]["test"] == {"statements": 120, "dropped": 0, "0": 60, "1": 60}
    for split in ("dev", "test"):
        assert set(r[split]) >= SPLIT_KEYS
        assert r[split]["selectivity"] == pytest.approx(r[split]["accuracy"] - r[split]["control_accuracy"])
    bits = r["bits"]["test"]
    assert bits["h_y"] == pytest.approx(1.0) and bits["i_v"] == pytest.approx(bits["h_y"] - bits["h_y_given_r"])
    write_report(tmp_path / "truth")
    report = (tmp_path / "truth" / "report.md").read_text(encoding="utf-8")
    assert "# Statement probing report" in report and "## truth:" in report
    test = r["test"]
    assert f"| 2 | {test['accuracy']:.3f} | {test['selectivity']:.3f} |" in report
    with (tmp_path / "truth" / "statement_probes.csv").open(encoding="utf-8") as handle:
        (row,) = csv.DictReader(handle)
    assert (row["task"], row["family"], row["representation"]) == ("truth", "linear", "2")


@pytest.mark.parametrize("pooling", ["last", "mean", "token-2"])
def test_the_stored_vector_is_the_models_last_token_mean_or_given_token(tmp_path, tiny_llama, pooling):
    from transformers import AutoModel, AutoTokenizer

    path = write_statements(tmp_path / "mine.csv", 20)
    r = probe_in_process(tmp_path, pooling, "task=statements", f"data.path={path}", f"features.pooling={pooling}",
                         "layer=2", "probe=linear", "trainer.max_epochs=1", *tiny_llama)
    assert r["pooling"] == pooling
    folder = tiny_llama[0].split("=", 1)[1]
    model = AutoModel.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, add_prefix_space=True)
    train = StatementFile(str(path)).load_statements().splits["train"]
    with FeatureStore(r["stores"]["train"]) as store:
        stored = store.read_layer(2)
    for row in (0, len(train) - 1):
        ids = tokenizer(train.texts[row].split(), is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            states = model(**ids, output_hidden_states=True).hidden_states[2][0]
        expected = {"last": states[-1], "mean": states.mean(0), "token-2": states[-2]}[pooling]
        np.testing.assert_allclose(stored[row], expected.numpy(), rtol=2e-3, atol=2e-3)  # stored as float16


def test_layer_0_of_a_decoder_is_the_majority_rate(tmp_path, tiny_llama):
    """Every statement ends in ".", and a decoder's layer 0 is that token's embedding alone: nothing to read."""
    r = probe_in_process(tmp_path, "layer0", "task=truth", "layer=0", "probe=linear", "trainer.max_epochs=2",
                         *tiny_llama)
    assert r["test"]["accuracy"] == pytest.approx(0.5)  # the test split is 60 true, 60 false


def test_the_mass_mean_probe_is_fitted_without_gradient_steps(tmp_path, tiny_llama):
    r = probe_in_process(tmp_path, "mm", "task=truth", "layer=2", "probe=mass_mean", "probe.module.whiten=true",
                         *tiny_llama)
    assert (r["probe_family"], r["epochs_trained"], r["best_epoch"]) == ("mass_mean_iid", 0, None)
    assert r["fitted"] == "closed form (no gradient steps)"
    assert 0.0 <= r["test"]["control_accuracy"] <= 1.0 and "bits" in r


def test_the_random_init_encoder_and_mdl_carry_over(tmp_path, tiny):
    path = write_statements(tmp_path / "mine.csv")
    common = ["task=statements", f"data.path={path}", "layer=1", "probe=linear", "trainer.max_epochs=2", *tiny]
    trained = probe_in_process(tmp_path, "trained", *common)
    r = probe_in_process(tmp_path, "random", *common, "model.random_init=true", "probe.mdl=true")
    assert r["random_init"] is True and r["weights_sha256"] != trained["weights_sha256"]
    assert r["stores"]["train"] != trained["stores"]["train"]
    code, n = r["mdl"], r["data_summary"]["train"]["statements"]
    assert code["block_ends"][-1] == n
    assert code["uniform_codelength_bits"] == pytest.approx(n * math.log2(2))
    assert code["codelength_bits"] == pytest.approx(code["block_ends"][0] + sum(code["block_bits"]))


def test_leace_of_the_label_leaves_a_linear_probe_at_the_majority_rate(tmp_path, tiny_llama):
    r = probe_in_process(tmp_path, "leace", "task=truth", "layer=2", "probe=linear", "trainer.max_epochs=2",
                         "erase=leace", "erase.concept=truth", "erase.fresh_probe_epochs=1", *tiny_llama)
    erasure = r["erasure"]
    assert (erasure["concept"], erasure["method"], erasure["rank"]) == ("truth", "leace", 1)
    guarded = erasure["guardedness"]
    probes, majority = guarded["fresh_probes"], guarded["majority_rate"]
    for split in ("dev", "test"):
        assert probes["linear_erased"][split] == pytest.approx(majority[split], abs=0.02)
        assert probes["linear_random_control"][split] == pytest.approx(probes["linear_before"][split], abs=0.02)
    assert guarded["train"]["class_mean_spread_before"] > 1e-3  # there was something to erase,
    assert guarded["train"]["class_mean_spread_after"] < 1e-9  # and the classes' means now agree


def test_the_control_labels_are_each_splits_labels_shuffled():
    labels = np.array([0] * 30 + [1] * 10)
    shuffled = shuffled_labels(labels, seed=0, split_index=1)
    assert np.array_equal(np.bincount(shuffled), [30, 10]) and not np.array_equal(shuffled, labels)
    assert np.array_equal(shuffled, shuffled_labels(labels, 0, 1))
    assert not np.array_equal(shuffled, shuffled_labels(labels, 1, 1))


def test_the_datamodule_leaves_out_statements_the_encoder_skipped(monkeypatch):
    from probing.data.records import SkipCounter
    from probing.data.statements import StatementSplit, StatementTaskData
    from probing.probes import statement_probes

    rows = np.array([0, 2, 3])  # statement 1 was skipped by the encoder: the store holds rows for 0, 2 and 3
    vectors = torch.arange(3 * 4, dtype=torch.float32).reshape(3, 4)

    def read_store(path, layer, expected_rows, expected_layers=None):
        position = np.full(expected_rows, -1)
        position[rows] = np.arange(len(rows))
        return vectors, position

    monkeypatch.setattr(statement_probes, "read_every_word_store", read_store)
    split = StatementSplit(("a.", "b.", "c.", "d."), ("f:1", "f:2", "f:3", "f:4"), np.array([0, 1, 0, 1]))
    data = StatementTaskData("x", ["0", "1"], {"train": split}, [], SkipCounter())
    datamodule = StatementDataModule({"train": "unused"}, data, layer=0, control_seed=0)
    datamodule.setup()
    train = datamodule.splits["train"]
    assert datamodule.dropped == {"train": 1}
    assert train.tensors["label"].tolist() == [0, 0, 1]
    assert sorted(train.tensors["control_label"].tolist()) == [0, 0, 1]
    assert torch.equal(train[[0, 1, 2]]["features"], vectors)


@pytest.mark.parametrize(("overrides", "message"), [
    (["probe.pair_product=true"], "has no word pairs"),
    (["probe.condition_on=0"], "is not a word task"),
    (["erase=leace", "erase.concept=upos"], "erases its own labels"),
    (["probe=mass_mean", "probe.mdl=true"], "fitted in closed form"),
    (["probe=mass_mean", "layer=mix"], "layer=mix"),
    (["baseline=prand"], "reads a layer of an encoder"),
])
def test_what_a_statement_task_has_no_use_for_is_refused_in_one_line(tmp_path, tiny, overrides, message):
    path = write_statements(tmp_path / "mine.csv", 20)
    with pytest.raises(ConfigError, match=message) as caught:
        probe_in_process(tmp_path, "refused", "task=statements", f"data.path={path}", "layer=1",
                         "trainer.max_epochs=1", *overrides, *tiny)
    assert "\n" not in str(caught.value) and "Fix:" in str(caught.value)


def test_mass_mean_on_a_word_task_and_a_statement_task_without_a_file_are_refused(tmp_path, tiny):
    with pytest.raises(ConfigError, match="fitted in closed form on one vector per text"):
        probe_in_process(tmp_path, "upos", "task=upos", "probe=mass_mean", "layer=1", *tiny)
    with pytest.raises(ConfigError, match="data.path is not set"):
        probe_in_process(tmp_path, "nofile", "task=statements", "layer=1", *tiny)


def test_a_jsonl_file_of_ones_own(tmp_path, tiny):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"Claim {i} holds.", "label": ["no", "yes"][i % 2]})
                              for i in range(40)) + "\n", encoding="utf-8")
    r = probe_in_process(tmp_path, "jsonl", "task=statements", f"data.path={path}", "layer=1", "probe=mlp1",
                         "probe.module.hidden_dim=8", "trainer.max_epochs=1", "probe.control_task.enabled=false",
                         *tiny)
    assert r["labels"] == ["no", "yes"] and r["control_task"] is None and r["probe_family"] == "mlp1"
    assert r["data_summary"]["train"]["statements"] + r["data_summary"]["dev"]["statements"] + \
        r["data_summary"]["test"]["statements"] == 40


def test_the_paper_data_composes(tmp_path):
    cfg = compose_job("probe", tmp_path, "task=truth", "data=geometry_of_truth", "data.name=neg_cities",
                      "data.data_dir=/data/got")
    assert cfg.data.source._target_ == "probing.data.statements.GeometryOfTruth"
    assert (cfg.data.name, cfg.task.kind, cfg.features.pooling) == ("neg_cities", "statement", "last")


@pytest.mark.shared_data
def test_cities_from_the_papers_folder(tmp_path, tiny, shared_data):
    r = probe_in_process(tmp_path, "cities", "task=truth", "data=geometry_of_truth", "data.name=cities",
                         f"data.data_dir={shared_data / 'geometry_of_truth'}", "layer=0", "probe=mass_mean", *tiny)
    assert r["data"] == "cities" and r["data_summary"]["test"]["statements"] == 300
    assert [path for path, _ in r["data_files"]] == [str(shared_data / "geometry_of_truth" / "cities.csv")]


@pytest.mark.slow
def test_the_documented_command_runs_offline_on_the_packaged_minilm(tmp_path, minilm_path):
    """`python probe.py task=truth model=minilm layer=3`, as a fresh clone runs it (default logger, W&B offline)."""
    from tests.helpers import run_script

    result = run_script("probe.py", "task=truth", "model=minilm", "layer=3", "trainer.max_epochs=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (found,) = tmp_path.glob("logs/probe/runs/*/results.json")
    r = json.loads(found.read_text())
    assert (r["kind"], r["model"], r["data"], r["pooling"], r["layer"]) == (
        "statement_probe", "minilm", "number_comparisons", "last", 3)
    assert r["test"]["n_examples"] == 120 and 0.0 <= r["test"]["accuracy"] <= 1.0


def test_extract_py_fills_the_stores_that_probe_py_reads(tmp_path, tiny):
    from probing.tasks import extract

    path = write_statements(tmp_path / "mine.csv", 20)
    common = ["task=statements", f"data.path={path}", *tiny]
    stores = extract.run(compose_job("extract", tmp_path / "run", *[o for o in common if o != "logger=csv"]))
    r = probe_in_process(tmp_path, "run", *common, "layer=1", "trainer.max_epochs=1")
    assert {split: str(store) for split, store in stores.items()} == r["stores"]
    with pytest.raises(ConfigError, match="export_elmo=.* statement stores do not hold"):
        extract.run(compose_job("extract", tmp_path / "export", *[o for o in common if o != "logger=csv"],
                                f"export_elmo={tmp_path / 'elmo'}"))


def test_a_store_of_the_asked_for_layers_only_serves_the_same_vectors(tmp_path, tiny_llama):
    path = write_statements(tmp_path / "mine.csv", 20)
    common = ["task=statements", f"data.path={path}", "layer=2", "probe=mass_mean", *tiny_llama]
    every = probe_in_process(tmp_path, "every", *common)
    only = probe_in_process(tmp_path, "only", *common, "features.layers=[2]")
    with FeatureStore(only["stores"]["train"]) as store:
        assert store.num_layers == 1
        kept = store.read_layer(0)
    with FeatureStore(every["stores"]["train"]) as store:
        np.testing.assert_array_equal(kept, store.read_layer(2))
    assert only["test"]["accuracy"] == every["test"]["accuracy"]
