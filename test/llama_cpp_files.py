"""Files of llama.cpp's source that tests read as real data: its vocabulary test files
(models/ggml-vocab-<name>.gguf with .inp and .out) and real models' chat templates
(models/templates/*.jinja). They come from the llama-cpp-python sdist tools/benchkit/peer.py
pins: the peer's unpacked source when it is there, else the sdist (benchkit.peer.fetch_sdist), whose
wanted models/ files are copied to $LLAISYS_HOME/peers/llama-cpp-models-<pin>, one file at a
time under a lock (two test processes may ask at once, for different files)."""

import fcntl
import os
import tarfile
from pathlib import Path

from benchkit.peer import PIN, fetch_sdist, home, paths

SEPARATOR = "\n__ggml_vocab_test__\n"  # between the texts of a vocabulary test file (.inp), and after the last


def vocab_texts(inp: Path) -> list:
    """The texts of one of llama.cpp's vocabulary test files (models/ggml-vocab-<name>.gguf.inp)."""
    texts = inp.read_text(encoding="utf-8")
    assert texts.endswith(SEPARATOR), inp
    return texts[:-len(SEPARATOR)].split(SEPARATOR)


def _has_all(folder: Path, wanted: list) -> bool:
    return all((folder / w).is_dir() and any((folder / w).iterdir()) if w.endswith("/") else (folder / w).is_file()
               for w in wanted)


def models_dir(wanted: list) -> Path:
    """A folder that holds each of `wanted` (paths under llama.cpp's models/; one ending in "/"
    stands for every file under it)."""
    out = home() / f"llama-cpp-models-{PIN}"
    for folder in (paths()["vendor"] / "models", out):
        if _has_all(folder, wanted):
            return folder
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _has_all(out, wanted):  # another process copied them meanwhile
            return out
        sdist = fetch_sdist()
        prefix = f"llama_cpp_python-{PIN}/vendor/llama.cpp/models/"
        with tarfile.open(sdist) as tar:
            for member in tar:
                rel = member.name[len(prefix):] if member.name.startswith(prefix) else ""
                if member.isfile() and rel and any(rel == w or (w.endswith("/") and rel.startswith(w)) for w in wanted):
                    dest = out / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    part = dest.with_name(dest.name + ".part")
                    part.write_bytes(tar.extractfile(member).read())
                    os.replace(part, dest)  # whole files only: a reader never sees one half written
    assert _has_all(out, wanted), f"{sdist.name} lacks some of {wanted}"
    return out
