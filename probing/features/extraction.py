"""Fill a feature store with the layer-wise word representations of one split, resuming where a run stopped.

See docs/features.md, 'Extraction: windows, batches, resuming'.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from probing.data.records import WordInContext
from probing.errors import ProbingError
from probing.features.encoder import PreparedInput, WordEncoder
from probing.features.store import FeatureStore, StoreWriter, WindowStage, records_fingerprint, store_lock

log = logging.getLogger(__name__)

# The pooled float32 features (all layers) of the rows written together as one block: a window of 1,680 rows for
# bert-base (13 x 768), 6,241 for MiniLM (7 x 384). Larger windows sort batches by length over more rows (a little
# less padding) and keep more memory.
WINDOW_BYTES = 64 << 20
# ...and at most this many rows: the window's tokenised inputs (about 1 KB per row) are held with its features, so a
# narrow model (a tiny encoder: 87k rows of 3 x 64) would otherwise hold ~175 MB of inputs per window.
MAX_WINDOW_ROWS = 16384
# Computing time after which a window's finished batches are staged (a kill loses at most this much, plus one batch).
# Each staging writes and flushes the unit's features and slots: a few ms, so staging less often costs nothing.
STAGE_SECONDS = 2.0
# Rows tokenised in one `prepare_many` call (the tokenizer's output for them is held until they are turned into inputs).
PREPARE_ROWS = 1024


@dataclass
class ExtractionReport:
    """What one `extract_split` call did. Rows: total = already_done + computed + skipped_now."""

    path: Path
    rows_total: int
    rows_already_done: int  # flagged in the store, or staged there by a killed run (read back, not computed)
    rows_computed: int
    rows_skipped: int
    skipped_now: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        skipped = f"{self.rows_skipped} skipped in the store"
        if self.skipped_now:
            reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped_now.items()))
            skipped += f" (this run: {reasons})"
        return (f"{self.path}: {self.rows_total} rows, {self.rows_already_done} already done, "
                f"{self.rows_computed} computed, {skipped}; {self.tokens} tokens in {self.seconds:.1f} s "
                f"({self.tokens_per_second:.0f} tokens/s)")


def request_metadata(records: Sequence[WordInContext], encoder: WordEncoder, dtype: str,
                     extra: Mapping[str, Any], records_sha256: str | None = None) -> dict[str, Any]:
    """The attributes a store for this request must carry: the features' identity and settings
    (`encoder.store_metadata()`), the storage dtype, the records, and `extra`.

    `encoder` is anything with WordEncoder's extraction interface (prepare_many, encode, skips,
    store_metadata), e.g. a bag-of-embeddings baseline. `records_sha256`: the records' fingerprint when the
    caller has it already (it is computed otherwise)."""
    metadata = {**encoder.store_metadata(), "dtype": dtype,
                "records_sha256": records_sha256 or records_fingerprint(records), "num_rows": len(records)}
    clashes = sorted(metadata.keys() & extra.keys())
    if clashes:
        raise ValueError(f"metadata_extra may not redefine {clashes}")
    return {**metadata, **extra}


def plan_batches(lengths: Sequence[int], max_tokens_per_batch: int) -> list[list[int]]:
    """Indices into `lengths`, longest first, cut so that len(batch) * longest <= the budget.

    An input longer than the budget forms a batch of its own. Equal lengths keep their order.
    """
    batches: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        batch = batches[-1] if batches else None
        if batch is None or (len(batch) + 1) * lengths[batch[0]] > max_tokens_per_batch:
            batches.append([index])
        else:
            batch.append(index)
    return batches


def window_rows(metadata: Mapping[str, Any], rows: int | None = None) -> int:
    """The rows of one window: `rows` if given, else as many as WINDOW_BYTES of float32 features hold in a store of
    `metadata` (which holds its num_layers and hidden_size), at most MAX_WINDOW_ROWS."""
    if rows is not None:
        if rows < 1:
            raise ValueError(f"window_rows must be >= 1, got {rows}")
        return rows
    return max(1, min(MAX_WINDOW_ROWS, WINDOW_BYTES // (4 * metadata["num_layers"] * metadata["hidden_size"])))


def extract_split(records: Sequence[WordInContext], encoder: WordEncoder, path: str | Path, *,
                  class_names: Sequence[str], metadata_extra: Mapping[str, Any] | None = None,
                  dtype: str = "float16", max_tokens_per_batch: int = 8192, progress: bool = True,
                  records_sha256: str | None = None, lock_wait_s: float = 0.0,
                  window: int | None = None) -> ExtractionReport:
    """Make `path` hold the features of every record, computing only the rows not yet written.

    A new store is created; an existing one must match the request (model, settings, data: else
    StoreMismatchError listing each difference) and is resumed, or only read if it is complete.
    `metadata_extra` adds request keys such as the data name, split and data-file hashes; they are
    recorded and compared like the others. Another run extracting into `path` is waited for up to `lock_wait_s`
    seconds (then refused); the store it completed is then only read. `window`: rows written together (None: as
    many as WINDOW_BYTES hold).
    """
    started = time.perf_counter()
    path = Path(path)
    if not records:
        raise ProbingError(
            f"{path}: no records to extract features for. Fix: check the data files and the split settings")
    request = request_metadata(records, encoder, dtype, metadata_extra or {}, records_sha256)
    report = _finished_report(path, request, len(records), started)
    if report is None:
        with store_lock(path, lock_wait_s):
            if not path.exists():
                FeatureStore.create(path, request, records, class_names)
            # another run may have completed the store before this one took the lock
            report = _finished_report(path, request, len(records), started) or _fill(
                path, request, records, class_names, encoder, window_rows(request, window), max_tokens_per_batch,
                progress, started)
    log.info("%s", report.summary())
    return report


def _finished_report(path: Path, request: Mapping[str, Any], rows: int, started: float) -> ExtractionReport | None:
    """The report of a complete store at `path` that matches `request`, found by reading only; None if there is no
    store yet or it is unfinished. A file that is not a store, or a store of another request, is refused.

    HDF5's file lock is not taken, so that this look never makes the open of a run writing the store fail."""
    if not path.exists():
        return None
    with FeatureStore(path, file_locking=False) as store:
        store.check_metadata(request)
        if not store.is_complete:
            return None
        skipped = store.num_skipped
    return ExtractionReport(path=path, rows_total=rows, rows_already_done=rows, rows_computed=0,
                            rows_skipped=skipped, seconds=time.perf_counter() - started)


def _fill(path: Path, request: Mapping[str, Any], records: Sequence[WordInContext], class_names: Sequence[str],
          encoder: WordEncoder, window: int, max_tokens_per_batch: int, progress: bool,
          started: float) -> ExtractionReport:
    """Compute and write the unwritten rows of the store at `path` (its lock held), once its tables are checked
    against the records (`StoreWriter`, `StoreWriter.match_records`)."""
    skips_before = Counter(encoder.skips.counts)
    with StoreWriter(path) as writer:
        writer.check_metadata(request)
        writer.match_records(records, class_names)
        pending = writer.pending_rows()
        # the token total is not known before the rows are tokenised: the bar counts rows (skipped ones included)
        with tqdm(total=len(pending), unit="row", unit_scale=True, desc=f"{path.name} (rows)",
                  disable=not progress) as bar:
            todo = _prepared_rows(pending, records, encoder, writer, bar)
            encoded, tokens, restored = _encode_rows(todo, encoder, writer, window, max_tokens_per_batch, bar)
        rows_skipped = int(writer.file["skipped"][()].sum())
    return ExtractionReport(
        path=path, rows_total=len(records), rows_already_done=len(records) - len(pending) + restored,
        rows_computed=encoded - restored,
        rows_skipped=rows_skipped, skipped_now=dict(encoder.skips.counts - skips_before), tokens=tokens,
        seconds=time.perf_counter() - started,
    )


def _prepared_rows(pending: np.ndarray, records: Sequence[WordInContext], encoder: WordEncoder, writer: StoreWriter,
                   bar) -> Iterator[tuple[int, PreparedInput]]:
    """(row, input) of each pending row the encoder can represent, in record order, tokenised PREPARE_ROWS rows at a
    time; the rows it cannot represent are flagged skipped in the store as their chunk is tokenised."""
    for first in range(0, len(pending), PREPARE_ROWS):
        rows = pending[first:first + PREPARE_ROWS]
        inputs = encoder.prepare_many([records[row] for row in rows])
        skipped = [row for row, prepared in zip(rows, inputs) if prepared is None]
        if skipped:
            writer.mark_skipped(skipped)
            bar.update(len(skipped))
        yield from ((int(row), prepared) for row, prepared in zip(rows, inputs) if prepared is not None)
        del inputs  # before the next chunk is tokenised


def _encode_rows(todo: Iterator[tuple[int, PreparedInput]], encoder: WordEncoder, writer: StoreWriter, window: int,
                 max_tokens_per_batch: int, bar) -> tuple[int, int, int]:
    """Encode `todo` (in record order) and write it window by window (`window` rows each); returns the rows encoded or
    read back, the (unpadded) input tokens encoded, and the rows read back from a killed run's staging instead."""
    rows_done = tokens = restored = 0
    while chunk := list(islice(todo, window)):
        inputs = [prepared for _, prepared in chunk]
        stage = writer.window(np.asarray([row for row, _ in chunk], dtype=np.int64))
        pooled, computed = _encode_window(inputs, encoder, stage, max_tokens_per_batch, bar)
        stage.commit(pooled)
        tokens += sum(len(inputs[i].input_ids) for i in computed)
        restored += len(inputs) - len(computed)
        rows_done += len(inputs)
        del chunk, inputs, stage, pooled  # before the next window is tokenised and computed: one window at a time
    return rows_done, tokens, restored


def _encode_window(inputs: list[PreparedInput], encoder: WordEncoder, stage: WindowStage, max_tokens_per_batch: int,
                   bar) -> tuple[np.ndarray, list[int]]:
    """The features (rows, num_layers, D) of one window's inputs, computed in the batches of `plan_batches` (those a
    killed run staged are read back), staging the finished batches every STAGE_SECONDS; and the positions computed."""
    batches = plan_batches([len(prepared.input_ids) for prepared in inputs], max_tokens_per_batch)
    pooled = np.empty((len(inputs), *stage.row_shape), np.float32)
    done = stage.restore(batches, pooled)
    bar.update(sum(len(batch) for batch in batches[:done]))
    unit, started = [], time.perf_counter()
    for number, batch in enumerate(batches[done:], done):
        pooled[batch] = encoder.encode([inputs[i] for i in batch]).numpy()
        bar.update(len(batch))
        unit.append(batch)
        if time.perf_counter() - started >= STAGE_SECONDS and number + 1 < len(batches):
            stage.save(unit, pooled)
            unit, started = [], time.perf_counter()
    return pooled, [i for batch in batches[done:] for i in batch]
