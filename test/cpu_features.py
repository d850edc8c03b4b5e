"""Which SIMD paths this CPU can run, read from /proc/cpuinfo, for the tests that run a child
process under each LLAISYS_ISA (an ISA the CPU lacks is skipped: LLAISYS_ISA never goes above
what the CPU can run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TOOLS = str(Path(__file__).resolve().parents[1] / "tools")
if TOOLS not in sys.path:  # pytest puts it there (pyproject's pythonpath); a test's child process does not
    sys.path.append(TOOLS)
from benchkit.host import cpu_flag_set as cpu_flags  # noqa: E402  (/proc/cpuinfo's flags, as a set)

ISA_FLAGS = {"avx2": {"avx2", "fma", "f16c"}, "avx512": {"avx512f", "avx512bw"},
             "avx512bf16": {"avx512f", "avx512bw", "avx512_bf16"}}  # /proc/cpuinfo names; scalar needs none


def can_run(isa: str) -> bool:
    return ISA_FLAGS.get(isa, set()) <= cpu_flags()


def skip_unless_cpu_runs(isa: str) -> None:
    missing = ISA_FLAGS.get(isa, set()) - cpu_flags()
    if missing:
        pytest.skip(f"this CPU cannot run {isa} (no {', '.join(sorted(missing))} in /proc/cpuinfo)")


def skip_a_repeated_path(isa: str) -> None:
    """For a test that reruns its own file in a child under LLAISYS_ISA=isa: skip where the
    child would take the path this process has just run the file on, which is this process's
    own ISA, or any ISA the CPU lacks (the child falls back to the CPU's best)."""
    from llaisys import runtime

    skip_unless_cpu_runs(isa)
    if runtime.cpu_isa() == isa:
        pytest.skip(f"{isa} is this process's own path: the file has just run on it")


def run_on_isa(isa: str, code: str, *args: str, timeout: int = 600):
    """Run `code` (python -c, with `args`) under LLAISYS_ISA=isa and return the JSON of its last
    line of output. The child must print runtime.cpu_isa() first: the ISA it really ran is
    checked against the one asked for. Skips when this CPU cannot run `isa`."""
    import json
    import os
    import subprocess
    import sys

    skip_unless_cpu_runs(isa)
    child = subprocess.run([sys.executable, "-c", code, *args], env=dict(os.environ, LLAISYS_ISA=isa),
                           capture_output=True, text=True, timeout=timeout)
    assert child.returncode == 0, child.stderr[-4000:]
    lines = child.stdout.splitlines()
    assert lines[0] == isa, f"asked for {isa}, the child ran {lines[0]}"
    return json.loads(lines[-1])
