"""probing/config.py: the names of sweep job folders (the `job_dir` resolver of conf/hydra/default.yaml)."""

from __future__ import annotations

from probing.config import job_dir_name, override_items

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
