"""Extraction: token-budget batching, skips, resume, refusal, and a SIGKILLed run resumed to the same store."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from probing.data.records import SkipCounter, WordInContext
from probing.errors import ProbingError, StoreMismatchError
from probing.features.encoder import EncoderInfo, PreparedInput, WordEncoder
from probing.features.extraction import extract_split, plan_batches
from probing.features.store import FeatureStore, StoreWriter

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
        self.batches: list[list[int]] = []

    store_metadata = WordEncoder.store_metadata

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

    def encode(self, batch):
        self.batches.append([len(prepared.input_ids) for prepared in batch])
        rows = torch.tensor([prepared.input_ids[0] for prepared in batch], dtype=torch.float32)
        return 10 * rows[:, None, None] + torch.arange(3.0)[None, :, None] + torch.arange(4.0)[None, None, :] / 8


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
    with FeatureStore(tmp_path / "s.h5") as store:
        assert store.row_ids().tolist() == [0, 1, 2, 3, 5, 6]
        assert store.labels().tolist() == [0, 1, 2, 0, 2, 0]
        for layer in range(3):
            np.testing.assert_array_equal(store.read_layer(layer), expected_fake_features([0, 1, 2, 3, 5, 6], layer))
        assert store.metadata["split"] == "train" and store.metadata["pooling"] == "mean"


def test_resume_computes_only_unwritten_rows(tmp_path):
    path, records = tmp_path / "s.h5", fake_records([4, 4, 4, 4, 4, 4])
    extract_split(records, FakeEncoder(), path, class_names=CLASSES, max_tokens_per_batch=12, progress=False)
    with StoreWriter(path) as writer:  # as if the last batch (rows 4, 5) had been cut off before its flags
        assert writer.file["slots"][()].tolist() == [0, 1, 2, 3, 4, 5]
        writer.file["written"][[4, 5]] = 0
        writer.file["features"][:, 4:, :] = -1
    encoder = FakeEncoder()
    report = extract_split(records, encoder, path, class_names=CLASSES, max_tokens_per_batch=12, progress=False)
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


CHILD = """
import json, sys, time
from pathlib import Path
from probing.features import store
from probing.data.records import WordInContext
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split

model, records_file, out, marker, stop_after = sys.argv[1:6]
records = [WordInContext(tuple(t), tuple(p), w, c, s) for t, p, w, c, s in json.loads(Path(records_file).read_text())]
set_values, batches_written = store.StoreWriter._set_values, []

def set_values_then_hang(self, name, rows, values):
    if name == "written" and not self.file["skipped"][rows[0]]:
        if len(batches_written) == int(stop_after):
            Path(marker).touch()  # this batch's features and slots are on disk, its flags are not: kill here
            time.sleep(120)
        batches_written.append(rows)
    set_values(self, name, rows, values)

store.StoreWriter._set_values = set_values_then_hang
extract_split(records, WordEncoder(model, max_length=16), Path(out), class_names=["food", "organization", "plant"],
              metadata_extra={"split": "train"}, max_tokens_per_batch=40, progress=False)
"""


def run_killed_child(model: Path, records: list[WordInContext], out: Path, tmp_path: Path, stop_after: int) -> None:
    records_file, marker = tmp_path / "records.json", tmp_path / "killed-here"
    records_file.write_text(json.dumps([[r.tokens, r.target, r.word, r.sclass, r.source] for r in records]))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(model), str(records_file), str(out), str(marker),
                              str(stop_after)], env={**os.environ, "HF_HUB_OFFLINE": "1"})
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
    assert 0 < len(killed_batch_slots) < pending  # the killed batch: features and slots written, flags not
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
