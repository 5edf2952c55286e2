"""What identifies the features that a run probes, and that saved probes and fitted erasers were made from: one
declared type, `FeatureIdentity`, recorded as its fields (`recorded`) and compared field by field (`differences`,
whose lines every refusal of a saved file made from other features shows)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from probing.features.featurizer import parse_context_size


@dataclasses.dataclass(frozen=True)
class FeatureIdentity:
    """The model (its path, and the SHA-256 of its weights, which tells a fine-tuned encoder apart), the layer and the
    representation's name (`3`/`layer3`, `mix`, `pbert`, ...), how a word's wordpieces are pooled, the context kept
    around it (`context_size` words on each side, None: the whole sentence), the attention window and policy the
    encoder ran with (None: its own attention), the dtype its weights were loaded in (`bf16`, `fp16`; None: float32)
    and the precision its forward ran in under autocast (`bf16`, `16`; None: float32, or no forward: a baseline of
    the embeddings, a static file). Its fields are the keys under which results.json, probes files and eraser files
    record them; a featurizer's store records them under its own keys (`of_store`)."""

    model_name_or_path: Any = None
    weights_sha256: str | None = None
    layer: Any = None
    representation: str | None = None
    pooling: str | None = None
    context_size: int | None = None
    attention_window: int | None = None
    attention_policy: str | None = None
    weights_dtype: str | None = None
    forward_precision: str | None = None

    # The fields that name the model: saved probes are scored on another model's features (Zhao et al. 2020).
    MODEL: ClassVar[tuple[str, ...]] = ("model_name_or_path", "weights_sha256")
    # The fields that the run decides, not the featurizer that fills the stores.
    OF_THE_RUN: ClassVar[tuple[str, ...]] = ("layer", "representation")

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def beyond_the_model(cls) -> tuple[str, ...]:
        """The fields that say which features of a model (all but MODEL)."""
        return tuple(name for name in cls.fields() if name not in cls.MODEL)

    @classmethod
    def of_the_featurizer(cls) -> tuple[str, ...]:
        """The fields that the featurizer decides (all but OF_THE_RUN): what its stores record (`of_store`)."""
        return tuple(name for name in cls.fields() if name not in cls.OF_THE_RUN)

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> FeatureIdentity:
        """The identity recorded in `record` (a results.json, a file's description); a key it lacks is None."""
        return cls(**{name: record.get(name) for name in cls.fields()})

    @classmethod
    def of_store(cls, metadata: Mapping[str, Any], pooling: str | None = None) -> FeatureIdentity:
        """What a featurizer's store metadata (its `store_metadata()`, the keys its stores record) say of the
        identity: the model's location (`model_path`), its weights hash, pooling (`pooling` where the stores record
        none: a baseline's own), context size (recorded as a number or "all"), attention window and policy (recorded
        only for a window), the weights' dtype (recorded only when not float32) and the forward's precision (recorded
        by every encoder that runs a forward, None here at float32: saved files and results made before either was
        recorded were made at float32, and compare equal). A featurizer without a model (P-Rand, a static file) has
        no location or weights hash. The layer and representation are the run's, not the store's."""
        return cls(model_name_or_path=metadata.get("model_path"), weights_sha256=metadata.get("weights_sha256"),
                   pooling=metadata.get("pooling", pooling),
                   context_size=parse_context_size(metadata.get("context_size")),
                   attention_window=metadata.get("attention_window"),
                   attention_policy=metadata.get("attention_policy"),
                   weights_dtype=unless_float32(metadata.get("weights_dtype"), "fp32"),
                   forward_precision=unless_float32(metadata.get("precision"), "32"))

    def recorded(self) -> dict[str, Any]:
        """Its fields as they are recorded."""
        return dataclasses.asdict(self)

    def differences(self, current: FeatureIdentity, fields: Sequence[str] | None = None) -> list[str]:
        """`field: <this> (saved) vs <current> (this run)` for each of `fields` (None: all) where this identity, a
        saved file's, and the current run's disagree."""
        return settings_differences(self.recorded(), current.recorded(), fields or self.fields())


def unless_float32(value: Any, float32: str) -> str | None:
    """A dtype or precision as the identity records it: None for float32 (`float32`: its name in the store's
    metadata), or absent."""
    return None if value is None or str(value) == float32 else str(value)


def settings_differences(saved: Mapping[str, Any], current: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    """The settings of `keys` where a saved file and the current run disagree, as `key: saved vs now`; a long class
    list is counted, with what differs in it (see `list_difference`)."""
    def shown(value: Any) -> str:
        return f"{len(value)} classes" if is_long_list(value) else repr(value)

    def detail(before: Any, now: Any) -> str:
        lists = isinstance(before, list) and isinstance(now, list)
        return f", {list_difference(before, now)}" if lists and (is_long_list(before) or is_long_list(now)) else ""

    return [f"{key}: {shown(saved.get(key))} (saved) vs {shown(current.get(key))} (this run)"
            f"{detail(saved.get(key), current.get(key))}" for key in keys if saved.get(key) != current.get(key)]


SHOWN_IN_FULL = 5  # a list this long or shorter is shown as it is
SHOWN_NAMES = 3  # names listed on each side of a difference before "and N more"


def is_long_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > SHOWN_IN_FULL


def list_difference(saved: list[Any], current: list[Any]) -> str:
    """What tells two lists of names apart: the same names in another order (and the first position, counted from
    1, where they differ), or the names on one side only."""
    if Counter(saved) == Counter(current):
        position = next(index for index, (a, b) in enumerate(zip(saved, current)) if a != b)
        return (f"the same names in another order: the first that differs is at position {position + 1}, "
                f"{saved[position]!r} (saved) vs {current[position]!r} (this run)")
    sides = [f"{few_of(names)} {side}" for names, side in [(names_missing(saved, current), "only in the saved probes"),
                                                             (names_missing(current, saved), "only in this run")]
             if names]
    return f"with {', '.join(sides)}" if sides else "the same names, some of them more often on one side"


def names_missing(names: list[Any], other: list[Any]) -> list[Any]:
    """The names of `names` (in their order, once each) that `other` lacks."""
    others = set(other)
    return [name for name in dict.fromkeys(names) if name not in others]


def few_of(names: list[Any]) -> str:
    shown = ", ".join(map(repr, names[:SHOWN_NAMES]))
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")
