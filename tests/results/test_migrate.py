"""Results written before the schema (no `schema_version`) read as schema version 1: each kind told from the keys its
job wrote then, a tree probe's structure moved from `kind` to `structure`, current results left as they are."""

from __future__ import annotations

import pytest

from probing.results import SCHEMA_VERSION, migrated

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


@pytest.mark.parametrize("kind", sorted(UNVERSIONED))
def test_results_written_before_the_schema_are_told_their_kind(kind):
    record = migrated(UNVERSIONED[kind])
    assert (record["schema_version"], record["job"], record["kind"]) == (SCHEMA_VERSION, JOBS.get(kind, "analyze"),
                                                                         kind)
    assert {key: value for key, value in record.items() if key not in ("schema_version", "job", "kind", "structure")
            } == {key: value for key, value in UNVERSIONED[kind].items() if key != "kind"}


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
