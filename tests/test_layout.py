"""The package's layers (docs/architecture.md): every import of nmtcli points down, never up."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import nmtcli

PACKAGE = Path(nmtcli.__file__).parent

# Lowest first; a module may import its own layer and the layers below it. Keep in step with
# docs/architecture.md.
LAYERS = [
    {"errors", "files", "device", "faults", "provenance", "checksums", "threads", "__init__"},
    {"model"},
    {"data"},
    {"inference", "scoring", "card"},
    {"training"},
    {"hub"},
    {"interop", "describe", "documents"},
    {"api", "bulk", "pair_scores"},
    {"serve"},
    {"cli", "__main__"},
]
LAYER = {part: i for i, layer in enumerate(LAYERS) for part in layer}


def part_of(module: str) -> str:
    """`nmtcli.training.trainer` -> `training`; `nmtcli.files` -> `files`; `nmtcli` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path) -> list[tuple[str, int]]:
    """The nmtcli modules `path` imports (at any depth: module level and inside functions), with line numbers."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "nmtcli":
            if node.module == "nmtcli":
                # `from nmtcli import Translator`: the module that defines the public name
                found += [(nmtcli._PUBLIC.get(alias.name, f"nmtcli.{alias.name}"), node.lineno) for alias in node.names
                          if alias.name != "__version__"]
            else:
                found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "nmtcli"]
    return found


def test_every_module_is_in_a_layer():
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.rglob("*.py")}
    assert parts - LAYER.keys() == set(), "a new module or package: give it a layer here and in docs/architecture.md"


# The one exception: the package's __init__ re-exports the public API (`from nmtcli import Translator`, its
# _PUBLIC table), imported when a name is first used, so `import nmtcli` itself loads nothing above the bottom layer.


def test_imports_point_down_the_layers():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = part_of(".".join(("nmtcli", *path.relative_to(PACKAGE).with_suffix("").parts)))
        for module, line in imports_of(path):
            there = part_of(module)
            if here == "__init__" and module in nmtcli._PUBLIC.values():
                continue
            if LAYER[there] > LAYER[here]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({here}) imports {module} ({there})")
    assert upward == []


def test_the_data_package_loads_neither_torch_nor_the_model():
    # `nmt prepare` and the encoding workers it starts need sentencepiece and numpy only.
    code = ("import sys, nmtcli.data.text, nmtcli.data.prepare, nmtcli.data.shards, nmtcli.files, nmtcli.provenance; "
            "print(sorted(m for m in ('torch', 'nmtcli.model.transformer', 'nmtcli.model.checkpoint') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
