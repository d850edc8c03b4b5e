"""`llaisys info`: what this installation is and what it will use.

The library version and path, Python, the CPU and the SIMD flags the kernels care about,
the ISA path, prefetch distance and thread count the library chose, the devices, and the
cached models with their sizes. Reads /proc/cpuinfo where it exists; loads no model.
"""

from __future__ import annotations

import os
import platform
import sys

# CPU flags (as /proc/cpuinfo spells them) that decide which kernels run
SIMD_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16")


def add_info_parser(sub) -> None:
    p = sub.add_parser("info", help="show the library, CPU features, ISA path, threads, devices and cached models",
                       description="What this installation is and what it will use: library version, CPU "
                                   "features, the SIMD path and thread count chosen, devices, cached models.")
    p.set_defaults(func=run_info)


def cpu_description(cpuinfo: str) -> tuple:
    """(model name, set of flags) from the text of /proc/cpuinfo ('' and an empty set if absent)."""
    model, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, flags


def _read_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _wait_policy() -> str:
    """How the kernels' idle OpenMP threads wait, and who chose it (libllaisys/cpu_tuning.py)."""
    from llaisys import libllaisys

    why = libllaisys.TUNING.wait
    if libllaisys.WAIT_APPLIED:
        chosen = " ".join(f"{k}={v}" for k, v in libllaisys.WAIT_APPLIED.items())
        how = "idle threads sleep at once" if "OMP_WAIT_POLICY" in libllaisys.WAIT_APPLIED else \
            "idle threads spin briefly, then sleep"
        return f"{how} ({chosen}, set by llaisys as it loaded): {why}"
    return why


def _linear() -> str:
    """The quantized linear's plan, a line per GGUF format (layout, int8 kernel, crossover, float
    path), continuation lines indented under the first."""
    from llaisys import runtime

    lines = [runtime.quant_plan(f) for f in runtime.QUANT_FORMATS]
    if any("float path" in line and "int8" in line for line in lines):  # a finite crossover
        lines.append("(serve/generate --batch-invariant: int8 at every batch size, so answers do not depend on the "
                     "load or the prefix cache)")
    return "\n          ".join(lines)


def _prefetch() -> str:
    """The quantized kernels' prefetch distance and why (a calibration's reason where it chose)."""
    from llaisys import libllaisys, runtime

    n, why = runtime.quant_prefetch()
    return f"{n} B ahead in the quantized kernels ({libllaisys.TUNING.prefetch or why})"


def info_lines() -> list:
    """The report, one string per line."""
    import llaisys
    from llaisys import DeviceType, runtime
    from llaisys.models import hub, hub_cache

    model, flags = cpu_description(_read_cpuinfo())
    have = [f for f in SIMD_FLAGS if f in flags]
    lack = [f for f in SIMD_FLAGS if f not in flags]
    forced = os.environ.get("LLAISYS_ISA")
    nvidia = runtime.device_count(DeviceType.NVIDIA)
    lines = [
        f"llaisys   {llaisys.__version__}  (library {llaisys._LIB._name})",
        f"python    {platform.python_version()}  ({sys.executable})",
        f"cpu       {model or platform.machine()}, {os.cpu_count()} logical cores",
        f"simd      {' '.join(have) or 'none of ' + ' '.join(SIMD_FLAGS)}"
        + (f"  (not: {' '.join(lack)})" if have and lack else ""),
        f"isa       {runtime.cpu_isa()}  "
        + (f"(forced by LLAISYS_ISA={forced})" if forced else "(the best this CPU has; LLAISYS_ISA forces a lower one)"),
        f"amx       {'yes: quantized prefill and batches run on AMX tiles (LLAISYS_AMX=0 turns it off)' if runtime.cpu_amx() else 'no'}",
        f"vnni      {'yes: quantized weights run on vpdpbusd (avx512_vnni or avx_vnni; LLAISYS_AVX_VNNI=0 turns the second off)' if runtime.cpu_vnni() else 'no'}"
        f"  -> a bare model name runs {hub.default_quant()}",
        f"linear    {_linear()}",
        f"prefetch  {_prefetch()}",
        f"threads   {runtime.num_threads()}  "
        + (f"(OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}; " if os.environ.get("OMP_NUM_THREADS") else "(")
        + "llaisys serve/generate --threads N, LLM(threads=N))",
        f"openmp    {_wait_policy()}",
        f"devices   cpu" + (f", nvidia x{nvidia}" if nvidia else
                            "  (nvidia: none; the library is built without CUDA or no GPU is visible)"),
    ]
    found = hub_cache.entries()
    lines.append(f"models    {hub.cache_root()}" + ("" if found else "  (empty: llaisys download NAME)"))
    width = max((len(e.name) for e in found), default=0)
    for e in found:
        lines.append(f"  {e.name:{width}}  {e.kind:7} {hub_cache.human(e.size):>9}")
    if found:
        lines.append(f"  {'total':{width}}  {'':7} {hub_cache.human(sum(e.size for e in found)):>9}")
    return lines


def run_info(args) -> int:
    print("\n".join(info_lines()))
    return 0
