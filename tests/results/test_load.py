"""A results.json read as its kind's type (probing.results.load): migrated first, its declared values as attributes,
a value of another type refused in one line naming the file; a key older files lack reads as absent. A file of the
current version is checked against its kind's JSON Schema (check_file)."""

from __future__ import annotations

import json

import pytest

from probing.errors import DataFormatError
from probing.report import write_report
from probing.results import SCHEMA_VERSION, load
from probing.results.kinds import ABSENT, TreeProbeResults
from probing.results.load import check_file, fits
from tests.helpers import FIXTURES

TREE = json.loads((FIXTURES / "results_unversioned" / "tree_probe.json").read_text(encoding="utf-8"))


def test_an_unversioned_tree_probe_reads_as_its_type_with_its_structure():
    run = load(TREE)
    assert isinstance(run, TreeProbeResults)
    assert (run.kind, run.structure, run.schema_version, run.job) == ("tree_probe", "distance", SCHEMA_VERSION, "probe")
    assert run.dev == TREE["dev"] and run.linear_baseline == TREE["linear_baseline"] and run.rank == TREE["rank"]
    assert run.mix_weights is ABSENT  # optional: a run without a scalar mix leaves it out


def test_keys_that_older_files_lack_or_hold_as_null_read_as_absent():
    run = load({"task": "sclass", "representation": "3", "dev": {"micro_f1": 0.5}, "config": None})
    assert (run.kind, run.dev, run.config, run.data_files, run.seed) == ("sclass_probe", {"micro_f1": 0.5}, None, None,
                                                                         None)


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("rank", "16", "an integer or null"),
    ("linear_baseline", [], "an object"),
    ("examples", {"words": []}, "a list"),
    ("random_init", 1, "true or false"),
])
def test_a_value_of_another_type_is_refused_naming_the_file(key, value, shown):
    with pytest.raises(DataFormatError) as error:
        load({**TREE, key: value}, "sweep/0/results.json")
    assert str(error.value) == (f"sweep/0/results.json: its `{key}` is not {shown}, as a tree_probe run records it. "
                                "Fix: delete that results.json or rerun its job (probe.py, train.py and analyze.py "
                                "write it)")


def test_types_are_those_of_json_schema():
    assert fits(3, float) and not fits(True, float) and not fits(True, int) and not fits(3.5, int)
    assert fits([[1, 2.5]], list[list[float]]) and not fits({"a": "x"}, dict[str, float])


def test_a_file_of_the_current_version_lacking_what_its_kind_requires_is_refused(tmp_path):
    record = {"schema_version": SCHEMA_VERSION, "job": "probe", "kind": "tree_probe",
              **{key: value for key, value in TREE.items() if key not in ("kind", "linear_baseline")},
              "structure": "distance", "model_weights": [], "weights_dtype": None, "forward_precision": None}
    check_file({**record, "linear_baseline": TREE["linear_baseline"]}, "results.json")
    with pytest.raises(DataFormatError, match="results.json: it does not hold what a tree_probe run records "
                                              "\\('linear_baseline' is a required property\\)"):
        check_file(record, "results.json")
    (tmp_path / "results.json").write_text(json.dumps(record))
    with pytest.raises(DataFormatError, match=f"{tmp_path / 'results.json'}: it does not hold what a tree_probe run"):
        write_report(tmp_path)
    assert not (tmp_path / "report.md").exists()
    (tmp_path / "results.json").unlink()  # not a job's: the session's check of what jobs wrote leaves it out
