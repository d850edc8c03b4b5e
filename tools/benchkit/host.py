"""What every benchmark table records about the machine it ran on (standard library only).

The build VMs change CPU between sessions (AVX-512 with BF16 and VNNI on some, AVX2 only on
others), so each figure carries the CPU model, the SIMD flags that pick our kernels and the
peer's, the core count and the load when it started.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import time
from pathlib import Path

# the flags that choose a kernel in llaisys or in ggml
SIMD_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
              "amx_bf16", "amx_int8")


def _cpuinfo() -> dict:
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())  # the first processor's
    except OSError:
        pass
    return info


def cpu_model() -> str:
    return _cpuinfo().get("model name") or platform.processor() or "unknown"


def cpu_flag_list() -> list:
    """Every flag /proc/cpuinfo lists for the first processor, in its order (empty where there is none)."""
    return _cpuinfo().get("flags", "").split()


def cpu_flag_set() -> set:
    return set(cpu_flag_list())


def cpu_flags() -> list:
    """The flags of SIMD_FLAGS this CPU has, in that order."""
    have = cpu_flag_set()
    return [f for f in SIMD_FLAGS if f in have]


def cpu_kind(flags: set | None = None) -> str:
    """avx512bf16 / avx512 / avx2 / generic: the tier a table belongs to, and the tier a
    -march=native build of the llama.cpp peer depends on."""
    flags = cpu_flag_set() if flags is None else flags
    if "avx512_bf16" in flags:
        return "avx512bf16"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "generic"


def llaisys_isa() -> str | None:
    """The SIMD path llaisys picks in this process (LLAISYS_ISA may force one)."""
    try:
        from llaisys.runtime import cpu_isa
        return cpu_isa()
    except (ImportError, OSError):  # a peer's interpreter has no llaisys
        return None


def llaisys_amx() -> bool | None:
    """Whether llaisys runs the quantized float path on AMX tiles in this process (LLAISYS_AMX=0
    or LLAISYS_ISA below avx512bf16 turn it off)."""
    try:
        from llaisys.runtime import cpu_amx
        return cpu_amx()
    except (ImportError, OSError, AttributeError):
        return None


def gpu_model() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def thp() -> dict:
    """The host's transparent-huge-page modes (the bracketed choice of each sysfs file), which
    decide whether anonymous memory (llaisys' weights, llama.cpp's with --no-mmap) gets 2 MiB
    pages: "always", "madvise" (only where the program asks) or "never"."""
    out = {}
    for name in ("enabled", "defrag"):
        try:
            text = Path(f"/sys/kernel/mm/transparent_hugepage/{name}").read_text()
            out[name] = text.split("[", 1)[1].split("]", 1)[0] if "[" in text else text.strip()
        except (OSError, IndexError):
            out[name] = None
    return out


def anon_huge_kib(pid: int) -> int | None:
    """AnonHugePages of a process, in KiB (smaps_rollup): how much of its memory sits in 2 MiB pages."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def vm_rss_kib(pid: int) -> int | None:
    """VmRSS of a process, in KiB (/proc/<pid>/status); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def machine() -> dict:
    return {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "cpu": cpu_model(), "cpu_kind": cpu_kind(),
            "cpu_flags": cpu_flags(), "cores": os.cpu_count(), "llaisys_isa": llaisys_isa(),
            "llaisys_amx": llaisys_amx(), "thp": thp(),
            "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def describe(m: dict) -> str:
    """One line for the top of a printed table."""
    return (f"{m['date_utc']} UTC, {m['cpu']} ({m['cores']} CPUs; {' '.join(m['cpu_flags'])}), "
            f"llaisys ISA path {m['llaisys_isa']}{' + AMX' if m.get('llaisys_amx') else ''}, "
            f"THP {(m.get('thp') or {}).get('enabled')}, load {m['load_avg_1m']:.2f}")


@contextlib.contextmanager
def env_var(name: str, value):
    """os.environ[name] = value (None: without it) inside, as it was after: what a child process
    started inside inherits."""
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
