"""Extraction's overlap of host and device (`extract_split(overlap=True)`, the default): the store of the threaded
pipeline is the serial one's, value for value; an error in the tokenising or the writing thread is raised in the
caller, nothing after it is written, and the rerun writes the uninterrupted store."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from probing.data.sources import StreusleSource
from probing.features import extraction
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split
from probing.features.store import FeatureStore, StoreWriter
from tests.features.test_extraction import CLASSES, FakeEncoder, assert_fake_store_complete, fake_records
from tests.helpers.stores import assert_same_store


class Broken(Exception):
    pass


def test_the_threaded_pipeline_writes_the_serial_store(tiny_bert_path, tmp_path, monkeypatch):
    """The first 600 records of the bundled STREUSLE dev (nouns and verbs; max_length 4 skips the longer targets) in
    windows of 97 rows tokenised 50 at a time: the same rows, vectors and tables, byte for byte."""
    monkeypatch.setattr(extraction, "PREPARE_ROWS", 50)
    data = StreusleSource(include_verbs=True).load()
    records, threaded, serial = data.splits["dev"][:600], tmp_path / "threaded.h5", tmp_path / "serial.h5"
    settings = {"class_names": data.classes, "max_tokens_per_batch": 200, "window": 97, "progress": False,
                "dtype": "float32"}
    report = extract_split(records, WordEncoder(str(tiny_bert_path), max_length=4), threaded, **settings)
    extract_split(records, WordEncoder(str(tiny_bert_path), max_length=4), serial, overlap=False, **settings)
    assert report.rows_skipped > 0 and report.rows_computed + report.rows_skipped == len(records)
    with FeatureStore(threaded) as store:
        assert store.num_rows > 3 * 97 and np.abs(store.read_layer(2)).min(axis=1).max() > 0
    assert_same_store(threaded, serial)


def settings(**extra):
    return {"class_names": CLASSES, "max_tokens_per_batch": 12, "window": 2, "progress": False, **extra}


def test_an_error_in_the_writing_thread_is_raised_and_nothing_after_it_is_written(tmp_path, monkeypatch):
    """The third window's block fails to write: the caller gets that error, though the forward ran ahead; the two
    windows before it are written, the later ones are not, and the rerun completes the store."""
    path, records, blocks = tmp_path / "s.h5", fake_records([4] * 12), []
    write_rows = StoreWriter.write_rows

    def failing_third(writer, rows, features):
        blocks.append(list(rows))
        if len(blocks) == 3:
            raise Broken("the third block")
        write_rows(writer, rows, features)

    monkeypatch.setattr(StoreWriter, "write_rows", failing_third)
    with pytest.raises(Broken, match="the third block"):
        extract_split(records, FakeEncoder(), path, **settings())
    assert blocks == [[0, 1], [2, 3], [4, 5]]  # no write after the failed one
    monkeypatch.undo()
    with h5py.File(path) as file:
        assert file["written"][()].nonzero()[0].tolist() == [0, 1, 2, 3]
    encoder = FakeEncoder()
    report = extract_split(records, encoder, path, **settings())
    assert (report.rows_already_done, report.rows_computed, len(encoder.batches)) == (4, 8, 4)
    assert_fake_store_complete(path, 12)


class FailingTokenizer(FakeEncoder):
    """Fails on its second `prepare_many` call."""

    def __init__(self):
        super().__init__()
        self.prepared = 0

    def prepare_many(self, records):
        self.prepared += 1
        if self.prepared == 2:
            raise Broken("the second chunk")
        return super().prepare_many(records)


def test_an_error_in_the_tokenising_thread_is_raised_after_the_windows_before_it_are_written(tmp_path, monkeypatch):
    monkeypatch.setattr(extraction, "PREPARE_ROWS", 4)
    path, records = tmp_path / "s.h5", fake_records([4] * 12)
    with pytest.raises(Broken, match="the second chunk"):
        extract_split(records, FailingTokenizer(), path, **settings())
    with h5py.File(path) as file:  # the first chunk's two windows
        assert file["written"][()].nonzero()[0].tolist() == [0, 1, 2, 3]
    report = extract_split(records, FakeEncoder(), path, **settings())
    assert (report.rows_already_done, report.rows_computed) == (4, 8)
    assert_fake_store_complete(path, 12)


def test_an_error_in_the_forward_stops_the_tokenising_and_keeps_the_computed_windows(tmp_path):
    class FailingForward(FakeEncoder):
        def encode(self, batch, dtype=torch.float32):
            if len(self.batches) == 3:
                raise Broken("the fourth batch")
            return super().encode(batch, dtype)

    path, records = tmp_path / "s.h5", fake_records([4] * 12)
    with pytest.raises(Broken, match="the fourth batch"):
        extract_split(records, FailingForward(), path, **settings())
    with h5py.File(path) as file:  # the three windows computed before it are written
        assert file["written"][()].nonzero()[0].tolist() == [0, 1, 2, 3, 4, 5]
    assert extract_split(records, FakeEncoder(), path, **settings()).rows_computed == 6
    assert_fake_store_complete(path, 12)
