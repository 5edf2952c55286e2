"""JSON Schema of each kind of results.json, generated from its declared type (`probing.results.kinds`), shipped in
this package as schemas/<kind>.json, and checked on every write (`validate`). After changing a type, regenerate the
shipped files with `python -m probing.results` (a test compares them with what the types generate)."""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from pathlib import Path
from typing import Any

from probing.results.kinds import KINDS, SCHEMA_VERSION, Results

SCHEMAS = Path(__file__).parent / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of a type hint: str, int, float (any number), bool, None, Any, Literal, unions, list[X] and
    dict[str, X]."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if hint in SIMPLE:
        return {"type": SIMPLE[hint]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [type_schema(arg) for arg in args]}
    if origin is list:
        return {"type": "array", "items": type_schema(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": type_schema(args[1])}
    raise TypeError(f"no JSON Schema for the type {hint!r}")


def kind_schema(kind: type[Results]) -> dict[str, Any]:
    """The JSON Schema of results.json of one kind: its fields typed and described, the required ones those without a
    default, `schema_version`, `job` and `kind` fixed; other keys allowed (see `probing.results.kinds`)."""
    hints = typing.get_type_hints(kind)
    fields = dataclasses.fields(kind)
    properties = {field.name: {**type_schema(hints[field.name]), "description": field.metadata["doc"]}
                  for field in fields}
    properties["schema_version"] |= {"const": SCHEMA_VERSION}
    properties["job"] |= {"const": kind.JOB}
    properties["kind"] |= {"const": kind.KIND}
    return {"$schema": DIALECT, "$id": f"{kind.KIND}.json", "title": kind.KIND,
            "description": " ".join(kind.__doc__.split()), "type": "object", "properties": properties,
            "required": [field.name for field in fields if not field.metadata.get("optional")]}


def schema_text(kind: type[Results]) -> str:
    return json.dumps(kind_schema(kind), indent=2) + "\n"


@functools.cache
def shipped_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of `kind` as this package ships it."""
    return json.loads((SCHEMAS / f"{kind}.json").read_text(encoding="utf-8"))


def validate(results: dict[str, Any], kind: str) -> None:
    """Refuse (jsonschema.ValidationError) results that do not hold what `kind` declares, as JSON: a writer's bug."""
    import jsonschema

    jsonschema.validate(json.loads(json.dumps(results)), shipped_schema(kind))


def write_schemas(folder: Path = SCHEMAS) -> list[Path]:
    """Write schemas/<kind>.json of every kind; returns the files."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, kind in KINDS.items():
        (folder / f"{name}.json").write_text(schema_text(kind), encoding="utf-8")
    return [folder / f"{name}.json" for name in KINDS]
