"""The tunables chosen per CPU kind before the library loads (python/llaisys/libllaisys/
cpu_tuning.py): /proc/cpuinfo parsing, the wait table's rows, the order environment > table >
calibration, the calibration's cache (written once, read back, redone when damaged or of another
version), a real calibration in child processes, and the loader applying a calibrated choice for
a CPU kind no table knows (checked by what libgomp says it read and what the library reports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llaisys.libllaisys import cpu_tuning
from llaisys.libllaisys.cpu_tuning import PASSIVE, SPIN, SPIN_SHORT, CpuId, choose, cpu_id, load_or_calibrate, table_wait

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni

processor\t: 1
vendor_id\t: GenuineIntel
"""
ZEN3 = CpuId("AuthenticAMD", 0x19, 0x01, "AMD EPYC 7B13", False)
ZEN4_ID = CpuId("AuthenticAMD", 0x19, 0x11, "AMD EPYC 9R14", True)
ZEN1 = CpuId("AuthenticAMD", 0x17, 0x01, "AMD EPYC 7601", False)
XEON = CpuId("GenuineIntel", 6, 0x8F, "Intel Xeon Platinum 8481C", True)
SKYLAKE_SP = CpuId("GenuineIntel", 6, 0x55, "Intel Xeon Processor @ 2.00GHz", True)
HYGON = CpuId("HygonGenuine", 0x18, 0x01, "Hygon C86", False)


def test_cpuinfo_is_read_from_the_first_processor():
    assert cpu_id(ZEN4) == CpuId("AuthenticAMD", 25, 17, "AMD EPYC 9R14 96-Core Processor", True)
    assert cpu_id(ZEN4).key == "AuthenticAMD-19h-11h-avx512"
    assert cpu_id("") == CpuId() and cpu_id("cpu family : x\n").family == 0  # no crash on odd text
    here = cpu_id()
    if Path("/proc/cpuinfo").exists() and "vendor_id" in Path("/proc/cpuinfo").read_text():
        assert here.vendor and here.family > 0


@pytest.mark.parametrize("cpu, env", [(ZEN3, SPIN), (ZEN4_ID, SPIN_SHORT), (SKYLAKE_SP, SPIN),
                                      (CpuId("AuthenticAMD", 0x1A, 0x02, "Zen 5", True), SPIN)])
def test_measured_kinds_come_from_the_table(cpu, env):
    assert table_wait(cpu).env == env

    def no_calibration(*a):
        raise AssertionError("a kind in both tables is not calibrated")

    ch = choose(cpu, {}, calibrate=no_calibration)
    assert ch.env == env and ch.wait == table_wait(cpu).reason and ch.prefetch == ""


def test_the_environment_wins_and_a_user_setting_is_never_overwritten():
    ch = choose(ZEN4_ID, {"GOMP_SPINCOUNT": "777"}, calibrate=lambda *a: pytest.fail("calibrated"))
    assert ch.env == {} and ch.wait == "from the environment: GOMP_SPINCOUNT=777"
    # an unknown kind with both set by the user: nothing to measure
    ch = choose(HYGON, {"OMP_WAIT_POLICY": "active", "LLAISYS_QUANT_PREFETCH": "0"},
                calibrate=lambda *a: pytest.fail("calibrated"))
    assert ch.env == {}


FAKE = {"wait_env": dict(PASSIVE), "wait_why": "passive (figures)", "prefetch": 1024, "prefetch_why": "1024 B (x)"}


def test_unknown_kinds_are_calibrated():
    seen = []
    ch = choose(XEON, {}, calibrate=lambda cpu, env: seen.append(cpu) or FAKE)
    assert seen == [XEON]  # Sapphire Rapids: the library has a prefetch row, the wait table none (a row is per model)
    assert ch.env == PASSIVE and ch.wait.startswith(XEON.key + ": calibrated: passive") and ch.prefetch == ""
    # Zen 1/2: the wait from its table row, the prefetch (no library row) calibrated
    ch = choose(ZEN1, {}, calibrate=lambda cpu, env: FAKE)
    assert ch.env == {**SPIN, "LLAISYS_QUANT_PREFETCH": "1024"} and ch.wait == table_wait(ZEN1).reason
    assert ch.prefetch == f"{ZEN1.key}: calibrated: 1024 B (x)"
    ch = choose(HYGON, {}, calibrate=lambda cpu, env: FAKE)  # neither table knows it
    assert ch.env == {**PASSIVE, "LLAISYS_QUANT_PREFETCH": "1024"} and "calibrated: 1024 B" in ch.prefetch
    ch = choose(HYGON, {"LLAISYS_CALIBRATE": "0"}, calibrate=lambda *a: pytest.fail("calibrated"))
    assert ch.env == SPIN and "LLAISYS_CALIBRATE=0" in ch.wait and ch.prefetch == ""
    ch = choose(HYGON, {}, calibrate=lambda *a: None)  # a calibration that could not run
    assert ch.env == SPIN and ch.prefetch == ""


def test_the_cache_is_written_once_and_redone_when_damaged(tmp_path, monkeypatch):
    env = {"LLAISYS_HOME": str(tmp_path)}
    calls = []
    monkeypatch.setattr(cpu_tuning, "calibrate", lambda environ: calls.append(1) or dict(FAKE))
    got = load_or_calibrate(HYGON, env)
    path = tmp_path / "tuning" / f"{HYGON.key}.json"
    saved = json.loads(path.read_text())
    assert got == saved and saved["cpu"] == HYGON.key and saved["prefetch"] == 1024 and len(calls) == 1
    assert load_or_calibrate(HYGON, env) == saved and len(calls) == 1  # read back, not measured again
    for damaged in ("{not json", json.dumps({**saved, "version": -1}), json.dumps({**saved, "cpu": "other"}), "[]"):
        path.write_text(damaged)
        assert load_or_calibrate(HYGON, env)["prefetch"] == 1024
        assert json.loads(path.read_text())["version"] == cpu_tuning.CALIBRATION_VERSION
    assert len(calls) == 5
    assert not list(path.parent.glob("*.tmp"))


def test_a_real_calibration():
    """Child processes time the decode pass under each candidate (no cache involved): the wait
    policies, then each prefetch distance, of which the fastest is kept if it beats none."""
    got = cpu_tuning.calibrate(dict(os.environ))
    assert got is not None
    t = got["seconds_per_pass"]
    tried = {f"prefetch_{n}" for n in cpu_tuning.PREFETCH_CANDIDATES}
    assert len(tried) >= 2 and set(t) >= {"spin_20k"} | tried and all(0 < v < 5 for v in t.values()), t
    if not any(k in os.environ for k in cpu_tuning.WAIT_VARS):
        passive = t["passive"] / t["spin_20k"] <= cpu_tuning.WAIT_TOLERANCE
        assert got["wait_env"] == (PASSIVE if passive else SPIN), got
    best = min(cpu_tuning.PREFETCH_CANDIDATES, key=lambda n: t[f"prefetch_{n}"])
    assert got["prefetch"] == (best if t[f"prefetch_{best}"] / t["spin_20k"] <= cpu_tuning.PREFETCH_GAIN else 0), got
    assert got["prefetch_why"].startswith(f"{best} B (" if got["prefetch"] else f"none (the best distance, {best} B"), got


# The loader, for a CPU kind no table knows: cpu_id is replaced before the package loads, and
# the cached calibration (written by the test) must reach libgomp and the library.
LOADER = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("llaisys.libllaisys.cpu_tuning", sys.argv[1])
tuning = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = tuning
spec.loader.exec_module(tuning)
tuning.cpu_id = lambda cpuinfo=None: tuning.CpuId("HygonGenuine", 0x18, 1, "Hygon C86", False)
from llaisys import libllaisys, runtime
import os
print(json.dumps([libllaisys.WAIT_APPLIED, libllaisys.TUNING.wait, libllaisys.TUNING.prefetch,
                  runtime.quant_prefetch()[0], [k for k in ("OMP_WAIT_POLICY", "LLAISYS_QUANT_PREFETCH") if k in os.environ]]))
"""


def test_the_loader_applies_a_cached_calibration(tmp_path):
    (tmp_path / "tuning").mkdir()
    (tmp_path / "tuning" / f"{HYGON.key}.json").write_text(json.dumps(
        {**FAKE, "version": cpu_tuning.CALIBRATION_VERSION, "cpu": HYGON.key}))
    env = {k: v for k, v in os.environ.items() if k not in (*cpu_tuning.WAIT_VARS, "LLAISYS_QUANT_PREFETCH")}
    env.update(LLAISYS_HOME=str(tmp_path), OMP_DISPLAY_ENV="verbose")
    proc = subprocess.run([sys.executable, "-c", LOADER, cpu_tuning.__file__], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    applied, wait, prefetch, n, leaked = json.loads(proc.stdout)
    assert applied == PASSIVE and wait == f"{HYGON.key}: calibrated: passive (figures)"
    assert prefetch == f"{HYGON.key}: calibrated: 1024 B (x)" and n == 1024
    assert leaked == []  # set around the load only
    if "OMP_WAIT_POLICY" in proc.stderr:  # libgomp says what it read
        assert "OMP_WAIT_POLICY = 'PASSIVE'" in proc.stderr
