"""tools/amx_probe.c compiles with the system C compiler and reports the machine. Without AMX in
CPUID it says so and exits 0; with AMX, the case llaisys' own AMX path relies on (the permission
requested, then a tile product) must come out right, and every case must report an outcome."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cpu_features import cpu_flags

PROBE = Path(__file__).resolve().parents[2] / "tools" / "amx_probe.c"
CASES = ["no_permission", "permission", "no_config", "thread_before", "config_kept", "after_signal", "small_altstack",
         "openmp_once"]


def test_the_probe_reports_this_machine(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "amx_probe"
    subprocess.run([cc, "-O1", "-Wall", "-Werror", "-pthread", "-fopenmp", str(PROBE), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    has_amx = {"amx_tile", "amx_int8"} <= cpu_flags()
    assert lines[0]["amx"] is has_amx
    if not has_amx:
        assert len(lines) == 1
        return
    outcomes = {line["case"]: line["outcome"] for line in lines[1:] if "outcome" in line}
    assert list(outcomes) == CASES
    assert outcomes["permission"] == "ok", lines
