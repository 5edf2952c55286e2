"""probing/config.py: the names of sweep job folders (the `job_dir` resolver of conf/hydra/default.yaml), and run
configs compared wherever the run was written."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from probing.config import RUN_DIR, build, job_dir_name, location_free, override_items, same_run
from probing.errors import ConfigError
from tests.helpers import CONFIG_DIR
from tests.helpers.runs import compose_job

FILES = "analysis.benchmarks=[/data/word-sim/EN-SIMLEX-999.txt,/data/word-sim/EN-MEN-TR-3k.txt,/data/EN-WS-353.txt]"


def test_a_short_name_is_the_overrides_made_folder_safe():
    assert job_dir_name("layer=3,seed=1") == "layer=3,seed=1"
    assert job_dir_name("data.paths=[a/b,c]") == "data.paths=_a_b,c_"
    assert job_dir_name("") == "defaults"


def test_a_long_name_keeps_its_short_overrides_and_a_hash_of_the_whole():
    first, second = f"{FILES},analysis=static_pc,layer=0", f"{FILES},analysis=static_pc,layer=1"
    assert len(first) > 100
    assert job_dir_name(first).startswith("analysis=static_pc,layer=0-")
    assert job_dir_name(second).startswith("analysis=static_pc,layer=1-")
    other_files = first.replace("EN-WS-353", "EN-RW")  # the same short overrides, another configuration
    assert job_dir_name(other_files) != job_dir_name(first)
    assert len({job_dir_name(first), job_dir_name(second), job_dir_name(other_files)}) == 3


def test_a_name_of_many_short_overrides_is_cut_and_tagged():
    overrides = ",".join(f"key{index}=value{index}" for index in range(20))
    name = job_dir_name(overrides)
    assert len(name) == 100 and name.startswith("key0=value0,key1=value1") and name[-11] == "-"
    assert job_dir_name(overrides.replace("value19", "other")) != name


def test_overrides_split_outside_brackets_only():
    assert override_items("a=[1,2],b={x:1,y:2},c=3") == ["a=[1,2]", "b={x:1,y:2}", "c=3"]


def run_config(run_dir: str, lr: float = 5e-5, launched_from: str = "/home/me/probing") -> dict:
    """The parts of a resolved train.py config that hold where the run was launched and written."""
    return {"paths": {"root_dir": launched_from, "log_dir": f"{launched_from}/logs", "output_dir": run_dir,
                      "store_dir": "/data/stores"},
            "trainer": {"default_root_dir": run_dir, "max_epochs": 3},
            "callbacks": {"best": {"dirpath": f"{run_dir}/checkpoints", "filename": "best"}},
            "logger": {"csv": {"save_dir": run_dir, "name": "csv"}},
            "task": {"lr": lr, "files": [f"{run_dir}/extra.txt", "/data/train.txt"]}}


def test_a_run_folder_moved_elsewhere_is_the_same_run():
    here, moved = run_config("/runs/2026-11-22/a"), run_config("/elsewhere/b", launched_from="/srv/probing")
    assert same_run(here, moved) and here != moved
    assert location_free(moved)["callbacks"]["best"]["dirpath"] == f"{RUN_DIR}/checkpoints"
    assert "paths" not in location_free(moved)


def test_another_setting_or_a_folder_that_only_begins_like_the_run_folder_is_another_run():
    here = run_config("/runs/a")
    assert not same_run(here, run_config("/runs/b", lr=1e-4))
    here["task"]["files"][1] = "/runs/a2/train.txt"  # not inside the run folder /runs/a: it stays as it is
    assert location_free(here)["task"]["files"] == [f"{RUN_DIR}/extra.txt", "/runs/a2/train.txt"]
    elsewhere = run_config("/runs/b")
    elsewhere["task"]["files"][1] = "/runs/b2/train.txt"
    assert not same_run(here, elsewhere)
    assert not same_run(here, None) and not same_run([here], [here])


def test_a_node_that_cannot_be_built_inside_another_is_named_by_its_own_key():
    node = OmegaConf.create({"outer": {"_target_": "builtins.dict", "inner": {"_target_": "probing.data.NoSuchThing"}}})
    with pytest.raises(ConfigError, match=r"^outer\.inner: cannot be built \(.*\)\. Fix: check the values under "
                                          r"`outer\.inner`"):
        build(node.outer, "outer")


# What probe.py does with each kind of task (conf/probings/): the class its `probing` builds; none for a fine-tuning
# task of sentences.
PROBING_OF_KIND = {"sclass": "SClassProbing", "token": "WordProbing", "word": "WordProbing", "pair": "WordProbing",
                   "tree": "TreeProbing", "sentence": None, "statement": "StatementProbing"}


@pytest.mark.parametrize("task", sorted(path.stem for path in (Path(CONFIG_DIR) / "task").glob("*.yaml")))
def test_probe_py_holds_the_probing_of_the_task_chosen_and_no_other(tmp_path, task):
    cfg = compose_job("probe", tmp_path, f"task={task}")
    expected = PROBING_OF_KIND[cfg.task.kind]
    assert cfg.probing.get("_target_", "").rpartition(".")[2] == (expected or "")
    assert "probings" not in cfg and "probing" not in cfg.task
    if expected == "TreeProbing":
        assert cfg.probing.kind == task.removeprefix("tree_")
