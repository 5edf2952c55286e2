"""Extraction: token-budget batching, skips, resume, refusal, a SIGKILLed run resumed to the same store, files that
are not stores, read-only complete stores, a full disk, and two runs into one store."""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from tqdm.auto import tqdm
from transformers import BertModel

from probing.data.records import SkipCounter, WordInContext
from probing.errors import ProbingError, StoreMismatchError
from probing.features import extraction
from probing.features.encoder import PreparedInput, WordEncoder
from probing.features.extraction import MAX_WINDOW_ROWS, extract_split, plan_batches, window_rows
from probing.features.hf_models import EncoderInfo
from probing.features.pipeline import WriteBehind
from probing.features.store import FeatureStore, StoreWriter
from tests.helpers.stores import (
    as_format_3,
    assert_one_line_error,
    assert_same_store,
    file_state,
    hold_store_lock,
    record_h5py_modes,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

CLASSES = ["food", "organization", "plant"]
WORDS = ["the", "a", "apple", "juice", "is", "healthy", "stock", "rises", "she", "eats", "airheads", "in",
         "new", "york", "city", "of", "and", "party", "progress", "socialism", "larch", "pine", "oak"]


def toy_records(count: int = 24, seed: int = 0) -> list[WordInContext]:
    """Sentences of 2-12 words from the tiny vocabulary; the last record's 15-word target exceeds max_length 16."""
    rng = random.Random(seed)
    records = []
    for i in range(count - 1):
        tokens = tuple(rng.choice(WORDS) for _ in range(rng.randint(2, 12)))
        target = rng.randrange(len(tokens))
        records.append(WordInContext(tokens, (target,), tokens[target], CLASSES[i % 3], f"toy:{i + 1}"))
    long_name = tuple(["new"] * 15)
    records.append(WordInContext(("the",) + long_name, tuple(range(1, 16)), "new_york", "organization", f"toy:{count}"))
    return records


class FakeEncoder:
    """The WordEncoder interface with hand-checkable output: layer l, dim d of record r is 10 r + l + d / 8.

    Records whose word is "skip" cannot be encoded; input length is the sentence length + 2.
    """

    def __init__(self, pooling: str = "mean", max_length: int = 128):
        self.info = EncoderInfo("fake", "/models/fake", "f" * 64, "FakeTokenizer", "t" * 64, "FakeModel", 3, 4)
        self.skips = SkipCounter()
        self.pooling, self.max_length, self.context_size, self.random_init = pooling, max_length, None, False
        self.attention_window, self.precision = None, "32"
        self.layers, self.site = [0, 1, 2], "resid"  # every layer of the residual stream
        self.dtype = "fp32"  # the weights' dtype, as WordEncoder records it
        self.batches: list[list[int]] = []

    store_metadata = WordEncoder.store_metadata
    every_layer = WordEncoder.every_layer

    def prepare_many(self, records):
        prepared = []
        for record in records:
            if record.word == "skip":
                self.skips.skip("fake skip", record.source)
                prepared.append(None)
            else:
                row = int(record.source.split(":")[1])
                prepared.append(PreparedInput([row] + [0] * (len(record.tokens) + 1), [1]))
        return prepared

    def encode(self, batch, dtype=torch.float32):
        self.batches.append([len(prepared.input_ids) for prepared in batch])
        rows = torch.tensor([prepared.input_ids[0] for prepared in batch], dtype=torch.float32)
        pooled = 10 * rows[:, None, None] + torch.arange(3.0)[None, :, None] + torch.arange(4.0)[None, None, :] / 8
        return pooled.to(dtype)


def fake_records(lengths, skip=()) -> list[WordInContext]:
    return [WordInContext(("w",) * n, (0,), "skip" if i in skip else f"w{i}", CLASSES[i % 3], f"fake:{i}")
            for i, n in enumerate(lengths)]


def expected_fake_features(rows, layer) -> np.ndarray:
    return np.array([[10 * r + layer + d / 8 for d in range(4)] for r in rows], dtype=np.float32)


def test_plan_batches_sorts_longest_first_within_the_token_budget():
    assert plan_batches([3, 10, 5, 5, 2, 9], 20) == [[1, 5], [2, 3, 0, 4]]
    assert plan_batches([30, 1], 20) == [[0], [1]]  # an input over budget is a batch of its own
    assert plan_batches([], 20) == []


def test_fake_extraction_writes_every_row_in_place_and_counts_skips(tmp_path):
    encoder = FakeEncoder()
    records = fake_records([3, 8, 1, 6, 2, 8, 4], skip={4})
    report = extract_split(records, encoder, tmp_path / "s.h5", class_names=CLASSES,
                           metadata_extra={"data": "fake", "split": "train"}, max_tokens_per_batch=24, progress=False)
    # input lengths (+2): rows 0,1,2,3,5,6 -> 5, 10, 3, 8, 10, 6; budget 24 -> [10, 10] [8, 6, 5] [3]
    assert encoder.batches == [[10, 10], [8, 6, 5], [3]]
    assert (report.rows_total, report.rows_already_done, report.rows_computed, report.rows_skipped) == (7, 0, 6, 1)
    assert report.skipped_now == {"fake skip": 1} and report.tokens == 42
    with h5py.File(tmp_path / "s.h5") as file:  # one window: one block, the kept rows in record order
        assert file["slots"][()].tolist() == [0, 1, 2, 3, -1, 4, 5] and file["block_rows"][0] == 6
    with FeatureStore(tmp_path / "s.h5") as store:
        assert store.row_ids().tolist() == [0, 1, 2, 3, 5, 6]
        assert store.labels().tolist() == [0, 1, 2, 0, 2, 0]
        for layer in range(3):
            np.testing.assert_array_equal(store.read_layer(layer), expected_fake_features([0, 1, 2, 3, 5, 6], layer))
        assert store.metadata["split"] == "train" and store.metadata["pooling"] == "mean"


def test_windows_are_batched_longest_first_and_written_as_blocks_in_record_order(tmp_path):
    encoder = FakeEncoder()
    records = fake_records([3, 8, 1, 6, 2, 8, 4, 7], skip={4})
    extract_split(records, encoder, tmp_path / "s.h5", class_names=CLASSES, max_tokens_per_batch=24, window=3,
                  progress=False)
    # kept rows 0,1,2 | 3,5,6 | 7 with input lengths 5,10,3 | 8,10,6 | 9, each window cut at 24 tokens
    assert encoder.batches == [[10, 5], [3], [10, 8], [6], [9]]
    with h5py.File(tmp_path / "s.h5") as file:
        assert file["slots"][()].tolist() == [0, 1, 2, 3, -1, 4, 5, 6]
        assert file["block_rows"][()].tolist() == [3, 0, 0, 3, 0, 0, 1, 0]
    with FeatureStore(tmp_path / "s.h5") as store:
        np.testing.assert_array_equal(store.read_layer(1), expected_fake_features([0, 1, 2, 3, 5, 6, 7], 1))


class LoggingFakeEncoder(FakeEncoder):
    """A FakeEncoder logging its calls: ("prepare", rows) and ("encode", rows); `fail_at` encode call fails."""

    def __init__(self, fail_at: int | None = None):
        super().__init__()
        self.calls: list[tuple[str, int]] = []
        self.fail_at = fail_at

    def prepare_many(self, records):
        self.calls.append(("prepare", len(records)))
        return super().prepare_many(records)

    def encode(self, batch, dtype=torch.float32):
        if sum(call == "encode" for call, _ in self.calls) + 1 == self.fail_at:
            raise RuntimeError("stopped")
        self.calls.append(("encode", len(batch)))
        return super().encode(batch, dtype)


@pytest.mark.parametrize("overlap", [False, True])
def test_rows_are_tokenised_a_chunk_at_a_time_as_their_windows_need_them(tmp_path, monkeypatch, overlap):
    monkeypatch.setattr(extraction, "PREPARE_ROWS", 3)
    encoder = LoggingFakeEncoder()
    records = fake_records([4] * 10, skip={4, 8})
    report = extract_fake(tmp_path / "s.h5", records, encoder, overlap=overlap)
    # chunks 0-2 | 3-5 | 6-8 | 9; kept rows 0,1,2,3,5,6,7,9 in windows of two, each window one batch
    serial = [("prepare", 3), ("encode", 2), ("prepare", 3), ("encode", 2), ("prepare", 3), ("encode", 2),
              ("prepare", 1), ("encode", 2)]
    if overlap:  # the same calls, the tokenising ahead of the forward
        assert sorted(encoder.calls) == sorted(serial) and encoder.calls[0] == ("prepare", 3)
    else:
        assert encoder.calls == serial
    assert (report.rows_computed, report.rows_skipped, report.skipped_now) == (8, 2, {"fake skip": 2})
    with h5py.File(tmp_path / "s.h5") as file:
        assert file["slots"][()].tolist() == [0, 1, 2, 3, -1, 4, 5, 6, -1, 7]
        assert file["block_rows"][()].tolist() == [2, 0, 2, 0, 2, 0, 2, 0, 0, 0]


class SlowLoggingEncoder(LoggingFakeEncoder):
    def encode(self, batch, dtype=torch.float32):
        time.sleep(0.02)
        return super().encode(batch, dtype)


def test_tokenising_runs_ahead_of_the_forward_by_at_most_the_prefetched_windows(tmp_path, monkeypatch):
    """Windows of two rows tokenised two at a time, one window prefetched: when window k (from 0) is encoded, the
    rows of windows k + 1 (queued) and k + 2 (waiting for room in the queue) may be tokenised, no more."""
    monkeypatch.setattr(extraction, "PREPARE_ROWS", 2)
    monkeypatch.setattr(extraction, "PREFETCH_WINDOWS", 1)
    encoder = SlowLoggingEncoder()
    extract_fake(tmp_path / "s.h5", fake_records([4] * 40), encoder, dtype="float32")  # rows above 256: float32
    ahead = []
    for number, (call, _) in enumerate(encoder.calls):
        if call == "encode":
            encodes = sum(call == "encode" for call, _ in encoder.calls[:number])
            prepares = sum(call == "prepare" for call, _ in encoder.calls[:number])
            ahead.append(prepares - (encodes + 1))
    assert len(ahead) == 20 and max(ahead) <= 2
    assert max(ahead) >= 1  # the tokenising did run ahead
    assert_fake_store_complete(tmp_path / "s.h5", 40)


def test_skips_flagged_before_a_run_stopped_stay_flagged_and_the_rerun_writes_the_same_store(tmp_path, monkeypatch):
    monkeypatch.setattr(extraction, "PREPARE_ROWS", 3)
    records, stopped, reference = fake_records([4] * 10, skip={4, 8}), tmp_path / "stopped.h5", tmp_path / "ref.h5"
    with pytest.raises(RuntimeError, match="stopped"):
        extract_fake(stopped, records, LoggingFakeEncoder(fail_at=3))  # in window 5, 6: chunk 6-8 was tokenised
    with StoreWriter(stopped) as writer:
        assert writer.file["skipped"][()].nonzero()[0].tolist() == [4, 8]
        assert writer.pending_rows().tolist() == [5, 6, 7, 9]
    encoder = LoggingFakeEncoder()
    resumed = extract_fake(stopped, records, encoder)
    assert (resumed.rows_already_done, resumed.rows_computed, resumed.rows_skipped) == (6, 4, 2)
    assert resumed.skipped_now == {} and encoder.calls[0] == ("prepare", 3)
    extract_fake(reference, records)
    assert_same_store(stopped, reference)


def extract_tokenising_first(records, encoder, path: Path, window: int, max_tokens_per_batch: int, class_names):
    """The extraction that came before tokenising per window, kept as the reference (its `_fill` without progress
    bar): every pending row tokenised first, the skipped ones flagged, then the windows of the representable rows."""
    FeatureStore.create(path, extraction.request_metadata(records, encoder, "float16", {}), records, class_names)
    with StoreWriter(path) as writer:
        pending = writer.pending_rows()
        inputs = encoder.prepare_many([records[row] for row in pending])
        writer.mark_skipped([row for row, prepared in zip(pending, inputs) if prepared is None])
        todo = [(int(row), prepared) for row, prepared in zip(pending, inputs) if prepared is not None]
        rows = np.asarray([row for row, _ in todo], dtype=np.int64)
        for first in range(0, len(todo), window):
            stage = writer.window(rows[first:first + window])
            window_inputs = [prepared for _, prepared in todo[first:first + window]]
            batches = plan_batches([len(prepared.input_ids) for prepared in window_inputs], max_tokens_per_batch)
            plain = extraction._Window(stage.rows, window_inputs, batches, None, [])  # `encode`, no collating ahead
            extraction._encode_window(plain, encoder, stage, WriteBehind(1, threaded=False), tqdm(disable=True))


def test_tokenising_per_window_writes_the_store_of_tokenising_the_split_first(tiny_bert_path, tmp_path,
                                                                               monkeypatch):
    """Bundled STREUSLE (dev, nouns and verbs) with a max_length that skips the longer targets, windows of 97 rows and
    chunks of 50: the features and every table are those of the old code path, byte for byte."""
    from probing.data.sources import StreusleSource

    monkeypatch.setattr(extraction, "PREPARE_ROWS", 50)
    data = StreusleSource(include_verbs=True).load()
    records, new, old = data.splits["dev"], tmp_path / "new.h5", tmp_path / "old.h5"
    report = extract_split(records, WordEncoder(str(tiny_bert_path), max_length=4), new, class_names=data.classes,
                           max_tokens_per_batch=200, window=97, progress=False)
    extract_tokenising_first(records, WordEncoder(str(tiny_bert_path), max_length=4), old, 97, 200, data.classes)
    assert report.rows_skipped > 0 and report.rows_computed + report.rows_skipped == len(records)
    assert_same_store(new, old)


def test_a_window_holds_64_mb_of_float32_features_unless_set():
    assert window_rows({"num_layers": 13, "hidden_size": 768}) == (64 << 20) // (4 * 13 * 768) == 1680
    assert window_rows({"num_layers": 13, "hidden_size": 768}, 5) == 5
    assert window_rows({"num_layers": 7, "hidden_size": 384}) == 6241  # MiniLM: the cap does not bind
    assert window_rows({"num_layers": 3, "hidden_size": 64}) == MAX_WINDOW_ROWS == 16384  # a narrow model: capped
    assert extraction.WINDOW_BYTES == 64 << 20


def test_resume_computes_only_unwritten_rows(tmp_path):
    path, records = tmp_path / "s.h5", fake_records([4, 4, 4, 4, 4, 4])
    extract_split(records, FakeEncoder(), path, class_names=CLASSES, max_tokens_per_batch=12, window=2,
                  progress=False)
    with StoreWriter(path) as writer:  # as if the last window (rows 4, 5) had been cut off before its flags
        assert writer.file["slots"][()].tolist() == [0, 1, 2, 3, 4, 5]
        writer.file["written"][[4, 5]] = 0
        writer.file["features"][:, 4:, :] = -1
    encoder = FakeEncoder()
    report = extract_split(records, encoder, path, class_names=CLASSES, max_tokens_per_batch=12, window=2,
                           progress=False)
    assert (report.rows_already_done, report.rows_computed) == (4, 2)
    assert encoder.batches == [[6, 6]]  # one batch: 2 rows x 6 tokens <= 12
    with FeatureStore(path) as store:
        np.testing.assert_array_equal(store.read_layer(2), expected_fake_features(range(6), 2))
    again = extract_split(records, FakeEncoder(), path, class_names=CLASSES, progress=False)
    assert (again.rows_already_done, again.rows_computed, again.tokens) == (6, 0, 0)


def test_existing_store_for_another_request_is_refused(tmp_path):
    path, records = tmp_path / "s.h5", fake_records([3, 4])
    extract_split(records, FakeEncoder(), path, class_names=CLASSES, metadata_extra={"split": "dev"}, progress=False)
    with pytest.raises(StoreMismatchError) as raised:
        extract_split(records, FakeEncoder(pooling="last", max_length=64), path, class_names=CLASSES,
                      metadata_extra={"split": "dev"}, progress=False)
    assert "pooling: store has 'mean', request has 'last'" in str(raised.value)
    assert "max_length: store has 128, request has 64" in str(raised.value)
    with pytest.raises(StoreMismatchError, match="records_sha256: store has"):
        extract_split(fake_records([3, 5]), FakeEncoder(), path, class_names=CLASSES,
                      metadata_extra={"split": "dev"}, progress=False)


def test_store_of_another_context_size_is_refused(tmp_path):
    """A store is never read for a context size it was not built for (Zhao §4.3 sweeps depend on it)."""
    path, records = tmp_path / "s.h5", fake_records([3, 4])
    extract_split(records, FakeEncoder(), path, class_names=CLASSES, progress=False)
    windowed = FakeEncoder()
    windowed.context_size = 2
    with pytest.raises(StoreMismatchError, match="context_size: store has 'all', request has 2"):
        extract_split(records, windowed, path, class_names=CLASSES, progress=False)


def test_empty_split_is_refused(tmp_path):
    with pytest.raises(ProbingError, match="no records to extract"):
        extract_split([], FakeEncoder(), tmp_path / "s.h5", class_names=CLASSES, progress=False)


def test_tiny_bert_store_matches_encoding_each_record_alone(tiny_bert_path, tmp_path):
    records = toy_records(12)
    encoder = WordEncoder(str(tiny_bert_path), max_length=16)
    report = extract_split(records, encoder, tmp_path / "s.h5", class_names=CLASSES, max_tokens_per_batch=40,
                           progress=False)
    assert (report.rows_computed, report.rows_skipped) == (11, 1)
    assert report.skipped_now == {"target longer than max_length": 1}
    alone = torch.cat([encoder.encode([prepared]) for prepared in encoder.prepare_many(records[:11])])
    with FeatureStore(tmp_path / "s.h5") as store:
        assert store.num_layers == 3 and store.hidden_size == 32 and store.row_ids().tolist() == list(range(11))
        for layer in range(3):
            np.testing.assert_allclose(store.read_layer(layer), alone[:, layer].numpy(), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("first, second", [("32", "bf16"), ("bf16", "32")])
def test_features_of_another_precision_are_refused_and_kept(tiny_bert_path, tmp_path, first, second):
    records, path = toy_records(6), tmp_path / "s.h5"
    encoders = {precision: WordEncoder(str(tiny_bert_path), max_length=16, precision=precision,
                                       allow_emulated_bf16=True) for precision in (first, second)}
    extract_split(records, encoders[first], path, class_names=CLASSES, progress=False)
    with FeatureStore(path) as store:
        assert store.metadata["precision"] == first
        before = store.read_layer(2)
    with pytest.raises(StoreMismatchError) as raised:
        extract_split(records, encoders[second], path, class_names=CLASSES, progress=False)
    assert f"precision: store has {first!r}, request has {second!r}" in str(raised.value)
    with FeatureStore(path) as store:
        np.testing.assert_array_equal(store.read_layer(2), before)


CHILD = """
import json, sys, time
from pathlib import Path
from probing.features import extraction, store
from probing.data.records import WordInContext
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split

model, records_file, out, marker, stop_after, mode = sys.argv[1:7]
records = [WordInContext(tuple(t), tuple(p), w, c, s) for t, p, w, c, s in json.loads(Path(records_file).read_text())]
set_values, batches_written, stage_save, units_staged = store.StoreWriter._set_values, [], store.WindowStage.save, []

def set_values_then_hang(self, name, rows, values):
    if name == "written" and not self.file["skipped"][rows[0]]:
        if len(batches_written) == int(stop_after):
            Path(marker).touch()  # this batch's features and slots are on disk, its flags are not: kill here
            time.sleep(120)
        batches_written.append(rows)
    set_values(self, name, rows, values)

def save_then_hang(self, batches, pooled):
    stage_save(self, batches, pooled)
    units_staged.append(batches)
    if len(units_staged) == int(stop_after):
        Path(marker).touch()  # this unit of the window is staged (features, hash, slots), the window is not written
        time.sleep(120)

window = None
if mode == "flags":
    store.StoreWriter._set_values = set_values_then_hang
    window = 4
else:  # one window of every row, staged after each batch
    store.WindowStage.save = save_then_hang
    extraction.STAGE_SECONDS = 0.0
extract_split(records, WordEncoder(model, max_length=16), Path(out), class_names=["food", "organization", "plant"],
              metadata_extra={"split": "train"}, max_tokens_per_batch=40, window=window, progress=False)
"""


def run_killed_child(model: Path, records: list[WordInContext], out: Path, tmp_path: Path, stop_after: int,
                     mode: str = "flags") -> None:
    """Run an extraction in a child process and SIGKILL it at the `stop_after`-th block's flags (`mode="flags"`,
    windows of 4 rows) or right after its `stop_after`-th staging (`mode="stage"`, one window)."""
    records_file, marker = tmp_path / "records.json", tmp_path / "killed-here"
    records_file.write_text(json.dumps([[r.tokens, r.target, r.word, r.sclass, r.source] for r in records]))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(model), str(records_file), str(out), str(marker),
                              str(stop_after), mode], env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 90
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert marker.exists(), "the child never reached the kill point"


def test_sigkilled_extraction_resumes_to_the_uninterrupted_result(tiny_bert_path, tmp_path):
    records = toy_records(24)
    killed, reference = tmp_path / "killed.h5", tmp_path / "reference.h5"
    run_killed_child(tiny_bert_path, records, killed, tmp_path, stop_after=3)
    with StoreWriter(killed) as writer:
        pending_rows = writer.pending_rows()
        pending = len(pending_rows)
        skipped_flags = int(writer.file["skipped"][()].sum())
        killed_batch_slots = writer.file["slots"][()][pending_rows]
        killed_batch_slots = killed_batch_slots[killed_batch_slots >= 0]
        killed_batch_features = writer.file["features"][0][killed_batch_slots]
    assert skipped_flags == 1 and 0 < pending < len(records) - 1
    assert 0 < len(killed_batch_slots) < pending  # the killed window: features and slots written, flags not
    assert np.abs(killed_batch_features).sum(axis=1).min() > 0

    encoder = WordEncoder(str(tiny_bert_path), max_length=16)
    resumed = extract_split(records, encoder, killed, class_names=CLASSES, metadata_extra={"split": "train"},
                            max_tokens_per_batch=40, progress=False)
    assert (resumed.rows_computed, resumed.rows_already_done) == (pending, len(records) - pending)
    extract_split(records, encoder, reference, class_names=CLASSES, metadata_extra={"split": "train"},
                  max_tokens_per_batch=64, progress=False)
    with FeatureStore(killed) as got, FeatureStore(reference) as want:
        assert got.is_complete and got.num_rows == want.num_rows == 23 and got.num_skipped == 1
        assert got.row_ids().tolist() == want.row_ids().tolist() == list(range(23))
        assert got.labels().tolist() == want.labels().tolist()
        for layer in range(3):
            np.testing.assert_allclose(got.read_layer(layer), want.read_layer(layer), rtol=2e-3, atol=2e-3)


def test_sigkilled_extraction_mid_window_keeps_the_staged_batches(tiny_bert_path, tmp_path):
    """Killed inside its only window, after three batches were staged: the rerun computes only the other batches,
    and writes the very store an uninterrupted run writes."""
    records = toy_records(24)
    killed, reference = tmp_path / "killed.h5", tmp_path / "reference.h5"
    run_killed_child(tiny_bert_path, records, killed, tmp_path, stop_after=3, mode="stage")
    with StoreWriter(killed) as writer:
        pending = writer.pending_rows()
        staged = int((writer.file["slots"][()][pending] >= 0).sum())
        assert len(pending) == 23 and writer.file["staged_batches"][()].sum() == 3
    assert 3 <= staged < 23  # three batches of one to three rows each
    encoder = WordEncoder(str(tiny_bert_path), max_length=16)
    settings = {"class_names": CLASSES, "metadata_extra": {"split": "train"}, "max_tokens_per_batch": 40,
                "progress": False}
    encoded = []
    encode = encoder.encode_collated  # each batch's forward
    encoder.encode_collated = lambda batch, **kwargs: encoded.append(len(batch.input_ids)) or encode(batch, **kwargs)
    resumed = extract_split(records, encoder, killed, **settings)
    assert (resumed.rows_already_done, resumed.rows_computed) == (1 + staged, 23 - staged) == (1 + staged, sum(encoded))
    extract_split(records, WordEncoder(str(tiny_bert_path), max_length=16), reference, **settings)
    assert_same_store(killed, reference)


def extract_fake(path: Path, records: list[WordInContext], encoder: FakeEncoder | None = None, **kwargs):
    """Windows of two rows: one batch each for the usual six-token inputs (2 x 6 <= 12)."""
    return extract_split(records, encoder or FakeEncoder(), path, class_names=CLASSES, max_tokens_per_batch=12,
                         window=2, progress=False, **kwargs)


def assert_fake_store_complete(path: Path, rows: int) -> None:
    with FeatureStore(path) as store:
        assert store.is_complete and store.row_ids().tolist() == list(range(rows))
        for layer in range(3):
            np.testing.assert_array_equal(store.read_layer(layer), expected_fake_features(range(rows), layer))


def unflag(path: Path, rows: list[int]) -> None:
    """As if the run had been killed before setting the flags of `rows` (its last window)."""
    with StoreWriter(path) as writer:
        writer.file["written"][rows] = 0


def write_not_a_store(path: Path, kind: str) -> None:
    if kind == "empty file":
        path.write_bytes(b"")
    elif kind == "unrelated hdf5":
        with h5py.File(path, "w") as handle:
            handle.create_dataset("embeddings", data=np.arange(12.0).reshape(3, 4))
    else:
        extract_fake(path, fake_records([3, 4]))
        with h5py.File(path, "r+") as handle:
            del handle.attrs["store_format"]
        path.with_name(path.name + ".lock").unlink()


@pytest.mark.parametrize("kind", ["empty file", "unrelated hdf5", "store without store_format"])
def test_a_file_that_is_not_a_store_is_refused_and_never_modified(tmp_path, monkeypatch, kind):
    path = tmp_path / "s.h5"
    write_not_a_store(path, kind)
    before = file_state(path)
    modes = record_h5py_modes(monkeypatch)
    for _ in range(2):  # every rerun is refused the same way
        with pytest.raises(StoreMismatchError) as raised:
            extract_fake(path, fake_records([3, 4]))
        assert_one_line_error(raised.value, str(path), "delete")
    assert set(modes) == {"r"} and file_state(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]


def test_store_of_the_previous_format_is_refused_by_the_metadata_comparison(tmp_path):
    path, records = tmp_path / "s.h5", fake_records([3, 4])
    extract_fake(path, records)
    as_format_3(path)
    before = file_state(path)
    with pytest.raises(StoreMismatchError) as raised:
        extract_fake(path, records)
    assert "store_format: store has 3, request has 4" in str(raised.value)
    assert "Fix: delete the file" in str(raised.value)
    assert file_state(path) == before


def test_a_complete_store_is_only_read_even_on_a_read_only_disk(tmp_path, monkeypatch):
    folder, records = tmp_path / "stores", fake_records([3, 4, 5])
    path, lock = folder / "s.h5", folder / "s.h5.lock"
    extract_fake(path, records)
    lock.unlink()
    before = file_state(path)
    modes = record_h5py_modes(monkeypatch)  # chmod does not stop root: the modes show that nothing is written
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        report = extract_fake(path, records)
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)
    assert (report.rows_already_done, report.rows_computed, report.rows_skipped) == (3, 0, 0)
    assert set(modes) == {"r"} and not lock.exists() and file_state(path) == before


def disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_on_call(original, call: int, only=lambda *args: True):
    """`original`, except that its `call`-th call (counting those `only` accepts) finds the disk full."""
    calls = []

    def patched(*args, **kwargs):
        if only(*args):
            calls.append(args)
            if len(calls) == call:
                disk_full()
        return original(*args, **kwargs)

    return patched


@pytest.mark.parametrize("fault", ["flush", "features write"])
def test_a_full_disk_keeps_the_written_rows_and_the_rerun_resumes(tmp_path, monkeypatch, fault):
    path, records = tmp_path / "s.h5", fake_records([4] * 6)
    if fault == "flush":  # flushes 1-3 commit the first batch; the 4th is the second batch's features
        monkeypatch.setattr(h5py.File, "flush", fail_on_call(h5py.File.flush, 4))
    else:
        monkeypatch.setattr(h5py.Dataset, "__setitem__", fail_on_call(
            h5py.Dataset.__setitem__, 2, only=lambda dataset, *_: dataset.name == "/features"))
    with pytest.raises(ProbingError) as raised:
        extract_fake(path, records)
    assert_one_line_error(raised.value, str(path), "disk is full", "paths.store_dir", "PROBING_STORE_DIR")
    monkeypatch.undo()
    encoder = FakeEncoder()
    report = extract_fake(path, records, encoder)
    assert (report.rows_already_done, report.rows_computed) == (2, 4) and len(encoder.batches) == 2
    assert_fake_store_complete(path, 6)


def test_a_full_disk_while_creating_the_store_leaves_no_partial_file(tmp_path, monkeypatch):
    path, records = tmp_path / "stores" / "s.h5", fake_records([4] * 6)

    def create_dataset(group, name, *args, **kwargs):
        if name == "features":  # as HDF5 reports it: no errno attribute, the reason in the text
            raise OSError("Unable to create dataset (file write failed: errno = 28, error message = "
                          "'No space left on device')")
        return original(group, name, *args, **kwargs)

    original = h5py.Group.create_dataset
    monkeypatch.setattr(h5py.Group, "create_dataset", create_dataset)
    with pytest.raises(ProbingError) as raised:
        extract_fake(path, records)
    assert_one_line_error(raised.value, str(path), "disk is full", "PROBING_STORE_DIR")
    assert [p.name for p in path.parent.iterdir() if not p.name.endswith(".lock")] == []
    monkeypatch.undo()
    extract_fake(path, records)
    assert_fake_store_complete(path, 6)


def test_a_run_told_to_wait_waits_for_the_lock_then_resumes(tmp_path):
    """A parallel sweep's jobs (features.lock_wait_s) wait while another job extracts into their store."""
    path, records = tmp_path / "s.h5", fake_records([4] * 6)
    extract_fake(path, records)
    unflag(path, [4, 5])
    waited = r"pid 4242\) is extracting into this store \(waited 0.2 s\)"
    with hold_store_lock(path, pid=4242), pytest.raises(ProbingError, match=waited):
        extract_fake(path, records, lock_wait_s=0.2)
    held = threading.Event()

    def other_run_holding_the_lock():
        with hold_store_lock(path, pid=4242):
            held.set()
            time.sleep(0.8)

    other = threading.Thread(target=other_run_holding_the_lock)
    other.start()
    held.wait(5)
    started = time.monotonic()
    report = extract_fake(path, records, lock_wait_s=10)
    other.join()
    assert time.monotonic() - started >= 0.7
    assert (report.rows_already_done, report.rows_computed) == (4, 2)


def test_a_run_is_refused_while_another_holds_the_store_lock_and_resumes_after(tmp_path):
    path, records = tmp_path / "s.h5", fake_records([4] * 6)
    extract_fake(path, records)
    unflag(path, [4, 5])
    before = file_state(path)
    with hold_store_lock(path, pid=4242):
        with pytest.raises(ProbingError) as raised:
            extract_fake(path, records)
        assert_one_line_error(raised.value, str(path), "another run", "pid 4242", "Fix: wait")
        assert file_state(path) == before
        fresh = tmp_path / "fresh.h5"
        with hold_store_lock(fresh, pid=4242), pytest.raises(ProbingError, match="another run"):
            extract_fake(fresh, records)
        assert not fresh.exists()
    report = extract_fake(path, records)
    assert (report.rows_already_done, report.rows_computed) == (4, 2)
    assert_fake_store_complete(path, 6)


class ReenteringEncoder(FakeEncoder):
    """Has another process extract into the same store while this one writes it (at its second batch)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path, self.second_run = path, None

    def encode(self, batch, dtype=torch.float32):
        if len(self.batches) == 1:
            self.second_run = subprocess.run([sys.executable, "-c", RUN_FAKE, str(self.path)], cwd=REPO_ROOT,
                                             capture_output=True, text=True, timeout=120)
        return super().encode(batch, dtype)


def test_a_second_run_started_while_the_first_writes_is_refused(tmp_path):
    path = tmp_path / "s.h5"
    encoder = ReenteringEncoder(path)
    report = extract_fake(path, fake_records([4] * 24), encoder)
    second = encoder.second_run
    assert second.returncode == 2 and second.stderr.startswith("error: ") and second.stderr.count("\n") == 1
    assert_one_line_error(second.stderr[len("error: "):-1], str(path), "another run", f"pid {os.getpid()}", "Fix: wait")
    assert (report.rows_computed, len(encoder.batches)) == (24, 12)
    assert_fake_store_complete(path, 24)


HOLD_OPEN = """
import sys, h5py
handle = h5py.File(sys.argv[1], "r+")
print("open", flush=True)
sys.stdin.read()
"""


def test_a_store_open_in_another_process_gives_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("HDF5_USE_FILE_LOCKING", raising=False)
    path, records = tmp_path / "s.h5", fake_records([4] * 6)
    extract_fake(path, records)
    unflag(path, [4, 5])
    holder = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "open\n"
        with pytest.raises(ProbingError) as raised:
            extract_fake(path, records)
        assert_one_line_error(raised.value, str(path), "another run", "Fix: wait")
    finally:
        holder.communicate("")
    assert extract_fake(path, records).rows_computed == 2


RUN_FAKE = """
import sys, time
import torch
from pathlib import Path
from probing.errors import ProbingError
from probing.features.extraction import extract_split
from tests.features.test_extraction import CLASSES, FakeEncoder, fake_records

class SlowEncoder(FakeEncoder):
    def encode(self, batch, dtype=torch.float32):
        time.sleep(0.02)
        return super().encode(batch, dtype)

path = Path(sys.argv[1])
while len(sys.argv) > 2 and not Path(sys.argv[2]).exists():  # the start signal
    time.sleep(0.001)
try:
    extract_split(fake_records([4] * 24), SlowEncoder(), path, class_names=CLASSES, max_tokens_per_batch=12,
                  progress=False)
except ProbingError as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
"""


def test_two_runs_started_together_into_one_store(tmp_path):
    path, start = tmp_path / "stores" / "s.h5", tmp_path / "start"
    env = {**os.environ, "HDF5_USE_FILE_LOCKING": "FALSE"}  # as on file systems without locks: the store lock alone
    racers = [subprocess.Popen([sys.executable, "-c", RUN_FAKE, str(path), str(start)], cwd=REPO_ROOT, env=env,
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(3)  # both have imported everything and wait for the start signal
    start.touch()
    stderrs = [racer.communicate(timeout=120)[1] for racer in racers]
    results = [(racer.returncode, stderr) for racer, stderr in zip(racers, stderrs)]
    assert 0 in [code for code, _ in results], results
    for code, stderr in results:
        if code:
            assert stderr.count("\n") == 1 and stderr.startswith("error: ") and "another run" in stderr, stderr
            assert str(path) in stderr and "Traceback" not in stderr
    assert_fake_store_complete(path, 24)


class Interrupted(Exception):
    pass


class KilledEncoder(FakeEncoder):
    """Stops the run (as a kill would) when asked for its `stop_at`-th batch."""

    def __init__(self, stop_at: int):
        super().__init__()
        self.stop_at = stop_at

    def encode(self, batch, dtype=torch.float32):
        if len(self.batches) == self.stop_at:
            raise Interrupted
        return super().encode(batch, dtype)


def ticking_clock(step: float):
    """A perf_counter that advances `step` seconds at each call."""
    now = [0.0]

    def perf_counter():
        now[0] += step
        return now[0]

    return perf_counter


# One window of 8 rows, input lengths 5, 10, 3, 8, 4, 10, 6, 9 -> batches (budget 12) of lengths
# [10] [10] [9] [8] [6, 5] [4, 3]
STAGED_LENGTHS = [3, 8, 1, 6, 2, 8, 4, 7]


@pytest.mark.parametrize("clock_step, kept", [(2.0, 3), (1.0, 2)])  # a unit per batch; a unit per two batches
def test_a_run_cut_off_mid_window_resumes_from_its_staged_batches(tmp_path, monkeypatch, clock_step, kept):
    """Killed at the window's 4th batch, the run staged its first three batches, each alone (2 s of clock per batch)
    or two at a time (the third, still unstaged, is lost); the rerun computes only the rest, in the same batches, and
    writes the very store of an uninterrupted run."""
    monkeypatch.setattr(extraction.time, "perf_counter", ticking_clock(clock_step))
    path, reference, records = tmp_path / "s.h5", tmp_path / "reference.h5", fake_records(STAGED_LENGTHS)
    settings = {"class_names": CLASSES, "max_tokens_per_batch": 12, "window": 8, "progress": False}
    with pytest.raises(Interrupted):
        extract_split(records, KilledEncoder(stop_at=3), path, **settings)
    with h5py.File(path) as file:
        assert file["written"][()].sum() == 0 and (file["slots"][()] >= 0).sum() == kept
    encoder = FakeEncoder()
    report = extract_split(records, encoder, path, **settings)
    assert encoder.batches == [[10], [10], [9], [8], [6, 5], [4, 3]][kept:]
    assert (report.rows_already_done, report.rows_computed) == (kept, 8 - kept)
    extract_split(records, FakeEncoder(), reference, **settings)
    assert_same_store(path, reference)


def test_a_damaged_staged_batch_is_computed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(extraction.time, "perf_counter", ticking_clock(2.0))
    path, records = tmp_path / "s.h5", fake_records(STAGED_LENGTHS)
    settings = {"class_names": CLASSES, "max_tokens_per_batch": 12, "window": 8, "progress": False}
    with pytest.raises(Interrupted):
        extract_split(records, KilledEncoder(stop_at=3), path, **settings)
    with h5py.File(path, "r+") as file:  # the second staged batch (row 5, slot 5) is damaged
        file["features"][1, 5, 2] += 1
    encoder = FakeEncoder()
    report = extract_split(records, encoder, path, **settings)
    assert encoder.batches == [[10], [9], [8], [6, 5], [4, 3]]  # the first unit is kept, the rest computed
    assert report.rows_computed == 7
    assert_fake_store_complete(path, 8)


def test_identical_fine_tuned_folders_under_other_parents_share_one_store(tiny_bert_path, tmp_path):
    """`hydra.run.dir=A/ft` and `B/ft` with identical weights get the same store name; the second reads the first's
    store (the model's name and path are provenance), while other weights are still refused."""
    from probing.features.store import store_path

    folders = {name: tmp_path / name / "ft" / "model" for name in ("A", "B", "C")}
    for folder in folders.values():
        shutil.copytree(tiny_bert_path, folder)
    changed = BertModel.from_pretrained(folders["C"])
    with torch.no_grad():
        changed.embeddings.word_embeddings.weight[0, 0] += 1
    changed.save_pretrained(folders["C"])
    encoders = {name: WordEncoder(str(folder), max_length=16) for name, folder in folders.items()}
    assert encoders["A"].store_name == encoders["B"].store_name != encoders["C"].store_name
    records, stores = toy_records(6), tmp_path / "stores"
    path = store_path(stores, encoders["A"].store_name, "toy", "train", "mean", None)
    settings = {"class_names": CLASSES, "metadata_extra": {"split": "train"}, "progress": False}
    assert extract_split(records, encoders["A"], path, **settings).rows_computed == 5
    assert extract_split(records, encoders["B"], path, **settings).rows_computed == 0  # read, not refused
    with FeatureStore(path) as store:
        assert store.metadata["model_path"] == str(folders["A"])  # provenance: the folder that computed it
    with pytest.raises(StoreMismatchError) as raised:
        extract_split(records, encoders["C"], path, **settings)
    assert "weights_sha256: store has" in str(raised.value) and "model_path" not in str(raised.value)
    assert "model_name" not in str(raised.value)


def test_tables_damaged_in_an_unfinished_store_are_rewritten_from_the_records_on_resume(tiny_bert_path, tmp_path,
                                                                                         monkeypatch, caplog):
    """Labels rolled and one flag of the last block cleared in a store whose run stopped after three windows: the
    resumed run sealed the rolled labels (and the seal then vouched for them). Now the labels are rewritten from the
    records before any row is computed, the cleared flag's block is computed again, and the store is the one an
    uninterrupted run writes."""
    records, path, reference = toy_records(24), tmp_path / "s.h5", tmp_path / "reference.h5"
    settings = {"class_names": CLASSES, "metadata_extra": {"split": "train"}, "max_tokens_per_batch": 40,
                "window": 4, "progress": False}
    original, windows = StoreWriter.write_rows, []

    def stop_at_the_fourth_window(writer, rows, features):
        windows.append(rows)
        if len(windows) == 4:
            raise Interrupted
        original(writer, rows, features)

    monkeypatch.setattr(StoreWriter, "write_rows", stop_at_the_fourth_window)
    with pytest.raises(Interrupted):
        extract_split(records, WordEncoder(str(tiny_bert_path), max_length=16), path, **settings)
    monkeypatch.undo()
    with h5py.File(path, "r+") as file:
        assert file["written"][()].nonzero()[0].tolist() == [*range(12), 23]  # three windows and the skipped row
        file["labels"][...] = np.roll(file["labels"][()], 5)
        file["written"][10] = 0  # in the last block, rows 8..11
    with caplog.at_level(logging.WARNING, logger="probing.features.store"):
        resumed = extract_split(records, WordEncoder(str(tiny_bert_path), max_length=16), path, **settings)
    assert f"{path}: the `labels` table of this unfinished store did not match its records" in caplog.text
    assert (resumed.rows_already_done, resumed.rows_computed, resumed.rows_skipped) == (9, 15, 1)
    with FeatureStore(path) as store:
        assert store.labels().tolist() == [CLASSES.index(record.sclass) for record in records[:23]]
    extract_split(records, WordEncoder(str(tiny_bert_path), max_length=16), reference, **settings)
    assert_same_store(path, reference)
