"""HDF5 feature store: one file per (model, data set, split, pooling, context size). Each module of this package holds
one part (layout, metadata, hashes, labels, pieces, lock, writer, reader); the names other modules use are imported
from here (`from probing.features.store import FeatureStore`).

See docs/features.md, 'The store file'.
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
