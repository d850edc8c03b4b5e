"""What the model cache holds on disk, and removing it (`llaisys models ls|rm`, `llaisys info`).

Entries under the cache root (see hub.py for the layout), each with its size and format:
    model    <root>/models/<name>/               a converted HuggingFace directory (bf16)
    gguf     <root>/gguf/<name>.gguf             a downloaded GGUF (the registry's format, q4_k_m), run as it is
             <root>/gguf/<name>-<quant>.gguf     a GGUF `llaisys download --quant` wrote (q8_0)
    export   <root>/models/<name>-<dtype>.gguf   a GGUF written from a model (tools/bench_compare.py)
    partial  an unfinished download or conversion: <root>/wheels/<name>/, <root>/gguf/<name>.gguf.partial-*,
             <root>/models/.<name>.tmp-*, <root>/gguf/.<file>.tmp-*
Only the stdlib is used: listing the cache loads no model.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import hub

KINDS = ("model", "gguf", "export", "partial")  # listing order within one name


@dataclass(frozen=True)
class CacheEntry:
    """One thing in the model cache that takes disk space."""

    name: str  # the model it belongs to: a directory name under <root>/models, or a GGUF's stem
    kind: str  # one of KINDS
    path: Path  # the file or directory
    size: int  # bytes on disk (files under a directory, summed; symlinks not followed)
    files: tuple  # names of the files inside a directory (sorted), or (path.name,) for a file
    quant: str = ""  # its format: "bf16" (a model directory), "q4_k_m", "q8_0", "f16"...; "" when unknown


def _size(path: Path) -> tuple:
    """(bytes, sorted file names relative to `path`) of a file or a directory tree."""
    if not path.is_dir():
        return path.lstat().st_size, (path.name,)
    total, names = 0, []
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = Path(root) / f
            total += p.lstat().st_size
            names.append(str(p.relative_to(path)))
    return total, tuple(sorted(names))


def _owner(stem: str, models: list) -> str:
    """The model an exported GGUF `<model>-<suffix>.gguf` belongs to (the longest match), else its stem."""
    owners = [m for m in models if stem.startswith(m + "-")]
    return max(owners, key=len) if owners else stem


def _gguf_quant(stem: str, owner: str) -> str:
    """The format of `<owner>[-<quant>].gguf`: the suffix, else the registry's format of the download."""
    if stem != owner:
        return stem[len(owner) + 1:]
    spec = hub.REGISTRY.get(owner)
    return spec.quant if spec is not None else ""


def entries() -> list:
    """Everything in the cache that belongs to a model, sorted by name then KINDS order."""
    root = hub.cache_root()
    found = []  # (name, kind, path, quant)
    models_dir, gguf_dir, wheels_dir = root / "models", root / "gguf", root / "wheels"
    names = sorted(p.name for p in models_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if models_dir.is_dir() else []
    found += [(n, "model", models_dir / n, "bf16") for n in names]
    owners = sorted(set(names) | set(hub.REGISTRY))
    if models_dir.is_dir():
        for p in models_dir.iterdir():
            if p.is_file() and p.suffix == ".gguf":
                owner = _owner(p.stem, names)
                found.append((owner, "export", p, p.stem[len(owner) + 1:] if p.stem != owner else ""))
            elif p.is_dir() and p.name.startswith(".") and ".tmp-" in p.name:
                found.append((p.name[1:].split(".tmp-")[0], "partial", p, ""))
    if gguf_dir.is_dir():
        for p in gguf_dir.iterdir():
            if p.name.endswith(".gguf") and not p.name.startswith("."):
                owner = _owner(p.name[:-5], owners) if p.name[:-5] not in owners else p.name[:-5]
                found.append((owner, "gguf", p, _gguf_quant(p.name[:-5], owner)))
            elif ".gguf.partial-" in p.name:
                found.append((p.name.split(".gguf.partial-")[0], "partial", p, ""))
            elif p.name.startswith(".") and ".gguf.tmp-" in p.name:  # a GGUF export under way (gguf_export)
                found.append((_owner(p.name[1:].split(".gguf.tmp-")[0], owners), "partial", p, ""))
    if wheels_dir.is_dir():
        found += [(p.name, "partial", p, "") for p in wheels_dir.iterdir() if p.is_dir() and any(p.iterdir())]
    out = []
    for name, kind, path, quant in found:
        try:
            size, files = _size(path)
        except OSError:  # removed while we looked
            continue
        out.append(CacheEntry(name, kind, path, size, files, quant))
    return sorted(out, key=lambda e: (e.name, KINDS.index(e.kind), e.path.name))


def select(name: str, kinds=KINDS) -> list:
    """The entries of `name` whose kind is in `kinds`; ValueError, naming `name` and what is
    cached, when there are none."""
    found = entries()
    chosen = [e for e in found if e.name == name and e.kind in kinds]
    if not chosen:
        cached = sorted({e.name for e in found})
        what = "model" if tuple(kinds) == KINDS else " or ".join(kinds)
        raise ValueError(f"no cached {what} named {name!r} in {hub.cache_root()}; cached: "
                         f"{', '.join(cached) if cached else 'nothing'}")
    return chosen


def remove(name: str, kinds=KINDS) -> list:
    """Delete the entries of `name` whose kind is in `kinds` (under the model's download lock);
    returns what was deleted. ValueError as select() when there is nothing to delete."""
    select(name, kinds)
    with hub._lock(name):
        gone = [e for e in entries() if e.name == name and e.kind in kinds]
        for e in gone:
            if e.path.is_dir():
                shutil.rmtree(e.path)
            else:
                e.path.unlink(missing_ok=True)
                if e.kind == "gguf":
                    e.path.with_name(e.path.name + ".keep").unlink(missing_ok=True)  # hub.keep_marker
    return gone


def human(n: int) -> str:
    """Bytes as a short decimal size: 512 B, 1.3 kB, 988.4 MB, 3.6 GB."""
    if n < 1000:
        return f"{n} B"
    for unit in ("kB", "MB", "GB"):
        n /= 1000
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}"
