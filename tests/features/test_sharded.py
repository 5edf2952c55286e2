"""Sharded extraction, its processes played one after another in this process: the shard plan, the merged store
against a single-process one (every table, byte for byte), resumed shards and merges, and missing or foreign shards
at merge time."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from probing.errors import ProbingError, StoreCorruptError, StoreMismatchError
from probing.features import sharded
from probing.features.extraction import extract_split, request_metadata
from probing.features.sharded import (
    ShardPlan,
    extract_split_sharded,
    merge_shards,
    representable_rows,
    shard_path,
    shard_rows,
)
from probing.features.store import StoreWriter
from tests.features.test_extraction import CLASSES, FakeEncoder, fake_records
from tests.helpers.stores import assert_one_line_error, assert_same_store, file_state

LENGTHS = [3, 9, 2, 7, 7, 4, 12, 5, 7, 1, 3, 8, 6, 2, 9, 4, 10, 5]
SKIP = (4, 13)
BUDGET = 40  # batches of 2 to 5 rows
WINDOW = 3  # 16 kept rows: five windows of 3 and one of 1


class RankOf:
    """What sharded extraction uses of a Fabric, for process `rank` of `world_size` (the barrier is the order in
    which the test plays the processes)."""

    def __init__(self, rank: int, world_size: int):
        self.global_rank, self.world_size = rank, world_size

    def broadcast(self, value):
        return value

    def barrier(self) -> None:
        pass


def records():
    return fake_records(LENGTHS, skip=SKIP)


def extract_as(rank: int, world_size: int, path: Path, encoder: FakeEncoder | None = None) -> FakeEncoder:
    encoder = encoder or FakeEncoder()
    extract_split_sharded(records(), encoder, path, fabric=RankOf(rank, world_size), class_names=CLASSES,
                          dtype="float32", max_tokens_per_batch=BUDGET, window=WINDOW, progress=False)
    return encoder


def extract_sharded(path: Path, world_size: int) -> None:
    """Every process in turn, rank 0 last (it merges after the barrier)."""
    for rank in reversed(range(world_size)):
        extract_as(rank, world_size, path)


def plan_of(path: Path, world_size: int, encoder: FakeEncoder | None = None) -> ShardPlan:
    encoder = encoder or FakeEncoder()
    request = request_metadata(records(), encoder, "float32", {})
    return ShardPlan(path, records(), encoder, request, {}, world_size, WINDOW)


def extract_shards_only(path: Path, world_size: int) -> ShardPlan:
    plan = plan_of(path, world_size)
    for rank in plan.shards():
        extract_split(plan.records_of(rank), plan.featurizer, plan.path_of(rank), class_names=CLASSES,
                      metadata_extra=plan.extra_of(rank), dtype="float32", max_tokens_per_batch=BUDGET,
                      window=WINDOW, progress=False)
    return plan


@pytest.fixture
def single(tmp_path) -> Path:
    path = tmp_path / "single" / "dev.h5"
    extract_split(records(), FakeEncoder(), path, class_names=CLASSES, dtype="float32",
                  max_tokens_per_batch=BUDGET, window=WINDOW, progress=False)
    return path


@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_are_disjoint_cover_the_split_and_take_whole_windows_round_robin(world_size):
    representable = representable_rows(records(), FakeEncoder())
    assert [row for row in range(len(LENGTHS)) if not representable[row]] == sorted(SKIP)
    shards = shard_rows(representable, world_size, WINDOW)
    every = np.sort(np.concatenate(shards))
    assert np.array_equal(every, np.arange(len(LENGTHS)))
    kept = [row for row in range(len(LENGTHS)) if row not in SKIP]
    windows = [kept[first:first + WINDOW] for first in range(0, len(kept), WINDOW)]
    assert [len(window) for window in windows] == [3, 3, 3, 3, 3, 1]
    for rank, rows in enumerate(shards):
        expected = [row for window in windows[rank::world_size] for row in window] + (list(SKIP) if rank == 0 else [])
        assert rows.tolist() == expected


@pytest.mark.parametrize("world_size", [2, 3, 12])
def test_the_merged_store_is_the_single_process_store_table_for_table(tmp_path, single, world_size):
    path = tmp_path / "sharded" / "dev.h5"
    extract_sharded(path, world_size)
    assert_same_store(path, single)
    assert not shard_path(path, 0, world_size).parent.exists()


def test_each_process_encodes_only_the_batches_of_its_windows(tmp_path):
    whole = FakeEncoder()
    extract_split(records(), whole, tmp_path / "single.h5", class_names=CLASSES, max_tokens_per_batch=BUDGET,
                  window=WINDOW, progress=False)
    path = tmp_path / "dev.h5"
    one = extract_as(1, 2, path)
    zero = extract_as(0, 2, path)
    # the input lengths of each window's batches (a window's inputs longest first, cut at 40 tokens)
    windows = [[[11, 5, 4]], [[14, 9], [6]], [[9, 7, 3]], [[10, 8, 5]], [[12, 11, 6]], [[7]]]
    assert whole.batches == [batch for window in windows for batch in window]
    assert one.batches == [batch for window in windows[1::2] for batch in window]
    assert zero.batches == [batch for window in windows[0::2] for batch in window]


def test_a_complete_store_starts_no_shard(tmp_path, single):
    before = file_state(single)
    encoder = extract_as(0, 2, single)
    assert encoder.batches == [] and file_state(single) == before
    assert not shard_path(single, 0, 2).parent.exists()


def test_a_partial_shard_resumes_computing_only_its_missing_rows(tmp_path, single):
    path = tmp_path / "sharded" / "dev.h5"
    plan = extract_shards_only(path, 2)
    with h5py.File(plan.path_of(0), "r+") as file:  # as if its process was killed after its first window
        slots, kept = file["slots"][()], file["skipped"][()] == 0
        lost = np.flatnonzero(kept & (slots >= file["block_rows"][0]))
        file["written"][lost] = 0
    assert extract_as(1, 2, path).batches == []
    zero = extract_as(0, 2, path)
    assert sum(len(batch) for batch in zero.batches) == len(lost) > 0
    assert_same_store(path, single)


def cut_off_merge(path: Path, monkeypatch) -> None:
    """The shards of two processes, merged until the merge is cut off after three blocks."""
    plan = extract_shards_only(path, 2)
    original, calls = StoreWriter.write_rows, []

    def stop_after_three(writer, rows, features):
        calls.append(len(rows))
        if len(calls) > 3:
            raise KeyboardInterrupt
        original(writer, rows, features)

    monkeypatch.setattr(StoreWriter, "write_rows", stop_after_three)
    with pytest.raises(KeyboardInterrupt):
        merge_shards(plan, CLASSES)
    monkeypatch.setattr(StoreWriter, "write_rows", original)


def test_a_merge_cut_off_resumes_to_the_same_store(tmp_path, single, monkeypatch):
    path = tmp_path / "sharded" / "dev.h5"
    cut_off_merge(path, monkeypatch)
    merge_shards(plan_of(path, 2), CLASSES)
    assert_same_store(path, single)


def test_a_cut_off_merge_whose_tables_were_damaged_resumes_from_the_records(tmp_path, single, monkeypatch):
    """The resumed merge used to seal the damaged tables of the unfinished store."""
    path = tmp_path / "sharded" / "dev.h5"
    cut_off_merge(path, monkeypatch)
    with h5py.File(path, "r+") as file:
        assert 0 < file["written"][()].sum() < len(LENGTHS)
        for name in ("labels", "combination_ids"):
            file[name][...] = np.roll(file[name][()], 5)
    merge_shards(plan_of(path, 2), CLASSES)
    assert_same_store(path, single)


def test_a_missing_shard_at_merge_time_is_one_line_and_the_others_are_kept(tmp_path):
    path = tmp_path / "dev.h5"
    plan = extract_shards_only(path, 2)
    plan.path_of(1).unlink()
    kept = file_state(plan.path_of(0))
    with pytest.raises(ProbingError) as error:
        merge_shards(plan, CLASSES)
    assert_one_line_error(error.value, "shard 1 of 2 is missing", "paths.store_dir")
    assert file_state(plan.path_of(0)) == kept and not path.exists()


def test_a_shard_of_another_request_at_merge_time_is_refused_and_nothing_is_lost(tmp_path):
    path = tmp_path / "dev.h5"
    plan = extract_shards_only(path, 2)
    plan.path_of(1).unlink()
    foreign = plan_of(tmp_path / "other" / "dev.h5", 2, FakeEncoder(pooling="last"))
    extract_split(foreign.records_of(1), foreign.featurizer, plan.path_of(1), class_names=CLASSES,
                  metadata_extra=foreign.extra_of(1), dtype="float32", max_tokens_per_batch=BUDGET, progress=False)
    shards = {rank: file_state(plan.path_of(rank)) for rank in (0, 1)}
    with pytest.raises(StoreMismatchError, match="pooling: store has 'last', request has 'mean'"):
        merge_shards(plan, CLASSES)
    with pytest.raises(StoreMismatchError, match="pooling"):  # and before any process computes
        extract_as(0, 2, path)
    assert {rank: file_state(plan.path_of(rank)) for rank in (0, 1)} == shards and not path.exists()


def test_a_shard_of_another_process_count_is_not_taken_for_one_of_this_plan(tmp_path):
    path = tmp_path / "dev.h5"
    three = extract_shards_only(path, 3)
    two = plan_of(path, 2)
    assert {three.path_of(rank) for rank in three.shards()}.isdisjoint(two.path_of(rank) for rank in two.shards())
    assert three.request_of(0)["records_sha256"] != two.request_of(0)["records_sha256"]


def test_a_damaged_shard_block_is_refused_at_merge_time(tmp_path):
    path = tmp_path / "dev.h5"
    plan = extract_shards_only(path, 2)
    with h5py.File(plan.path_of(1), "r+") as file:
        file["features"][2, 0, 1] += 1.0
    with pytest.raises(StoreCorruptError) as error:
        merge_shards(plan, CLASSES)
    assert_one_line_error(error.value, str(plan.path_of(1)), "checksums")


@pytest.mark.parametrize("world_size, name", [(2, "1-of-2.h5"), (3, "1-of-2.h5"), (12, "11-of-12.h5"),
                                              (2, "notes.txt")])
def test_a_foreign_file_in_the_shards_folder_is_refused_and_kept(tmp_path, world_size, name):
    """A file that the store's metadata do not identify as one of its shards: at this plan's shard path, at the path
    of a rank without rows (12 processes), or of another process count, or any other file."""
    path = tmp_path / "dev.h5"
    foreign = shard_path(path, 0, 1).parent / name
    foreign.parent.mkdir()
    foreign.write_bytes(b"someone else's data")
    with pytest.raises(ProbingError) as error:
        extract_sharded(path, world_size)
    assert_one_line_error(error.value, str(foreign))
    assert foreign.read_bytes() == b"someone else's data" and not path.exists()


def test_a_plain_hdf5_file_named_like_a_shard_of_no_plan_is_refused(tmp_path):
    path = tmp_path / "dev.h5"
    foreign = shard_path(path, 5, 9)
    foreign.parent.mkdir()
    with h5py.File(foreign, "w") as file:
        file["data"] = np.arange(3)
    with pytest.raises(ProbingError) as error:
        extract_sharded(path, 2)
    assert_one_line_error(error.value, str(foreign), "not a shard of", "Fix: move it")
    assert foreign.is_file()


def test_the_shards_of_another_process_count_are_deleted_with_the_merge(tmp_path, single):
    path = tmp_path / "sharded" / "dev.h5"
    three = extract_shards_only(path, 3)  # a run with 3 processes, cut off before its merge
    assert all(three.path_of(rank).is_file() for rank in three.shards())
    extract_sharded(path, 2)
    assert_same_store(path, single)
    assert not shard_path(path, 0, 2).parent.exists()


def test_the_plan_tokenises_a_chunk_at_a_time(monkeypatch):
    """The plan never holds the inputs of the whole split: prepare_many sees at most PREPARE_ROWS rows per call."""
    seen = []

    class CountingEncoder(FakeEncoder):
        def prepare_many(self, batch):
            seen.append(len(batch))
            return super().prepare_many(batch)

    monkeypatch.setattr(sharded, "PREPARE_ROWS", 4)
    assert representable_rows(records(), CountingEncoder()).tolist() == \
        representable_rows(records(), FakeEncoder()).tolist()
    assert max(seen) == 4 and sum(seen) == len(LENGTHS)
