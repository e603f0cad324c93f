"""Import circles among nmtcli's modules (issue 55: "no import circle").

Every `from nmtcli.X import ...` and `import nmtcli.X`, at any depth (module level, inside functions, and under
`if TYPE_CHECKING:` unless --runtime), is an edge of a graph of the package's modules; a circle is a set of
modules that reach each other (a strongly connected component of more than one module). Prints the pairs that
import each other and the circles; exits 1 if there is any.

    python scripts/import_circles.py            # typing-only imports count too
    python scripts/import_circles.py --runtime  # only what runs
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nmtcli"


def modules() -> dict[str, Path]:
    """`nmtcli.inference.beam` -> its file, for every module of the package (a package by its __init__.py)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def typing_only_lines(tree: ast.Module) -> set[int]:
    """The lines inside `if TYPE_CHECKING:` blocks."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines |= {n.lineno for sub in node.body for n in ast.walk(sub) if hasattr(n, "lineno")}
    return lines


def import_graph(known: dict[str, Path], runtime: bool) -> dict[str, set[str]]:
    """Each module -> the package's modules it imports (`from nmtcli.a import b` names module nmtcli.a.b where it is one)."""
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = typing_only_lines(tree) if runtime else set()
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skipped:
                continue
            targets = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "nmtcli":
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in known and t not in (name, "nmtcli")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", action="store_true", help="leave out imports under `if TYPE_CHECKING:`")
    args = parser.parse_args()
    known = modules()
    graph = import_graph(known, args.runtime)
    pairs = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph[b]})
    found = circles(graph)
    print(f"{len(known)} modules; imports {'that run' if args.runtime else 'including TYPE_CHECKING ones'}")
    print(f"modules importing each other: {len(pairs)}")
    for a, b in pairs:
        print(f"  {a} <-> {b}")
    print(f"circles: {len(found)}")
    for component in found:
        print(f"  {len(component)} modules: {', '.join(component)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
