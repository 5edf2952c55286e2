"""The one reading of a `layer` setting: a user's value -> the index of a hidden state of an encoder.

An encoder with L transformer layers has L + 1 hidden states (EncoderInfo.num_layers): 0 is the embedding output,
L the top layer, and a negative value counts from the top as Python does (-1 = L). Every job that takes a layer
(probe.py's `layer=`, analyze.py's `layer=` and `analysis.layers`) resolves it here, so that a value means the same
hidden state everywhere and a bad one is refused in the same words: not an integer, or out of range, is one
ConfigError naming the setting and the model's range.
"""

from __future__ import annotations

from typing import Any

from probing.errors import ConfigError


def resolve_layer(layer: Any, num_layers: int, setting: str = "layer", model: str = "this model",
                  fix: str | None = None) -> int:
    """`layer` as an index into the `num_layers` hidden states 0..L of `model` (negative counts from the top).

    A value that is not an integer (a bool included) or out of range is a ConfigError on `setting`, its fix `fix`
    (by default: the top layer, by index and as -1)."""
    last = num_layers - 1
    if isinstance(layer, bool) or not isinstance(layer, int) or not -num_layers <= layer <= last:
        raise ConfigError(f"{setting}={layer!r} is not a layer of {model}: its hidden states are 0..{last} (0 = the "
                          f"embedding output, {last} the top layer; -1..-{num_layers} count down from the top). "
                          f"Fix: {fix or f'{setting}={last}, or {setting}=-1 for the top layer'}")
    return layer % num_layers
