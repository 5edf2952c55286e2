"""probe.py: train the s-class probes on one representation of the words, score them, write results.json; or, on a
word or word-pair task (task=upos, xpos, deprel, feats, ner, pos, supersense, jsonl), one multi-class probe (linear,
MLP-1, MLP-2; Hewitt & Liang 2019 §4) on the words' vectors from the every-word stores (`probe_words`). Both train
their control task beside, and with `probe.mdl=true` the prefix probes of the online code (Voita & Titov 2020 §2.2).

The representation is built from `conf/representation/` (probing/probes/representations.py): one encoder layer
(`layer=3`), the scalar mix of all layers (`layer=mix`), a bag-of-embeddings baseline (`baseline=pbert`, or the same
name as `layer=`), or at `probe.level=type` a word space (AVG-l, Rand, BERTw, a static file). The data source, the
control task, the probe module and its optimizer, the callbacks, loggers and Trainer are built from the composed
config with hydra.utils.instantiate. A job whose run folder already holds the results of the same configuration is
not run again, so a sweep relaunched into its folder (`hydra.sweep.dir=...`) only runs the jobs that had not finished.
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
from probing.data.files import write_json_atomically
from probing.data.settings import require_bool, require_int
from probing.data.splits import EVAL_SPLITS, SEEN
from probing.errors import ConfigError
from probing.features.attention import DEFAULT_POLICY, window_policy
from probing.features.encoder import model_location
from probing.features.featurizer import parse_context_size
from probing.features.finetuned import finetuned_task
from probing.features.store import FeatureStore
from probing.probes import mdl as online_code
from probing.probes.callbacks import best_epochs, best_weights_keeper, control_keeper, training_warnings
from probing.probes.controls import NO_CONTROL_TASK, ControlTask
from probing.probes.mdl import MdlSettings
from probing.probes.representations import ProbeInputs
from probing.probes.saved import (
    PROBES_FILE,
    find_reusable,
    load_probes,
    module_of,
    probe_files,
    reused_summary,
    save_probes,
    storage_dtype,
)
from probing.probes.word_data import load_word_task
from probing.tasks.common import (
    build_trainer,
    check_config,
    closing_loggers,
    encoder_name_or_path,
    finish_results,
    job_state,
    mdl_settings,
    store_settings,
)
from probing.vocabulary import SCLASS_TASK

log = logging.getLogger(__name__)

# The top-level settings of conf/probe.yaml (anything else is a typo).
KNOWN_KEYS = ("task_name", "task", "paths", "model", "data", "features", "probe", "trainer", "callbacks", "logger",
              "embeddings", "type_spaces", "layer", "baseline", "baselines", "representation", "representations",
              "context_size", "seed", "optimized_metric", "finetuned", "comparison_setup", "run_name", "run_group")
SUMMARY_SCORES = ("micro_f1", "n_combinations", "n_contexts", "selectivity", "control_micro_f1")  # into W&B's summary
WORD_TASK_KINDS = ("token", "word", "pair")  # task.kind of the tasks probe.py probes with one multi-class probe
WORD_SUMMARY_SCORES = ("accuracy", "macro_f1", "selectivity", "control_accuracy")  # into W&B's summary


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train the batched s-class probes on one representation (or score saved ones, `probe.reuse`), evaluate
    dev/test, write results.json; bad settings are refused before any extraction."""
    check_config(cfg, KNOWN_KEYS)
    out, config, previous = job_state(cfg)
    if previous is not None:
        return previous
    require_int("probe.batch_size", cfg.probe.batch_size, minimum=1)
    require_int("trainer.max_epochs", cfg.trainer.get("max_epochs"), minimum=1)  # 0 would score untrained probes
    control = build(cfg.probe.control_task, "probe.control_task") if cfg.probe.get("control_task") else NO_CONTROL_TASK
    if cfg.probe.get("reuse"):  # a missing, damaged or changed probes file is refused before any extraction
        for path in probe_files(cfg.probe.reuse):
            load_probes(path)
    refuse_mdl_without_training(cfg)
    words = word_task(cfg)
    with closing_loggers(cfg.get("logger")) as loggers:
        results = (probe_words if words else probe)(cfg, control, config, out.parent, loggers)
    write_json_atomically(out, results)
    if words:
        log_word_results(results, out)
        return results
    log.info("%s: dev micro-F1 %.3f, test micro-F1 %.3f%s%s -> %s", results["representation"],
             results["dev"]["micro_f1"], results["test"]["micro_f1"], selectivity_note(results),
             online_code.describe(results), out)
    return results


def refuse_mdl_without_training(cfg: DictConfig) -> None:
    """The online code trains its prefix probes: saved probes or type-level probing have none."""
    if not cfg.probe.get("mdl"):
        return
    if cfg.probe.get("reuse"):
        raise ConfigError("probe.mdl=true trains the prefix probes of the online code; probe.reuse scores saved "
                          "probes without training. Fix: probe.mdl=false or probe.reuse=null")
    if cfg.probe.get("level", "context") != "context":
        raise ConfigError("probe.mdl=true sends the labels of the training contexts; probe.level=type has one "
                          "example per word instead. Fix: probe.level=context or probe.mdl=false")


def word_task(cfg: DictConfig) -> bool:
    """True for a word or word-pair task (one multi-class probe), False for the s-class task; a fine-tuning-only
    task is refused."""
    kind = cfg.task.get("kind", SCLASS_TASK)
    if kind == SCLASS_TASK:
        return False
    if kind not in WORD_TASK_KINDS:
        raise ConfigError(f"task={cfg.task.name} classifies whole sentences (a fine-tuning task of train.py); probe.py "
                          "probes words. Fix: task=sclass (the default), upos, xpos, deprel, feats, ner, pos, "
                          "supersense or jsonl")
    return True


def probe(cfg: DictConfig, control: ControlTask, config: dict[str, Any], run_dir: Path,
          loggers: list[Logger]) -> dict[str, Any]:
    """Build the representation and its data, train the probes and save them in `run_dir` (or score saved ones),
    and sum up the run; the Trainer logs through `loggers`."""
    started = time.time()
    L.seed_everything(cfg.seed, workers=True)
    mdl = mdl_settings(cfg)
    representation, inputs = context_inputs(cfg, control, mdl)
    features = features_about(cfg, representation.level, inputs, control)
    reuse = cfg.probe.get("reuse")
    untrained = None if reuse else new_probes(cfg, inputs, features, control, mdl)  # a bad setting starts no logger
    keepers = [] if reuse or control.seed is None else [control_keeper(SEEN in inputs.datamodule.splits)]
    trainer = build_trainer(cfg, keepers, loggers=loggers)
    for logger in trainer.loggers:  # the whole resolved config, so runs can be filtered by layer, model, data...
        logger.log_hyperparams({**config, "representation": inputs.about["representation"]})
    if reuse:
        module, outcome = reused_probes(cfg, features, control)
    else:
        module, outcome = trained_probes(cfg, trainer, untrained, inputs, features, run_dir / PROBES_FILE)
    trainer.validate(module, datamodule=inputs.datamodule, verbose=False)
    trainer.test(module, datamodule=inputs.datamodule, verbose=False)
    results = {
        "model": cfg.model.name, "model_name_or_path": features["model_name_or_path"],
        "weights_sha256": features["weights_sha256"], "finetuned_task": finetuned_task(features["model_name_or_path"]),
        "random_init": bool(cfg.model.get("random_init", False)), "data": cfg.data.name, "level": features["level"],
        "embeddings": None, **inputs.about, "probe": cfg.probe.name, "seed": cfg.seed,
        **{key: features[key] for key in ("pooling", "context_size", "attention_window", "attention_policy",
                                          "classes")},
        **{split: module.split_metrics[split] for split in EVAL_SPLITS if split in module.split_metrics},
        **module.mix_summary(), **outcome, "epochs_trained": trainer.current_epoch,
    }
    return finish_results(results, module, inputs.datamodule, mdl, trainer, SUMMARY_SCORES, started, config)


def context_inputs(cfg: DictConfig, control: ControlTask = NO_CONTROL_TASK,
                   mdl: MdlSettings | None = None) -> tuple[Any, ProbeInputs]:
    """The representation of an s-class run and its inputs: its data read, its stores filled (or reused), the
    datamodule built (also what bench/probe.py trains on)."""
    representation = build(cfg.representation, "representation")
    inputs = representation.inputs(build(cfg.data.source, "data.source"), store_settings(cfg.features),
                                   cfg.probe.batch_size, control,
                                   mdl_seed=mdl.seed if mdl is not None and mdl.enabled else None)
    return representation, inputs


def reused_probes(cfg: DictConfig, features: dict[str, Any], control: ControlTask) -> tuple[L.LightningModule, dict]:
    """Zhao et al. 2020 §4.4.2 setup (a): the saved probes of `probe.reuse`, scored unchanged; their control head too
    when this run's control task draws the same control classes (same seed)."""
    saved = find_reusable(cfg.probe.reuse, features, seed=cfg.seed)
    same_controls = control.seed is not None and saved.about.get("control_seed") == control.seed
    module = module_of(saved, build(cfg.probe.module, "probe.module"), saved.has_control and same_controls)
    log.info("Scoring the probes saved in %s (trained on %s) on %s, without training", saved.path,
             saved.about["model_name_or_path"], features["model_name_or_path"])
    return module, {"best_epoch": None, "reused_probes": reused_summary(saved), "warnings": []}


def new_probes(cfg: DictConfig, inputs: ProbeInputs, features: dict[str, Any], control: ControlTask,
               mdl: MdlSettings) -> L.LightningModule:
    """The untrained probes of `probe.module` for these inputs (and the control probes, and the MDL prefix probes)."""
    block_ends = mdl.block_ends(len(inputs.datamodule.splits["train"])) if mdl.enabled else None
    return build(cfg.probe.module, "probe.module")(
        input_dim=inputs.datamodule.feature_dim, class_names=inputs.classes, level=features["level"],
        num_layers=inputs.datamodule.num_layers, mix=OmegaConf.to_container(cfg.probe.mix, resolve=True),
        control=control.seed is not None, mdl_block_ends=block_ends)


def trained_probes(cfg: DictConfig, trainer: L.Trainer, module: L.LightningModule, inputs: ProbeInputs,
                   features: dict[str, Any], path: Path) -> tuple[L.LightningModule, dict]:
    """Fit the untrained probes `module`, each head keeping its best-dev weights, saved at `path` (the MDL prefix
    probes are not: they are only needed for the codelength); the best epochs and the warnings of the fit."""
    trainer.fit(module, datamodule=inputs.datamodule)
    epochs, best_dev = best_epochs(trainer.callbacks), best_weights_keeper(trainer.callbacks).best_score
    if trainer.is_global_zero:  # every process holds the same weights; one writes them
        # the prefix probes of MDL are not saved (only the codelength needs them), so neither is their setting
        hyperparameters = {key: value for key, value in module.hparams.items() if key != "mdl_block_ends"}
        save_probes(module, path, {**features, **epochs, "seed": cfg.seed, "best_dev_micro_f1": best_dev,
                                   "module": hyperparameters}, dtype=storage_dtype(cfg.trainer.precision))
    warnings = training_warnings(best_dev, trainer.current_epoch)
    for warning in warnings:
        log.warning("%s", warning)
    return module, {**epochs, "probes_file": str(path), "warnings": warnings}


def features_about(cfg: DictConfig, level: str, inputs: ProbeInputs, control: ControlTask) -> dict[str, Any]:
    """What the probes of this run are trained on (saved with them; saved probes must match it to be reused)."""
    window = cfg.features.get("attention_window")
    about = {"level": level, "classes": list(inputs.classes), "feature_dim": inputs.datamodule.feature_dim,
             "layer": inputs.about["layer"], "representation": inputs.about["representation"],
             "pooling": cfg.features.pooling, "context_size": parse_context_size(cfg.context_size),
             "attention_window": window,
             "attention_policy": window_policy(window, cfg.features.get("attention_policy", DEFAULT_POLICY)),
             "num_layers": inputs.datamodule.num_layers, "control_seed": control.seed, "data": cfg.data.name,
             "model_name_or_path": model_location(encoder_name_or_path(cfg)), "weights_sha256": None}
    stores = inputs.about.get("stores")
    if stores:  # the weights actually read, as the train store records them; the path is this run's (a store is
        # shared by identical models in other folders, so the path it records is only where it was first extracted)
        with FeatureStore(stores["train"]) as store:
            about["weights_sha256"] = store.metadata.get("weights_sha256")
    return about


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
    data = load_word_task(build(cfg.data.source, "data.source"), cfg.task.name, cfg.data.name)  # before the model
    representation = build(cfg.representation, "representation")
    pair_product = require_bool("probe.pair_product", cfg.probe.get("pair_product", False))
    inputs = representation.word_inputs(data, store_settings(cfg.features), cfg.probe.batch_size, control,
                                        pair_product=pair_product, mdl_seed=mdl.seed if mdl.enabled else None)
    datamodule = inputs.datamodule
    block_ends = mdl.block_ends(len(datamodule.splits["train"])) if mdl.enabled else None
    module = build(cfg.probe.word_module, "probe.word_module")(  # before the loggers start: a bad setting starts no run
        input_dim=datamodule.feature_dim, label_names=inputs.classes, num_layers=datamodule.num_layers,
        mix=OmegaConf.to_container(cfg.probe.mix, resolve=True), control=control.seed is not None,
        mdl_block_ends=block_ends)
    keepers = [] if control.seed is None else [control_keeper(False)]
    trainer = build_trainer(cfg, keepers, loggers=loggers)
    for logger in trainer.loggers:
        logger.log_hyperparams({**config, "representation": inputs.about["representation"]})
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
    return finish_results(results, module, datamodule, mdl, trainer, WORD_SUMMARY_SCORES, started, config)


def log_word_results(results: dict[str, Any], out: Path) -> None:
    log.info("%s %s %s: dev accuracy %.3f, test accuracy %.3f%s%s -> %s", results["task"], results["probe_family"],
             results["representation"], results["dev"]["accuracy"], results["test"]["accuracy"],
             selectivity_note(results), online_code.describe(results), out)


def selectivity_note(results: dict[str, Any]) -> str:
    """' (test selectivity +0.290)' where the control task ran beside the probe, else ''."""
    return f" (test selectivity {results['test']['selectivity']:+.3f})" if "selectivity" in results["test"] else ""
