"""probe.py with probe.online=true: the probes of every asked-for layer trained straight from the encoder's forward
pass, no store written (`probing.probes.online`), fitted by the Trainer and loggers every probe run builds; statement
tasks with a gradient-trained family, with or without the control task. What needs a store or another pass over the
features is refused before any work. See docs/scale.md, 'Probing without a store'."""

from __future__ import annotations

import logging
import time
from typing import Any

import lightning as L
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf, open_dict

from probing.errors import ConfigError
from probing.features.featurizers import featurizer_config, featurizer_of
from probing.features.identity import FeatureIdentity
from probing.probes.callbacks import training_warnings
from probing.probes.online import CONTROL, PROBES, OnlineProbes
from probing.probes.online_data import OnlineDataModule, forward_source, prepared_splits
from probing.probes.representations import described_featurizer
from probing.probes.statement_probes import CONTROL_KIND
from probing.tasks.loggers import summarise_in_wandb
from probing.tasks.trainer import build_trainer, note_precision

log = logging.getLogger(__name__)
ONLINE_TASK_KINDS = ("statement",)


def online_layers(cfg: DictConfig) -> list[int] | None:
    """The layers probed: `layer` as a list (an int: that layer alone), or null for all of features.layers."""
    layer = cfg.layer
    if layer is None:
        return None if cfg.features.layers is None else list(cfg.features.layers)
    if isinstance(layer, int) and not isinstance(layer, bool):
        return [layer]
    if OmegaConf.is_list(layer) and layer and all(isinstance(item, int) for item in layer):
        return list(layer)
    raise ConfigError(f"layer={layer} with probe.online=true: the online probes read layers of the encoder. Fix: "
                      "layer=[0,3,6] (a list), layer=N, or layer=null for all of features.layers")


def refuse(what: str, fix: str) -> None:
    raise ConfigError(f"probe.online=true trains probes from the forward pass, without a store, and cannot run {what}. "
                      f"Fix: {fix}, or probe.online=false")


def refuse_what_online_cannot_read(cfg: DictConfig) -> None:
    """Before the config is recorded: a task that is not a statement task, a scalar mix, a baseline, several
    devices."""
    if cfg.task.get("kind") not in ONLINE_TASK_KINDS:
        raise ConfigError(f"probe.online=true trains statement probes for now, and task={cfg.task.name} is not a "
                          "statement task. Fix: task=truth (or statements), or probe.online=false")
    if cfg.layer == "mix":
        refuse("a scalar mix", "layer=[0,1,2] (one probe per layer)")
    if cfg.get("baseline") is not None:
        refuse("a baseline", "baseline=null")
    devices = cfg.trainer.get("devices", 1)
    if str(devices).strip() != "1" and not (OmegaConf.is_list(devices) and len(devices) == 1):
        refuse("on several devices (each process would run the model on every batch)", "trainer.devices=1")


def refuse_what_online_cannot_train(probing: Any) -> None:
    """Of the built probing (before its data loads): what needs a store or another pass over the features."""
    refused = [
        (probing.online_code is not None, "the online code (MDL)", "probe.mdl=false"),
        (probing.erase is not None, "a concept erasure", "erase=none"),
        (bool(probing.reuse), "saved probes", "probe.reuse=null"),
        (probing.level != "context", "the type level", "probe.level=context"),
        (probing.condition_on is not None, "conditioning", "probe.condition_on=null"),
        (probing.family.closed_form, "a closed-form family", "probe=linear"),
        (bool(probing.eval_on), "scores on other datasets", "probe.eval_on=[]"),
    ]
    for is_set, what, fix in refused:
        if is_set:
            refuse(what, fix)


def with_online_layers(cfg: DictConfig) -> list[int] | None:
    """Checks the settings, then sets features.layers to the probed layers (the forward stops after the last)."""
    refuse_what_online_cannot_read(cfg)
    layers = online_layers(cfg)
    with open_dict(cfg):
        cfg.features.layers = layers
    return layers


def online_probe(cfg: DictConfig, probing: Any, config: dict[str, Any], loggers: list[Logger]) -> dict[str, Any]:
    """Train and score the online probes with the job's Trainer (`build_trainer`: the callbacks of `callbacks`, the
    job's `loggers`), the run's seed drawing the probes and the training order; the run's results (the probing's
    kind, `online: true`): `dev` and `test` of the best dev layer, every layer's in `online_layers`."""
    started = time.time()
    refuse_what_online_cannot_train(probing)
    probing.load()
    data = probing.data.store_data()
    featurizer = featurizer_of(featurizer_config(cfg.features, cfg.model, cfg.context_size))
    layers = list(featurizer.layers)
    splits = prepared_splits(featurizer, data.splits, data.classes)
    datamodule = OnlineDataModule(splits, probing.batch_size, int(cfg.seed), probing.control.seed)
    L.seed_everything(cfg.seed, workers=True)
    module = OnlineProbes(forward_source(featurizer, splits), layers, featurizer.info.hidden_size, data.classes,
                          probing.family, control=probing.control.seed is not None)
    trainer = build_trainer(cfg, loggers=loggers)
    note_precision(str(trainer.precision), trainer.strategy.root_device)
    representation = f"online layers {','.join(map(str, layers))}"
    for logger in trainer.loggers:
        logger.log_hyperparams({**config, "representation": representation})
    trainer.fit(module, datamodule=datamodule)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)
    by_layer = {str(layer): layer_results(module, index, splits) for index, layer in enumerate(layers)}
    best = max(by_layer, key=lambda layer: by_layer[layer]["dev"]["accuracy"])
    warnings = training_warnings(by_layer[best]["dev"]["accuracy"], trainer.current_epoch)
    described = described_featurizer(featurizer)
    log.info("online probes of layers %s: dev accuracy %s", layers,
             ", ".join(f"{layer} {by_layer[layer]['dev']['accuracy']:.3f}" for layer in by_layer))
    control = None if probing.control.seed is None else {"kind": CONTROL_KIND, "seed": probing.control.seed}
    results = {
        "task": probing.name, "probe": cfg.probe.name, "probe_family": probing.family.name,
        "rank": probing.family.rank, "model": cfg.model.name, "finetuned_task": None,
        "random_init": bool(cfg.model.get("random_init", False)), "data": cfg.data.name, "level": "context",
        "embeddings": None, **{key: described[key] for key in FeatureIdentity.of_the_featurizer()},
        "layer": layers, "representation": f"{representation} (best: {best})", "seed": cfg.seed,
        "control_seed": probing.control.seed, "dev": by_layer[best]["dev"], "test": by_layer[best]["test"],
        "epochs_trained": trainer.current_epoch,
        **{key: value for key, value in by_layer[best].items() if key.endswith("best_epoch")}, "warnings": warnings,
        "labels": list(data.classes), "control_task": control, "data_split": dict(probing.data.split),
        "online": True, "online_layers": by_layer, "duration_s": round(time.time() - started, 2), "config": config}
    summarise_in_wandb(trainer.loggers, {f"{split}/final_{key}": results[split][key] for split in ("dev", "test")
                                         for key in ("accuracy", "selectivity") if key in results[split]}
                       | {"representation": results["representation"], "best_epoch": results["best_epoch"]})
    return results


def layer_results(module: OnlineProbes, index: int, splits: dict[str, Any]) -> dict[str, Any]:
    """The layer's probe: the epoch whose weights it kept (and its control probe's), its dev and test scores."""
    epochs = {"best_epoch": int(module.best_epoch[PROBES][index])}
    if CONTROL in module.best_epoch:
        epochs["control_best_epoch"] = int(module.best_epoch[CONTROL][index])
    return {**epochs, **{split: module.split_scores[split][index] for split in ("dev", "test") if split in splits}}
