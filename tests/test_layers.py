"""The package's layers (../shared/DESIGN.md, "Shape"): every import between modules of
`ebm_jax`, read from the source with `ast` (function-local and `TYPE_CHECKING` imports
included, relative imports resolved), points down the layers or stays in its own layer;
`data` never imports `tracking` or `detection` (issue 27); and the imports between the
modules of one subpackage form no cycle."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

# bottom to top; a module imports only from its own layer or below
LAYERS = (("checks", "io", "config", "config_catalog", "config_show", "safe_pickle"), ("ops",), ("energy", "contrastive"), ("models",),
          ("tracking", "detection"), ("data",), ("eval",), ("train",), ("report",),
          ("recipes",), ("cli",))
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}
# (importer, imported) pairs refused whatever their layers
FORBIDDEN = {("data", "tracking"), ("data", "detection")}


def module_names(package_dir: Path) -> dict[str, Path]:
    """{dotted module name: file} of every .py under the package; a package's
    `__init__.py` is named after the package."""
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, modules) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file, anywhere in it (module top,
    functions, `if TYPE_CHECKING:`), restricted to modules of the package. `from a
    import b` names the module a.b when that is a module, else a; relative imports are
    resolved against `name`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a non-module
                target = target.rpartition(".")[0]
            if target:
                found.append((node.lineno, target))
    return found


def subpackage(name: str) -> str:
    """The unit of the layers: `ebm_jax.data.images` -> data; the root's own modules
    (`ebm_jax.io`) are their own unit; the root package is `ebm_jax`."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def import_graph(package_dir: Path):
    modules = module_names(package_dir)
    return modules, {name: imports_of(name, path, modules) for name, path in modules.items()}


def layer_violations(package_dir: Path, layer_of=None, forbidden=None) -> list[str]:
    """`file:line: a -> b` for every import of a higher layer (or a forbidden pair),
    and for every module whose unit has no layer."""
    layer_of = {**LAYER_OF, package_dir.name: 0} if layer_of is None else layer_of
    forbidden = FORBIDDEN if forbidden is None else forbidden
    modules, graph = import_graph(package_dir)
    root = package_dir.parent
    bad = []
    for name, edges in graph.items():
        src = subpackage(name)
        where = modules[name].relative_to(root)
        if src not in layer_of:
            bad.append(f"{where}:1: {name} is in no layer ({src})")
            continue
        for line, target in edges:
            dst = subpackage(target)
            if dst not in layer_of:
                bad.append(f"{where}:{line}: {name} -> {target} (no layer for {dst})")
            elif layer_of[dst] > layer_of[src] or (src, dst) in forbidden:
                bad.append(f"{where}:{line}: {name} -> {target} ({src}, layer "
                           f"{layer_of[src]}, imports {dst}, layer {layer_of[dst]})")
    return bad


def subpackage_cycles(package_dir: Path) -> list[list[str]]:
    """The import cycles among the modules of each subpackage (its `__init__`
    included), each as [m0, m1, ..., m0], from a depth-first search; the root's own
    modules count as one unit."""
    _, graph = import_graph(package_dir)
    succ = {name: sorted({t for _, t in edges if t != name
                          and subpackage(t) == subpackage(name)})
            for name, edges in graph.items()}
    cycles, state = [], {}  # state: 1 on the stack, 2 done

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in succ[node]:
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for name in sorted(succ):
        if name not in state:
            visit(name, [])
    return cycles


def test_every_import_points_down_the_layers():
    bad = layer_violations(ROOT / "ebm_jax")
    assert not bad, ("imports against the layers of DESIGN.md (bottom to top: "
                     + " - ".join(", ".join(names) for names in LAYERS)
                     + "; data never imports tracking or detection):\n" + "\n".join(bad))


def test_no_import_cycle_inside_a_subpackage():
    cycles = subpackage_cycles(ROOT / "ebm_jax")
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "pkg"


def test_the_checker_catches_planted_violations(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/io.py": "import json\n",
        "pkg/ops/__init__.py": "from pkg.ops.boxes import iou\n",
        "pkg/ops/boxes.py": "from pkg import io\n\ndef iou():\n    return 1\n",
        "pkg/tracking/__init__.py": "",
        "pkg/tracking/maps.py": "from ..ops import boxes\n",
        "pkg/data/__init__.py": "",
        # a function-local import of a higher layer, behind a relative import
        "pkg/data/a.py": """\
            from . import b

            def f():
                from ..eval import metrics
                return metrics
            """,
        # TYPE_CHECKING and `import x.y` forms; data -> tracking is forbidden
        "pkg/data/b.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                import pkg.tracking.maps

            def g():
                from pkg.data.a import f
                return f
            """,
        "pkg/eval/__init__.py": "",
        "pkg/eval/metrics.py": "from pkg.data import a\n",
        "pkg/ops/low.py": "from pkg.ops import boxes\n",
    })
    layer_of = {"pkg": 0, "io": 0, "ops": 1, "tracking": 4, "data": 5, "eval": 6}
    bad = layer_violations(pkg, layer_of, {("data", "tracking")})
    assert bad == [
        "pkg/data/a.py:4: pkg.data.a -> pkg.eval.metrics (data, layer 5, imports eval, "
        "layer 6)",
        "pkg/data/b.py:3: pkg.data.b -> pkg.tracking.maps (data, layer 5, imports "
        "tracking, layer 4)",
    ]
    assert subpackage_cycles(pkg) == [["pkg.data.a", "pkg.data.b", "pkg.data.a"]]
    # without the planted faults, the same package is clean
    _write(tmp_path, {"pkg/data/a.py": "from . import b\n", "pkg/data/b.py": "X = 1\n"})
    assert layer_violations(pkg, layer_of, {("data", "tracking")}) == []
    assert subpackage_cycles(pkg) == []
    # a unit with no layer is reported, not skipped
    _write(tmp_path, {"pkg/extra/__init__.py": ""})
    assert layer_violations(pkg, layer_of, set()) == ["pkg/extra/__init__.py:1: pkg.extra "
                                                      "is in no layer (extra)"]


@pytest.mark.parametrize("line, expected", [
    ("from . import b", "pkg.sub.b"),
    ("from .. import io", "pkg.io"),
    ("from ..io import load", "pkg.io"),
    ("import pkg.sub.b as bee", "pkg.sub.b"),
    ("from pkg.sub import b, missing", "pkg.sub.b"),
])
def test_imports_are_resolved_to_modules(tmp_path, line, expected):
    pkg = _write(tmp_path, {"pkg/__init__.py": "", "pkg/io.py": "", "pkg/sub/__init__.py": "",
                            "pkg/sub/b.py": "", "pkg/sub/a.py": line + "\n"})
    modules = module_names(pkg)
    found = imports_of("pkg.sub.a", pkg / "sub" / "a.py", modules)
    assert found[0] == (1, expected)
