"""Code-completion prompts for the drafters' training text, from a source every machine has:
the public functions (and methods) of the running Python's standard library that have a
docstring, cut after the docstring and asked the way the HumanEval benchmark asks
(specbench.data.benchmarks.HUMANEVAL_INSTRUCTION), so the target's answers teach a drafter
how the target completes code. The standard library is not an evaluation set, and the
corpus drops any prompt that shares a 13-word span with one anyway.

The prompts depend on the Python version (3.11 here): a pack of their answers finds its
prompts again only under the same standard library."""

from __future__ import annotations

import ast
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

from specbench.data.benchmarks import HUMANEVAL_INSTRUCTION

SKIPPED_DIRS = {"test", "tests", "idlelib", "turtledemo", "site-packages", "lib2to3", "ensurepip"}
DOCSTRING_CHARS = (40, 800)  # a docstring that says what to write, short enough to fit the prompt budget


def stdlib_prompts(stdlib: Path | None = None) -> Iterator[str]:
    """Each completion prompt in a fixed order (sorted files, then source order)."""
    root = stdlib or Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        if SKIPPED_DIRS.intersection(path.relative_to(root).parts):
            continue
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        for node in ast.walk(tree):
            stub = function_stub(node, lines)
            if stub is not None:
                yield f"{HUMANEVAL_INSTRUCTION}\n\n{stub}\n"


def function_stub(node: ast.AST, lines: list[str]) -> str | None:
    """A public function's `def` line(s) through its docstring, dedented; None for anything
    else, or a function with no body past its docstring (nothing to complete)."""
    if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or len(node.body) < 2:
        return None
    docstring = ast.get_docstring(node)
    if docstring is None or not DOCSTRING_CHARS[0] <= len(docstring) <= DOCSTRING_CHARS[1]:
        return None
    return textwrap.dedent("\n".join(lines[node.lineno - 1 : node.body[0].end_lineno]))
