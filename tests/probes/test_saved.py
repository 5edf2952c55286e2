"""probes.safetensors: round trip, damaged files, and which saved probes fit a run (probe.reuse)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from probing.errors import ConfigError, ProbingError
from probing.probes.saved import METADATA_KEY, PROBES_FILE, differences, find_reusable, load_probes, save_probes
from probing.probes.sclass_probe import SClassProbe

CLASSES = ["animal", "food", "place"]


def about(**changes):
    base = {"level": "context", "classes": CLASSES, "feature_dim": 8, "layer": 2, "representation": "2",
            "pooling": "mean", "context_size": None, "attention_window": None, "num_layers": None,
            "model_name_or_path": "m", "weights_sha256": "ab" * 32, "seed": 0}
    return base | changes


def saved_run(folder, control=True, **changes):
    torch.manual_seed(changes.get("seed", 0))
    module = SClassProbe(input_dim=8, class_names=CLASSES, hidden_dim=4, control=control)
    folder.mkdir(parents=True, exist_ok=True)
    save_probes(module, folder / PROBES_FILE, about(**changes))
    return module


def test_round_trip_keeps_both_heads_and_what_they_were_trained_on(tmp_path):
    module = saved_run(tmp_path / "run")
    saved = load_probes(tmp_path / "run" / PROBES_FILE)
    assert saved.about["classes"] == CLASSES and saved.about["format"] == 2 and saved.has_control
    expected = {name: tensor for name, tensor in module.state_dict().items()
                if name.startswith(("probes.", "control_probes."))}
    assert saved.state_dict.keys() == expected.keys()
    assert all(torch.equal(saved.state_dict[name], tensor) for name, tensor in expected.items())
    assert not list(tmp_path.glob("run/.*partial"))  # written atomically: no temporary file left


def test_a_format_1_file_with_transposed_weights_loads_into_the_same_probes(tmp_path):
    module = saved_run(tmp_path / "run", control=False)
    old_layout = {name: tensor.transpose(-1, -2).contiguous() if name.endswith(("w1", "w2")) else tensor
                  for name, tensor in module.state_dict().items() if name.startswith("probes.")}
    save_file(old_layout, tmp_path / PROBES_FILE, metadata={METADATA_KEY: json.dumps({"format": 1, **about()})})
    loaded = SClassProbe(input_dim=8, class_names=CLASSES, hidden_dim=4)
    loaded.load_state_dict(load_probes(tmp_path / PROBES_FILE).state_dict)
    features = torch.randn(5, 8)
    torch.testing.assert_close(loaded(features), module(features), rtol=0, atol=0)


def test_a_damaged_file_is_one_error(tmp_path):
    saved_run(tmp_path / "run")
    path = tmp_path / "run" / PROBES_FILE
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ProbingError, match="not a readable probes file"):
        load_probes(path)


def test_differences_name_classes_and_dimension():
    found = differences(about(), about(classes=CLASSES[:2], feature_dim=16))
    assert found == ["classes: ['animal', 'food', 'place'] (saved) vs ['animal', 'food'] (this run)",
                     "feature_dim: 8 (saved) vs 16 (this run)"]
    assert differences(about(), about(model_name_or_path="other", weights_sha256="cd" * 32)) == []  # model may differ


def test_the_fitting_probes_of_a_sweep_are_found_and_the_seed_decides(tmp_path):
    saved_run(tmp_path / "sweep" / "layer=1", layer=1, representation="1")
    saved_run(tmp_path / "sweep" / "layer=2,seed=0", seed=0)
    saved_run(tmp_path / "sweep" / "layer=2,seed=1", seed=1)
    chosen = find_reusable(tmp_path / "sweep", about(), seed=1)
    assert chosen.path == tmp_path / "sweep" / "layer=2,seed=1" / PROBES_FILE
    with pytest.raises(ConfigError, match="2 saved probe sets fit"):
        find_reusable(tmp_path / "sweep", about(), seed=5)
    with pytest.raises(ConfigError, match=r"differs in classes: .*\(saved\)"):
        find_reusable(tmp_path / "sweep" / "layer=1", about(layer=1, representation="1", classes=["x"]), seed=0)
