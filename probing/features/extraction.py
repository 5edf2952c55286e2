"""Fill a feature store with the layer-wise word representations of one split, resuming where a run stopped.

See docs/features.md, 'Extraction: windows, batches, resuming'.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from probing.data.records import WordInContext
from probing.errors import ProbingError
from probing.features.encoder import PreparedInput, WordEncoder, in_dtype
from probing.features.pipeline import Prefetch, WriteBehind
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
# Windows tokenised and batched ahead of the forward, and windows computed and waiting for their writes (a window's
# features are written as one block, so its memory is held until then): each one more window of memory.
PREFETCH_WINDOWS = 2
WRITE_BEHIND_WINDOWS = 2


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
                  window: int | None = None, overlap: bool = True) -> ExtractionReport:
    """Make `path` hold the features of every record, computing only the rows not yet written.

    A new store is created; an existing one must match the request (model, settings, data: else
    StoreMismatchError listing each difference) and is resumed, or only read if it is complete.
    `metadata_extra` adds request keys such as the data name, split and data-file hashes; they are
    recorded and compared like the others. Another run extracting into `path` is waited for up to `lock_wait_s`
    seconds (then refused); the store it completed is then only read. `window`: rows written together (None: as
    many as WINDOW_BYTES hold). `overlap`: tokenise and write in threads of their own while the model computes (the
    store is the same either way).
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
                progress, started, overlap)
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
          encoder: WordEncoder, window: int, max_tokens_per_batch: int, progress: bool, started: float,
          overlap: bool = True) -> ExtractionReport:
    """Compute and write the unwritten rows of the store at `path` (its lock held), once its tables are checked
    against the records (`StoreWriter`, `StoreWriter.match_records`). `overlap`: tokenise and write in threads of
    their own, overlapping the forward (else one after the other, in this thread)."""
    skips_before = Counter(encoder.skips.counts)
    with StoreWriter(path) as writer:
        writer.check_metadata(request)
        writer.match_records(records, class_names)
        pending = writer.pending_rows()
        # the token total is not known before the rows are tokenised: the bar counts rows (skipped ones included)
        with tqdm(total=len(pending), unit="row", unit_scale=True, desc=f"{path.name} (rows)",
                  disable=not progress) as bar:
            windows = Prefetch(_windows(pending, records, encoder, window, max_tokens_per_batch), PREFETCH_WINDOWS,
                               threaded=overlap)
            behind = WriteBehind(WRITE_BEHIND_WINDOWS, threaded=overlap)
            try:
                encoded, tokens, restored = _encode_windows(windows, encoder, writer, behind, bar)
            except BaseException:
                _stop(windows, behind)
                raise
            _stop(windows, behind, raising=True)
        rows_skipped = int(writer.file["skipped"][()].sum())
    return ExtractionReport(
        path=path, rows_total=len(records), rows_already_done=len(records) - len(pending) + restored,
        rows_computed=encoded - restored,
        rows_skipped=rows_skipped, skipped_now=dict(encoder.skips.counts - skips_before), tokens=tokens,
        seconds=time.perf_counter() - started,
    )


def _stop(windows: Prefetch, behind: WriteBehind, raising: bool = False) -> None:
    """Stop the tokenising and wait for the queued writes (a window computed before an error is still written); the
    writes' own error is raised unless another is on its way out (`raising` False)."""
    windows.close()
    try:
        behind.close()
    except BaseException:
        if raising:
            raise


@dataclass
class _Window:
    """The rows of one window (ascending) with their inputs and batches (`plan_batches`), each batch collated where
    the encoder can (`WordEncoder.collate`); and the rows found unrepresentable while they were tokenised."""

    rows: np.ndarray
    inputs: list[PreparedInput]
    batches: list[list[int]]
    collated: list | None
    skipped: list[int]


def _windows(pending: np.ndarray, records: Sequence[WordInContext], encoder: WordEncoder, window: int,
             max_tokens_per_batch: int) -> Iterator[_Window]:
    """The windows of the pending rows the encoder can represent, in record order, tokenised PREPARE_ROWS rows at a
    time as the windows need them; the unrepresentable rows come with the window during whose filling they were
    found (or, after the last, with a window of no rows)."""
    skipped: list[int] = []
    todo = _prepared_rows(pending, records, encoder, skipped)
    collate = getattr(encoder, "collate", None)
    while chunk := list(islice(todo, window)):
        inputs = [prepared for _, prepared in chunk]
        batches = plan_batches([len(prepared.input_ids) for prepared in inputs], max_tokens_per_batch)
        collated = None if collate is None else [collate([inputs[i] for i in batch]) for batch in batches]
        yield _Window(np.asarray([row for row, _ in chunk], dtype=np.int64), inputs, batches, collated, skipped[:])
        skipped.clear()
    if skipped:
        yield _Window(np.empty(0, np.int64), [], [], None, skipped[:])


def _prepared_rows(pending: np.ndarray, records: Sequence[WordInContext], encoder: WordEncoder,
                   skipped: list[int]) -> Iterator[tuple[int, PreparedInput]]:
    """(row, input) of each pending row the encoder can represent, in record order, tokenised PREPARE_ROWS rows at a
    time; the rows it cannot represent are added to `skipped` as their chunk is tokenised."""
    for first in range(0, len(pending), PREPARE_ROWS):
        rows = pending[first:first + PREPARE_ROWS]
        inputs = encoder.prepare_many([records[row] for row in rows])
        skipped.extend(int(row) for row, prepared in zip(rows, inputs) if prepared is None)
        yield from ((int(row), prepared) for row, prepared in zip(rows, inputs) if prepared is not None)
        del inputs  # before the next chunk is tokenised


def _encode_windows(windows: Iterator[_Window], encoder: WordEncoder, writer: StoreWriter, behind: WriteBehind,
                    bar) -> tuple[int, int, int]:
    """Encode each window and have `behind` write it as a block (its skipped rows flagged first); returns the rows
    encoded or read back, the (unpadded) input tokens encoded, and the rows read back from a killed run's staging."""
    rows_done = tokens = restored = 0
    for window in windows:
        if window.skipped:
            behind.put(partial(writer.mark_skipped, window.skipped))
            bar.update(len(window.skipped))
        if not len(window.rows):
            continue
        behind.open_window()
        computed = _encode_window(window, encoder, writer.window(window.rows), behind, bar)
        tokens += sum(len(window.inputs[i].input_ids) for i in computed)
        restored += len(window.rows) - len(computed)
        rows_done += len(window.rows)
    return rows_done, tokens, restored


def _encode_window(window: _Window, encoder: WordEncoder, stage: WindowStage, behind: WriteBehind,
                   bar) -> list[int]:
    """Compute the features (rows, num_layers, D) of one window in its batches (those a killed run staged are read
    back), have `behind` stage the finished batches every STAGE_SECONDS and commit the window; returns the positions
    computed. The features are put in place by `behind` too, as each batch's copy from the device completes."""
    batches = window.batches
    pooled = np.empty((len(window.inputs), *stage.row_shape), np.float32)
    done = stage.restore(batches, pooled)
    bar.update(sum(len(batch) for batch in batches[:done]))
    unit, started = [], time.perf_counter()
    rows_dtype = getattr(torch, stage.dtype.name)  # cast on the device: half the bytes copied back into a float16 store
    for number, batch in enumerate(batches[done:], done):
        if window.collated is None:
            features, ready, computed = _encode_in(encoder, [window.inputs[i] for i in batch], rows_dtype), None, None
        else:
            rows = encoder.encode_collated(window.collated[number], on_device=True)
            computed = rows if rows.is_cuda else None  # kept until placed: an overflow of float16 is named from it
            features, ready = to_host(in_dtype(rows, rows_dtype) if rows.is_cuda else rows)
        behind.put(partial(_place, pooled, batch, features, ready, computed))
        bar.update(len(batch))
        unit.append(batch)
        if time.perf_counter() - started >= STAGE_SECONDS and number + 1 < len(batches):
            behind.put(partial(stage.save, unit, pooled))
            unit, started = [], time.perf_counter()
    behind.put(partial(stage.commit, pooled), closes_window=True)
    return [i for batch in batches[done:] for i in batch]


def to_host(features: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    """A copy of `features` in host memory and the event that marks it complete: from a CUDA device, copied into
    pinned memory without waiting (the event is None where the copy is complete on return)."""
    if features.device.type != "cuda":
        return features.cpu(), None
    host = torch.empty(features.shape, dtype=features.dtype, pin_memory=True)
    host.copy_(features, non_blocking=True)
    ready = torch.cuda.Event()
    ready.record()
    return host, ready


def _place(pooled: np.ndarray, batch: list[int], features: torch.Tensor, ready: torch.cuda.Event | None,
           computed: torch.Tensor | None = None) -> None:
    """Put a batch's features at its positions in the window, once their copy from the device is complete. Rows that
    came back non-finite in the store's dtype are placed from `computed` (float32, still on the device) instead, so
    that the writer tells an overflow of float16 from the encoder's own NaN or inf."""
    if ready is not None:
        ready.synchronize()
    if computed is not None and not bool(torch.isfinite(features).all()):
        features = computed.cpu()
    pooled[batch] = features.numpy()


def _encode_in(encoder: WordEncoder, inputs: list[PreparedInput], dtype: torch.dtype) -> torch.Tensor:
    """The pooled rows of `inputs`, cast to `dtype` where they are computed; in float32 where that cast overflows,
    so that the writer tells an overflow of float16 from the encoder's own NaN or inf."""
    rows = encoder.encode(inputs, dtype=dtype)
    return rows if bool(torch.isfinite(rows).all()) else encoder.encode(inputs)
