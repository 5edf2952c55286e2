"""probing/tasks/probe.py: the `layer=` setting as probe.py reads it (negative counts from the last hidden state)."""

from __future__ import annotations

import pytest

from probing.errors import ConfigError
from probing.tasks.probe import resolve_layer


@pytest.mark.parametrize("layer,expected", [(0, 0), (6, 6), (-1, 6), (-7, 0)])
def test_resolve_layer(layer, expected):
    assert resolve_layer(layer, num_layers=7) == expected


@pytest.mark.parametrize("layer", [7, -8, "mix", 2.5, True])
def test_resolve_layer_rejects(layer):
    with pytest.raises(ConfigError, match="0..6"):
        resolve_layer(layer, num_layers=7)
