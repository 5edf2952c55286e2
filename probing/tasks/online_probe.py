"""probe.py with probe.online=true: the probes of every asked-for layer trained straight from the encoder's forward
pass, no store written (`probing.probes.online`); statement tasks with a gradient-trained family. What needs a store
or another pass over the features is refused before any work. See docs/scale.md, 'Probing without a store'."""

from __future__ import annotations

import logging
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from probing.errors import ConfigError
from probing.features.featurizers import featurizer_config, featurizer_of
from probing.features.identity import FeatureIdentity
from probing.probes.online import forward_source, prepared_splits, train_layer_probes
from probing.probes.representations import described_featurizer

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
    """Before the config is recorded: a task that is not a statement task, a scalar mix or a baseline."""
    if cfg.task.get("kind") not in ONLINE_TASK_KINDS:
        raise ConfigError(f"probe.online=true trains statement probes for now, and task={cfg.task.name} is not a "
                          "statement task. Fix: task=truth (or statements), or probe.online=false")
    if cfg.layer == "mix":
        refuse("a scalar mix", "layer=[0,1,2] (one probe per layer)")
    if cfg.get("baseline") is not None:
        refuse("a baseline", "baseline=null")


def refuse_what_online_cannot_train(probing: Any) -> None:
    """Of the built probing (before its data loads): what needs a store or another pass over the features."""
    refused = [
        (probing.control.seed is not None, "a control task", "probe.control_task.enabled=false"),
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


def online_probe(cfg: DictConfig, probing: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Train and score the online probes; the run's results (the probing's kind, `online: true`): `dev` and `test`
    of the best dev layer, every layer's in `online_layers`."""
    started = time.time()
    refuse_what_online_cannot_train(probing)
    probing.load()
    data = probing.data.store_data()
    featurizer = featurizer_of(featurizer_config(cfg.features, cfg.model, cfg.context_size))
    layers = list(featurizer.layers)
    splits = prepared_splits(featurizer, data.splits, data.classes)
    outcome = train_layer_probes(forward_source(featurizer, splits), splits, layers, featurizer.info.hidden_size,
                                 len(data.classes), probing.family, int(cfg.trainer.max_epochs), probing.batch_size,
                                 int(cfg.seed), featurizer.device)
    by_layer = {str(layer): {"best_epoch": outcome.best_epoch[index],
                             **{split: {"accuracy": scores[index], "n_examples": len(splits[split])}
                                for split, scores in outcome.scores.items()}}
                for index, layer in enumerate(layers)}
    best = max(by_layer, key=lambda layer: by_layer[layer]["dev"]["accuracy"])
    described = described_featurizer(featurizer)
    log.info("online probes of layers %s: dev accuracy %s", layers,
             ", ".join(f"{layer} {by_layer[layer]['dev']['accuracy']:.3f}" for layer in by_layer))
    return {"task": probing.name, "probe": cfg.probe.name, "probe_family": probing.family.name,
            "rank": probing.family.rank, "model": cfg.model.name, "finetuned_task": None,
            "random_init": bool(cfg.model.get("random_init", False)), "data": cfg.data.name, "level": "context",
            "embeddings": None, **{key: described[key] for key in FeatureIdentity.of_the_featurizer()},
            "layer": layers, "representation": f"online layers {','.join(map(str, layers))} (best: {best})",
            "seed": cfg.seed, "control_seed": None, "dev": by_layer[best]["dev"], "test": by_layer[best]["test"],
            "epochs_trained": outcome.epochs, "best_epoch": by_layer[best]["best_epoch"], "warnings": [],
            "labels": list(data.classes), "control_task": None, "data_split": dict(probing.data.split),
            "online": True, "online_layers": by_layer, "duration_s": round(time.time() - started, 2),
            "config": config}
