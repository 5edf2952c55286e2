"""Which representation a probe run reads: conf/probe.yaml's `representation`, given the user's plain values.

The shorthand (`layer=3`, `layer=-1`, `layer=mix`, `baseline=pbert` or `layer=pbert`, and at the type level
`layer=l` (AVG-l), `layer=rand`, `layer=bertw` or `embeddings=...`) and `probe.condition_on` are read once, by
`RepresentationChoice`: the task module builds it from those values before any work (and `probing.cli.SweepCheck`
for every job of a sweep), so that a shorthand that names no representation is one ConfigError with a fix. Called,
it builds the one representation of probing/probes/representations.py that the shorthand names, with what that
kind reads (the encoder, one baseline's featurizer, one word space) and nothing else.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from probing.config import build
from probing.data.settings import choose, require_int
from probing.errors import ConfigError, setting
from probing.features.baselines import WordpieceBaseline, check_baseline, rand_baseline, static_file_baseline
from probing.features.featurizers import featurizer_of
from probing.features.type_spaces import AvgSpace, BertwSpace, RandSpace
from probing.probes.representations import (
    AvgSpaceOfLayer,
    Baseline,
    ConditionedRepresentation,
    EncoderLayer,
    LayerMix,
    StaticFileBaseline,
    TypeSpace,
)
from probing.vocabulary import BASELINE_LABELS, LEVELS, MIX

# At type level, `layer=` names a space of its own (an integer l is AVG-l), as `embeddings=` does.
NAMED_TYPE_SPACES = ("rand", "bertw")
# What `probe.condition_on` may name beside a layer: the bag-of-embeddings baselines, one vector per word in context.
CONDITIONING_BASELINES = ("pbert", "bertw", "prand")


def representation_kind(layer: Any, baseline: str | None, level: str, embeddings: str | None) -> str:
    """The kind of representation that the shorthand names. A shorthand that names none (an unknown probe.level or
    baseline, a baseline with layer=mix, a layer that is neither an index nor a name) is a ConfigError."""
    choose(setting("level"), level, LEVELS)
    if level == "type":
        if embeddings == "bertw" or (embeddings is None and layer in NAMED_TYPE_SPACES):
            return f"type_{embeddings or layer}"
        if embeddings is not None and embeddings != "avg":
            return "static"
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise ConfigError(f"{setting('level')}=type needs a word space, and layer={layer} names none. Fix: "
                              "layer=l (AVG-l), layer=rand, layer=bertw, or a static file: embeddings=glove "
                              f"{setting('embeddings.path')}=/path/to/glove.6B.300d.txt")
        return "avg"
    if baseline is not None:
        check_baseline(str(baseline))
        if layer == MIX:
            raise ConfigError(f"layer={layer} mixes the encoder's layers, but baseline={baseline} has a single vector "
                              "per context. Fix: drop one of the two settings")
        return str(baseline)
    if layer == MIX or layer in BASELINE_LABELS:
        return str(layer)
    if isinstance(layer, bool) or not isinstance(layer, int):  # the model's range is checked once it is loaded
        raise ConfigError(f"layer={layer!r} is not a layer. Fix: an integer (0 = embeddings, -1 = the top layer), "
                          f"{MIX}, or a baseline ({', '.join(BASELINE_LABELS)})")
    return "layer"


def conditioning_kind(condition_on: Any, layer: Any = None) -> str:
    """The kind of representation that `probe.condition_on` names: "none" without conditioning, "layer" for a layer
    of the same model, or a baseline. The scalar mix is refused as X and as R (`layer`): it is learned by each probe,
    so the probes on X and on [X; R] would not share one X, or one R."""
    if condition_on is None:
        return "none"
    name = setting("condition_on")
    if layer == MIX:
        raise ConfigError(f"{name}={condition_on} with layer={MIX}: the scalar mix is learned by each "
                          f"probe, so the probe on [X; R] would mix R its own way. Fix: probe a layer (layer=3) or "
                          f"{name}=null")
    if condition_on in CONDITIONING_BASELINES:
        return str(condition_on)
    if condition_on == MIX:
        raise ConfigError(f"{name}={MIX}: the scalar mix is learned by each probe, so the probe on X and "
                          "the probe on [X; R] would condition on different mixes. Fix: condition on a layer "
                          f"({name}=0) or a baseline ({', '.join(CONDITIONING_BASELINES)})")
    if isinstance(condition_on, bool) or not isinstance(condition_on, int):
        raise ConfigError(f"{name}={condition_on!r} names no representation. Fix: a layer (0 = the "
                          f"embeddings) or a baseline ({', '.join(CONDITIONING_BASELINES)}), or null")
    return "layer"


def plain(node: Any) -> Any:
    """A config node as plain containers, its interpolations resolved (what is built later needs no config)."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


class RepresentationChoice:
    """The representation that `layer`, `baseline`, `level` and `embeddings` (a config of conf/embeddings/, or None)
    name, and the one `condition_on` names, both decided and checked here, where nothing is loaded yet; called, the
    probed representation is built (joined with the conditioning one, which is built only once the probed one's
    stores are filled, `ConditionedRepresentation`). `encoder` is the config of the encoder
    (`probing.features.featurizers.featurizer_config`), built only for a kind that reads it; `rand_dim`, `rand_seed`
    and `oov_seed` are the settings of the random and static baselines (P-Rand and the Rand space: N(0, I_rand_dim)
    per word type; P-static: the seed of the vectors of the words missing from the file)."""

    def __init__(self, layer: Any, baseline: str | None = None, level: str = "context",
                 embeddings: Mapping[str, Any] | None = None, condition_on: Any = None,
                 encoder: Mapping[str, Any] | None = None, context_size: int | str | None = None,
                 configured_layers: int | None = None, rand_dim: int = 300, rand_seed: int = 0, oov_seed: int = 0):
        self.embeddings = plain(embeddings)
        self.kind = representation_kind(layer, baseline, level, (self.embeddings or {}).get("name"))
        self.conditioning = conditioning_kind(condition_on, layer)
        self.layer, self.condition_on, self.encoder = layer, condition_on, plain(encoder)
        self.context_size, self.configured_layers = context_size, configured_layers
        self.rand_dim = require_int(setting("rand_dim"), rand_dim, minimum=1)
        self.rand_seed = require_int(setting("rand_seed"), rand_seed)
        self.oov_seed = require_int(setting("oov_seed"), oov_seed)

    def __call__(self) -> Any:
        probed = self.built(self.kind, self.layer)
        if self.conditioning == "none":
            return probed
        return ConditionedRepresentation(probed, functools.partial(self.built, self.conditioning, self.condition_on,
                                                                   "probe.condition_on"))

    def built_encoder(self) -> Any:
        return featurizer_of(self.encoder)

    def built(self, kind: str, layer: Any, setting: str = "layer") -> Any:
        """The representation of `kind` at `layer`, with what it reads; `setting` is the one named when the layer
        is out of range."""
        if kind == "layer":
            return EncoderLayer(self.built_encoder(), layer, self.configured_layers, setting=setting)
        if kind == MIX:
            return LayerMix(self.built_encoder(), self.configured_layers)
        if kind in BASELINE_LABELS:
            return self.built_baseline(kind)
        if kind == "avg":  # AvgSpace awaits the stores that the encoder fills (embeddings=avg: as configured)
            space = build(OmegaConf.create(self.embeddings), "embeddings") if self.embeddings else AvgSpace
            return AvgSpaceOfLayer(space, self.built_encoder(), layer)
        if kind == "static":
            return TypeSpace(build(OmegaConf.create(self.embeddings), "embeddings"))
        if kind == "type_rand":
            return TypeSpace(RandSpace(dim=self.rand_dim, seed=self.rand_seed))
        return TypeSpace(BertwSpace(self.built_encoder()))

    def built_baseline(self, kind: str) -> Baseline:
        """The bag-of-embeddings baseline `kind` with its featurizer (Zhao et al. 2020 §4.2.1)."""
        if kind == "prand":
            return Baseline(kind, rand_baseline(self.rand_dim, self.rand_seed, self.context_size))
        if kind == "pstatic":
            named = self.embeddings or {}
            featurizer = static_file_baseline(named.get("path"), named.get("name"), self.oov_seed, self.context_size)
            return StaticFileBaseline(featurizer, named.get("name"), named.get("label"))
        return Baseline(kind, WordpieceBaseline(kind, self.built_encoder()))
