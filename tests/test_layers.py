"""The layering of DESIGN.md, checked on the import statements of probing/: arrows point down only (entry points →
tasks → wings (probes, finetune, geometry) → erasure (shared by probes and finetune) → the analyses' base (analysis)
→ features → data; report beside features, read by the tasks; results, the declared results.json, below both), no
wing imports another, nothing imports a task but the entry points, no module imports itself back through others,
and data/ is torch-free."""

from __future__ import annotations

import ast
from pathlib import Path

import probing

PACKAGE = Path(probing.__file__).parent
# The floor of each part of the package; an import must go to a lower floor (cross-cutting modules are the floor).
FLOORS = {"console": 8, "tasks": 7, "probes": 6, "finetune": 6, "geometry": 6, "erasure": 5, "analysis": 4,
          "features": 3, "report": 3, "data": 2, "results": 2, "cli": 1, "config": 1, "vocabulary": 1, "devices": 1,
          "locks": 1, "": 1, "errors": 0}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py") if "conf" not in path.parts}


def imports_of(path: Path) -> set[str]:
    """The probing modules that `path` imports anywhere in it (a name imported from a package counts as the
    package's module when it is one)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found |= {name for name in names if name in MODULES}
    return found


GRAPH = {name: imports_of(path) - {name} for name, path in MODULES.items()}


def part(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_every_part_of_the_package_has_a_floor():
    assert {part(module) for module in MODULES} <= set(FLOORS)


def test_imports_point_down_and_no_wing_imports_another():
    upward = sorted(f"{module} -> {target}" for module, targets in GRAPH.items() for target in targets
                    if part(module) != part(target) and FLOORS[part(target)] >= FLOORS[part(module)])
    assert upward == []


def test_no_module_imports_itself_back():
    state: dict[str, str] = {}

    def cycle_from(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for target in sorted(GRAPH[module]):
            if state.get(target) == "open":
                return [*path, target]
            if target not in state and (found := cycle_from(target, [*path, target])):
                return found
        state[module] = "done"
        return None

    cycles = [found for module in sorted(GRAPH) if module not in state and (found := cycle_from(module, [module]))]
    assert cycles == []


def test_data_is_torch_free():
    heavy = sorted(module for module, path in MODULES.items() if part(module) == "data"
                   for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, (ast.Import, ast.ImportFrom))
                   and any(name.split(".")[0] in ("torch", "lightning", "transformers") for name in
                           ([node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])))
    assert heavy == []
