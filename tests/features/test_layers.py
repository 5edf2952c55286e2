"""probing/features/layers.py, the one reading of a `layer` setting: an index into a model's L + 1 hidden states,
negative counting from the top, and anything else refused in one line that names the setting, the model and its
range."""

from __future__ import annotations

import pytest

from probing.errors import ConfigError
from probing.features.layers import resolve_layer


@pytest.mark.parametrize("layer,expected", [(0, 0), (6, 6), (-1, 6), (-7, 0), (3, 3), (-4, 3)])
def test_a_layer_is_a_hidden_state_counted_from_the_bottom_or_from_the_top(layer, expected):
    assert resolve_layer(layer, num_layers=7) == expected


@pytest.mark.parametrize("layer", [7, -8, 100, "mix", "3", 2.5, 1.0, True, False, None])
def test_anything_else_is_refused_naming_the_setting_and_the_range(layer):
    with pytest.raises(ConfigError) as raised:
        resolve_layer(layer, num_layers=7)
    assert str(raised.value) == (
        f"layer={layer!r} is not a layer of this model: its hidden states are 0..6 (0 = the embedding output, 6 the "
        "top layer; -1..-7 count down from the top). Fix: layer=6, or layer=-1 for the top layer")


def test_the_setting_the_model_and_the_fix_are_the_callers():
    with pytest.raises(ConfigError) as raised:
        resolve_layer(9, 3, setting="analysis.layers", model="tiny", fix="analysis.layers=null for all")
    message = str(raised.value)
    assert message.startswith("analysis.layers=9 is not a layer of tiny: its hidden states are 0..2 ")
    assert message.endswith(". Fix: analysis.layers=null for all") and "\n" not in message
