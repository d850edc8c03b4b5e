"""Which build's one-row walk the i-quants take at one activation row on AVX-512 VNNI
(src/ops/linear/cpu/quant_plan.cpp, iq_walks_avx2): the AVX2 build's for IQ2_XXS and IQ3_XXS on
AMD Zen 4, where it measured 11-14% faster, the AVX-512 one elsewhere. LLAISYS_IQ_WALK_AVX2=1
takes the AVX2 walk for every i-quant, 0 for none, any other value is ignored; the plan's line
(`llaisys info`, runtime.quant_plan) says which. Chosen once per process, so each case runs in a
child. That both walks stay within the activation-quantization bound is test_quant_linear's
bound test, whose AVX-512 children force each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_features import cpu_flags

I_QUANTS = ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"]
OTHERS = ["q4_k", "q8_0", "iq4_xs"]
PROBE = ("import json, sys; from llaisys import runtime; "
         "print(json.dumps({f: runtime.quant_plan(f) for f in sys.argv[1:]}))")
WALK = "the AVX2 row walk at 1 row"


def plans(value: str | None, isa: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LLAISYS_IQ_WALK_AVX2"} | {"LLAISYS_ISA": isa}
    if value is not None:
        env["LLAISYS_IQ_WALK_AVX2"] = value
    out = subprocess.run([sys.executable, "-c", PROBE, *I_QUANTS, *OTHERS], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout)


def zen4() -> bool:
    """AMD family 19h with AVX-512 (the first processor of /proc/cpuinfo), as the library reads CPUID."""
    fields = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return (fields.get("vendor_id") == "AuthenticAMD" and fields.get("cpu family") == "25"
            and "avx512f" in fields.get("flags", "").split())


@pytest.mark.parametrize("value", [None, "0", "1", "yes"])
def test_the_walk_follows_the_cpu_kind_unless_forced(value):
    if "avx512_vnni" not in cpu_flags():
        pytest.skip("no avx512_vnni in /proc/cpuinfo: there is no AVX-512 walk to choose against")
    got = plans(value, "avx512")
    for fmt in I_QUANTS + OTHERS:
        if fmt in OTHERS or value == "0":
            want = False
        elif value == "1":
            want = True
        else:  # unset, or a value the library ignores: the CPU kind's choice
            want = zen4() and fmt in ("iq2_xxs", "iq3_xxs")
        assert (WALK in got[fmt]) == want, (fmt, got[fmt])
        if fmt in I_QUANTS:
            assert "AVX-512 VNNI row kernels" in got[fmt], got[fmt]  # from 2 rows on, whatever the walk


def test_below_avx512_nothing_switches():
    """Under LLAISYS_ISA=avx2 every i-quant runs the AVX2 build already: the variable changes nothing."""
    if "avx2" not in cpu_flags():
        pytest.skip("no avx2 in /proc/cpuinfo")
    got = plans("1", "avx2")
    assert not [f for f, text in got.items() if WALK in text or "AVX-512" in text], got
