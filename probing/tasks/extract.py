"""extract.py: fill the HDF5 feature store of every split of a data set (resumable)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from probing.tasks.common import build_encoder, ensure_features, load_data, log


def run(cfg: DictConfig) -> dict[str, Path]:
    data = load_data(cfg.data)
    encoder = build_encoder(cfg)
    paths = ensure_features(cfg, data, encoder, tuple(cfg.splits))
    for split, path in paths.items():
        log.info("%s store: %s", split, path)
    return paths
