"""probe.py: train the s-class probes on one representation of the words, score them, write results.json.

A probe run probes one *representation* of the words:
- context level (`probe.level=context`, Zhao §3.2.2): one encoder layer (`layer=3`), the scalar mix of all layers
  (`layer=mix`), or a bag-of-embeddings baseline (`baseline=pbert|bertw|prand|pstatic`, or the same name as
  `layer=`), each from its HDF5 feature store;
- type level (`probe.level=type`, Zhao §3.2.1, Fig. 1): one vector per word from the space `embeddings=...`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from probing.config import CONFIG_DIR
from probing.data.sources import WordInContextData
from probing.data.splits import SEEN, TEST_SPLITS, split_summary
from probing.data.types import TypeLevelData, type_summary
from probing.errors import ConfigError
from probing.features.baselines import (
    BASELINE_LABELS,
    WordpieceBaseline,
    check_baseline,
    oov_summary,
    rand_baseline,
    static_baseline,
)
from probing.features.static_embeddings import read_static_embeddings
from probing.features.store import FeatureStore
from probing.features.type_spaces import (
    SPACES,
    average_by_word,
    avg_vectors,
    bertw_vectors,
    rand_vectors,
    space_label,
    static_vectors,
)
from probing.probes.callbacks import KeepBestWeights
from probing.probes.controls import class_distribution, control_classes
from probing.probes.datamodule import ALL_LAYERS, ProbingDataModule, StoreDataModule, TensorSplit
from probing.probes.sclass_probe import LEVELS
from probing.tasks.common import (
    build_encoder,
    build_trainer,
    context_size_of,
    ensure_features,
    finished_results,
    load_data,
    log,
)

MIX = "mix"


def build_featurizer(cfg: DictConfig, baseline: str | None):
    """What fills the store: the encoder itself, or one of the bag-of-embeddings baselines (probing.features.baselines)."""
    if baseline is None:
        return build_encoder(cfg)
    if baseline in ("pbert", "bertw"):
        return WordpieceBaseline(baseline, build_encoder(cfg))
    if baseline == "prand":
        return rand_baseline(int(cfg.baselines.rand_dim), int(cfg.baselines.rand_seed), context_size_of(cfg))
    return static_baseline(load_static(cfg, "baseline=pstatic"), int(cfg.baselines.oov_seed), context_size_of(cfg))


def load_static(cfg: DictConfig, what: str):
    space = cfg.get("embeddings")
    if space is None or space.kind != "static" or not space.get("path"):
        raise ConfigError(f"{what} needs a static embedding file. Fix: add embeddings=glove (or fasttext, word2vec, "
                          "static) embeddings.path=/path/to/vectors.txt")
    return read_static_embeddings(space.path, name=space.name)


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
    stores = ensure_features(cfg, data, featurizer)
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
    return int(control.seed) if control is not None and control.enabled else None


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
    """One vector per word from the space `embeddings=...` on the type-level word splits (Fig. 1)."""
    space = type_space(cfg)
    data = instantiate(cfg.data.source, _convert_="all").load_types()
    layer, about = None, {}
    if space.kind == "rand":
        vectors = rand_vectors(space, data)
    elif space.kind == "static":
        vectors, about = static_vectors(space, data)
    elif space.kind == "bertw":
        vectors = bertw_vectors(build_encoder(cfg), data)
    else:
        data, vectors, about, layer = avg_space(cfg, data)
    for split, types in data.splits.items():
        log.info("%s %s: %d words, %d gold (word, class) pairs", data.name, split, len(types.words),
                 int(types.targets.sum()))
    splits = type_splits(data, vectors, control_seed(cfg))
    about |= {"layer": layer, "embeddings": str(space.name), "representation": space_label(space, layer),
              "data_summary": type_summary(data)}
    return ProbeInputs(ProbingDataModule(splits, batch_size=cfg.probe.batch_size), data.classes, about)


def type_space(cfg: DictConfig) -> DictConfig:
    """The word space of a type-level run: `embeddings=...`, or else the `layer` setting: an integer l is AVG-l,
    `rand` / `bertw` those spaces (so that one sweep axis, `layer=0,...,L,rand,bertw`, covers Table 5)."""
    space = cfg.get("embeddings")
    if space is None and (isinstance(cfg.layer, int) or cfg.layer in ("rand", "bertw")):
        name = "avg" if isinstance(cfg.layer, int) else cfg.layer
        space = OmegaConf.load(Path(CONFIG_DIR) / "embeddings" / f"{name}.yaml")
    if space is None or space.get("kind") not in SPACES:
        raise ConfigError("probe.level=type needs a word space. Fix: layer=l (AVG-l), layer=rand, layer=bertw, or "
                          "a static file: embeddings=glove embeddings.path=/path/to/glove.6B.300d.txt")
    return space


def avg_space(cfg: DictConfig, data: TypeLevelData):
    """AVG-l: each word's mean vector at layer l over its contexts in the data's feature stores."""
    contexts = load_data(cfg.data)
    encoder = build_encoder(cfg)
    layer = resolve_layer(cfg.layer, encoder.info.num_layers)
    stores = ensure_features(cfg, contexts, encoder)
    del encoder
    data, vectors, about = avg_vectors(average_by_word(stores, layer), data)
    return data, vectors, {**about, "stores": {split: str(path) for split, path in stores.items()}}, layer


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


def finish_loggers(trainer: L.Trainer, results: dict[str, Any]) -> None:
    """Put the final scores in the W&B run summary and close the run, so the next job of a multirun starts its own."""
    keys = ("micro_f1", "n_combinations", "n_contexts", "selectivity", "control_micro_f1")
    summary = {f"{split}/final_{key}": results[split][key] for split in ("dev", *TEST_SPLITS) if split in results
               for key in keys if key in results[split]}
    for logger in trainer.loggers:
        if isinstance(logger, L.pytorch.loggers.WandbLogger):
            logger.experiment.summary.update({**summary, "representation": results["representation"],
                                              "best_epoch": results["best_epoch"]})
            logger.experiment.finish()


def train_probe(cfg: DictConfig, inputs: ProbeInputs, config: dict[str, Any]):
    """Fit the probes (and the control probes) keeping each head's best-dev weights; score dev, test (and seen).
    Returns the module, {"best_epoch": ..., "control_best_epoch": ...} and the trainer."""
    datamodule = inputs.datamodule
    control = control_seed(cfg) is not None
    module = instantiate(cfg.probe.module)(
        input_dim=datamodule.feature_dim, class_names=inputs.classes, level=cfg.probe.level,
        num_layers=datamodule.num_layers, mix=OmegaConf.to_container(cfg.probe.mix, resolve=True), control=control)
    keep_best = {"best_epoch": KeepBestWeights(monitor="dev/micro_f1", submodule="probes")}
    if control:
        # Dev words are unseen, so the control task's dev score is a prior-level floor and its best epoch is noise.
        # Scoring memorisation on seen words needs both heads trained alike: the control head then keeps the weights
        # of the real head's best epoch.
        monitor = "dev/micro_f1" if SEEN in datamodule.splits else "dev/control_micro_f1"
        keep_best["control_best_epoch"] = KeepBestWeights(monitor=monitor, submodule="control_probes")
    trainer = build_trainer(cfg, list(keep_best.values()))
    for logger in trainer.loggers:  # the whole resolved config, so runs can be filtered by layer, model, data...
        logger.log_hyperparams({**config, "representation": inputs.about["representation"]})
    trainer.fit(module, datamodule=datamodule)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)
    return module, {name: callback.best_epoch for name, callback in keep_best.items()}, trainer


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train the batched s-class probes on one representation, evaluate dev/test, write results.json.

    A job whose run folder already holds the results of the same configuration is not run again, so a sweep
    interrupted and relaunched into its folder (`hydra.sweep.dir=...`) only runs the jobs that had not finished.
    """
    out = Path(cfg.paths.output_dir) / "results.json"
    config = OmegaConf.to_container(cfg, resolve=True)
    previous = finished_results(out, config)
    if previous is not None:
        log.info("%s already holds the results of this configuration; not running it again (delete it to rerun)", out)
        return previous
    if cfg.probe.level not in LEVELS:
        raise ConfigError(f"probe.level={cfg.probe.level!r} is unknown. Fix: probe.level=context or probe.level=type")
    seen_fraction(cfg)  # a bad seen split is refused before any extraction
    started = time.time()
    L.seed_everything(cfg.seed, workers=True)
    inputs = type_inputs(cfg) if cfg.probe.level == "type" else context_inputs(cfg)
    module, best_epochs, trainer = train_probe(cfg, inputs, config)
    results = {
        "model": cfg.model.name, "model_name_or_path": cfg.model.name_or_path,
        "random_init": bool(cfg.model.get("random_init", False)), "data": cfg.data.name, "level": cfg.probe.level,
        "embeddings": None, **inputs.about, "probe": cfg.probe.name, "seed": cfg.seed,
        "pooling": cfg.features.pooling, "context_size": context_size_of(cfg), "classes": inputs.classes,
        **{split: module.split_metrics[split] for split in ("dev", *TEST_SPLITS) if split in module.split_metrics},
        **module.mix_summary(),
        **best_epochs, "epochs_trained": trainer.current_epoch,
        "duration_s": round(time.time() - started, 2), "config": config,
    }
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    finish_loggers(trainer, results)
    log.info("%s: dev micro-F1 %.3f, test micro-F1 %.3f%s -> %s", results["representation"],
             results["dev"]["micro_f1"], results["test"]["micro_f1"], selectivity_note(results), out)
    return results


def selectivity_note(results: dict[str, Any]) -> str:
    test = results["test"]
    return f" (selectivity {test['selectivity']:+.3f})" if "selectivity" in test else ""
