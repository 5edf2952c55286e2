"""The rooms of the house stay small and keep to themselves (DESIGN.md): no module of probing/ over 400 lines, and
library code names few config key paths in its messages (the config layer adds the key path it knows)."""

from __future__ import annotations

import ast
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
