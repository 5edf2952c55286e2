"""results.json files written by the code before the schema (tests/fixtures/results_unversioned: one of each kind, as
commit a26969b's own tests wrote them on the tiny BERT) are migrated to the current schema version, valid against
their kind's shipped JSON Schema, read by the report into the row their run gives, and returned migrated by a relaunch
into their folder."""

from __future__ import annotations

import json
import shutil

import pytest

from probing.report import write_report
from probing.results import KINDS, SCHEMA_VERSION, migrated, validate
from probing.tasks.results_file import finished_results
from tests.helpers import FIXTURES

UNVERSIONED = FIXTURES / "results_unversioned"
# The row of report.md that each file gives (its section's table), as the report of commit a26969b gave it.
ROWS = {
    "sclass_probe": "| 1 | 0.080 | 0.065 | -0.055 | 1 | 220 | 384 |",
    "word_probe": "| 1 | 0.183 | 0.043 |",
    "tree_probe": "| 1 | 32 | 12.7 | 0.208 | -6.4 | -0.012 |",
    "finetuning": "| pos | minilm | all | - | 0.0 | 32-true | - | 0.032 | 1 | 2 | 0.0 | 0.977 |",
    "contextuality": "| 1 | 0.599 | 0.684 | 0.085 | 0.757 | 0.157 | 0.725 | 0.638 | 0.087 |",
    "static_pc": "| tiny | 1 | 31 | 0.029 (21/28) | 0.000 (1/2) | 0.600 (5/6) |",
    "isotropy": "| tiny, layer 1 | 60 | 0.001 | 0.142 | 0.144 | 0.368 | 1 | 5.568 | 3.978 | 0.714 |",
    "attention_similarity": "| 2 | 0.881 |",
    "neurons": "| tiny (random init), ner, layer 2 | 32 | 0.500 | 0.125 | 0.188 | probeless | 1 (majority reaches it) "
               "| 8 (majority reaches it) |",
    "amnesic": "| tiny | pos, pos dev | 1 | upos | leace, rank 4 | accuracy | 0.000 | 0.009 | 0.000 ± 0.000 (3 seeds) "
               "| +0.009 | +0.000 |",
}
# The kinds first written with a schema version: no results.json of theirs was ever unversioned.
BORN_VERSIONED = {"lens", "statement_probe"}
UNVERSIONED_KINDS = sorted(set(KINDS) - BORN_VERSIONED)


def unversioned(kind: str) -> dict:
    return json.loads((UNVERSIONED / f"{kind}.json").read_text(encoding="utf-8"))


def test_there_is_a_file_of_every_kind():
    assert sorted(path.stem for path in UNVERSIONED.glob("*.json")) == UNVERSIONED_KINDS == sorted(ROWS)


@pytest.mark.parametrize("kind", UNVERSIONED_KINDS)
def test_each_is_migrated_to_its_kind_and_valid_against_its_schema(kind):
    record = unversioned(kind)
    assert "schema_version" not in record
    current = migrated(record)
    assert (current["schema_version"], current["job"], current["kind"]) == (SCHEMA_VERSION, KINDS[kind].JOB, kind)
    validate(current, kind)


def test_a_tree_probes_kind_was_its_structure():
    assert (unversioned("tree_probe")["kind"], migrated(unversioned("tree_probe"))["structure"]) == ("distance",
                                                                                                      "distance")


@pytest.mark.parametrize("kind", UNVERSIONED_KINDS)
def test_the_report_reads_each_into_the_row_of_its_run(tmp_path, kind):
    shutil.copy(UNVERSIONED / f"{kind}.json", tmp_path / "results.json")
    write_report(tmp_path)
    assert ROWS[kind] in (tmp_path / "report.md").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("kind", ["tree_probe", "finetuning", "contextuality"])
def test_a_relaunch_into_the_folder_of_an_unversioned_run_returns_its_results_migrated(tmp_path, kind):
    """The "already finished" check of every job (probe.py, train.py, analyze.py): the same configuration finds the
    old results.json and returns it as the current schema holds it (the inputs it recorded are not on this machine,
    so they are not checked)."""
    shutil.copy(UNVERSIONED / f"{kind}.json", tmp_path / "results.json")
    previous = finished_results(tmp_path / "results.json", unversioned(kind)["config"])
    assert previous == migrated(unversioned(kind))
    assert previous["kind"] == kind
