"""The two jobs behind the entry scripts: fill the feature store (extract.py) and probe one layer (probe.py)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from probing.callbacks import KeepBestWeights
from probing.data.sources import WordInContextData
from probing.data.splits import SPLIT_NAMES, split_summary
from probing.data.text import sha256_file
from probing.datamodule import StoreDataModule
from probing.encoder import WordEncoder
from probing.errors import ConfigError
from probing.extraction import extract_split
from probing.store import FeatureStore, records_fingerprint, store_path

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


def build_encoder(cfg: DictConfig) -> WordEncoder:
    features = cfg.features
    return WordEncoder(
        cfg.model.name_or_path, pooling=features.pooling, max_length=features.max_length,
        context_size=cfg.context_size, device=features.device, revision=cfg.model.revision,
        precision=str(features.precision),
    )


def ensure_features(cfg: DictConfig, data: WordInContextData, encoder: WordEncoder,
                    splits: tuple[str, ...] = SPLIT_NAMES) -> dict[str, Path]:
    """Extract (or resume, or verify) the store of each split; a store built for another request is refused."""
    file_hashes = [[Path(f).name, sha256_file(f)] for f in data.files]  # in reading order; names may repeat
    paths = {}
    for split in splits:
        records_sha256 = records_fingerprint(data.splits[split])
        path = store_path(cfg.features.store_dir, cfg.model.name_or_path, data.name, split,
                          cfg.features.pooling, cfg.context_size, records_sha256)
        extract_split(
            data.splits[split], encoder, path, class_names=data.classes, records_sha256=records_sha256,
            metadata_extra={"data": data.name, "split": split, "data_files": file_hashes},
            dtype=cfg.features.dtype, max_tokens_per_batch=cfg.features.max_tokens_per_batch,
        )
        paths[split] = path
    return paths


def resolve_layer(layer: Any, num_layers: int) -> int:
    """`layer` as an index into the hidden states 0..L (negative counts from the top); out of range is an error."""
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise ConfigError(f"layer={layer!r} is not an integer; use 0..{num_layers - 1} (0 = embeddings) or -1 for the top layer")
    if not -num_layers <= layer < num_layers:
        raise ConfigError(f"layer={layer} is out of range for this model: it has layers 0..{num_layers - 1} "
                          f"(0 = embeddings); use one of those, or -1 for the top layer")
    return layer % num_layers


def run_extract(cfg: DictConfig) -> dict[str, Path]:
    data = load_data(cfg.data)
    encoder = build_encoder(cfg)
    paths = ensure_features(cfg, data, encoder, tuple(cfg.splits))
    for split, path in paths.items():
        log.info("%s store: %s", split, path)
    return paths


def build_trainer(cfg: DictConfig, keep_best: KeepBestWeights) -> L.Trainer:
    callbacks: list[L.Callback] = [keep_best]
    if cfg.probe.early_stopping.enabled:
        callbacks.append(L.pytorch.callbacks.EarlyStopping(
            monitor="dev/micro_f1", mode="max", patience=cfg.probe.early_stopping.patience))
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values()]
    return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)


def stored_skips(path: Path) -> int:
    """Rows the encoder could not encode (e.g. a target longer than max_length), kept and flagged in the store."""
    with FeatureStore(path) as store:
        return store.num_skipped


def finish_loggers(trainer: L.Trainer, results: dict[str, Any]) -> None:
    """Put the final scores in the W&B run summary and close the run, so the next job of a multirun starts its own."""
    for logger in trainer.loggers:
        if isinstance(logger, L.pytorch.loggers.WandbLogger):
            summary = {f"{split}/final_{key}": results[split][key] for split in ("dev", "test")
                       for key in ("micro_f1", "n_combinations", "n_contexts")}
            logger.experiment.summary.update({**summary, "layer": results["layer"], "best_epoch": results["best_epoch"]})
            logger.experiment.finish()


def finished_results(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The results.json at `path` if an earlier run wrote it for exactly this configuration, else None."""
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous.get("config") == config:
            return previous
    return None


def run_probe(cfg: DictConfig) -> dict[str, Any]:
    """Train the batched s-class probes on one layer, evaluate dev/test with Zhao's metric, write results.json.

    A job whose run folder already holds the results of the same configuration is not run again, so a sweep
    interrupted and relaunched into its folder (`hydra.sweep.dir=...`) only runs the jobs that had not finished.
    """
    out = Path(cfg.paths.output_dir) / "results.json"
    config = OmegaConf.to_container(cfg, resolve=True)
    previous = finished_results(out, config)
    if previous is not None:
        log.info("%s already holds the results of this configuration; not running it again (delete it to rerun)", out)
        return previous
    started = time.time()
    L.seed_everything(cfg.seed, workers=True)
    data = load_data(cfg.data)
    encoder = build_encoder(cfg)
    layer = resolve_layer(cfg.layer, encoder.info.num_layers)
    stores = ensure_features(cfg, data, encoder)
    del encoder  # free the encoder's memory before training

    datamodule = StoreDataModule(stores, layer=layer, batch_size=cfg.probe.batch_size)
    datamodule.setup()
    module = instantiate(cfg.probe.module)(input_dim=datamodule.feature_dim, class_names=data.classes)
    keep_best = KeepBestWeights(monitor="dev/micro_f1")
    trainer = build_trainer(cfg, keep_best)
    for logger in trainer.loggers:  # the whole resolved config, so runs can be filtered by layer, model, data...
        logger.log_hyperparams({**config, "resolved_layer": layer})
    trainer.fit(module, datamodule=datamodule)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)

    results = {
        "model": cfg.model.name, "model_name_or_path": cfg.model.name_or_path, "data": data.name,
        "layer": layer, "probe": cfg.probe.name, "seed": cfg.seed, "pooling": cfg.features.pooling,
        "context_size": cfg.context_size, "classes": data.classes,
        "dev": module.split_metrics["dev"], "test": module.split_metrics["test"],
        "best_epoch": keep_best.best_epoch, "epochs_trained": trainer.current_epoch,
        "stores": {split: str(path) for split, path in stores.items()},
        "data_summary": split_summary(data.splits), "data_skips": data.skips.as_dict(),
        "extraction_skipped_rows": {split: stored_skips(path) for split, path in stores.items()},
        "duration_s": round(time.time() - started, 2), "config": config,
    }
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    finish_loggers(trainer, results)
    log.info("layer %d: dev micro-F1 %.3f, test micro-F1 %.3f -> %s", layer,
             results["dev"]["micro_f1"], results["test"]["micro_f1"], out)
    return results
