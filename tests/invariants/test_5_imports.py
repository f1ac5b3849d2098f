"""The import structure stays a hierarchy: no module imports itself back through others
(lazy imports inside functions count), and of the package's folders only the one named
below is imported from below (data.calibration draws the shape-calibration prompts a corpus
source holds out from the drafters' training text, and those sources are training's)."""

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "specbench"
# (importer unit, imported unit) pairs that point back up the folder hierarchy
ALLOWED_UPWARD = {("specbench.data", "specbench.train")}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Module -> the specbench modules it imports (module-level or inside functions)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            # a submodule, or a name of the module
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("specbench"):
                    found.add(target)
        graph[name] = found
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (its modules in order, the first repeated last), or None."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        return error.args[1]
    return None


def unit(module: str) -> str:
    """A module's folder under specbench (specbench.costs.dtype -> specbench.costs), or itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir() else module


def test_no_module_imports_itself_back():
    assert cycle(imports()) is None


def test_folders_import_downward_but_for_the_named_exception():
    graph = imports()
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        units.setdefault(unit(module), set()).update(unit(t) for t in targets if unit(t) != unit(module))
    assert all(target in units[importer] for importer, target in ALLOWED_UPWARD)  # once one goes, drop it from the list
    for importer, target in ALLOWED_UPWARD:
        units[importer].discard(target)
    assert cycle(units) is None
