"""The rooms of the house stay small and keep to themselves (DESIGN.md): no module of probing/ over 400 lines, and
library code names few config key paths in its messages (the config layer adds the key path it knows)."""

from __future__ import annotations

from pathlib import Path

import probing

PACKAGE = Path(probing.__file__).parent
MAX_MODULE_LINES = 400


def module_lengths() -> dict[str, int]:
    return {str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_is_longer_than_400_lines():
    too_long = {name: lines for name, lines in module_lengths().items() if lines > MAX_MODULE_LINES}
    assert too_long == {}
