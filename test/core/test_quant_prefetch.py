"""The quantized kernels' prefetch distance, chosen once per process by CPU kind
(src/utils/cpu_isa.cpp's table; test/cpp/test_quant_prefetch.cpp tests every row for CPUs
this machine is not): llaisys.runtime.quant_prefetch() gives the bytes and a non-empty reason,
LLAISYS_QUANT_PREFETCH overrides it (and says so), an unusable value is ignored (and says so),
and `llaisys info` prints it. The variable is read once, so each case runs in its own process."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys

import pytest

from llaisys import runtime
from llaisys.libllaisys import LIB

PROBE = "import json; from llaisys import runtime; print(json.dumps(runtime.quant_prefetch()))"


def _run(code_or_args, value):
    # LLAISYS_CALIBRATE=0: on a CPU kind the table lacks, the loader would set a calibrated value
    env = {k: v for k, v in os.environ.items() if k != "LLAISYS_QUANT_PREFETCH"} | {"LLAISYS_CALIBRATE": "0"}
    if value is not None:
        env["LLAISYS_QUANT_PREFETCH"] = value
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _probe(value):
    n, why = json.loads(_run(PROBE, value))
    return n, why


def _table_for_this_cpu():
    """What the table gives this machine, from /proc/cpuinfo (None where it cannot tell)."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8", errors="replace").read()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    vendor, family, flags = fields.get("vendor_id"), fields.get("cpu family"), fields.get("flags", "").split()
    if vendor is None or family is None:
        return None
    family, model = int(family), int(fields.get("model", "0"))
    if vendor == "GenuineIntel" and family == 6 and model == 0x55 and "avx512f" in flags:
        return 2048, "Intel Skylake-SP"
    if vendor == "GenuineIntel":
        return 2048, "Intel:"
    if vendor == "AuthenticAMD" and family >= 0x19 and "avx512f" in flags:
        return 2048, "AMD Zen 4/5"
    if vendor == "AuthenticAMD" and family == 0x19:
        return 1024, "AMD Zen 3:"
    return 0, None


def test_in_this_process():
    n, why = runtime.quant_prefetch()
    assert isinstance(n, int) and 0 <= n <= 65536
    assert isinstance(why, str) and why.strip()
    env = os.environ.get("LLAISYS_QUANT_PREFETCH")
    if env and env.isdigit() and int(env) <= 65536:
        assert n == int(env) and why.startswith(f"LLAISYS_QUANT_PREFETCH={env} from the environment")
    # either out pointer may be NULL
    assert LIB.llaisysCpuQuantPrefetch(None, None) == 0
    b = ctypes.c_size_t(12345)
    assert LIB.llaisysCpuQuantPrefetch(ctypes.byref(b), None) == 0 and b.value == n


def test_unset_follows_the_table():
    n, why = _probe(None)
    assert n in (0, 1024, 2048) and why and "LLAISYS_QUANT_PREFETCH=" not in why.split(";")[0]
    expected = _table_for_this_cpu()
    if expected is not None:
        bytes_, kind = expected
        assert n == bytes_, why
        if kind:
            assert why.startswith(kind), why
        else:
            assert why.endswith("not measured here; LLAISYS_QUANT_PREFETCH=512 or 2048 to try"), why


@pytest.mark.parametrize("value", ["0", "4096", "65536"])
def test_the_environment_overrides(value):
    n, why = _probe(value)
    assert n == int(value)
    table_n, _ = _probe(None)
    assert why.startswith(f"LLAISYS_QUANT_PREFETCH={value} from the environment (without it {table_n}: "), why


@pytest.mark.parametrize("value", ["65537", "-1", "2k"])
def test_an_unusable_value_is_ignored_and_said(value):
    n, why = _probe(value)
    table_n, table_why = _probe(None)
    assert n == table_n
    assert why == f"{table_why} (LLAISYS_QUANT_PREFETCH={value} ignored: not a byte count in 0..65536)"


def test_info_prints_it():
    out = _run(["-m", "llaisys.cli", "info"], "1024")
    assert re.search(r"^prefetch +1024 B ahead in the quantized kernels \(LLAISYS_QUANT_PREFETCH=1024 from the "
                     r"environment \(without it \d+: .+\)\)$", out, re.M), out


def test_the_loaders_mirror_of_the_table_agrees():
    """cpu_tuning.library_prefetch_measured (which decides whether a calibration is needed)
    says of this CPU what the library's table says."""
    from llaisys.libllaisys import cpu_tuning

    _, why = _probe(None)
    assert cpu_tuning.library_prefetch_measured(cpu_tuning.cpu_id()) == ("not measured here" not in why), why
