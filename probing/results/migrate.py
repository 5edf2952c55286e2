"""Results of an older schema version (users' sweeps on disk) read as the current version: those written before the
schema (no `schema_version`) have their `job` and `kind` told from the keys each job wrote then, the one place that
recognises a run by its keys; the keys a later version added (ADDED) read as null, what they record at the defaults."""

from __future__ import annotations

import dataclasses
from typing import Any

from probing.results.kinds import (
    KINDS,
    SCHEMA_VERSION,
    FinetuningResults,
    SClassProbeResults,
    TreeProbeResults,
    WordProbeResults,
)
from probing.vocabulary import SCLASS_TASK, TREE_SCORES


def unversioned_kind(record: dict[str, Any]) -> str:
    """The kind of results written before the schema: an analysis names itself; a tree probe's `kind` was its
    structure (distance, depth); a word task's probe run a task other than the s-class task and a probe family; train.py
    a task and no representation; every other run was an s-class probe."""
    if "analysis" in record:
        return str(record["analysis"])
    if record.get("kind") in TREE_SCORES:
        return TreeProbeResults.KIND
    if record.get("task") not in (None, SCLASS_TASK) and "probe_family" in record and "kind" not in record:
        return WordProbeResults.KIND
    if "task" in record and "representation" not in record:
        return FinetuningResults.KIND
    return SClassProbeResults.KIND


# The keys each schema version added to the kinds that declare them, by that version: null in older results.
# 2: the features' weights dtype and forward precision (probing.features.identity.FeatureIdentity), null at float32.
ADDED = {2: ("weights_dtype", "forward_precision")}


def migrated(record: dict[str, Any]) -> dict[str, Any]:
    """`record` as the current schema version holds it (itself when it is that version already, or not a version this
    one knows: the schema check names it)."""
    version = record.get("schema_version")
    if "schema_version" in record and not (isinstance(version, int) and 1 <= version < SCHEMA_VERSION):
        return record
    current = record if "schema_version" in record else first_version(record)
    kind = KINDS.get(current.get("kind")) if isinstance(current.get("kind"), str) else None  # else the checks name it
    declared = {field.name for field in dataclasses.fields(kind)} if kind is not None else ()
    added = {key: None for since, keys in ADDED.items() if since > current["schema_version"] for key in keys
             if key in declared and key not in current}
    return {**current, "schema_version": SCHEMA_VERSION, **added}


def first_version(record: dict[str, Any]) -> dict[str, Any]:
    """Results written before the schema as schema version 1 holds them: their job and kind, a tree probe's
    structure moved from `kind` to `structure`."""
    kind = unversioned_kind(record)
    renamed = {"structure": record["kind"]} if kind == TreeProbeResults.KIND else {}
    rest = {name: value for name, value in record.items() if name != "kind"}
    return {"schema_version": 1, "job": job_of(kind), "kind": kind, **rest, **renamed}


def job_of(kind: str) -> str:
    """The job that writes results of `kind` (analyze for a kind this version does not know: only analyses are
    found by name)."""
    return KINDS[kind].JOB if kind in KINDS else "analyze"
