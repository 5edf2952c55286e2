"""What fills the stores, built from a run's settings: `features.encoder` (conf/features/) names one of these
factories, and the job builds it with `featurizer_config`: the model of `model` (conf/model/), the extraction settings
beside the node in `features` (each has one home there: pooling, max_length, device, precision, ...) and the context
size. The factory reads what its featurizer takes, and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from probing.config import build
from probing.errors import ConfigError
from probing.features.elmo_hdf5 import ElmoFileFeaturizer
from probing.features.encoder import WordEncoder


def word_encoder(model: Mapping[str, Any], settings: Mapping[str, Any], context_size: int | str | None = None,
                 name_or_path: str | None = None) -> WordEncoder:
    """The frozen encoder of `model` (`name_or_path`: another model folder of the same config, as the fine-tuned
    comparison's setups read) with the extraction `settings`; what the encoder refuses is named as this factory's
    `model.<key>` or `settings.<key>` (`featurizer_of` keys them model.<key> and features.<key>)."""
    try:
        return WordEncoder(name_or_path=name_or_path or model["name_or_path"], revision=model.get("revision"),
                           random_init=model.get("random_init", False), init_seed=model.get("init_seed", 0),
                           pooling=settings["pooling"], max_length=settings["max_length"], context_size=context_size,
                           device=settings["device"], precision=settings["precision"],
                           allow_emulated_bf16=settings["allow_emulated_bf16"],
                           attention_window=settings["attention_window"],
                           attention_policy=settings["attention_policy"], layers=settings.get("layers"),
                           site=settings.get("site", "resid"), pad_to_multiple_of=settings.get("pad_to_multiple_of", 1),
                           **{name: model.get(name) for name in MODEL_WEIGHTS_KEYS if model.get(name) is not None})
    except ConfigError as error:  # the encoder's arguments are this factory's model's and settings' keys
        raise error.renamed(lambda name: f"model.{name}" if name in MODEL_KEYS else f"settings.{name}") from None


# The model's keys that say how its weights are read and placed (absent from a model config that predates them).
MODEL_WEIGHTS_KEYS = ("dtype", "device_map", "gguf_file", "cache_dir")
MODEL_KEYS = ("name_or_path", "revision", "random_init", "init_seed", *MODEL_WEIGHTS_KEYS)


def imported_vectors(model: Mapping[str, Any], settings: Mapping[str, Any],
                     context_size: int | str | None = None) -> ElmoFileFeaturizer:
    """The vectors of the ELMo-layout file at the model's `path` (model=imported), their stores named after its
    `vectors_name` (default: the file's stem); the file's vectors saw whole sentences."""
    return ElmoFileFeaturizer(model["path"], model.get("vectors_name"))


def featurizer_config(features: Any, model: Any, context_size: int | str | None = None,
                      **changed: Any) -> dict[str, Any]:
    """`features.encoder` with what its factory is built from: `model`, the other settings of `features` (with the
    `changed` ones: extract.py's device of each process) and `context_size`; plain containers, ready to build."""
    settings = dict(plain(features))
    node = settings.pop("encoder")
    return {**node, "model": plain(model), "settings": {**settings, **changed}, "context_size": context_size}


def plain(node: Any) -> Any:
    """A config node as plain containers, its interpolations resolved."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def built_featurizer(features: Any, model: Any, context_size: int | str | None = None) -> Any:
    """The featurizer of `features.encoder`, built (`featurizer_config`): for a config that holds it as one node,
    as analysis=neurons's representation does."""
    return featurizer_of(featurizer_config(features, model, context_size))


# Where the user sets what a featurizer factory refuses: its `settings` are those of `features`, its `model` is `model`.
FEATURIZER_KEYS = {"settings": "features", "model": "model"}


def featurizer_of(config: Mapping[str, Any]) -> Any:
    """The featurizer of a `featurizer_config`, built; a setting it refuses is named by the user's key path
    (`features.precision`, `model.random_init`)."""
    return build(OmegaConf.create(config), "features.encoder", settings_from=FEATURIZER_KEYS)
