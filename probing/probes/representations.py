"""What a probe run reads: one representation of the words (which one, `probing.probes.representation_choice`).

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from probing.data.every_word import every_word_data
from probing.data.sources import WordInContextData, read_contexts
from probing.data.splits import SEEN, split_summary
from probing.data.types import TypeLevelData, type_summary
from probing.errors import ConfigError, settings_under
from probing.features.baselines import check_baseline, oov_summary
from probing.features.featurizer import Featurizer
from probing.features.identity import FeatureIdentity
from probing.features.layers import resolve_layer
from probing.features.provision import ensure_features
from probing.features.sentence_store import sentence_encoder_of
from probing.features.sites import RESIDUAL
from probing.features.store import FeatureStore
from probing.probes.bits.mdl import OnlineCode
from probing.probes.controls import ControlTask, class_distribution, control_classes
from probing.probes.datamodule import ALL_LAYERS, ProbingDataModule, StoreDataModule, TensorSplit
from probing.probes.word_data import ConcatenatedSplit, WordTaskDataModule
from probing.vocabulary import BASELINE_LABELS, MIX

log = logging.getLogger(__name__)

def warn_if_num_layers_differ(configured: int | None, encoder: Featurizer) -> None:
    """The presets sweep `model.num_layers` layers: say so when the config disagrees with the model loaded."""
    num_layers = encoder.info.num_layers
    if configured is not None and configured != num_layers:
        log.warning("the model's num_layers=%s, but %s has %d layers (0..%d): presets that sweep every layer use the "
                    "config value; set the model's num_layers=%d", configured, encoder.info.model_name, num_layers,
                    num_layers - 1, num_layers)


def stored_layer(encoder: Featurizer, layer: int, setting: str = "layer") -> int:
    """Where hidden state `layer` is among the layers that the encoder's stores hold (`layers`: those of the setting
    features.layers; a featurizer without them holds every layer); a layer they lack is refused."""
    held = getattr(encoder, "layers", None)
    if held is None:
        return layer
    if layer not in held:
        raise ConfigError(f"{setting}={layer}: the features hold only the layers {held} (the setting features.layers). "
                          f"Fix: probe one of them, or add {layer} to features.layers (null keeps every layer)")
    return held.index(layer)


def layer_label(encoder: Featurizer, layer: int) -> str:
    """The representation's label of hidden state `layer`: its index, or `<site>-<index>` for an attention or MLP
    output (so that saved probes and erasers of one site are never taken for another's)."""
    site = getattr(encoder, "site", RESIDUAL)
    return str(layer) if site == RESIDUAL else f"{site}-{layer}"


@dataclass
class ProbeInputs:
    """What a probe run trains on, and what its results.json says about where it came from.

    `level` is the representation's; `features` what the probes are trained on, as saved probes record it
    (`features_about`); `about`: layer, representation, stores, data sizes, skips...; `conditioning_dim`: with
    conditional probing, the size of X in the features [X; R] (`ConditionedRepresentation`)."""

    datamodule: ProbingDataModule
    classes: list[str]
    about: dict[str, Any] = field(default_factory=dict)
    level: str = "context"
    features: dict[str, Any] = field(default_factory=dict)
    conditioning_dim: int | None = None


def described_featurizer(featurizer: Featurizer | None) -> dict[str, Any]:
    """What the features come from, read from the featurizer's own store metadata (what its stores record): the
    model's location and weights hash, pooling (a baseline's own where its stores do not record it), context size
    (None for the whole sentence) and attention window and policy (None for the model's own attention). A featurizer
    without a model (P-Rand, a static file) has no location or weights hash."""
    metadata = featurizer.store_metadata() if featurizer is not None else {}
    identity = FeatureIdentity.of_store(metadata, getattr(featurizer, "pooling", None)).recorded()
    return {key: identity[key] for key in FeatureIdentity.of_the_featurizer()}


def features_about(described: Mapping[str, Any], level: str, classes: list[str], datamodule: ProbingDataModule,
                   about: Mapping[str, Any], control: ControlTask, data_name: str) -> dict[str, Any]:
    """What probes trained on these inputs are trained on: the representation's description, its level, layer and
    label, the classes, the feature size and layers, the control seed and the data (saved with the probes;
    `probing.probes.saved.MUST_MATCH` of it must agree for saved probes to be scored on other features)."""
    return {**described, "level": level, "classes": list(classes), "feature_dim": datamodule.feature_dim,
            "layer": about["layer"], "representation": about["representation"], "num_layers": datamodule.num_layers,
            "control_seed": control.seed, "data": data_name}


class ContextRepresentation:
    """Vectors of words in context, read from the HDF5 stores that `featurizer` fills: `store_layer` (an index, or
    ALL_LAYERS for the scalar mix) of them. `layer` and `label` are the results' `layer` and `representation`."""

    level = "context"

    def __init__(self, featurizer: Featurizer, store_layer: int | str, layer: int | str, label: str,
                 expected_layers: int | None = None):
        self.featurizer, self.store_layer, self.layer, self.label = featurizer, store_layer, layer, label
        self.expected_layers = expected_layers  # the layers every store must hold (the mix needs all)

    def inputs(self, source: Any, store_settings: Mapping[str, Any], batch_size: int,
               control: ControlTask, online_code: OnlineCode | None = None) -> ProbeInputs:
        """Read the data's contexts, fill (or reuse) their stores and build the datamodule over them (with
        `online_code`, the training contexts in its order); the featurizer (an encoder's memory) is let go before
        training."""
        data, described = read_contexts(source), described_featurizer(self.featurizer)
        stores = ensure_features(data, self.featurizer, **store_settings)
        about = {"layer": self.layer, "representation": self.label,
                 "stores": {split: str(path) for split, path in stores.items()},
                 "data_summary": split_summary(data.splits), "data_skips": data.skips.as_dict(),
                 "extraction_skipped_rows": {split: stored_skips(path) for split, path in stores.items()},
                 **self.about_data(data)}
        classes, data_name, self.featurizer = data.classes, data.name, None
        del data  # the stores hold what training reads: the records need not stay beside the features
        datamodule = StoreDataModule(stores, layer=self.store_layer, batch_size=batch_size, control_seed=control.seed,
                                     expected_layers=self.expected_layers, seen_fraction=control.seen_fraction,
                                     online_code=online_code)
        datamodule.setup()
        if SEEN in datamodule.splits:
            about["seen_split"] = seen_split_summary(datamodule)
        features = features_about(described, self.level, classes, datamodule, about, control, data_name)
        return ProbeInputs(datamodule, classes, about, self.level, features)

    def about_data(self, data: WordInContextData) -> dict[str, Any]:
        return {}

    def word_featurizer(self) -> Featurizer:
        """What fills the every-word stores of a word task (an encoder may encode each sentence once instead)."""
        return self.featurizer

    def word_stores(self, data: Any, store_settings: Mapping[str, Any],
                    keep_featurizer: bool = False) -> tuple[dict[str, Path], dict[str, Any]]:
        """The every-word store of each split of a task over sentences (a word task, a tree task), filled or reused,
        and the description of their features (`described_featurizer`); the featurizer is let go before training,
        unless more stores are to be filled with it (`keep_featurizer`)."""
        described = described_featurizer(self.featurizer)
        stores = ensure_features(every_word_data(data), self.word_featurizer(), **store_settings)
        if not keep_featurizer:
            self.featurizer = None
        return stores, described

    def about_stores(self, stores: Mapping[str, Path]) -> dict[str, Any]:
        """What results.json records of the stores read: the layer and label, their paths, their skipped rows."""
        return {"layer": self.layer, "representation": self.label,
                "stores": {split: str(path) for split, path in stores.items()},
                "extraction_skipped_rows": {split: stored_skips(path) for split, path in stores.items()}}

    def word_inputs(self, data: Any, store_settings: Mapping[str, Any], batch_size: int, control: ControlTask,
                    pair_product: bool = False, online_code: OnlineCode | None = None) -> ProbeInputs:
        """A word or word-pair task (`WordTaskData`): its every-word stores (`word_stores`), then the datamodule of
        its examples."""
        stores, described = self.word_stores(data, store_settings)
        datamodule = WordTaskDataModule(stores, data, layer=self.store_layer, batch_size=batch_size,
                                        control_seed=control.seed, expected_layers=self.expected_layers,
                                        pair_product=pair_product, online_code=online_code)
        datamodule.setup()
        about = {**self.about_stores(stores), "data_summary": word_task_summary(data, datamodule.dropped),
                 "data_skips": data.skips.as_dict(), "unseen_labels": data.unseen_labels}
        features = features_about(described, self.level, list(data.labels), datamodule, about, control, data.name)
        return ProbeInputs(datamodule, list(data.labels), about, self.level, features)


class ConditionedRepresentation:
    """A word task's representation R joined with a conditioning representation X as [X; R] (`probe.condition_on`,
    conditional probing, Hewitt et al. 2021): both read from their own every-word stores (a layer of the same model
    reads the same store: nothing new is written), example by example (`ConcatenatedSplit`). `conditioning` builds
    X's representation when it is needed, after R's featurizer has filled its stores and been let go, so that two
    encoders are never in memory at once. Everything but the features is R's: its layer and label, its control
    labels, its MDL order."""

    level = "context"

    def __init__(self, probed: ContextRepresentation, conditioning: Callable[[], ContextRepresentation]):
        self.probed, self.conditioning = probed, conditioning
        self.store_layer, self.expected_layers = probed.store_layer, probed.expected_layers

    def word_inputs(self, data: Any, store_settings: Mapping[str, Any], batch_size: int, control: ControlTask,
                    pair_product: bool = False, online_code: OnlineCode | None = None) -> ProbeInputs:
        inputs = self.probed.word_inputs(data, store_settings, batch_size, control, pair_product, online_code)
        conditioning = self.conditioning()
        given = conditioning.word_inputs(data, store_settings, batch_size, control, pair_product)
        datamodule = inputs.datamodule
        datamodule.splits = {name: ConcatenatedSplit(given.datamodule.splits[name], split)
                             for name, split in datamodule.splits.items()}
        inputs.about |= {"conditioned_on": conditioning.label,
                         "conditioning": {key: given.about[key] for key in ("layer", "representation", "stores")}}
        inputs.features |= {"conditioned_on": conditioning.label,
                            "conditioning": {key: given.features[key]
                                             for key in ("model_name_or_path", "weights_sha256", "layer")}}
        inputs.conditioning_dim = datamodule.splits["train"].conditioning_dim
        return inputs


class EncoderLayer(ContextRepresentation):
    """One hidden state of the encoder (`layer=3`; 0 = the embedding output, -1 = the top layer)."""

    def __init__(self, encoder: Featurizer, layer: Any, configured_layers: int | None = None, setting: str = "layer"):
        warn_if_num_layers_differ(configured_layers, encoder)
        index = resolve_layer(layer, encoder.info.num_layers, setting, model=encoder.info.model_name)
        super().__init__(encoder, stored_layer(encoder, index, setting), index, layer_label(encoder, index))

    def word_featurizer(self) -> Featurizer:
        return sentence_encoder_of(self.featurizer)


class LayerMix(ContextRepresentation):
    """Every hidden state, mixed by the probes' learned scalar mix (`layer=mix`)."""

    def __init__(self, encoder: Featurizer, configured_layers: int | None = None):
        warn_if_num_layers_differ(configured_layers, encoder)
        if not getattr(encoder, "every_layer", True):
            raise ConfigError(f"layer={MIX} mixes every hidden state of the model, but the features hold only the "
                              f"layers {encoder.layers} at site {encoder.site} (the settings features.layers and "
                              "features.site). Fix: set both to their defaults (null, resid), or probe one layer "
                              f"(layer={encoder.layers[-1]})")
        super().__init__(encoder, ALL_LAYERS, MIX, MIX, expected_layers=encoder.info.num_layers)

    def word_featurizer(self) -> Featurizer:
        return sentence_encoder_of(self.featurizer)


def word_task_summary(data: Any, dropped: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Examples, sentences and labels of each split, and the examples left out because a word had no vector."""
    return {split: {"examples": len(task) - dropped.get(split, 0), "sentences": len(task.sentences),
                    "labels": int(len(np.unique(task.label))), "dropped_examples": dropped.get(split, 0)}
            for split, task in data.splits.items()}


class Baseline(ContextRepresentation):
    """A bag-of-embeddings baseline of Zhao et al. 2020 §4.2.1 (`baseline=pbert|bertw|prand`): one vector per
    context, filled by `featurizer`."""

    def __init__(self, name: str, featurizer: Featurizer):
        super().__init__(featurizer, 0, check_baseline(name), BASELINE_LABELS[name])


class StaticFileBaseline(Baseline):
    """P-static (Zhao's P-fastText) from the file of `embeddings=...`: named after that file's config, so that two
    files are two columns; the words of the windows the file lacks (they got random vectors) are counted."""

    def __init__(self, featurizer: Featurizer, embeddings_name: str, embeddings_label: str):
        super().__init__("pstatic", featurizer)
        self.embeddings_name, self.label = str(embeddings_name), f"P-{embeddings_label}"

    def about_data(self, data: WordInContextData) -> dict[str, Any]:
        words = (word for records in data.splits.values() for record in records
                 for word in self.featurizer.window_words(record)[0])
        return {"embeddings": self.embeddings_name, "oov": oov_summary(self.featurizer.static, words)}


class TypeSpace:
    """One vector per word from a word space (Zhao et al. 2020 Fig. 1): `space` has `vectors(types)`, `name`,
    `label` (probing/features/type_spaces.py)."""

    level = "type"
    layer: int | None = None

    def __init__(self, space: Any):
        self.space = space

    @property
    def label(self) -> str:
        return self.space.label

    def built_space(self, source: Any, store_settings: Mapping[str, Any]) -> Any:
        return self.space

    def inputs(self, source: Any, store_settings: Mapping[str, Any], batch_size: int,
               control: ControlTask, online_code: OnlineCode | None = None) -> ProbeInputs:
        """The word vectors and multi-hot targets of the type-level word splits (no online code: it is refused at
        type level, `probing.probes.bits.mdl.online_code`)."""
        with settings_under("source"):
            types = source.load_types()
        space = self.built_space(source, store_settings)
        data, vectors, about = space.vectors(types)
        for split, types in data.splits.items():
            log.info("%s %s: %d words, %d gold (word, class) pairs", data.name, split, len(types.words),
                     int(types.targets.sum()))
        about |= {"layer": self.layer, "embeddings": str(space.name), "representation": space.label,
                  "data_summary": type_summary(data)}
        splits = type_splits(data, vectors, control.seed)
        datamodule = ProbingDataModule(splits, batch_size=batch_size)
        features = features_about(self.described, self.level, data.classes, datamodule, about, control, data.name)
        return ProbeInputs(datamodule, data.classes, about, self.level, features)

    # A word type's vector has no context window and no pooling of its own to describe (AVG-l: the model it comes from)
    described: dict[str, Any] = described_featurizer(None)


# What AVG-l's type vectors take from the encoder whose vectors of words in context they average.
AVERAGED_FROM = ("model_name_or_path", "weights_sha256", "weights_dtype", "forward_precision")


class AvgSpaceOfLayer(TypeSpace):
    """AVG-l (Table 5, after Schuster et al. 2019): `space` is AvgSpace awaiting the stores of the data's contexts,
    which the encoder fills first, and the layer."""

    def __init__(self, space: Callable[..., Any], encoder: Featurizer, layer: Any):
        super().__init__(space)
        self.encoder, self.layer = encoder, resolve_layer(layer, encoder.info.num_layers, model=encoder.info.model_name)
        self.store_layer = stored_layer(encoder, self.layer)

    @property
    def label(self) -> str:
        return f"AVG-{self.layer}"

    def built_space(self, source: Any, store_settings: Mapping[str, Any]) -> Any:
        stores = ensure_features(read_contexts(source), self.encoder, **store_settings)
        model = described_featurizer(self.encoder)
        self.described = {**self.described, **{key: model[key] for key in AVERAGED_FROM}}
        self.encoder = None  # its memory is let go before training
        return self.space(stores=stores, layer=self.layer, store_layer=self.store_layer)


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


def seen_split_summary(datamodule: StoreDataModule) -> dict[str, int]:
    """Contexts and words of the seen split, and the training contexts left."""
    seen = datamodule.splits[SEEN].tensors
    return {"contexts": len(seen["word"]), "words": int(seen["word"].unique().numel()),
            "train_contexts_left": len(datamodule.splits["train"])}


def stored_skips(path: Path) -> int:
    """Rows the encoder could not encode (e.g. a target longer than max_length), kept and flagged in the store."""
    with FeatureStore(path) as store:
        return store.num_skipped
