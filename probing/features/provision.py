"""Store provisioning: the folder of the feature stores, and the store of every split a job reads, extracted (or
resumed, or verified) before the job reads it. Callers pass the settings; nothing here reads a config."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from probing.data.sources import WordInContextData
from probing.data.splits import SPLIT_NAMES
from probing.errors import ConfigError, setting
from probing.features.extraction import extract_split
from probing.features.featurizer import Featurizer
from probing.features.store import data_files_entry, records_fingerprint, store_path

# How long a job of a multirun waits for another job extracting into the store it needs (`lock_wait_s` null).
MULTIRUN_LOCK_WAIT_S = 24 * 3600.0


def store_root(store_dir: str | Path) -> Path:
    """`paths.store_dir` as a folder that exists (created if missing); a file there is a ConfigError."""
    root = Path(store_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError, PermissionError) as error:
        problem = "is a file, not a folder" if root.is_file() else f"cannot be created ({error.strerror})"
        raise ConfigError(f"paths.store_dir={store_dir} {problem}. Fix: set paths.store_dir (or PROBING_STORE_DIR) "
                          "to a folder you can write") from error
    return root


def ensure_features(data: WordInContextData, featurizer: Featurizer, *, store_dir: str | Path, dtype: str,
                    max_tokens_per_batch: int, lock_wait_s: float, splits: Iterable[str] = SPLIT_NAMES,
                    extract: Callable[..., Any] = extract_split) -> dict[str, Path]:
    """Extract (or resume, or verify) the store of each split under `store_dir` with `extract` (`extract_split`'s
    arguments; sharded extraction takes the same); a store built for another request is refused. `lock_wait_s`: how
    long to wait for another run extracting into the same store (`lock_wait_seconds`).

    The hashes of the data's files (`WordInContextData.files`) are part of each store's request (`data_files`); data
    without files (every-word data, whose records identify it) requests none, and then any store of the same records
    is taken, whatever files it records (`probing.features.store`)."""
    root = store_root(store_dir)
    data_files = data_files_entry(data.files)
    paths = {}
    for split in splits:
        if not data.splits[split]:
            raise ConfigError(f"the {split} split of {data.name} is empty, so there is nothing to extract for it. Fix: "
                              "set data.split.dev_fraction and test_fraction (shares of the words) so that every "
                              "split gets words, or use more data")
        records_sha256 = records_fingerprint(data.splits[split])
        path = store_path(root, featurizer.store_name, data.name, split, featurizer.store_kind,
                          featurizer.context_size, records_sha256, dtype)
        extract(
            data.splits[split], featurizer, path, class_names=data.classes, records_sha256=records_sha256,
            metadata_extra={"data": data.name, "split": split, **data_files},
            dtype=dtype, max_tokens_per_batch=max_tokens_per_batch, lock_wait_s=lock_wait_s,
        )
        paths[split] = path
    return paths


def lock_wait_seconds(lock_wait_s: Any, in_multirun: bool) -> float:
    """The stores' `lock_wait_s` (features.lock_wait_s): how long to wait for another run extracting into the same
    store. null = wait up to MULTIRUN_LOCK_WAIT_S in a multirun (a parallel launcher's jobs share their stores, and a
    layer sweep's first jobs all need the same one), refuse at once in a single run."""
    if lock_wait_s is None:
        return MULTIRUN_LOCK_WAIT_S if in_multirun else 0.0
    if isinstance(lock_wait_s, bool) or not isinstance(lock_wait_s, (int, float)) or lock_wait_s < 0:
        raise ConfigError(f"{setting('lock_wait_s')}={lock_wait_s!r} is not a number of seconds. Fix: a number >= 0, "
                          "or null (wait in a multirun, refuse at once in a single run)")
    return float(lock_wait_s)
