"""probes.safetensors: round trip, damaged files, and which saved probes fit a run (probe.reuse)."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from probing.data.files import file_mode
from probing.errors import ConfigError, ProbingError
from probing.probes.controls import ControlPart
from probing.probes.saved import (
    FORMAT,
    HASH_KEY,
    METADATA_KEY,
    PROBES_FILE,
    TENSORS_HASH_KEY,
    differences,
    file_metadata,
    find_reusable,
    load_into,
    load_probes,
    module_of,
    save_probes,
    storage_dtype,
    tensors_hash,
)
from probing.probes.sclass_probe import SClassProbe
from tests.helpers import REPO
from tests.helpers.stores import assert_one_line_error

CLASSES = ["animal", "food", "place"]
OLD_PROBES = REPO / "tests" / "fixtures" / "probes_format_3"  # written by the code of 084fdab (its README)


def about(**changes):
    base = {"level": "context", "classes": CLASSES, "feature_dim": 8, "layer": 2, "representation": "2",
            "pooling": "mean", "context_size": None, "attention_window": None, "num_layers": None,
            "model_name_or_path": "m", "weights_sha256": "ab" * 32, "seed": 0, "best_dev_micro_f1": 0.5,
            "module": {"input_dim": 8, "class_names": CLASSES, "hidden_dim": 4}}
    return base | changes


def rewritten(path, tensors=None, metadata=None):
    """`path` written again with other tensors or metadata (by default its own), as damage or a foreign tool would."""
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() if metadata is None else metadata
    save_file(load_file(path) if tensors is None else tensors, path, metadata=metadata)
    return path


def metadata_of(path):
    with safe_open(str(path), framework="pt") as handle:
        return handle.metadata()


def with_about(path, **changes):
    """The metadata of `path` with `changes` made to what the probes were trained on (the recorded hash kept)."""
    metadata = metadata_of(path)
    return {**metadata, METADATA_KEY: json.dumps(json.loads(metadata[METADATA_KEY]) | changes)}


def format_2_metadata(tensors, tensors_hashed=True):
    """What a version that hashed only the tensors wrote (with `tensors_hashed`), or one before any hash."""
    metadata = {METADATA_KEY: json.dumps({"format": 2, **about()})}
    return metadata | ({TENSORS_HASH_KEY: tensors_hash(tensors)} if tensors_hashed else {})


def saved_run(folder, control=True, **changes):
    torch.manual_seed(changes.get("seed", 0))
    module = SClassProbe.from_settings(input_dim=8, labels=CLASSES, hidden_dim=4, control=control)
    folder.mkdir(parents=True, exist_ok=True)
    save_probes(module, folder / PROBES_FILE, about(**changes))
    return module


def test_round_trip_keeps_both_heads_and_what_they_were_trained_on(tmp_path):
    module = saved_run(tmp_path / "run")
    saved = load_probes(tmp_path / "run" / PROBES_FILE)
    assert saved.about["classes"] == CLASSES and saved.about["format"] == FORMAT == 4 and saved.has_control
    expected = {name: tensor for name, tensor in module.state_dict().items()
                if name.startswith(("probes.", "parts.control.probes."))}
    assert saved.state_dict.keys() == expected.keys()
    assert all(torch.equal(saved.state_dict[name], tensor) for name, tensor in expected.items())
    assert not list(tmp_path.glob("run/.*partial"))  # written atomically: no temporary file left


def test_a_format_1_file_with_transposed_weights_loads_into_the_same_probes(tmp_path):
    module = saved_run(tmp_path / "run", control=False)
    old_layout = {name: tensor.transpose(-1, -2).contiguous() if name.endswith(("w1", "w2")) else tensor
                  for name, tensor in module.state_dict().items() if name.startswith("probes.")}
    save_file(old_layout, tmp_path / PROBES_FILE, metadata={METADATA_KEY: json.dumps({"format": 1, **about()})})
    loaded = SClassProbe.from_settings(input_dim=8, labels=CLASSES, hidden_dim=4)
    loaded.load_state_dict(load_probes(tmp_path / PROBES_FILE).state_dict)
    features = torch.randn(5, 8)
    torch.testing.assert_close(loaded(features), module(features), rtol=0, atol=0)


def test_a_damaged_file_is_one_error(tmp_path):
    saved_run(tmp_path / "run")
    path = tmp_path / "run" / PROBES_FILE
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ProbingError, match="not a readable probes file"):
        load_probes(path)


STREUSLE_LIKE = [f"n.CLASS{index:02d}" for index in range(26)]


def test_reordered_classes_name_the_first_position_that_differs():
    swapped = [*STREUSLE_LIKE[:3], STREUSLE_LIKE[4], STREUSLE_LIKE[3], *STREUSLE_LIKE[5:]]
    assert differences(about(classes=STREUSLE_LIKE), about(classes=swapped)) == [
        "classes: 26 classes (saved) vs 26 classes (this run), the same names in another order: the first that "
        "differs is at position 4, 'n.CLASS03' (saved) vs 'n.CLASS04' (this run)"]


def test_other_class_names_are_named_on_their_side():
    renamed = [*STREUSLE_LIKE[:20], *(f"v.CLASS{index}" for index in range(5))]  # 6 saved names gone, 5 new
    assert differences(about(classes=STREUSLE_LIKE), about(classes=renamed)) == [
        "classes: 26 classes (saved) vs 25 classes (this run), with 'n.CLASS20', 'n.CLASS21', 'n.CLASS22' and 3 more "
        "only in the saved probes, 'v.CLASS0', 'v.CLASS1', 'v.CLASS2' and 2 more only in this run"]
    assert differences(about(classes=STREUSLE_LIKE[:7]), about(classes=STREUSLE_LIKE[:6])) == [
        "classes: 7 classes (saved) vs 6 classes (this run), with 'n.CLASS06' only in the saved probes"]


def test_differences_name_classes_and_dimension():
    found = differences(about(), about(classes=CLASSES[:2], feature_dim=16))
    assert found == ["classes: ['animal', 'food', 'place'] (saved) vs ['animal', 'food'] (this run)",
                     "feature_dim: 8 (saved) vs 16 (this run)"]
    assert differences(about(), about(model_name_or_path="other", weights_sha256="cd" * 32)) == []  # model may differ


def test_probes_of_another_attention_policy_do_not_fit():
    """The policy is recorded beside the window; probes saved before the policies (a window, no policy: blocked)
    fit no windowed run of today, and without a window (policy None) old and new probes agree."""
    windowed = about(attention_window=2, attention_policy="positional")
    assert differences(windowed, about(attention_window=2, attention_policy="sink")) == [
        "attention_policy: 'positional' (saved) vs 'sink' (this run)"]
    assert differences(about(attention_window=2), windowed) == [
        "attention_policy: None (saved) vs 'positional' (this run)"]
    assert differences(about(), about(attention_policy=None)) == []


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


def test_finite_values_written_into_the_tensor_data_are_refused(tmp_path):
    saved_run(tmp_path / "run")
    path = tmp_path / "run" / PROBES_FILE
    tensors = load_file(path)
    tensors["probes.mlps.w1"][2, 1, 2] += 0.25  # finite, plausible, wrong
    rewritten(path, tensors)
    with pytest.raises(ProbingError) as error:
        load_probes(path)
    assert_one_line_error(error.value, str(path), "do not match the hash", "Fix: rerun")


def test_an_edited_setting_in_the_metadata_is_refused(tmp_path):
    """Layer-3 probes whose metadata were edited to say layer 2 would be scored on layer 2: the hash covers the
    metadata too."""
    saved_run(tmp_path / "run", layer=3, representation="3")
    path = tmp_path / "run" / PROBES_FILE
    rewritten(path, metadata=with_about(path, layer=2, representation="2"))
    with pytest.raises(ProbingError) as error:
        load_probes(path)
    assert_one_line_error(error.value, str(path), "its metadata or tensors do not match the hash",
                          "(the file is damaged or was changed)", "Fix: rerun the probe run")


@pytest.mark.parametrize("metadata", [
    lambda path: with_about(path, format=2),  # claims to be an older file, keeps the hash of this format
    lambda path: {key: value for key, value in metadata_of(path).items() if key != HASH_KEY},
], ids=["format edited", "hash removed"])
def test_a_file_of_this_format_cannot_pass_for_an_unchecked_one(tmp_path, metadata):
    saved_run(tmp_path / "run")
    path = tmp_path / "run" / PROBES_FILE
    rewritten(path, metadata=metadata(path))
    with pytest.raises(ProbingError) as error:
        load_probes(path)
    assert_one_line_error(error.value, str(path), "(the file is damaged or was changed)", "Fix: rerun")


def test_a_format_2_file_is_read_with_a_warning_that_its_metadata_are_not_checked(tmp_path, caplog):
    module = saved_run(tmp_path / "run")
    path = tmp_path / "run" / PROBES_FILE
    rewritten(path, metadata=format_2_metadata(load_file(path)))
    with caplog.at_level(logging.WARNING, logger="probing"):
        saved = load_probes(path)
    assert torch.equal(saved.state_dict["probes.mlps.w1"], module.state_dict()["probes.mlps.w1"])
    assert f"{path} was written by an older version (probes file format 2): its metadata" in caplog.text
    assert "are not covered by a hash" in caplog.text and "and its tensors" not in caplog.text
    tensors = load_file(path)
    tensors["probes.mlps.w1"][0, 0, 0] += 0.25  # its tensors are still checked
    rewritten(path, tensors)
    with pytest.raises(ProbingError, match="the tensor data do not match the hash"):
        load_probes(path)


def test_a_file_without_the_hash_is_read_with_a_warning_but_not_finite_values_are_refused(tmp_path, caplog):
    module = saved_run(tmp_path / "run")
    path = tmp_path / "run" / PROBES_FILE
    rewritten(path, metadata=format_2_metadata(load_file(path), tensors_hashed=False))
    with caplog.at_level(logging.WARNING, logger="probing"):
        saved = load_probes(path)
    assert torch.equal(saved.state_dict["probes.mlps.w1"], module.state_dict()["probes.mlps.w1"])
    assert "metadata (the layer, classes and other settings the probes were trained on) and its tensors are not " \
           "covered by a hash" in caplog.text and str(path) in caplog.text
    tensors = load_file(path)
    tensors["probes.mlps.b1"][0, 0] = float("nan")
    rewritten(path, tensors)
    with pytest.raises(ProbingError, match="probes.mlps.b1 hold values that are not finite"):
        load_probes(path)


def test_a_file_written_with_the_metadata_of_this_format_loads(tmp_path):
    """file_metadata is what save_probes writes: a file written with it by another tool is read and checked."""
    module = saved_run(tmp_path / "run")
    tensors = load_file(tmp_path / "run" / PROBES_FILE)
    save_file(tensors, tmp_path / PROBES_FILE, metadata=file_metadata(about(layer=5), tensors))
    saved = load_probes(tmp_path / PROBES_FILE)
    assert saved.about["layer"] == 5 and saved.about["format"] == FORMAT
    assert torch.equal(saved.state_dict["probes.mlps.w1"], module.state_dict()["probes.mlps.w1"])


@pytest.mark.parametrize("value, problem", [("null", "NoneType None"), ("[1, 2]", "list [1, 2]"),
                                            ('{"format": 2}', "lack module, model_name_or_path")])
def test_metadata_that_describe_no_probes_are_one_error(tmp_path, value, problem):
    saved_run(tmp_path / "run")
    path = rewritten(tmp_path / "run" / PROBES_FILE, metadata={METADATA_KEY: value})
    with pytest.raises(ProbingError) as error:
        load_probes(path)
    assert_one_line_error(error.value, str(path), problem)


def test_weights_of_other_shapes_than_the_module_expects_are_one_error(tmp_path):
    saved_run(tmp_path / "run", control=False)
    path = tmp_path / "run" / PROBES_FILE
    tensors = load_file(path)
    tensors["probes.mlps.w1"] = torch.zeros(3, 100, 8)  # 100 hidden units where the settings say 4
    del tensors["probes.mlps.b2"]
    saved = load_probes(rewritten(path, tensors, {METADATA_KEY: json.dumps({"format": 2, **about()})}))
    with pytest.raises(ProbingError) as error:
        load_into(SClassProbe.from_settings(input_dim=8, labels=CLASSES, hidden_dim=4), saved)
    assert_one_line_error(error.value, str(path), "probes.mlps.w1 (3, 100, 8) (expected (3, 4, 8))",
                          "probes.mlps.b2 missing (expected (3, 2))")


def test_saved_weights_load_into_a_module_of_the_same_settings(tmp_path):
    module = saved_run(tmp_path / "run")
    loaded = SClassProbe.from_settings(input_dim=8, labels=CLASSES, hidden_dim=4)  # no control head: it is left out
    load_into(loaded, load_probes(tmp_path / "run" / PROBES_FILE))
    features = torch.randn(5, 8)
    torch.testing.assert_close(loaded(features), module(features), rtol=0, atol=0)


@pytest.mark.parametrize("precision,dtype", [("32-true", torch.float32), ("bf16-mixed", torch.bfloat16),
                                             ("bf16-true", torch.bfloat16), ("16-mixed", torch.float16),
                                             ("64-true", torch.float32)])
def test_the_storage_dtype_follows_the_training_precision(precision, dtype):
    assert storage_dtype(precision) == dtype


def test_probes_stored_in_bf16_take_half_the_bytes_and_load_as_their_rounded_weights(tmp_path):
    torch.manual_seed(0)
    module = SClassProbe.from_settings(input_dim=8, labels=CLASSES, hidden_dim=4, control=True)
    full = save_probes(module, tmp_path / "full.safetensors", about())
    half = save_probes(module, tmp_path / "half.safetensors", about(), dtype=torch.bfloat16)
    saved = load_probes(half)  # its hash is checked on load
    assert saved.about["storage_dtype"] == "bfloat16" and load_probes(full).about["storage_dtype"] == "float32"
    assert all(tensor.dtype == torch.bfloat16 for tensor in saved.state_dict.values())
    def tensor_bytes(probes) -> int:
        return sum(tensor.numel() * tensor.element_size() for tensor in probes.state_dict.values())

    assert 2 * tensor_bytes(saved) == tensor_bytes(load_probes(full))
    assert full.stat().st_mode & 0o777 == half.stat().st_mode & 0o777 == file_mode()  # not safetensors' 0600
    loaded = SClassProbe.from_settings(input_dim=8, labels=CLASSES, hidden_dim=4, control=True)
    load_into(loaded, saved)
    for name, tensor in loaded.state_dict().items():
        if name.startswith(("probes.", "parts.control.probes.")):
            assert tensor.dtype == torch.float32
            assert torch.equal(tensor, module.state_dict()[name].to(torch.bfloat16).float())


def test_a_file_written_before_the_control_task_was_a_part_loads_its_control_head_there(tmp_path):
    """tests/fixtures/probes_format_3: written by the code that held the control head at `control_probes`. Its
    weights load under today's names (parts.control.probes) and both heads give the logits they gave then."""
    saved = load_probes(OLD_PROBES / PROBES_FILE)
    assert saved.about["format"] == 3 and saved.has_control
    assert not [name for name in saved.state_dict if name.startswith("control_probes.")]
    with safe_open(str(OLD_PROBES / PROBES_FILE), framework="pt") as handle:
        old_weights = handle.get_tensor("control_probes.mlps.w1")
    assert torch.equal(saved.state_dict["parts.control.probes.mlps.w1"], old_weights)
    module = module_of(saved, SClassProbe, control=True)
    logits = json.loads((OLD_PROBES / "logits.json").read_text())
    features = torch.arange(40.0).view(5, 8) / 10 - 2
    with torch.no_grad():
        torch.testing.assert_close(module.probes(features), torch.tensor(logits["probes"]))
        torch.testing.assert_close(module.parts[ControlPart.NAME].probes(features),
                                   torch.tensor(logits["control_probes"]))


def test_a_lightning_checkpoint_written_before_the_control_task_was_a_part_loads_through_lightning(tmp_path):
    """Lightning reads the module's `on_load_checkpoint` before its weights: the old names are renamed there, and the
    control head scores the fixture's logits (its weights, not fresh ones)."""
    import lightning as L

    torch.manual_seed(5)  # other weights than the checkpoint's
    module = SClassProbe.from_settings(input_dim=8, labels=CLASSES, hidden_dim=4, control=True)
    features = torch.arange(40.0).view(5, 8) / 10 - 2
    rows = [{"features": row, "label": torch.tensor(0), "combination": torch.tensor(0),
             "control_label": torch.tensor(1), "control_combination": torch.tensor(i)}
            for i, row in enumerate(features)]
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.validate(module, torch.utils.data.DataLoader(rows, batch_size=5), ckpt_path=OLD_PROBES / "last.ckpt",
                     verbose=False)
    logits = json.loads((OLD_PROBES / "logits.json").read_text())
    with torch.no_grad():
        torch.testing.assert_close(module.parts[ControlPart.NAME].probes(features),
                                   torch.tensor(logits["control_probes"]))
        torch.testing.assert_close(module.probes(features), torch.tensor(logits["probes"]))
