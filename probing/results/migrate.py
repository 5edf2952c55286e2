"""Results written before the schema (no `schema_version`: users' sweeps on disk) read as the current version: their
`job` and `kind` are told from the keys each job wrote then, the one place that recognises a run by its keys."""

from __future__ import annotations

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


def migrated(record: dict[str, Any]) -> dict[str, Any]:
    """`record` as the current schema version holds it (itself when it is that version already)."""
    if "schema_version" in record:
        return record
    kind = unversioned_kind(record)
    renamed = {"structure": record["kind"]} if kind == TreeProbeResults.KIND else {}
    rest = {name: value for name, value in record.items() if name != "kind"}
    return {"schema_version": SCHEMA_VERSION, "job": job_of(kind), "kind": kind, **rest, **renamed}


def job_of(kind: str) -> str:
    """The job that writes results of `kind` (analyze for a kind this version does not know: only analyses are
    found by name)."""
    return KINDS[kind].JOB if kind in KINDS else "analyze"
