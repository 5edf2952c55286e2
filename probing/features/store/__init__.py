"""HDF5 feature store: one file per (model, data set, split, pooling, context size).

Layout of a store file:

    features        (num_layers, N, D) float16 (or float32), contiguous (one layer is one run of bytes),
                    allocated when the file is created; rows are stored in the order they were written, each
                    write (an extraction window) as one contiguous block
    slots           (N,) int64     where row i sits in `features` (-1 until written, and for skipped rows)
    block_rows      (N,) int64     at the first slot of each block: its number of slots (0 elsewhere)
    block_xxh3      (N, num_layers) uint64  at the first slot of each block: per layer, the XXH3-64 hash
                    (xxhash.xxh3_64, seed 0) of the block's bytes, (rows, D) C-order in the storage dtype
    labels          (N,) int32     index into `class_names`
    word_ids        (N,) int32     index into `words`
    combination_ids (N,) int32     index into `combinations`, the word-s-class pairs (Zhao et al. 2020 §3.1)
    combinations    (M, 2) int32   (word id, label) of each combination, in order of first occurrence
    class_names, words             variable-length UTF-8 strings
    written         (N,) uint8     1 once the row is final (features stored, or the row skipped)
    skipped         (N,) uint8     1 if the encoder could not represent the row (reason counted by its SkipCounter)
    table_xxh3      (T,) uint64    the XXH3-64 hash of each table of SEALED_TABLES (every dataset above but
                                   `features`), written when the store completes (0 until then)
    staged_batches  (N,) int32     scratch of the window being extracted (see "Staging" in `writer`): at the first
    staged_xxh3     (N,) uint64    row of a staged unit of batches, its number of batches and the hash of its features

Row i is record i of the split; readers get rows in that order (through `slots`). Skipped rows stay in
the file, flagged, so no row is lost silently; readers leave them out. Writing each block contiguously
costs one write per layer instead of one small write per row and layer (1.4 ms instead of 0.1 s for 300
rows of a 7-layer, 384-dimensional model). The K kept rows of a complete store fill slots 0..K-1, and its
blocks tile them: each block starts where the one before ends, from slot 0. Extraction writes windows of
consecutive records in record order (`probing.features.extraction`), so the slots of its stores are the
record order itself and a layer is read sequentially; rows written in another order are scattered into
record order on reading.

Where each part lives (each module's docstring says its part):

    layout     the format: table names, attribute encoding, opening a file as a store, the block tiling
    metadata   a store's identity: its path, the request in its attributes and how a reopening compares it
    hashes     checksums of blocks and tables (the seal), finiteness
    labels     the tables the records determine: class names, words, labels, word and combination ids
    lock       the store's lock (concurrency) and a full or unwritable disk as one error line
    writer     create_store_file, StoreWriter, WindowStage: crash safety, resuming, staging
    reader     FeatureStore and LayerReader: checked reads of a layer in record order

The names other modules use are imported from here (`from probing.features.store import FeatureStore`).
"""

from __future__ import annotations

from probing.features.store.hashes import (
    TABLE_PIECE_BYTES,
    all_finite,
    read_checked_tables,
    read_tables,
    table_hashes,
)
from probing.features.store.layout import FEATURE_DTYPES, RECORD_TABLES, SEALED_TABLES, STORE_FORMAT
from probing.features.store.lock import disk_full_is_user_error, one_line, store_lock
from probing.features.store.metadata import code_version, data_files_entry, records_fingerprint, store_path
from probing.features.store.reader import READ_GROUP_BYTES, FeatureStore, block_groups, record_order
from probing.features.store.writer import StoreWriter, WindowStage, create_store_file

__all__ = [
    "FEATURE_DTYPES",
    "READ_GROUP_BYTES",
    "RECORD_TABLES",
    "SEALED_TABLES",
    "STORE_FORMAT",
    "TABLE_PIECE_BYTES",
    "FeatureStore",
    "StoreWriter",
    "WindowStage",
    "all_finite",
    "block_groups",
    "code_version",
    "create_store_file",
    "data_files_entry",
    "disk_full_is_user_error",
    "one_line",
    "read_checked_tables",
    "read_tables",
    "record_order",
    "records_fingerprint",
    "store_lock",
    "store_path",
    "table_hashes",
]
