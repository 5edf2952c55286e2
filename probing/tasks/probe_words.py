"""probe.py on a word or word-pair task (task=upos, xpos, deprel, feats, ner, pos, supersense, jsonl): one
multi-class probe (linear, MLP-1, MLP-2; Hewitt & Liang 2019 §4) on one representation of the words, its control task
beside it (selectivity), and with `probe.mdl=true` the online codelength of the labels (Voita & Titov 2020 §2.2).

The task's data source reads the words and labels (`load_word_task()`, probing/data/word_tasks.py); the
representation fills the every-word stores and builds the datamodule (probing/probes/representations.py); the
probe is `probe.word_module` (probing/probes/word_probe.py).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf

from probing.config import build
from probing.data.settings import require_bool
from probing.data.splits import EVAL_SPLITS
from probing.errors import ConfigError
from probing.features.encoder import model_location
from probing.features.finetuned import finetuned_task
from probing.probes import mdl as online_code
from probing.probes.callbacks import best_epochs, best_weights_keeper, control_keeper, training_warnings
from probing.probes.controls import ControlTask
from probing.probes.word_data import load_word_task
from probing.tasks.common import build_trainer, encoder_name_or_path, finish_results, mdl_settings, store_settings

log = logging.getLogger(__name__)

WORD_TASK_KINDS = ("token", "word", "pair")  # task.kind of the tasks probe.py probes with one multi-class probe
SUMMARY_SCORES = ("accuracy", "macro_f1", "selectivity", "control_accuracy")  # into W&B's summary


def refuse_settings_of_sclass(cfg: DictConfig) -> None:
    """Settings of the s-class probes that a word task does not have."""
    if cfg.probe.get("reuse"):
        raise ConfigError("probe.reuse scores saved s-class probes; a word task trains its own. Fix: probe.reuse=null")
    if cfg.probe.get("level", "context") != "context":
        raise ConfigError(f"probe.level={cfg.probe.level} is a setting of the s-class task (type-level probing); "
                          f"task={cfg.task.name} probes every labelled word in context. Fix: probe.level=context")
    if cfg.probe.control_task.get("seen_fraction"):
        raise ConfigError("probe.control_task.seen_fraction holds out s-class contexts; a word task's dev and test "
                          "already hold words seen in training. Fix: seen_fraction=0")


def probe_words(cfg: DictConfig, control: ControlTask, config: dict[str, Any], run_dir: Path,
                loggers: list[Logger]) -> dict[str, Any]:
    """Train the word probe (and its control, and the MDL prefix probes) on one representation, score dev/test,
    and sum up the run."""
    started = time.time()
    refuse_settings_of_sclass(cfg)
    L.seed_everything(cfg.seed, workers=True)
    mdl = mdl_settings(cfg)
    representation = build(cfg.representation, "representation")
    data = load_word_task(build(cfg.data.source, "data.source"), cfg.task.name, cfg.data.name)
    pair_product = require_bool("probe.pair_product", cfg.probe.get("pair_product", False))
    inputs = representation.word_inputs(data, store_settings(cfg.features), cfg.probe.batch_size, control,
                                        pair_product=pair_product, mdl_seed=mdl.seed if mdl.enabled else None)
    datamodule = inputs.datamodule
    keepers = [] if control.seed is None else [control_keeper(False)]
    trainer = build_trainer(cfg, keepers, loggers=loggers)
    for logger in trainer.loggers:
        logger.log_hyperparams({**config, "representation": inputs.about["representation"]})
    block_ends = mdl.block_ends(len(datamodule.splits["train"])) if mdl.enabled else None
    module = build(cfg.probe.word_module, "probe.word_module")(
        input_dim=datamodule.feature_dim, label_names=inputs.classes, num_layers=datamodule.num_layers,
        mix=OmegaConf.to_container(cfg.probe.mix, resolve=True), control=control.seed is not None,
        mdl_block_ends=block_ends)
    trainer.fit(module, datamodule=datamodule)
    epochs, best_dev = best_epochs(trainer.callbacks), best_weights_keeper(trainer.callbacks).best_score
    warnings = training_warnings(best_dev, trainer.current_epoch)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)
    results = {
        "task": cfg.task.name, "probe_family": module.hparams.family, "rank": module.hparams.rank,
        "pair": bool(data.pair), "pair_product": pair_product if data.pair else None,
        "model": cfg.model.name, "model_name_or_path": model_location(encoder_name_or_path(cfg)),
        "finetuned_task": finetuned_task(encoder_name_or_path(cfg)),
        "random_init": bool(cfg.model.get("random_init", False)), "data": cfg.data.name, "level": "context",
        **inputs.about, "probe": cfg.probe.name, "seed": cfg.seed, "labels": list(inputs.classes),
        "control_seed": control.seed,
        **{split: module.split_metrics[split] for split in EVAL_SPLITS if split in module.split_metrics},
        **module.mix_summary(), **epochs, "warnings": warnings, "epochs_trained": trainer.current_epoch,
    }
    return finish_results(results, module, datamodule, mdl, trainer, SUMMARY_SCORES, started, config)


def log_word_results(results: dict[str, Any], out: Path) -> None:
    control = f" (selectivity {results['test']['selectivity']:+.3f})" if "selectivity" in results["test"] else ""
    log.info("%s %s %s: dev accuracy %.3f, test accuracy %.3f%s%s -> %s", results["task"], results["probe_family"],
             results["representation"], results["dev"]["accuracy"], results["test"]["accuracy"], control,
             online_code.describe(results), out)
