"""What the jobs share: data loading, the encoder and its feature stores, the Trainer and its loggers, results."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig

from probing.data.sources import WordInContextData
from probing.data.splits import SPLIT_NAMES, split_summary
from probing.data.text import sha256_file
from probing.errors import ConfigError
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split
from probing.features.store import records_fingerprint, store_path

log = logging.getLogger("probing")


def load_data(data_cfg: DictConfig) -> WordInContextData:
    """Read the configured corpus and make its word-disjoint, sampled train/dev/test splits."""
    data = instantiate(data_cfg.source, _convert_="all").load()
    for split, counts in split_summary(data.splits).items():
        log.info("%s %s: %d words, %d combinations, %d contexts", data.name, split,
                 counts["words"], counts["combinations"], counts["contexts"])
    if data.skips.total():
        log.warning("%s: skipped while reading: %s", data.name, data.skips.summary())
    return data


def context_size_of(cfg: DictConfig) -> int | None:
    """`context_size` as the encoder takes it: words left and right of the target, None for the whole sentence."""
    value = cfg.context_size
    if value is None or value == "all":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"context_size={value!r} is not a context size. Fix: context_size=0, 2, 4, 8, 16, 32 (any "
                          "number of words >= 0 on each side of the target) or context_size=all (the whole sentence)")
    return value


def build_encoder(cfg: DictConfig) -> WordEncoder:
    features, model = cfg.features, cfg.model
    return WordEncoder(
        model.name_or_path, pooling=features.pooling, max_length=features.max_length,
        context_size=context_size_of(cfg), device=features.device, revision=model.revision,
        precision=str(features.precision), random_init=bool(model.get("random_init", False)),
        init_seed=int(model.get("init_seed", 0)),
    )


def ensure_features(cfg: DictConfig, data: WordInContextData, featurizer,
                    splits: tuple[str, ...] = SPLIT_NAMES) -> dict[str, Path]:
    """Extract (or resume, or verify) the store of each split; a store built for another request is refused."""
    file_hashes = [[Path(f).name, sha256_file(f)] for f in data.files]  # in reading order; names may repeat
    paths = {}
    for split in splits:
        records_sha256 = records_fingerprint(data.splits[split])
        path = store_path(cfg.features.store_dir, featurizer.store_name, data.name, split, featurizer.store_kind,
                          context_size_of(cfg), records_sha256)
        extract_split(
            data.splits[split], featurizer, path, class_names=data.classes, records_sha256=records_sha256,
            metadata_extra={"data": data.name, "split": split, "data_files": file_hashes},
            dtype=cfg.features.dtype, max_tokens_per_batch=cfg.features.max_tokens_per_batch,
        )
        paths[split] = path
    return paths


def build_trainer(cfg: DictConfig, callbacks: list[L.Callback]) -> L.Trainer:
    if cfg.probe.early_stopping.enabled:
        callbacks = [*callbacks, L.pytorch.callbacks.EarlyStopping(
            monitor="dev/micro_f1", mode="max", patience=cfg.probe.early_stopping.patience)]
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values()]
    return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)


def finished_results(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The results.json at `path` if an earlier run wrote it for exactly this configuration, else None."""
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous.get("config") == config:
            return previous
    return None
