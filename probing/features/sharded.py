"""Sharded extraction: the processes of a Lightning Fabric run (DDP over GPUs, or CPU processes over gloo) fill one
split's store together, each process its own shard, and the process of rank 0 merges the shards into the store.

See docs/features.md, 'Sharded extraction'.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from lightning.fabric import Fabric

from probing.data.records import WordInContext, as_table
from probing.errors import ProbingError
from probing.features.extraction import PREPARE_ROWS, extract_split, request_metadata, window_rows
from probing.features.featurizer import Featurizer
from probing.features.store import (
    FeatureStore,
    StoreWriter,
    store_lock,
)

log = logging.getLogger(__name__)

# How long a process waits at the barrier for the others: a rerun may find one shard complete and another barely
# begun, so the wait can last as long as a whole extraction (the usual 30 minutes would end such a run).
SHARD_WAIT = timedelta(days=2)
# A shard's file name, `<rank>-of-<N>.h5`, and the files a store leaves beside it (its lock, a half-built file).
SHARD_NAME = re.compile(r"\d+-of-\d+\.h5")
COMPANIONS = (".lock", ".partial")


def representable_rows(records: Sequence[WordInContext], featurizer: Featurizer) -> np.ndarray:
    """Which rows the featurizer can encode (its `prepare_many` gives an input): tokenised PREPARE_ROWS rows at a time
    and let go, so that the inputs of the whole split are never held."""
    mask = np.zeros(len(records), dtype=bool)
    for first in range(0, len(records), PREPARE_ROWS):
        prepared = featurizer.prepare_many(records[first:first + PREPARE_ROWS])
        mask[first:first + len(prepared)] = [item is not None for item in prepared]
    return mask


def shard_rows(representable: Sequence[bool], num_shards: int, window: int) -> list[np.ndarray]:
    """The rows of each shard, in plan order: the representable rows cut into windows of `window` rows, shard r
    taking the windows r, r + N, ...; shard 0 also the rows that are not representable."""
    representable = np.asarray(representable, dtype=bool)
    kept = np.flatnonzero(representable)
    shards: list[list[np.ndarray]] = [[] for _ in range(num_shards)]
    for number, first in enumerate(range(0, len(kept), window)):
        shards[number % num_shards].append(kept[first:first + window])
    shards[0].append(np.flatnonzero(~representable))
    return [np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64) for rows in shards]


def shard_path(path: Path, rank: int, num_shards: int) -> Path:
    return shards_folder(path) / f"{rank}-of-{num_shards}.h5"


def shards_folder(path: Path) -> Path:
    return path.with_name(path.name + ".shards")


class ShardPlan:
    """The shards of one split's store: their rows, paths and the metadata each must carry."""

    def __init__(self, path: Path, records: Sequence[WordInContext], featurizer: Featurizer, request: Mapping,
                 extra: Mapping[str, Any], num_shards: int, window: int | None = None):
        self.path, self.records, self.featurizer, self.request, self.extra = path, records, featurizer, request, extra
        self.rows = shard_rows(representable_rows(records, featurizer), num_shards, window_rows(request, window))

    @property
    def num_shards(self) -> int:
        return len(self.rows)

    def shards(self) -> list[int]:
        """The ranks whose shard has rows (with more processes than batches, some have none and write no file)."""
        return [rank for rank, rows in enumerate(self.rows) if len(rows)]

    def path_of(self, rank: int) -> Path:
        return shard_path(self.path, rank, self.num_shards)

    def records_of(self, rank: int) -> Sequence[WordInContext]:
        return as_table(self.records).take(self.rows[rank])

    def extra_of(self, rank: int) -> dict[str, Any]:
        return {**self.extra, "shard": f"{rank}-of-{self.num_shards}",
                "split_records_sha256": self.request["records_sha256"]}

    def request_of(self, rank: int) -> dict[str, Any]:
        return request_metadata(self.records_of(rank), self.featurizer, self.request["dtype"], self.extra_of(rank))

    def check_existing(self) -> None:
        """Refuse a shard file of another request, and any file in the shards folder that is no shard of this store,
        before any process computes (every process checks, so all stop with the same error rather than some waiting
        for a process that stopped)."""
        for rank in self.shards():
            is_finished(self.path_of(rank), self.request_of(rank))
        foreign = [path for path in self.folder_files() if not self.is_own(path)]
        if foreign:
            raise ProbingError(
                f"{foreign[0]}: this file is not a shard of {self.path} (its metadata do not name it as one), but it "
                f"lies in the folder of that store's shards, which extraction fills and deletes. Fix: move it (and any "
                f"other file that is not a shard) out of {foreign[0].parent}, then rerun")

    def folder_files(self) -> list[Path]:
        folder = shards_folder(self.path)
        return sorted(folder.iterdir()) if folder.is_dir() else []

    def is_own(self, path: Path) -> bool:
        """Whether `path` is a shard of this store (of any process count: its metadata name it after its file and
        carry this split's fingerprint), or the lock or half-built file of a shard."""
        for suffix in COMPANIONS:
            if path.name.endswith(suffix) and SHARD_NAME.fullmatch(path.name.removesuffix(suffix)):
                return path.is_file()
        if not (SHARD_NAME.fullmatch(path.name) and path.is_file()):
            return False
        try:
            with FeatureStore(path, file_locking=False) as store:
                metadata = store.metadata
        except (ProbingError, OSError):
            return False
        return (metadata.get("shard") == path.name.removesuffix(".h5")
                and metadata.get("split_records_sha256") == self.request["records_sha256"])

    def delete_shards(self) -> None:
        """Delete this store's shards (after the merge), and their folder if nothing else is left in it."""
        kept = []
        for path in self.folder_files():
            if self.is_own(path):
                path.unlink(missing_ok=True)
            else:
                kept.append(path)
        if kept:
            log.warning("%s: kept, it holds files that are not shards of %s (%s)", shards_folder(self.path),
                        self.path, ", ".join(path.name for path in kept))
        elif shards_folder(self.path).is_dir():
            shards_folder(self.path).rmdir()

    def check_mergeable(self) -> None:
        """Every shard present, of this request and complete; otherwise one ProbingError, nothing written."""
        for rank in self.shards():
            path = self.path_of(rank)
            if not path.exists():
                raise ProbingError(
                    f"{path}: shard {rank} of {self.num_shards} is missing at merge time, so {self.path} cannot be "
                    "assembled. Fix: put paths.store_dir on a file system that every process (every node) sees, "
                    "then rerun; the shards already written are kept and only the missing one is computed")
            if not is_finished(path, self.request_of(rank)):
                raise ProbingError(f"{path}: shard {rank} of {self.num_shards} is unfinished at merge time. "
                                   "Fix: rerun the extraction; it resumes the shard where it stopped")


def extract_split_sharded(records: Sequence[WordInContext], featurizer: Featurizer, path: str | Path, *,
                          fabric: Fabric, class_names: Sequence[str], metadata_extra: Mapping[str, Any] | None = None,
                          dtype: str = "float16", max_tokens_per_batch: int = 8192, progress: bool = True,
                          records_sha256: str | None = None, lock_wait_s: float = 0.0,
                          window: int | None = None) -> None:
    """`extract_split` shared by the processes of `fabric` (call it in every process): each fills its shard, then
    rank 0 merges them into `path`. One process extracts `path` directly."""
    path = Path(path)
    settings = {"dtype": dtype, "max_tokens_per_batch": max_tokens_per_batch,
                "progress": progress and fabric.global_rank == 0, "lock_wait_s": lock_wait_s, "window": window}
    if fabric.world_size == 1:
        extract_split(records, featurizer, path, class_names=class_names, metadata_extra=metadata_extra,
                      records_sha256=records_sha256, **settings)
        return
    extra = dict(metadata_extra or {})
    request = request_metadata(records, featurizer, dtype, extra, records_sha256)
    if fabric.broadcast(is_finished(path, request)):  # rank 0's answer, so that every process takes the same way
        log.info("%s: complete, %d rows", path, len(records))
        return
    plan = ShardPlan(path, records, featurizer, request, extra, fabric.world_size, window)
    plan.check_existing()
    rank = fabric.global_rank
    if len(plan.rows[rank]):
        extract_split(plan.records_of(rank), featurizer, plan.path_of(rank), class_names=class_names,
                      metadata_extra=plan.extra_of(rank), **settings)
    fabric.barrier()
    if rank == 0:
        merge_shards(plan, class_names, lock_wait_s)


def is_finished(path: Path, request: Mapping) -> bool:
    """Whether `path` is a complete store of `request` (a store of another request is refused)."""
    if not path.exists():
        return False
    with FeatureStore(path, file_locking=False) as store:
        store.check_metadata(request)
        return store.is_complete


def merge_shards(plan: ShardPlan, class_names: Sequence[str], lock_wait_s: float = 0.0) -> None:
    """Assemble the complete shards of `plan` into its store, then delete them."""
    started = time.perf_counter()
    with store_lock(plan.path, lock_wait_s):
        if not is_finished(plan.path, plan.request):
            plan.check_mergeable()
            if not plan.path.exists():
                FeatureStore.create(plan.path, plan.request, plan.records, class_names)
            with StoreWriter(plan.path) as writer:
                writer.match_records(plan.records, class_names)
                copied = copy_shards(plan, writer)
            log.info("%s: %d rows from %d shards in %.1f s", plan.path, copied, len(plan.shards()),
                     time.perf_counter() - started)
        plan.delete_shards()


def copy_shards(plan: ShardPlan, writer: StoreWriter) -> int:
    """Write the shards' rows not yet in the store, block after block in plan order; returns the rows written."""
    pending = np.zeros(len(plan.records), dtype=bool)
    pending[writer.pending_rows()] = True
    copied = 0
    with ShardReaders(plan) as readers:
        skipped = np.concatenate([readers.skipped_rows(rank) for rank in plan.shards()])
        writer.mark_skipped(skipped[pending[skipped]])
        for rows, features in readers.blocks_in_plan_order():
            if pending[rows].any():
                writer.write_rows(rows, features)
                copied += len(rows)
    return copied


class ShardReaders:
    """The open shards of a plan, read block by block (one block of every layer in memory at a time)."""

    def __init__(self, plan: ShardPlan):
        self.plan = plan
        self.stores = {rank: FeatureStore(plan.path_of(rank)) for rank in plan.shards()}

    def __enter__(self) -> ShardReaders:
        return self

    def __exit__(self, *exc) -> None:
        for store in self.stores.values():
            store.close()

    def skipped_rows(self, rank: int) -> np.ndarray:
        """Split rows of shard `rank` that the featurizer could not represent."""
        return self.plan.rows[rank][self.stores[rank].skipped_row_ids()]

    def blocks_in_plan_order(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(split rows, features (rows, num_layers, D)) of block k of shard r as window k * N + r of the plan."""
        blocks = [self.blocks(rank) for rank in self.plan.shards()]
        while blocks:
            for iterator in list(blocks):
                block = next(iterator, None)
                if block is None:
                    blocks.remove(iterator)
                else:
                    yield block

    def blocks(self, rank: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The blocks of shard `rank` in slot order, each checked against its hashes, with their split rows."""
        for rows, block in self.stores[rank].verified_blocks():
            yield self.plan.rows[rank][rows], block.transpose(1, 0, 2)
