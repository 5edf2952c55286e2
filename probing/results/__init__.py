"""results.json, declared: the kinds of results and their documented types (`kinds`), the JSON Schema of each,
generated from its type and shipped as schemas/<kind>.json (`schema`), and the migration of results written before
the schema (`migrate`). The jobs stamp and check what they write (`stamped`); the report reads each run as its kind's
type (`load`, through `migrated`)."""

from __future__ import annotations

from typing import Any

from probing.results.kinds import KINDS, SCHEMA_VERSION
from probing.results.load import load
from probing.results.migrate import migrated
from probing.results.schema import validate

__all__ = ["KINDS", "SCHEMA_VERSION", "load", "migrated", "stamped", "validate"]


def stamped(results: dict[str, Any], kind: str) -> dict[str, Any]:
    """`results` of `kind` with the schema version, the job and the kind first, checked against the kind's schema
    (a jsonschema.ValidationError is a writer's bug: results of a kind hold what it declares)."""
    record = {"schema_version": SCHEMA_VERSION, "job": KINDS[kind].JOB, "kind": kind,
              **results}
    validate(record, kind)
    return record
