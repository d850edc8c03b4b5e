"""Every third-party module the package, the tests and the tools import comes from the project's own requirement
files, so a fresh virtualenv made from them runs every test (a machine's own site packages must not be what makes
a test pass); and `import llaisys` pulls in none of the heavy references (torch, transformers, ray)."""

import ast
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("python/llaisys", "test", "tools")  # every .py file under these
# modules that live in a tool's own virtualenv, not in the project's: module -> (the tool that installs it, the
# pin that tool must carry)
PEER_VENVS = {"llama_cpp": ("tools/benchkit/peer.py", re.compile(r'^PIN = "\d+\.\d+\.\d+"', re.M))}
HEAVY = ("torch", "transformers", "ray")  # test references and an optional extra: never loaded by `import llaisys`


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them ("Jinja2" == "jinja2", "ray[serve]" -> "ray")."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~;\s]", name.strip(), maxsplit=1)[0]).lower()


def declared() -> set:
    """Distributions named by pyproject.toml (dependencies, every optional extra) and requirements-*.txt."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        names += extra
    for req in ("requirements-test.txt", "requirements-build.txt"):
        for line in (ROOT / req).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                names.append(line)
    return {normalized(n) for n in names}


def local_modules() -> set:
    """Names a test or tool imports from the repository itself (a sibling file, or a folder put on sys.path)."""
    names = {"llaisys", "conftest"}
    for top in ("test", "tools"):
        for p in (ROOT / top).rglob("*.py"):
            names.add(p.stem)
            if p.name == "__init__.py":
                names.add(p.parent.name)
    return names


def imported_modules() -> dict:
    """Top-level name of every absolute import in SCANNED -> the files importing it (at any depth in the file)."""
    found = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for mod in mods:
                    found.setdefault(mod.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def third_party(found: dict) -> dict:
    local = local_modules()
    return {m: files for m, files in found.items()
            if m not in sys.stdlib_module_names and m != "__future__" and m not in local}


def test_scan_sees_the_imports_it_must_check():
    """The walk finds what the tree is known to import (guards the test against scanning nothing)."""
    mods = third_party(imported_modules())
    assert {"numpy", "flask", "pytest", "torch", "transformers"} <= set(mods)
    assert "os" not in mods and "llaisys" not in mods and "server_helpers" not in mods


def test_normalized_names():
    assert normalized("ray[serve]==2.60.0") == "ray"
    assert normalized("Jinja2>=3.1.6") == normalized("jinja2") == "jinja2"
    assert normalized("prometheus_client>=0.20") == "prometheus-client"


def test_every_third_party_import_is_declared():
    want = declared()
    owners = md.packages_distributions()  # module -> distributions providing it, among those installed
    missing = []
    for mod, files in sorted(third_party(imported_modules()).items()):
        if mod in PEER_VENVS:
            tool, pin = PEER_VENVS[mod]
            assert pin.search((ROOT / tool).read_text()), f"{tool} must pin the {mod} it installs"
            continue
        dists = owners.get(mod) or [mod]  # not installed: its own name, which is how a requirement file names it
        if not any(normalized(d) in want for d in dists):
            missing.append(f"{mod} (distribution {', '.join(sorted(set(dists)))}; imported by "
                           f"{', '.join(sorted(files)[:3])})")
    assert not missing, ("imported but in no requirement file (add it, pinned, to requirements-test.txt for tests "
                         "and tools, or to pyproject.toml for the package): " + "; ".join(missing))


def test_test_requirements_are_pinned_exactly():
    """requirements-test.txt pins every line, so two machines test against the same versions."""
    for line in (ROOT / "requirements-test.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z,]+\])?==[0-9][0-9A-Za-z.+\-]*", line), line


def test_import_llaisys_imports_no_heavy_reference():
    """`import llaisys` and the entry points the commands use load no test reference and not ray (the [ray]
    extra's code imports ray only when `serve --ray` runs)."""
    code = ("import sys, llaisys, llaisys.cli, llaisys.engine, llaisys.models, llaisys.server.app, "
            "llaisys.server.serve, llaisys.ray, llaisys.ray.cli; llaisys.cli.build_parser(); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
