"""results.json files of schema version 1 (tests/fixtures/results_v1: one of each kind that records its features'
identity, as the code before version 2 wrote them on the tiny models) are migrated to the current version with the
features' weights dtype and forward precision null (float32, as every run then), valid against their kind's shipped
JSON Schema, read by the report into the row their run gave, and returned migrated by a relaunch into their folder."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from probing.report import write_report
from probing.results import KINDS, SCHEMA_VERSION, load, migrated
from probing.results.load import check_file
from probing.tasks.results_file import finished_results
from tests.helpers import FIXTURES

VERSION_1 = FIXTURES / "results_v1"
# The row of report.md that each file gives (its section's table), as the report of version 1 gave it.
ROWS = {
    "sclass_probe": "| 1 | 0.080 | 0.065 | -0.055 | 1 | 220 | 384 |",
    "word_probe": "| 1 | 0.183 | 0.043 |",
    "tree_probe": "| 1 | 32 | 12.7 | 0.208 | -6.4 | -0.012 |",
    "statement_probe": "| 2 | 0.500 | 0.000 | -0.02 | 0.02 |",
    "neurons": "| tiny (random init), ner, layer 2 | 32 | 0.500 | 0.125 | 0.188 | probeless | 1 (majority reaches it) "
               "| 8 (majority reaches it) |",
}
ADDED = ("weights_dtype", "forward_precision")


def version_1(kind: str) -> dict:
    return json.loads((VERSION_1 / f"{kind}.json").read_text(encoding="utf-8"))


@pytest.fixture
def run_folder(tmp_path):
    """A folder for a copied results.json, removed after the test: the session's check of what jobs wrote reads
    every results.json as the current version."""
    yield tmp_path
    (tmp_path / "results.json").unlink(missing_ok=True)


def test_there_is_a_file_of_every_kind_that_records_the_features_identity():
    identified = sorted(name for name, kind in KINDS.items()
                        if set(ADDED) <= {field.name for field in dataclasses.fields(kind)})
    assert sorted(path.stem for path in VERSION_1.glob("*.json")) == identified == sorted(ROWS)


@pytest.mark.parametrize("kind", sorted(ROWS))
def test_each_reads_as_the_current_version_with_float32_features(kind):
    record = version_1(kind)
    assert (record["schema_version"], record["kind"]) == (1, kind) and not set(ADDED) & set(record)
    current = migrated(record)
    assert (current["schema_version"], current["job"], current["kind"]) == (SCHEMA_VERSION, KINDS[kind].JOB, kind)
    assert {key: current[key] for key in ADDED} == dict.fromkeys(ADDED)
    assert {key: value for key, value in current.items() if key not in (*ADDED, "schema_version")} == {
        key: value for key, value in record.items() if key != "schema_version"}
    check_file(record, f"{kind}.json")  # valid against the shipped schema, as the current version reads it
    run = load(record)
    assert (run.schema_version, run.weights_dtype, run.forward_precision) == (SCHEMA_VERSION, None, None)


@pytest.mark.parametrize("kind", sorted(ROWS))
def test_the_report_reads_each_into_the_row_of_its_run(run_folder, kind):
    shutil.copy(VERSION_1 / f"{kind}.json", run_folder / "results.json")
    write_report(run_folder)
    assert ROWS[kind] in (run_folder / "report.md").read_text(encoding="utf-8").splitlines()


def test_a_relaunch_into_the_folder_of_a_version_1_run_returns_its_results_migrated(run_folder):
    shutil.copy(VERSION_1 / "statement_probe.json", run_folder / "results.json")
    previous = finished_results(run_folder / "results.json", version_1("statement_probe")["config"])
    assert previous == migrated(version_1("statement_probe"))
    assert (previous["schema_version"], previous["forward_precision"]) == (SCHEMA_VERSION, None)
