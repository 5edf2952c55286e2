"""The rooms of the house stay small and keep to themselves (DESIGN.md): no module of probing/ over 400 lines, and
library code names few config key paths in its messages (the config layer adds the key path it knows)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import probing

PACKAGE = Path(probing.__file__).parent
MAX_MODULE_LINES = 400
MAX_MODULE_DOCSTRING_LINES = 10


def module_lengths() -> dict[str, int]:
    return {str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_is_longer_than_400_lines():
    too_long = {name: lines for name, lines in module_lengths().items() if lines > MAX_MODULE_LINES}
    assert too_long == {}


def module_docstring_lengths() -> dict[str, int]:
    lengths = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        lengths[str(path.relative_to(PACKAGE))] = len(docstring.splitlines()) if docstring else 0
    return lengths


def test_no_module_docstring_is_longer_than_10_lines():
    """What a module is for fits in a few lines; the paper's definitions and the choices made go to docs/."""
    too_long = {name: lines for name, lines in module_docstring_lengths().items()
                if lines > MAX_MODULE_DOCSTRING_LINES}
    assert too_long == {}


# Library code names a setting by its own argument name (`probing.errors.setting`) and the config layer writes the key
# path (probing/config.py `build`); the job modules (tasks/), the command line (cli/) and config.py know key paths.
KNOWS_KEY_PATHS = ("config.py", "cli/", "tasks/")
KEY_PATH = re.compile(r"\b[a-z_]+\.[a-z_]+(?:\.[a-z_]+)*=")
# What remains is written where no keyed context reaches: errors that are not ConfigErrors (a DataFormatError's fix, a
# model that cannot be loaded, NaN features, a diverging fine-tuning loss), settings that are no argument of the
# object that refuses (the run folder, a tree task's own data folder), and checks deep in the store and its
# provisioning, which every job reaches by another way (docs/development.md). The ceiling keeps the count from
# growing back.
MAX_KEY_PATHS_IN_LIBRARY_CODE = 12


def key_paths_in_library_code() -> dict[str, int]:
    counts = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if not name.startswith(KNOWS_KEY_PATHS) and (found := len(KEY_PATH.findall(path.read_text(encoding="utf-8")))):
            counts[name] = found
    return counts


def test_library_code_writes_few_config_key_paths():
    counts = key_paths_in_library_code()
    assert sum(counts.values()) <= MAX_KEY_PATHS_IN_LIBRARY_CODE, sorted(counts.items(), key=lambda item: -item[1])
