"""extract.py: fill the HDF5 feature store of every split of a data set (resumable)."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from probing.config import build
from probing.data.splits import SPLIT_NAMES
from probing.errors import ConfigError
from probing.tasks.common import check_config, ensure_features, load_data

log = logging.getLogger(__name__)

# The top-level settings of conf/extract.yaml (anything else is a typo).
KNOWN_KEYS = ("task_name", "paths", "model", "data", "features", "context_size", "splits")


def run(cfg: DictConfig) -> dict[str, Path]:
    check_config(cfg, KNOWN_KEYS)
    splits = requested_splits(cfg.splits)
    data = load_data(cfg.data)
    encoder = build(cfg.features.encoder, "features.encoder")
    paths = ensure_features(cfg, data, encoder, splits)
    for split, path in paths.items():
        log.info("%s store: %s", split, path)
    return paths


def requested_splits(splits) -> list[str]:
    unknown = [split for split in splits if split not in SPLIT_NAMES]
    if unknown or not splits:
        raise ConfigError(f"splits={list(splits)}: {unknown or 'none'} is not a split of the data. Fix: a non-empty "
                          f"list of {', '.join(SPLIT_NAMES)}, e.g. splits=[train,dev]")
    return list(splits)
