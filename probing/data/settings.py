"""Checks for plain setting values that arrive from YAML or the command line (Hydra overrides).

Hydra reads `key=true`/`key=false` as booleans but `key=no` as the string "no", `key=3.0` as a float, and `key=FILE`
as a string where `key=[FILE]` is a list; these helpers refuse or normalise such values with a ConfigError naming
the setting. The one home of the value checkers (`require_int`, `require_bool`, `choose`, paths) for every layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from probing.errors import ConfigError


def require_int(key: str, value: object, minimum: int | None = None) -> int:
    """`value` as an int (bools refused), at least `minimum`; otherwise a ConfigError naming `key`."""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(f"{key}={value!r} is not an integer{bound}. Fix: set {key} to an integer{bound}")
    return value


def optional_int(key: str, value: object, minimum: int | None = None, null: str = "unset") -> int | None:
    """None, or `value` as `require_int` takes it; the refusal offers null too, saying what it means (`null`)."""
    if value is None:
        return None
    try:
        return require_int(key, value, minimum)
    except ConfigError as error:
        raise ConfigError(f"{error.marked}, or null ({null})") from None


def require_number(key: str, value: object, low: float = 0.0, high: float = float("inf"), example: str = "",
                   high_open: bool = True) -> float:
    """`value` as a float in [low, high) (or [low, high] with `high_open=False`); anything else (a string, a bool,
    nan) is a ConfigError naming `key`, with `example` as the fix."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    inside = number and low <= value and (value < high if high_open else value <= high)
    if not inside:
        bound = f"[{low:g}, {high:g}{')' if high_open else ']'}"
        raise ConfigError(f"{key}={value!r} is not a number in {bound}. Fix: e.g. {key}={example or low:}")
    return float(value)


def check_optimizer(optimizer: object, key: str) -> None:
    """The learning rate and weight decay of an optimizer built from the config node `key` (a partial), refused here
    rather than by torch once training has started."""
    keywords = getattr(optimizer, "keywords", {})
    if "lr" in keywords and not require_number(f"{key}.lr", keywords["lr"], example="1e-3") > 0:
        raise ConfigError(f"{key}.lr=0 would train nothing. Fix: e.g. {key}.lr=1e-3")
    if "weight_decay" in keywords:
        require_number(f"{key}.weight_decay", keywords["weight_decay"], example="0.01")


def require_bool(key: str, value: object) -> bool:
    """`value` itself if it is a bool; anything else (the string "no", 1, None...) is a ConfigError naming `key`."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r} ({type(value).__name__}). "
                          f"Fix: {key}=true or {key}=false")
    return value


def path_list(key: str, value: object) -> list[Path]:
    """A non-empty list of paths from a list of strings, or from a single string taken as a one-element list.

    A string is never iterated character by character; an empty list or a non-string item is a ConfigError."""
    items = [value] if isinstance(value, (str, Path)) else value
    fix = f"Fix: {key}=[FILE] or {key}=[FILE1,FILE2]"
    if not isinstance(items, Sequence) or not items:
        raise ConfigError(f"{key} must be a path or a non-empty list of paths, got {value!r}. {fix}")
    wrong = [item for item in items if not isinstance(item, (str, Path)) or not str(item)]
    if wrong:
        raise ConfigError(f"{key} must list paths (strings), got {wrong[0]!r} in {value!r}. {fix}")
    return [Path(item) for item in items]


def optional_path(key: str, value: object) -> Path | None:
    """A path from a string, None when unset (None or ""); any other value is a ConfigError naming `key`."""
    if value is None or value == "":
        return None
    if not isinstance(value, (str, Path)):
        raise ConfigError(f"{key} must be one path, got {value!r} ({type(value).__name__}). Fix: {key}=/path/to/it")
    return Path(value)


def choose(key: str, value: object, choices: Sequence[str]) -> str:
    """`value` if it is one of `choices`; anything else is a ConfigError naming `key` and the first choice."""
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(choices)}. Fix: {key}={choices[0]}")
    return str(value)
