"""Run as a process's sitecustomize: Python sees only the standard library and the
distributions named in ONLY_PACKAGES (comma-separated) with what they require, as on the
lent GPU machine, and not specbench's own install (nor the repository root on sys.path):
a script must find the repository itself. Imports of anything else fail as for a package
that is not installed."""

import importlib.abc
import importlib.metadata as metadata
import os
import re
import sys

from packaging.requirements import Requirement


def closure(names: list[str]) -> set[str]:
    """The distributions `names` need, with what those need (extras left out), by normalised name."""
    seen, todo = set(), list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def top_level(distribution: str) -> set[str]:
    dist = metadata.distribution(distribution)
    listed = dist.read_text("top_level.txt")
    if listed:
        return set(listed.split())
    names = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first.endswith((".dist-info", ".data")) or first == "..":
            continue
        names.add(first.removesuffix(".py").split(".")[0])
    return names


ALLOWED = {module for dist in closure(os.environ["ONLY_PACKAGES"].split(",")) for module in top_level(dist)}
REPOSITORY = os.environ["ONLY_PACKAGES_REPOSITORY"]


def blocked(name: str) -> bool:
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in ALLOWED or top.startswith("_"):
        return False
    # specbench only through the repository root a script put on sys.path itself
    return not (top == "specbench" and any(os.path.abspath(p or ".") == REPOSITORY for p in sys.path))


class OnlyPackages(importlib.abc.MetaPathFinder):
    """A finder that finds nothing blocked: importing it fails, and find_spec says None
    (not installed), as libraries probing optional packages expect."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if blocked(name):
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find is not None else None

    def find_distributions(self, *args, **kwargs):
        find = getattr(self.finder, "find_distributions", None)
        return find(*args, **kwargs) if find is not None else iter(())

    def invalidate_caches(self):
        if hasattr(self.finder, "invalidate_caches"):
            self.finder.invalidate_caches()


def editable(finder) -> bool:
    return "editable" in (getattr(finder, "__module__", "") or "").lower() or "editable" in repr(finder).lower()


sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != REPOSITORY]
sys.meta_path[:] = [OnlyPackages(f) for f in sys.meta_path if not editable(f)]
