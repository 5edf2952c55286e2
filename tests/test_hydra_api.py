"""The command-line check (probing/cli/) against the Hydra it runs on: the installed hydra-core is one that
pyproject.toml allows, probing/cli/ reads Hydra through its public API only (nothing from `hydra._internal`, which
changes between releases without notice), and the Hydra flags probing/cli/ knows are the ones Hydra's `--hydra-help`
lists. The behaviour of the check itself is tested in tests/test_cli.py, on this Hydra."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import version

from packaging.requirements import Requirement

from probing.cli import command_line
from tests.helpers import REPO


def hydra_requirement() -> Requirement:
    """hydra-core as pyproject.toml's dependencies require it (the one quoted requirement of it there)."""
    [line] = re.findall(r'^\s*"(hydra-core\b[^"]*)"', (REPO / "pyproject.toml").read_text(), flags=re.MULTILINE)
    return Requirement(line)


def test_the_installed_hydra_is_one_that_pyproject_allows():
    requirement = hydra_requirement()
    assert requirement.specifier.contains(version("hydra-core")), (
        f"hydra-core {version('hydra-core')} is installed, pyproject.toml allows {requirement.specifier}")


def imported_modules(source: str) -> set[str]:
    """Every module that `source` imports, at any depth (`from a import b`: a, and a.b in case b is a module)."""
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def test_cli_imports_nothing_private_of_hydra():
    private = sorted(module for path in sorted((REPO / "probing" / "cli").glob("*.py"))
                     for module in imported_modules(path.read_text()) if module.startswith("hydra.") and "._" in module)
    assert private == []


def test_imported_modules_sees_every_form_of_import():
    source = "import hydra._internal.utils\nfrom hydra import _internal\ndef f():\n    from hydra._internal import x\n"
    assert {"hydra._internal.utils", "hydra._internal", "hydra._internal.x"} <= imported_modules(source)


def test_the_hydra_flags_cli_knows_are_those_hydra_lists(tmp_path):
    app = tmp_path / "app.py"
    app.write_text("import hydra\n\n@hydra.main(version_base=None, config_path=None)\ndef main(cfg):\n    pass\n\n"
                   "main()\n")
    hydra_help = subprocess.run([sys.executable, app, "--hydra-help"], capture_output=True, text=True, check=True,
                                timeout=120).stdout
    listed = {flag for line in re.findall(r"^(-[-\w,]+) : ", hydra_help, flags=re.MULTILINE)
              for flag in line.split(",")}
    known = {flag for flags in command_line.HYDRA_FLAGS for flag in flags}
    assert listed and known == listed
