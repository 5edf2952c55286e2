"""What a saved file (probes, an eraser) records of the features it was made from, compared with the current run's:
`settings_differences` gives the lines that every refusal of a saved file made from other features shows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any


def settings_differences(saved: Mapping[str, Any], current: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    """The settings of `keys` where a saved file and the current run disagree, as `key: saved vs now`; a long class
    list is counted, with what differs in it (see `list_difference`)."""
    def shown(value: Any) -> str:
        return f"{len(value)} classes" if is_long_list(value) else repr(value)

    def detail(before: Any, now: Any) -> str:
        lists = isinstance(before, list) and isinstance(now, list)
        return f", {list_difference(before, now)}" if lists and (is_long_list(before) or is_long_list(now)) else ""

    return [f"{key}: {shown(saved.get(key))} (saved) vs {shown(current.get(key))} (this run)"
            f"{detail(saved.get(key), current.get(key))}" for key in keys if saved.get(key) != current.get(key)]


SHOWN_IN_FULL = 5  # a list this long or shorter is shown as it is
SHOWN_NAMES = 3  # names listed on each side of a difference before "and N more"


def is_long_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > SHOWN_IN_FULL


def list_difference(saved: list[Any], current: list[Any]) -> str:
    """What tells two lists of names apart: the same names in another order (and the first position, counted from
    1, where they differ), or the names on one side only."""
    if Counter(saved) == Counter(current):
        position = next(index for index, (a, b) in enumerate(zip(saved, current)) if a != b)
        return (f"the same names in another order: the first that differs is at position {position + 1}, "
                f"{saved[position]!r} (saved) vs {current[position]!r} (this run)")
    sides = [f"{few_of(names)} {side}" for names, side in [(names_missing(saved, current), "only in the saved probes"),
                                                             (names_missing(current, saved), "only in this run")]
             if names]
    return f"with {', '.join(sides)}" if sides else "the same names, some of them more often on one side"


def names_missing(names: list[Any], other: list[Any]) -> list[Any]:
    """The names of `names` (in their order, once each) that `other` lacks."""
    others = set(other)
    return [name for name in dict.fromkeys(names) if name not in others]


def few_of(names: list[Any]) -> str:
    shown = ", ".join(map(repr, names[:SHOWN_NAMES]))
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")
