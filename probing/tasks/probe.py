"""probe.py: train the s-class probes on one representation of the words, score them, write results.json.

A probe run probes one *representation* of the words:
- context level (`probe.level=context`, Zhao §3.2.2): one encoder layer (`layer=3`), the scalar mix of all layers
  (`layer=mix`), or a bag-of-embeddings baseline (`baseline=pbert|bertw|prand|pstatic`, or the same name as
  `layer=`), each from its HDF5 feature store;
- type level (`probe.level=type`, Zhao §3.2.1, Fig. 1): one vector per word from the space `embeddings=...`.

Everything is built from the composed config with hydra.utils.instantiate: the data source (`data.source`), the
encoder (`features.encoder`), the baselines (`baselines.<name>`), the word spaces (`embeddings`, `type_spaces`), the
probe module and its optimizer (`probe.module`), the callbacks, loggers and Trainer.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf

from probing.config import build
from probing.data.settings import require_bool, require_int
from probing.data.sources import WordInContextData
from probing.data.splits import EVAL_SPLITS, SEEN, split_summary
from probing.data.types import TypeLevelData, type_summary
from probing.errors import ConfigError, ProbingError
from probing.features.attention import DEFAULT_POLICY, window_policy
from probing.features.baselines import check_baseline, oov_summary
from probing.features.encoder import model_location
from probing.features.featurizer import Featurizer, parse_context_size
from probing.features.finetuned import finetuned_task
from probing.features.provision import ensure_features
from probing.features.store import FeatureStore
from probing.probes.callbacks import KeepBestWeights
from probing.probes.controls import class_distribution, control_classes
from probing.probes.datamodule import ALL_LAYERS, ProbingDataModule, StoreDataModule, TensorSplit
from probing.probes.saved import (
    PROBES_FILE,
    RERUN_FIX,
    SavedProbes,
    find_reusable,
    load_into,
    probe_files,
    save_probes,
)
from probing.probes.sclass_probe import LEVELS
from probing.tasks.common import (
    build_trainer,
    check_config,
    closing_loggers,
    job_state,
    load_data,
    store_settings,
    write_json_atomically,
)
from probing.vocabulary import BASELINE_LABELS, MIX

log = logging.getLogger(__name__)

# The top-level settings of conf/probe.yaml (anything else is a typo).
KNOWN_KEYS = ("task_name", "paths", "model", "data", "features", "probe", "trainer", "callbacks", "logger",
              "embeddings", "type_spaces", "layer", "baseline", "baselines", "context_size", "seed", "optimized_metric",
              "finetuned", "comparison_setup", "run_name", "run_group")
# At type level, `layer=` names a space of `type_spaces`: an integer l is AVG-l.
NAMED_TYPE_SPACES = ("rand", "bertw")


def build_featurizer(cfg: DictConfig, baseline: str | None) -> Featurizer:
    """What fills the store: the encoder itself, or one of the bag-of-embeddings baselines."""
    if baseline is None:
        return build(cfg.features.encoder, "features.encoder")
    return build(cfg.baselines[baseline], f"baselines.{baseline}")


def resolve_layer(layer: Any, num_layers: int) -> int:
    """`layer` as an index into the hidden states 0..L (negative counts from the top); out of range is an error."""
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise ConfigError(f"layer={layer!r} is not an integer; use 0..{num_layers - 1} (0 = embeddings), -1 for the "
                          f"top layer, mix, or a baseline ({', '.join(BASELINE_LABELS)})")
    if not -num_layers <= layer < num_layers:
        raise ConfigError(f"layer={layer} is out of range for this model: it has layers 0..{num_layers - 1} "
                          f"(0 = embeddings); use one of those, or -1 for the top layer")
    return layer % num_layers


def requested_baseline(cfg: DictConfig) -> str | None:
    """`baseline=...`, or a baseline name given as `layer=...` (so that one sweep axis covers layers and baselines)."""
    if cfg.get("baseline"):
        return check_baseline(str(cfg.baseline))
    if isinstance(cfg.layer, str) and cfg.layer in BASELINE_LABELS:
        return cfg.layer
    return None


@dataclass
class ProbeInputs:
    """What a probe run trains on, and what its results.json says about where it came from."""

    datamodule: ProbingDataModule
    classes: list[str]
    about: dict[str, Any] = field(default_factory=dict)  # layer, representation, stores, data sizes, skips...


def context_inputs(cfg: DictConfig) -> ProbeInputs:
    """Stores of one layer / all layers (mix) / a baseline, on the word-in-context splits."""
    data = load_data(cfg.data)
    baseline = requested_baseline(cfg)
    if baseline is not None and cfg.layer == MIX:
        raise ConfigError(f"layer=mix mixes the encoder's layers, but baseline={baseline} has a single vector per "
                          "context. Fix: drop one of the two settings")
    featurizer = build_featurizer(cfg, baseline)
    num_layers = featurizer.info.num_layers if baseline is None else 1
    if baseline is None:
        check_num_layers(cfg, num_layers)
    layer, reported, label = store_layer(cfg, baseline, num_layers)
    stores = ensure_features(data, featurizer, **store_settings(cfg.features))
    about = {"layer": reported, "representation": label, "stores": {split: str(path) for split, path in stores.items()},
             "data_summary": split_summary(data.splits), "data_skips": data.skips.as_dict(),
             "extraction_skipped_rows": {split: stored_skips(path) for split, path in stores.items()}}
    if baseline == "pstatic":  # Zhao's P-fastText: named after the file's config, so two files are two columns
        about |= {"embeddings": str(cfg.embeddings.name), "representation": f"P-{cfg.embeddings.label}",
                  "oov": oov_summary_of(featurizer, data)}
    del featurizer  # free the encoder's memory before training
    expected_layers = num_layers if layer == ALL_LAYERS else None
    datamodule = StoreDataModule(stores, layer=layer, batch_size=cfg.probe.batch_size, control_seed=control_seed(cfg),
                                 expected_layers=expected_layers, seen_fraction=seen_fraction(cfg))
    datamodule.setup()
    if SEEN in datamodule.splits:
        about["seen_split"] = seen_split_summary(datamodule)
    return ProbeInputs(datamodule, data.classes, about)


def seen_split_summary(datamodule: StoreDataModule) -> dict[str, int]:
    """Contexts and words of the seen split, and the training contexts left."""
    seen = datamodule.splits[SEEN].tensors
    return {"contexts": len(seen["word"]), "words": int(seen["word"].unique().numel()),
            "train_contexts_left": len(datamodule.splits["train"])}


def check_num_layers(cfg: DictConfig, num_layers: int) -> None:
    """The presets sweep `model.num_layers` layers: say so when the config disagrees with the model loaded."""
    configured = cfg.model.get("num_layers")
    if configured is not None and configured != num_layers:
        log.warning("model.num_layers=%s, but %s has %d layers (0..%d): presets that sweep every layer use the "
                    "config value; set model.num_layers=%d", configured, cfg.model.name_or_path, num_layers,
                    num_layers - 1, num_layers)


def store_layer(cfg: DictConfig, baseline: str | None, num_layers: int) -> tuple[int | str, int | str, str]:
    """(which store layer to read: an index or ALL_LAYERS, the results' `layer`, the report's representation)."""
    if baseline is not None:
        return 0, baseline, BASELINE_LABELS[baseline]
    if cfg.layer == MIX:
        return ALL_LAYERS, MIX, MIX
    layer = resolve_layer(cfg.layer, num_layers)
    return layer, layer, str(layer)


def oov_summary_of(featurizer, data: WordInContextData) -> dict[str, Any]:
    """P-static: how many words of the context windows the static file lacks (they got random vectors)."""
    words = [word for records in data.splits.values() for record in records
             for word in featurizer.window_words(record)[0]]
    return oov_summary(featurizer.static, words)


def control_seed(cfg: DictConfig) -> int | None:
    control = cfg.probe.get("control_task")
    if control is None or not require_bool("probe.control_task.enabled", control.enabled):
        return None
    return require_int("probe.control_task.seed", control.seed)


def seen_fraction(cfg: DictConfig) -> float:
    """`probe.control_task.seen_fraction`: the share of training contexts held out as the seen split (0 = none)."""
    control = cfg.probe.get("control_task")
    fraction = float((control or {}).get("seen_fraction") or 0.0)
    if not fraction:
        return 0.0
    key = f"probe.control_task.seen_fraction={fraction}"
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"{key} is not a fraction. Fix: a value in [0, 1), e.g. 0.2 (0 = no seen split)")
    if control_seed(cfg) is None:
        raise ConfigError(f"{key} holds out contexts to score the control task on, but the control task is off. "
                          "Fix: probe.control_task.enabled=true, or seen_fraction=0")
    if cfg.probe.level != "context":
        raise ConfigError(f"{key} needs several contexts per word; at probe.level=type each word is one training "
                          "row, so no word can be both trained on and held out. Fix: seen_fraction=0")
    return fraction


def type_inputs(cfg: DictConfig) -> ProbeInputs:
    """One vector per word from a word space on the type-level word splits (Fig. 1)."""
    space_cfg, key = type_space_config(cfg)
    data = build(cfg.data.source, "data.source").load_types()
    layer = None
    if space_cfg.get("_partial_"):  # AVG-l: the space reads the stores of the data's contexts at layer l
        layer, stores = avg_stores(cfg)
        space = build(space_cfg, key)(stores=stores, layer=layer)
    else:
        space = build(space_cfg, key)
    data, vectors, about = space.vectors(data)
    for split, types in data.splits.items():
        log.info("%s %s: %d words, %d gold (word, class) pairs", data.name, split, len(types.words),
                 int(types.targets.sum()))
    splits = type_splits(data, vectors, control_seed(cfg))
    about |= {"layer": layer, "embeddings": str(space.name), "representation": space.label,
              "data_summary": type_summary(data)}
    return ProbeInputs(ProbingDataModule(splits, batch_size=cfg.probe.batch_size), data.classes, about)


def type_space_config(cfg: DictConfig) -> tuple[DictConfig, str]:
    """The word space of a type-level run and its config key: `embeddings=...`, or else the `layer` setting: an
    integer l is AVG-l, `rand` / `bertw` those spaces (so that one sweep axis, `layer=0,...,L,rand,bertw`, covers
    Table 5)."""
    if cfg.get("embeddings") is not None:
        return cfg.embeddings, "embeddings"
    layer = cfg.layer
    name = "avg" if isinstance(layer, int) and not isinstance(layer, bool) else layer
    if name not in ("avg", *NAMED_TYPE_SPACES):
        raise ConfigError("probe.level=type needs a word space. Fix: layer=l (AVG-l), layer=rand, layer=bertw, or "
                          "a static file: embeddings=glove embeddings.path=/path/to/glove.6B.300d.txt")
    return cfg.type_spaces[name], f"type_spaces.{name}"


def avg_stores(cfg: DictConfig) -> tuple[int, dict[str, Path]]:
    """The layer of AVG-l and the encoder's stores of the data's contexts (extracted if needed)."""
    contexts = load_data(cfg.data)
    encoder = build(cfg.features.encoder, "features.encoder")
    layer = resolve_layer(cfg.layer, encoder.info.num_layers)
    stores = ensure_features(contexts, encoder, **store_settings(cfg.features))
    del encoder  # free its memory before training
    return layer, stores


def type_splits(data: TypeLevelData, vectors: dict[str, np.ndarray], seed: int | None) -> dict[str, TensorSplit]:
    """TensorSplits of word vectors and multi-hot targets; with a control seed, one random class per word."""
    probabilities = class_distribution(data.splits["train"].targets.sum(axis=0)) if seed is not None else None
    splits = {}
    for split, types in data.splits.items():
        tensors = {"features": torch.from_numpy(np.ascontiguousarray(vectors[split], dtype=np.float32)),
                   "targets": torch.from_numpy(types.targets.astype(bool))}
        if probabilities is not None:
            control = torch.from_numpy(control_classes(types.words, probabilities, seed))
            tensors["control_targets"] = control[:, None] == torch.arange(len(data.classes))
        splits[split] = TensorSplit(tensors)
    return splits


def stored_skips(path: Path) -> int:
    """Rows the encoder could not encode (e.g. a target longer than max_length), kept and flagged in the store."""
    with FeatureStore(path) as store:
        return store.num_skipped


def summarise_in_wandb(trainer: L.Trainer, results: dict[str, Any]) -> None:
    """Put the final scores in the W&B run summary (the run is finished by `closing_loggers`)."""
    keys = ("micro_f1", "n_combinations", "n_contexts", "selectivity", "control_micro_f1")
    summary = {f"{split}/final_{key}": results[split][key] for split in EVAL_SPLITS if split in results
               for key in keys if key in results[split]}
    for logger in trainer.loggers:
        if isinstance(logger, L.pytorch.loggers.WandbLogger):
            logger.experiment.summary.update({**summary, "representation": results["representation"],
                                              "best_epoch": results["best_epoch"]})


def best_weights_keeper(trainer: L.Trainer) -> KeepBestWeights:
    """The callback that keeps the probes' best-dev weights (`callbacks.keep_best`): the test split is always scored
    with them."""
    for callback in trainer.callbacks:
        if isinstance(callback, KeepBestWeights) and callback.submodule == "probes":
            return callback
    raise ConfigError("callbacks.keep_best is missing: the test split is scored with the probes' best-dev weights. "
                      "Fix: keep callbacks=default (or a callbacks config that includes keep_best)")


def train_probe(cfg: DictConfig, inputs: ProbeInputs, config: dict[str, Any], loggers: list[Logger]):
    """Fit the probes (and the control probes) keeping each head's best-dev weights; score dev, test (and seen).
    Returns the module, {"best_epoch": ..., "control_best_epoch": ...}, the best dev micro-F1 and the trainer."""
    datamodule = inputs.datamodule
    control = control_seed(cfg) is not None
    module = build(cfg.probe.module, "probe.module")(
        input_dim=datamodule.feature_dim, class_names=inputs.classes, level=cfg.probe.level,
        num_layers=datamodule.num_layers, mix=OmegaConf.to_container(cfg.probe.mix, resolve=True), control=control)
    keepers = {}
    if control:
        # Dev words are unseen, so the control task's dev score is a prior-level floor and its best epoch is noise.
        # Scoring memorisation on seen words needs both heads trained alike: the control head then keeps the weights
        # of the real head's best epoch.
        monitor = "dev/micro_f1" if SEEN in datamodule.splits else "dev/control_micro_f1"
        keepers["control_best_epoch"] = KeepBestWeights(monitor=monitor, submodule="control_probes")
    trainer = build_trainer(cfg, keepers.values(), loggers=loggers)
    keepers = {"best_epoch": best_weights_keeper(trainer), **keepers}
    for logger in trainer.loggers:  # the whole resolved config, so runs can be filtered by layer, model, data...
        logger.log_hyperparams({**config, "representation": inputs.about["representation"]})
    trainer.fit(module, datamodule=datamodule)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)
    best_epochs = {name: keeper.best_epoch for name, keeper in keepers.items()}
    return module, best_epochs, keepers["best_epoch"].best_score, trainer


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train the batched s-class probes on one representation, evaluate dev/test, write results.json.

    A job whose run folder already holds the results of the same configuration is not run again, so a sweep
    interrupted and relaunched into its folder (`hydra.sweep.dir=...`) only runs the jobs that had not finished.
    """
    check_config(cfg, KNOWN_KEYS)
    out, config, previous = job_state(cfg)
    if previous is not None:
        return previous
    check_probe_settings(cfg)
    with closing_loggers(cfg.get("logger")) as loggers:
        results = probe(cfg, config, out.parent, loggers)
    write_json_atomically(out, results)
    log.info("%s: dev micro-F1 %.3f, test micro-F1 %.3f%s -> %s", results["representation"],
             results["dev"]["micro_f1"], results["test"]["micro_f1"], selectivity_note(results), out)
    return results


def check_probe_settings(cfg: DictConfig) -> None:
    """Refuse bad probe settings before any extraction."""
    if cfg.probe.level not in LEVELS:
        raise ConfigError(f"probe.level={cfg.probe.level!r} is unknown. Fix: probe.level=context or probe.level=type")
    require_int("probe.batch_size", cfg.probe.batch_size, minimum=1)
    require_int("trainer.max_epochs", cfg.trainer.get("max_epochs"), minimum=1)  # 0 would score untrained probes
    seen_fraction(cfg)
    if cfg.probe.get("reuse"):
        probe_files(cfg.probe.reuse)


def probe(cfg: DictConfig, config: dict[str, Any], run_dir: Path, loggers: list[Logger]) -> dict[str, Any]:
    """Train the probes and save them in `run_dir` (or, with `probe.reuse`, score saved ones), and sum up the run;
    the Trainer logs through `loggers`."""
    started = time.time()
    L.seed_everything(cfg.seed, workers=True)
    inputs = type_inputs(cfg) if cfg.probe.level == "type" else context_inputs(cfg)
    features = features_about(cfg, inputs)
    reuse = cfg.probe.get("reuse")
    if reuse:
        saved = find_reusable(reuse, features, seed=cfg.seed)
        module, trainer = score_saved_probes(cfg, inputs, saved, config, loggers)
        best_epochs, warnings = {"best_epoch": None}, []
        probes = {"reused_probes": reused_summary(saved)}
    else:
        module, best_epochs, best_dev, trainer = train_probe(cfg, inputs, config, loggers)
        warnings = training_warnings(best_dev, trainer)
        about = {**features, **best_epochs, "seed": cfg.seed, "best_dev_micro_f1": best_dev,
                 "module": dict(module.hparams)}
        if trainer.is_global_zero:  # every process holds the same weights; one writes them
            save_probes(module, run_dir / PROBES_FILE, about)
        probes = {"probes_file": str(run_dir / PROBES_FILE)}
    results = {
        "model": cfg.model.name, "model_name_or_path": features["model_name_or_path"],
        "weights_sha256": features["weights_sha256"], "finetuned_task": finetuned_task(features["model_name_or_path"]),
        "random_init": bool(cfg.model.get("random_init", False)), "data": cfg.data.name, "level": cfg.probe.level,
        "embeddings": None, **inputs.about, "probe": cfg.probe.name, "seed": cfg.seed,
        "pooling": cfg.features.pooling, "context_size": parse_context_size(cfg.context_size),
        "attention_window": cfg.features.get("attention_window"), "attention_policy": features["attention_policy"],
        "classes": inputs.classes,
        **{split: module.split_metrics[split] for split in EVAL_SPLITS if split in module.split_metrics},
        **module.mix_summary(),
        **best_epochs, **probes, "epochs_trained": trainer.current_epoch, "warnings": warnings,
        "duration_s": round(time.time() - started, 2), "config": config,
    }
    summarise_in_wandb(trainer, results)
    return results


def features_about(cfg: DictConfig, inputs: ProbeInputs) -> dict[str, Any]:
    """What the probes of this run are trained on (saved with them; saved probes must match it to be reused)."""
    datamodule = inputs.datamodule
    about = {"level": cfg.probe.level, "classes": list(inputs.classes), "feature_dim": datamodule.feature_dim,
             "layer": inputs.about["layer"], "representation": inputs.about["representation"],
             "pooling": cfg.features.pooling, "context_size": parse_context_size(cfg.context_size),
             "attention_window": cfg.features.get("attention_window"),
             "attention_policy": window_policy(cfg.features.get("attention_window"),
                                               cfg.features.get("attention_policy", DEFAULT_POLICY)),
             "num_layers": datamodule.num_layers,
             "control_seed": control_seed(cfg), "data": cfg.data.name,
             "model_name_or_path": model_location(cfg.features.encoder.name_or_path), "weights_sha256": None}
    stores = inputs.about.get("stores")
    if stores:  # the weights actually read, as the train store records them; the path is this run's (a store is
        # shared by identical models in other folders, so the path it records is only where it was first extracted)
        with FeatureStore(stores["train"]) as store:
            about["weights_sha256"] = store.metadata.get("weights_sha256")
    return about


def score_saved_probes(cfg: DictConfig, inputs: ProbeInputs, saved: SavedProbes, config: dict[str, Any],
                       loggers: list[Logger]):
    """Zhao et al. 2020 §4.4.2 setup (a): the saved probes, unchanged, scored on this run's dev and test features.
    The control head is scored too when this run's control task draws the same control classes (same seed)."""
    datamodule = inputs.datamodule
    seed = control_seed(cfg)
    control = saved.has_control and seed is not None and saved.about.get("control_seed") == seed
    module = build(cfg.probe.module, "probe.module")
    try:
        module = module(**{**saved.about["module"], "control": control})
    except (TypeError, ValueError) as error:
        raise ProbingError(f"{saved.path}: its module settings ({saved.about['module']}) do not build probes "
                           f"({error}). {RERUN_FIX}") from error
    load_into(module, saved)
    log.info("Scoring the probes saved in %s (trained on %s) on %s, without training", saved.path,
             saved.about["model_name_or_path"], cfg.features.encoder.name_or_path)
    trainer = build_trainer(cfg, loggers=loggers)
    for logger in trainer.loggers:
        logger.log_hyperparams({**config, "representation": inputs.about["representation"]})
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)
    return module, trainer


def reused_summary(saved: SavedProbes) -> dict[str, Any]:
    about = saved.about
    return {"path": str(saved.path), "model_name_or_path": about["model_name_or_path"],
            "weights_sha256": about["weights_sha256"], "finetuned_task": finetuned_task(about["model_name_or_path"]),
            "best_epoch": about.get("best_epoch"), "seed": about.get("seed"),
            "dev_micro_f1": about["best_dev_micro_f1"]}


def training_warnings(best_dev: float | None, trainer: L.Trainer) -> list[str]:
    """What a reader of the results must know: a dev micro-F1 of 0 in every epoch usually means "trained too
    briefly" (e.g. P-BERT stopped early), not "no information in the representation"."""
    warnings = []
    if not best_dev:
        warnings.append(f"dev micro-F1 stayed 0 in all {trainer.current_epoch} epochs: the probes never predicted a "
                        "class; this usually means too few epochs (raise trainer.max_epochs or the early-stopping "
                        "patience), not that the representation holds no information")
    for warning in warnings:
        log.warning("%s", warning)
    return warnings


def optimized_value(results: dict[str, Any], metric: str) -> float:
    """The `optimized_metric` ("dev/micro_f1", "test/selectivity", ...) of a run's results, for a Hydra sweeper."""
    split, _, name = str(metric).partition("/")
    value = results.get(split, {}).get(name) if isinstance(results.get(split), dict) else None
    if not isinstance(value, (int, float)):
        raise ConfigError(f"optimized_metric={metric} is not a score of this run. Fix: <split>/<score>, e.g. "
                          "dev/micro_f1 or dev/selectivity (the control task must be on for selectivity)")
    return float(value)


def selectivity_note(results: dict[str, Any]) -> str:
    test = results["test"]
    return f" (selectivity {test['selectivity']:+.3f})" if "selectivity" in test else ""
