"""The tiny-checkpoint parity of test_tiny_qwen2.py again under each SIMD path.

The model's linears run on weights packed for the process's ISA (16-column panels on AVX2
and scalar, 32 on AVX-512, bf16 k-pair panels on avx512bf16), and a tied embedding is read
back from those panels, so every ISA gets the whole forward checked against transformers.
The ISA is chosen once per process: each runs in a child pytest with LLAISYS_ISA set; an
ISA the CPU lacks is skipped (LLAISYS_ISA never goes above what the CPU can run)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


ISA_FLAGS = {"avx2": {"avx2", "fma", "f16c"}, "avx512": {"avx512f", "avx512bw"},
             "avx512bf16": {"avx512f", "avx512bw", "avx512_bf16"}}  # /proc/cpuinfo names


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16"])
def test_tiny_parity_on_isa(isa):
    missing = ISA_FLAGS.get(isa, set()) - cpu_flags()
    if missing:
        pytest.skip(f"this CPU cannot run {isa} (no {', '.join(sorted(missing))} in /proc/cpuinfo)")
    here = Path(__file__).parent
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            str(here / "test_tiny_qwen2.py")], cwd=here.parent.parent,
                           env=dict(os.environ, LLAISYS_ISA=isa), capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
