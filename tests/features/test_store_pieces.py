"""A store's tables in pieces: the record tables computed a chunk at a time equal those of the whole split (computed
here by a plain loop), the seal hashed a piece at a time equals the hash of the whole tables, the pending rows are
held as runs of consecutive rows, and extraction with tables in pieces of a few rows writes the store of one piece."""

from __future__ import annotations

import random

import h5py
import numpy as np
import pytest

from probing.data.records import RecordTable, WordInContext
from probing.errors import ProbingError
from probing.features import extraction
from probing.features.store import FeatureStore, StoreWriter, read_tables, table_hashes
from probing.features.store.hashes import stored_table_hashes, table_hash
from probing.features.store.labels import FirstSeen, RecordTables
from probing.features.store.pieces import RowRuns
from tests.features.test_extraction import LoggingFakeEncoder, extract_fake, fake_records
from tests.helpers.stores import (
    CLASSES,
    assert_same_store,
    features_of,
    make_records,
    metadata,
    small_table_pieces,
    store_tables,
)


def random_records(count: int, seed: int = 0) -> list[WordInContext]:
    """Records of a small vocabulary, so that words and word-class pairs recur across chunks."""
    rng = random.Random(seed)
    words = ["apple", "pine", "oak", "juice", "larch", "stock", "party"]
    return [WordInContext(("the", word, "."), (1,), word, rng.choice(CLASSES[:2] if word == "apple" else CLASSES),
                          f"r:{n}") for n, word in enumerate(rng.choice(words) for _ in range(count))]


def tables_by_a_loop(records: list[WordInContext], class_names: list[str]) -> dict[str, list]:
    """RECORD_TABLES as their definition reads: ids in order of first occurrence, one record after another."""
    word_ids, combination_ids, tables = {}, {}, {name: [] for name in ("labels", "word_ids", "combination_ids")}
    for record in records:
        label = class_names.index(record.sclass)
        word = word_ids.setdefault(record.word, len(word_ids))
        tables["labels"].append(label)
        tables["word_ids"].append(word)
        tables["combination_ids"].append(combination_ids.setdefault((word, label), len(combination_ids)))
    return {**tables, "words": list(word_ids), "combinations": [list(pair) for pair in combination_ids]}


def computed_tables(records, class_names) -> dict[str, list]:
    tables = RecordTables(records, class_names)
    rows = {name: [] for name in ("labels", "word_ids", "combination_ids")}
    for first, chunk in tables.row_chunks():
        assert first == len(rows["labels"])
        for name, values in chunk.items():
            assert values.dtype == np.int32
            rows[name] += values.tolist()
    words = tables.words(0, tables.num_words).tolist()
    return {**rows, "words": words, "combinations": tables.combinations().tolist()}


@pytest.mark.parametrize("rows", [1, 3, 7, 1000])
def test_record_tables_in_chunks_are_those_of_the_whole_split(monkeypatch, rows):
    small_table_pieces(monkeypatch, rows)
    records = random_records(50)
    expected = tables_by_a_loop(records, CLASSES)
    assert len(expected["words"]) == 7 and 7 < len(expected["combinations"]) < 21  # words recur with other classes
    assert computed_tables(records, CLASSES) == expected
    assert computed_tables(RecordTable.from_records(records), CLASSES) == expected


def test_first_seen_numbers_values_across_chunks_in_order_of_first_occurrence():
    first_seen = FirstSeen()
    assert first_seen(np.array([5, 3, 5, 9])).tolist() == [0, 1, 0, 2]
    assert first_seen(np.array([9, 4, 3, 1, 4])).tolist() == [2, 3, 1, 4, 3]
    assert first_seen(np.array([], np.int64)).tolist() == []
    assert first_seen(np.array([1, 7])).tolist() == [4, 5]
    assert first_seen.values().tolist() == [5, 3, 9, 4, 1, 7]


def test_an_unknown_class_is_refused_before_any_table_is_made(monkeypatch):
    small_table_pieces(monkeypatch, 2)
    records = random_records(9) + [WordInContext(("a",), (0,), "a", "mineral", "r:9")]
    with pytest.raises(ProbingError, match=r"s-classes \['mineral'\] are not in the class list"):
        RecordTables(records, CLASSES)


@pytest.mark.parametrize("pieces", [[b"ab", b"c"], [b"abc"], [b"", b"a", b"bc"]])
def test_a_table_hashed_in_pieces_has_the_hash_of_the_whole_table(pieces):
    """XXH3 streams: pieces of a table give its one-shot hash, for numbers and strings alike."""
    numbers = np.arange(12, dtype=np.int64)
    cut = np.cumsum([len(piece) for piece in pieces])[:-1]
    import xxhash

    hasher = xxhash.xxh3_64()
    for part in np.split(numbers, cut):
        hasher.update(part)
    assert hasher.intdigest() == table_hash(numbers) == xxhash.xxh3_64_intdigest(numbers.tobytes())
    strings = np.array([b"apple", b"pine", b"oak"], dtype=object)
    assert table_hash(strings) == xxhash.xxh3_64_intdigest(b"".join(
        len(word).to_bytes(8, "little") + word for word in strings))


@pytest.mark.parametrize("rows", [1, 3, 1000])
def test_the_seal_hashed_in_pieces_is_the_hash_of_the_whole_tables(tmp_path, monkeypatch, rows):
    small_table_pieces(monkeypatch, rows)
    records = make_records()
    path = FeatureStore.create(tmp_path / "split.h5", metadata(len(records)), records, CLASSES).path
    with StoreWriter(path) as writer:
        writer.write_rows([7, 2, 9, 0], features_of([7, 2, 9, 0]))
        writer.mark_skipped([4])
        hashes = stored_table_hashes(writer.file, {"written": 1})
        whole = read_tables(writer.file)
    assert hashes == table_hashes({**whole, "written": np.ones_like(whole["written"])})
    assert hashes != table_hashes(whole)  # `written` as it will be, not as it is


@pytest.mark.parametrize("rows", [1, 3, 1000])
def test_rows_whose_flag_is_unset_are_held_as_runs_and_sliced_like_the_array_of_them(monkeypatch, rows):
    small_table_pieces(monkeypatch, rows)
    rng = np.random.default_rng(rows)
    for flags in ([], [True], [False], [False] * 7, [True, False, False, True, True, False, True, False, False],
                  rng.random(40) < 0.3, rng.random(40) < 0.9):
        flags = np.asarray(flags, bool)
        expected, runs = np.flatnonzero(~flags), RowRuns.unset(flags)
        assert len(runs) == len(expected) and runs.tolist() == list(runs) == expected.tolist()
        assert np.asarray(runs).dtype == np.int64 and np.array_equal(np.asarray(runs), expected)
        assert len(runs.starts) == len(set(expected.tolist()) - set((expected + 1).tolist()))  # one per run
        for first in range(len(expected) + 1):
            for stop in range(first, len(expected) + 2):
                assert np.array_equal(runs[first:stop], expected[first:stop])
        assert [runs[i] for i in range(-len(expected), len(expected))] == expected.tolist() * 2
        assert np.array_equal(runs[::2], expected[::2]) and np.array_equal(runs[-3:], expected[-3:])


def test_pending_rows_of_a_new_store_are_one_run_and_index_arrays(tmp_path):
    records = make_records()
    path = FeatureStore.create(tmp_path / "split.h5", metadata(len(records)), records, CLASSES).path
    with StoreWriter(path) as writer:
        pending = writer.pending_rows()
        assert (pending.starts.tolist(), pending.stops.tolist()) == ([0], [10])
        writer.write_rows([1, 2, 6], features_of([1, 2, 6]))
        assert pending.tolist() == list(range(10))  # the rows as they were when asked for
        pending = writer.pending_rows()
        assert (pending.starts.tolist(), pending.stops.tolist()) == ([0, 3, 7], [1, 6, 10])
        mask = np.zeros(10, bool)
        mask[pending] = True
        assert np.flatnonzero(mask).tolist() == [0, 3, 4, 5, 7, 8, 9] == np.arange(10)[pending].tolist()


def test_an_extraction_in_table_pieces_of_two_rows_stopped_and_resumed_writes_the_store_of_one_piece(
        tmp_path, monkeypatch):
    monkeypatch.setattr(extraction, "PREPARE_ROWS", 3)
    records, stopped, reference = fake_records([4] * 11, skip={4, 8}), tmp_path / "stopped.h5", tmp_path / "ref.h5"
    extract_fake(reference, records)
    small_table_pieces(monkeypatch, 2)
    with pytest.raises(RuntimeError, match="stopped"):
        extract_fake(stopped, records, LoggingFakeEncoder(fail_at=3))
    resumed = extract_fake(stopped, records, LoggingFakeEncoder())
    assert (resumed.rows_already_done, resumed.rows_computed, resumed.rows_skipped) == (6, 5, 2)
    assert_same_store(stopped, reference)
    with h5py.File(stopped) as file:
        assert file["table_xxh3"][()].all()
    assert store_tables(stopped)["table_xxh3"].tolist() == store_tables(reference)["table_xxh3"].tolist()
