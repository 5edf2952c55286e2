"""analyze.py analysis=isotropy on the tiny BERT: Table 1 of its input embeddings (checked against the matrix loaded
independently), benchmark rows with their coverage, contextual vectors of a layer, Fig. 3 for a vocabulary with
unused tokens, the report section, and bad settings or files refused with one error line."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import pytest
from transformers import BertConfig, BertModel, BertTokenizerFast, GPT2Config, GPT2Model, GPT2TokenizerFast

from probing.errors import ConfigError, DataFormatError
from probing.geometry import isotropy as iso
from probing.report import write_report
from probing.tasks import analyze
from tests.helpers import TINY_VOCAB, run_script
from tests.helpers.runs import compose_job

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def tiny(tiny_bert_path):
    return ["analysis=isotropy", f"model.name_or_path={tiny_bert_path}", "model.name=tiny"]


@pytest.fixture
def benchmark(tmp_path) -> Path:
    path = tmp_path / "toy.txt"  # "airheads" is three wordpieces (air ##head ##s): its pair is left out
    path.write_text("apple\tjuice\t8\nstock\tparty\t1\nthe\ta\t3\nair\toak\t2\nairheads\tpine\t5\n", encoding="utf-8")
    return path


def test_input_embeddings_table_1_and_the_benchmark_rows(tmp_path, tiny, tiny_bert_path, benchmark, caplog):
    caplog.set_level(logging.INFO, logger="probing.geometry.isotropy_analysis")
    results = analyze.run(compose_job("analyze", tmp_path, *tiny, f"analysis.benchmarks=[{benchmark}]"))
    assert json.loads((tmp_path / "run" / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["analysis"] == "isotropy" and results["layer"] is None and results["source"] == "input embeddings"
    W = BertModel.from_pretrained(tiny_bert_path).get_input_embeddings().weight.detach().double().numpy()
    block = results["isotropy"]
    assert (block["vectors"], block["dimensions"], block["pc_removed"]) == (len(TINY_VOCAB), 32, 1)  # ⌈32/100⌉
    assert block["I_W"] == pytest.approx(iso.isotropy(W)) and block["I_W_centered"] == pytest.approx(
        iso.isotropy(W - W.mean(axis=0)))
    assert 0 < block["I_W_postprocessed"] <= 1 and 0 < block["I_W_scaled_centered"] <= 1
    assert block["mean_vector_norm_ratio"] == pytest.approx(block["mean_vector_norm"] / block["mean_norm"])
    rows = results["benchmarks"]
    assert [(row["transform"], row["measure"]) for row in rows] == [
        (transform, measure) for transform in iso.TRANSFORMS for measure in ("cosine", "dot")]
    assert all((row["pairs"], row["covered"], row["missing_words"], row["missing_examples"], row["correlation"])
               == (5, 4, 1, ["airheads"], "pearson") for row in rows)
    assert results["benchmark_average"]["original"]["cosine"] == rows[0]["score"]
    assert results["unused_tokens"] == {"count": 0, "selection": "none", "ids": [], "examples": [], "bin_size": 1000,
                                        "bins": []}  # 45 ids: no unused tokens, and too few for the last 1,000
    assert (tmp_path / "run" / "isotropy_benchmarks.csv").is_file()
    assert not (tmp_path / "run" / "isotropy_unused_cosine.csv").exists()
    original = results["benchmark_average"]["original"]
    assert (f"pearson correlation averaged over 1 benchmark(s) (isotropy_benchmarks.csv): original cosine "
            f"{original['cosine']:.3f} dot {original['dot']:.3f}; centered") in caplog.text


def test_contextual_vectors_of_a_layer(tmp_path, tiny, benchmark):
    results = analyze.run(compose_job("analyze", tmp_path, *tiny, "layer=1", "analysis.max_vectors=60",
                                      "analysis.max_sentences=20", f"analysis.benchmarks=[{benchmark}]"))
    assert results["layer"] == 1 and results["isotropy"]["vectors"] == 60
    assert results["source"] == "layer 1, 60 words of pos train"
    assert all(row["pairs"] == 5 for row in results["benchmarks"])  # covered: whatever words the sentences hold


def with_unused_tokens(source: Path, folder: Path) -> Path:
    """The tiny BERT with three [unused] tokens added to its vocabulary (fresh weights)."""
    folder.mkdir()
    vocabulary = [*TINY_VOCAB[:5], "[unused0]", "[unused1]", "[unused2]", *TINY_VOCAB[5:]]
    (folder / "vocab.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    BertTokenizerFast.from_pretrained(folder, do_lower_case=True).save_pretrained(folder)
    config = BertConfig.from_pretrained(source)
    config.vocab_size = len(vocabulary)
    BertModel(config).save_pretrained(folder)
    return folder


def test_fig3_bins_csv_plot_and_the_report_section(tmp_path, tiny_bert_path):
    model = with_unused_tokens(tiny_bert_path, tmp_path / "unused_model")
    sweep = tmp_path / "runs"
    results = analyze.run(compose_job("analyze", tmp_path, "analysis=isotropy", f"model.name_or_path={model}",
                                      "model.name=unused", "analysis.bin_size=10",
                                      f"paths.output_dir={sweep / 'one'}"))
    unused = results["unused_tokens"]
    assert unused["count"] == 3 and [row["bin_start"] for row in unused["bins"]] == [0, 10, 20, 30, 40]
    assert [row["tokens"] for row in unused["bins"]] == [7, 10, 10, 10, 5]  # ids 0..44 less the 3 unused ones
    with open(sweep / "one" / "isotropy_unused_cosine.csv", newline="") as handle:
        assert float(next(csv.DictReader(handle))["original"]) == pytest.approx(unused["bins"][0]["original"])
    assert (sweep / "one" / "isotropy_unused_cosine.png").read_bytes().startswith(PNG_MAGIC)
    write_report(sweep)
    report = (sweep / "report.md").read_text()
    assert "# Isotropy (Bis et al. 2021)" in report and "S-class probing" not in report
    assert "| unused, input embeddings | 45 |" in report
    assert (sweep / "isotropy_unused_cosine.png").read_bytes().startswith(PNG_MAGIC)


def tiny_gpt2(folder: Path) -> Path:
    """A random 1-layer GPT-2 with a byte-level BPE tokenizer trained here (no [unused*] tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=280, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(["the apple juice is healthy", "she eats the apple"] * 5, trainer)
    fast = GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    GPT2Model(GPT2Config(vocab_size=len(fast), n_positions=32, n_embd=16, n_layer=1, n_head=2)).save_pretrained(folder)
    return folder


def test_fig3_of_a_byte_level_vocabulary_uses_its_last_ids(tmp_path):
    model = tiny_gpt2(tmp_path / "gpt2")
    rows = len(GPT2TokenizerFast.from_pretrained(model))
    results = analyze.run(compose_job("analyze", tmp_path, "analysis=isotropy", f"model.name_or_path={model}",
                                      "model.name=gpt2", "analysis.bin_size=100", "analysis.fallback_tokens=50"))
    unused = results["unused_tokens"]
    assert (unused["count"], unused["selection"], unused["ids"]) == (50, "last_ids", [rows - 50, rows - 1])
    assert unused["examples"] == GPT2TokenizerFast.from_pretrained(model).convert_ids_to_tokens(
        list(range(rows - 50, rows - 45)))
    assert sum(row["tokens"] for row in unused["bins"]) == rows - 50  # every other id, once
    assert (tmp_path / "run" / "isotropy_unused_cosine.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("overrides,error,message", [
    (["layer=3"], ConfigError, "layer=3 is not a layer of tiny: its hidden states are 0..2"),
    (["analysis.pc_removed=32"], ConfigError, "analysis.pc_removed=32 is not a number of principal components"),
    (["analysis.correlation=kendall"], ConfigError, "analysis.correlation='kendall' is not one of"),
    (["analysis.measures=[cos]"], ConfigError, "analysis.measures='cos' is not one of"),
    (["analysis.benchmarks=[/nowhere/x.txt]"], DataFormatError, "/nowhere/x.txt: file not found"),
    (["layer=1", "analysis/sentences=sts", "analysis.sentences.data_dir=/nowhere/sts"], ConfigError,
     "analysis.sentences.data_dir=/nowhere/sts is not a folder"),
])
def test_bad_settings_are_refused_in_one_line(tmp_path, tiny, overrides, error, message):
    with pytest.raises(error, match="Fix:") as raised:
        analyze.run(compose_job("analyze", tmp_path, *tiny, *overrides))
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_malformed_benchmark_is_one_error_line_from_the_script(tmp_path, tiny):
    bad = tmp_path / "bad.txt"
    bad.write_text("apple\tjuice\t8\napple\tjuice\n", encoding="utf-8")
    result = run_script("analyze.py", *tiny, f"analysis.benchmarks=[{bad}]", f"hydra.run.dir={tmp_path / 'run'}",
                        cwd=tmp_path)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(errors) == 1 and f"{bad}:2: has 2 columns, expected 3" in errors[0] and "Fix:" in errors[0]
