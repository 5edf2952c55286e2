"""Results written before the schema (no `schema_version`) read as the current version: each kind told from the keys
its job wrote then, a tree probe's structure moved from `kind` to `structure`; results of version 1 read with the keys
version 2 added (the features' weights dtype and forward precision) null, where their kind declares them; current
results left as they are."""

from __future__ import annotations

import pytest

from probing.results import SCHEMA_VERSION, migrated
from probing.results.migrate import ADDED

# The keys that tell each kind apart in what today's writers put in results.json (probing.tasks.probe.about_run and
# the task's probing, probing.tasks.train.finetune, probing.tasks.analyze.run with each analysis's results).
PROBE = {"task": "sclass", "probe": "linear", "probe_family": "linear", "rank": None, "model": "minilm",
         "representation": "3", "dev": {"micro_f1": 0.8}, "test": {"micro_f1": 0.7}}
UNVERSIONED = {
    "sclass_probe": {**PROBE, "classes": ["a", "b"]},
    "word_probe": {**PROBE, "task": "upos", "pair": False, "pair_product": None, "labels": ["NOUN", "VERB"]},
    "tree_probe": {**PROBE, "task": "tree_depth", "kind": "depth", "linear_baseline": {}, "examples": []},
    "finetuning": {"task": "pos", "model": "minilm", "dev": {"accuracy": 0.9}, "model_dir": "/runs/1/model"},
    **{name: {"analysis": name, "model": "minilm"} for name in (
        "contextuality", "static_pc", "isotropy", "attention_similarity", "amnesic")},
    "neurons": {"analysis": "neurons", "task": "upos", "representation": "3", "model": "minilm"},
}
JOBS = {"sclass_probe": "probe", "word_probe": "probe", "tree_probe": "probe", "finetuning": "train"}
# The kinds that record the features' identity: version 2 added two of its fields to them.
IDENTIFIED = {"sclass_probe", "word_probe", "tree_probe", "neurons"}
IN_VERSION_2 = ("weights_dtype", "forward_precision")


@pytest.mark.parametrize("kind", sorted(UNVERSIONED))
def test_results_written_before_the_schema_are_told_their_kind(kind):
    record = migrated(UNVERSIONED[kind])
    assert (record["schema_version"], record["job"], record["kind"]) == (SCHEMA_VERSION, JOBS.get(kind, "analyze"),
                                                                         kind)
    assert {key: value for key, value in record.items() if key not in ("schema_version", "job", "kind", "structure",
                                                                       *IN_VERSION_2)
            } == {key: value for key, value in UNVERSIONED[kind].items() if key != "kind"}
    assert {key: record[key] for key in IN_VERSION_2 if key in record} == (
        dict.fromkeys(IN_VERSION_2) if kind in IDENTIFIED else {})


def test_version_2_added_the_weights_dtype_and_the_forward_precision():
    assert ADDED == {2: IN_VERSION_2}


@pytest.mark.parametrize("kind", ["statement_probe", "word_probe", "neurons"])
def test_results_of_version_1_read_with_the_keys_of_version_2_null(kind):
    """Version 1 did not record the weights' dtype or the forward precision: every run was at float32, which the
    identity records as null."""
    old = {"schema_version": 1, "job": JOBS.get(kind, "analyze"), "kind": kind, "model": "minilm", "pooling": "last"}
    record = migrated(old)
    assert record == {**old, "schema_version": SCHEMA_VERSION, "weights_dtype": None, "forward_precision": None}
    assert list(record)[:3] == ["schema_version", "job", "kind"] and old["schema_version"] == 1  # not changed


def test_results_of_version_1_of_a_kind_without_the_identity_only_change_version():
    old = {"schema_version": 1, "job": "train", "kind": "finetuning", "precision": "bf16-mixed"}
    assert migrated(old) == {**old, "schema_version": SCHEMA_VERSION}


@pytest.mark.parametrize("kind", [None, "distance_probe", ["word_probe"]])
def test_results_of_version_1_of_no_kind_this_one_knows_only_change_version(kind):
    """What to make of them is the schema check's to say (a kind this version does not know: one line naming it)."""
    old = {"schema_version": 1, "job": "probe", "kind": kind}
    assert migrated(old) == {**old, "schema_version": SCHEMA_VERSION}


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, "1"])
def test_a_version_this_one_does_not_know_is_left_for_the_schema_check_to_name(version):
    record = {"schema_version": version, "job": "probe", "kind": "word_probe"}
    assert migrated(record) is record


def test_a_tree_probes_structure_moves_from_kind_to_structure():
    record = migrated(UNVERSIONED["tree_probe"])
    assert (record["kind"], record["structure"]) == ("tree_probe", "depth")


def test_a_word_task_run_lacking_its_representation_is_still_a_word_probe_run():
    """The older rules in their order: a task and a probe family is a word task's run before a task without a
    representation is train.py's, so the report names what the word task's section lacks."""
    assert migrated({"task": "upos", "probe_family": "linear"})["kind"] == "word_probe"


def test_results_of_the_current_version_are_left_as_they_are():
    current = {"schema_version": SCHEMA_VERSION, "job": "probe", "kind": "tree_probe", "structure": "distance"}
    assert migrated(current) is current
