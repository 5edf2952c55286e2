"""A results.json read through its kind's type: `load` migrates the record (`probing.results.migrated`), builds the
kind's dataclass from the keys it declares and refuses, in one line naming the file, a record that does not fit. The
report reads a run's values as attributes of what `load` returns, so that a field renamed in `probing.results.kinds`
fails where it is read, not as a key silently missing.

See docs/outputs.md, 'The schema of results.json'.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from probing.errors import DataFormatError
from probing.results.kinds import ABSENT, KINDS, Results
from probing.results.migrate import migrated
from probing.results.schema import validate

LOAD_FIX = "delete that results.json or rerun its job (probe.py, train.py and analyze.py write it)"


def load(record: dict[str, Any], path: str | Path | None = None, kind: str | None = None) -> Results:
    """`record` (a results.json of any schema version, from `path`) as its kind's type; one DataFormatError naming
    `path` if its kind is unknown or a declared value is not of its declared type. A key it lacks, or holds as null,
    is ABSENT (see `check_file` for a file of a schema version). `kind`: the kind of a record that is not stamped
    yet (a job's results, which its own figures read before they are written), read as that kind."""
    current = migrated(record)
    if kind is not None and "schema_version" not in record:
        current = {**current, "job": KINDS[kind].JOB, "kind": kind}
    where = path if path is not None else current.get("_file", "results.json")
    kind = KINDS.get(current["kind"])
    if kind is None:
        raise DataFormatError(where, None, f"its kind {current['kind']!r} is none that this version of the report "
                              f"knows ({', '.join(KINDS)})", LOAD_FIX)
    values = {}
    for field, hint in declared(kind).items():
        if current.get(field.name) is None:
            values[field.name] = ABSENT
        elif not fits(current[field.name], hint):
            raise DataFormatError(where, None, f"its `{field.name}` is not {shown_type(hint)}, as a {kind.KIND} run "
                                  "records it", LOAD_FIX)
        else:
            values[field.name] = current[field.name]
    return kind(**values)


@functools.cache
def declared(kind: type[Results]) -> dict[dataclasses.Field, Any]:
    """The fields of `kind` with their type hints."""
    hints = typing.get_type_hints(kind)
    return {field: hints[field.name] for field in dataclasses.fields(kind)}


def fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of the type `hint` (as `probing.results.schema.type_schema` declares it: an int is a
    number, a bool is not)."""
    return checker(hint)(value)


@functools.cache
def checker(hint: Any) -> Callable[[Any], bool]:
    """The test of `fits` for one type hint, made once."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda value: True
    if hint in SIMPLE:
        kinds, bool_fits = SIMPLE[hint]
        return lambda value: isinstance(value, kinds) and (bool_fits or not isinstance(value, bool))
    if origin is typing.Literal:
        return lambda value: value in args
    if origin in (typing.Union, types.UnionType):
        tests = [checker(arg) for arg in args]
        return lambda value: any(test(value) for test in tests)
    if origin in (list, dict):
        item = checker(args[-1])
        items = (lambda value: value) if origin is list else (lambda value: value.values())
        if args[-1] is Any:
            return lambda value: isinstance(value, origin)
        return lambda value: isinstance(value, origin) and all(map(item, items(value)))
    raise TypeError(f"no check for the type {hint!r}")


# The JSON types of the simple hints: the Python types a value may be, and whether a bool is one.
SIMPLE = {str: (str, False), int: (int, False), float: ((int, float), False), bool: (bool, True),
          type(None): (type(None), False)}


def shown_type(hint: Any) -> str:
    """A type hint as a refusal names it: "a string or null", "a list", ..."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(shown_type(arg) for arg in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in args)
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null",
             list: "a list", dict: "an object"}
    return names.get(origin or hint, str(hint))


def check_file(record: dict[str, Any], path: str | Path) -> None:
    """Refuse (one DataFormatError naming `path`) a results.json of a schema version that does not hold what its
    kind's JSON Schema declares, read as the current version holds it (`migrated`: the keys added since an older
    version read as null): a key it requires missing, a value of another type, a version this one does not know."""
    import jsonschema

    kind = record.get("kind")
    if kind not in KINDS:
        raise DataFormatError(path, None, f"its kind {kind!r} is none that this version of the report knows "
                              f"({', '.join(KINDS)})", LOAD_FIX)
    try:
        validate(migrated(record), kind)
    except jsonschema.ValidationError as error:
        where = "".join(f"[{part!r}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
        raise DataFormatError(path, None, f"it does not hold what a {kind} run records ({error.message}"
                              f"{f' at `{where[1:]}`' if where else ''})", LOAD_FIX) from None
