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
from cpu_features import skip_unless_cpu_runs


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16"])
def test_tiny_parity_on_isa(isa):
    skip_unless_cpu_runs(isa)
    here = Path(__file__).parent
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            str(here / "test_tiny_qwen2.py")], cwd=here.parent.parent,
                           env=dict(os.environ, LLAISYS_ISA=isa), capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
