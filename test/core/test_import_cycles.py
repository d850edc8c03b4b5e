"""No import cycle among the modules of python/llaisys: an import of a sibling, at module level or inside a
function, is an edge (a lazy import still ties the two modules together); a submodule importing its own package
is not, that being how a package exposes its parts. Shared pieces live in leaf modules instead (cli_args.py,
models/config.py as data, models/tensors.py, server/protocol/schema.py apart from the bodies)."""

import ast
from pathlib import Path

PKG_ROOT = Path(__file__).resolve().parents[2] / "python"


def modules(root: Path = PKG_ROOT) -> dict:
    """Dotted name -> file, for every module of the llaisys package (a package by its own name)."""
    out = {}
    for path in sorted((root / "llaisys").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict) -> set:
    """The modules of `known` that `name` (at `path`) imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]  # `from pkg import mod` names a module
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def cycles(graph: dict) -> list:
    """The groups of modules that reach each other (each sorted), by reachability from every module."""
    reach = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        reach[start] = seen
    groups = {frozenset({m, *(o for o in reach[m] if m in reach[o])}) for m in graph if m in reach[m]}
    return sorted(sorted(g) for g in groups)


def test_cycles_groups_the_modules_that_reach_each_other():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_edges_resolve_relative_and_lazy_imports(tmp_path):
    pkg = tmp_path / "llaisys" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "llaisys" / "__init__.py").write_text("from . import top\n")
    (tmp_path / "llaisys" / "top.py").write_text("def f():\n    from .sub.leaf import X\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "leaf.py").write_text("from .. import top\nfrom llaisys import sub\n")
    known = modules(tmp_path)
    graph = {m: imports_of(m, p, known) for m, p in known.items()}
    assert graph["llaisys.top"] == {"llaisys.sub.leaf"}
    assert graph["llaisys.sub.leaf"] == {"llaisys.top"}  # its own package, llaisys.sub, is no edge
    assert cycles(graph) == [["llaisys.sub.leaf", "llaisys.top"]]


def test_no_import_cycle_in_llaisys():
    known = modules()
    assert "llaisys.server.protocol.parse" in known and "llaisys.cli" in known
    graph = {m: imports_of(m, p, known) for m, p in known.items()}
    assert "llaisys.server.protocol.schema" in graph["llaisys.server.protocol.parse"]  # the walk sees real edges
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
