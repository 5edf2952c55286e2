"""Memory at scale: the plain path hands the model only the (B, T) padding mask (no T x T buffer of ours; an attention
window is the one path that builds (B, 1, T, T)), and bench/memory.py, run small, finds extraction's working memory
flat in the number of statements."""

from __future__ import annotations

import json

import pytest

from probing.data.records import RecordTable, WordInContext
from probing.features.encoder import WordEncoder
from probing.features.store import records_fingerprint
from tests.helpers import run_script
from tests.helpers.tiny_decoders import save_tiny_llama

SENTENCES = ["she eats .", "the apple juice is healthy .", "new york city is unbelievable and the apple is old ."]


@pytest.fixture(scope="module")
def tiny_llama_path(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


def statements() -> list[WordInContext]:
    """Each sentence as a statement: every word is the target."""
    return [WordInContext(tuple(text.split()), tuple(range(len(text.split()))), text, "true", f"test:{number}")
            for number, text in enumerate(SENTENCES)]


def masks_seen(encoder: WordEncoder) -> list:
    """The attention_mask of each forward pass of the encoder's model over the statements."""
    seen = []
    handle = encoder.model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs.get("attention_mask")), with_kwargs=True)
    try:
        encoder.encode(encoder.prepare_many(statements()))
    finally:
        handle.remove()
    return seen


def test_the_plain_path_passes_only_the_padding_mask(tiny_llama_path):
    encoder = WordEncoder(str(tiny_llama_path), pooling="last")
    prepared = encoder.prepare_many(statements())
    lengths = [len(item.input_ids) for item in prepared]
    (mask,) = masks_seen(encoder)
    assert mask.shape == (3, max(lengths)) and len(set(lengths)) == 3
    # ones over each input's tokens, zeros over its padding
    assert mask.sum(dim=1).tolist() == lengths and mask[:, 0].tolist() == [1, 1, 1]


def test_an_attention_window_is_the_one_path_that_builds_a_t_by_t_mask(tiny_llama_path):
    encoder = WordEncoder(str(tiny_llama_path), pooling="last", attention_window=1)
    (mask,) = masks_seen(encoder)
    longest = max(len(item.input_ids) for item in encoder.prepare_many(statements()))
    assert mask.shape == (3, 1, longest, longest)


def test_the_fingerprint_pass_reads_a_table_a_block_at_a_time_with_the_fields_of_the_records():
    records = [WordInContext(("a", "b", "c"), (position,), "abc"[position], "x" if position else "y", f"t:{n}")
               for n in range(4) for position in range(3)]
    table = RecordTable.from_records(records)
    expected = [(record.tokens, list(record.target), record.word, record.sclass) for record in records]
    assert list(table.fields(block=5)) == list(table.fields()) == expected
    assert records_fingerprint(table) == records_fingerprint(records)  # the table's path and the objects' path


@pytest.mark.slow
def test_the_bench_finds_extraction_memory_flat_in_the_statements(tmp_path):
    """200 vs 2,000 statements on a Llama of width 256, in windows of 40 rows tokenised 40 at a time (so that even 200
    fill the overlapped pipeline's five windows in flight): the traced peak of the extraction (its records apart)
    grows by at most a quarter (1.13 measured). Keeping the vectors of every
    row (5 x 256 x 4 B = 5 KB a statement in float32) would multiply it by about ten."""
    out = tmp_path / "memory.json"
    done = run_script("bench/memory.py", "--sizes", "200", "2000", "--window", "40", "--prepare-rows", "40",
                      "--hidden", "256", "--json", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    small, large = figures["sizes"]
    assert (small["statements"], large["statements"]) == (200, 2000)
    assert (small["rows_computed"], large["rows_computed"]) == (200, 2000)
    assert figures["peak_ratio"] == pytest.approx(large["traced_peak_mb"] / small["traced_peak_mb"], abs=0.01)
    assert figures["peak_ratio"] <= 1.25
    assert f"peak_ratio={figures['peak_ratio']}" in done.stdout and "MB" in done.stdout
