"""The CPU tunables that must be chosen before libllaisys loads, per CPU kind.

How OpenMP's idle threads wait (`OMP_WAIT_POLICY`, `GOMP_SPINCOUNT`) is read once, when the
OpenMP runtime loads with the library, and the quantized kernels' prefetch distance
(`LLAISYS_QUANT_PREFETCH`) once, at the first kernel. Both depend on the CPU kind, not on its
vendor: on a 2-vCPU AMD Zen 3 a bounded spin decodes faster than sleeping both idle and beside
busy processes; on 2-vCPU Zen 4s the hosts disagreed under load (sleeping won 2.7x on one, a
spin 1.4x on the other), and Zen 4 takes the shortest spin that kept the idle speed. So they are
chosen here, from this order:

1. the environment: any of WAIT_VARS set (or LLAISYS_QUANT_PREFETCH) is kept as it is;
2. WAIT_TABLE, rows measured on each CPU kind seen (the prefetch's own table is in the library,
   src/utils/cpu_isa.cpp; `library_prefetch_measured` mirrors which kinds it covers);
3. for a CPU in neither, a calibration (`calibrate`): a few child processes (llaisys/calibrate_child.py)
   time decode-shaped parallel regions under each choice (tens of milliseconds of kernels each, ~1 s of
   process start in all), once per CPU model; the result is cached in
   $LLAISYS_HOME/tuning/<cpu key>.json. LLAISYS_CALIBRATE=0 skips it (then: a 20k spin, no
   prefetch).

`choose` returns what to set and why; the loader sets it around the load only, so it never
reaches child processes, and `llaisys info` prints the reasons.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
PREFETCH_VAR = "LLAISYS_QUANT_PREFETCH"
SPIN = {"GOMP_SPINCOUNT": "20000"}  # GNU OpenMP (what the build links); libomp ignores it
SPIN_SHORT = {"GOMP_SPINCOUNT": "1000"}  # libgomp's own spin when threads outnumber CPUs
PASSIVE = {"OMP_WAIT_POLICY": "passive"}
CALIBRATION_VERSION = 2  # bump when what the calibration measures changes: old caches are redone
WAIT_TOLERANCE = 1.03  # passive's time / the spin's time at most this: passive
PREFETCH_GAIN = 0.97   # prefetch's time / none's at most this: prefetch
# the distances tried, a short and a long one: 2048 was measured best on Intel Xeon and AMD Zen 4,
# and on AMD Zen 3 768 to 2048 bytes gained alike (+19% decode), 512 half of that
PREFETCH_CANDIDATES = (512, 2048)


@dataclass(frozen=True)
class CpuId:
    vendor: str = ""  # vendor_id: GenuineIntel, AuthenticAMD
    family: int = 0   # display family, as /proc/cpuinfo prints it ("cpu family")
    model: int = 0    # display model
    name: str = ""    # model name
    avx512: bool = False  # avx512f among the flags

    @property
    def key(self) -> str:
        """File-name-safe identity of the kind: vendor, family and model."""
        return f"{self.vendor or 'unknown'}-{self.family:x}h-{self.model:x}h" + ("-avx512" if self.avx512 else "")

    def __str__(self) -> str:
        return f"{self.name or self.vendor or 'unknown CPU'} ({self.vendor} family {self.family:x}h model {self.model:x}h)"


def cpu_id(cpuinfo: Optional[str] = None) -> CpuId:
    """The first processor of /proc/cpuinfo (or of the text given); CpuId() where there is none."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return CpuId()
    fields: dict = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor only
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())

    def number(k: str) -> int:
        try:
            return int(fields.get(k, "0"), 0)
        except ValueError:
            return 0

    return CpuId(fields.get("vendor_id", ""), number("cpu family"), number("model"), fields.get("model name", ""),
                 "avx512f" in fields.get("flags", "").split())


@dataclass(frozen=True)
class WaitRow:
    vendor: str
    families: tuple  # display families, inclusive (lo, hi)
    avx512: Optional[bool]  # None: either
    env: dict
    reason: str  # "<kind>: <the measurement>", one line
    models: Optional[tuple] = None  # display models, inclusive (lo, hi); None: any


# How idle threads wait, per CPU kind, as measured (tools/bench_contention.py, 0.5B bf16,
# single-stream decode, 2 threads on 2 vCPUs, idle and beside 2 busy processes, tok/s). The
# first matching row wins; a kind without a row is calibrated.
WAIT_TABLE = (
    WaitRow("AuthenticAMD", (0x1A, 0x1A), None, SPIN,
            "AMD Zen 5: a 20k spin won, idle 100.5 vs 76.1 tok/s for passive (0.5B Q4_K_M GGUF), beside 2 "
            "busy processes a wash: 47.7 vs 30.4 in one sitting, 16.8 vs 55.3 in the next (EPYC, 2 vCPUs, "
            "2026-11-29)"),
    WaitRow("AuthenticAMD", (0x19, 0x19), True, SPIN_SHORT,
            "AMD Zen 4 (AVX-512): a 1k spin, measured on 2-vCPU EPYCs: on 2026-11-30 it won idle and beside 2 busy "
            "processes alike (1.5B Q4_K_M 32.2 vs 26.6 tok/s for passive idle, 16.2 vs 11.1 busy; 0.5B 78.0 vs 64.9 "
            "and 38.1 vs 27.3; a 20k spin the same within 11%); an outside tester's Zen 4 (2026-11-27) had passive "
            "ahead beside busy processes (16.1 vs 5.9 for a 20k spin), so the shortest spin that kept the idle gain"),
    WaitRow("AuthenticAMD", (0x19, 0x19), False, SPIN,
            "AMD Zen 3: a 20k spin won, idle 18.1 vs 17.0 tok/s for passive, beside 2 busy processes "
            "9.8 vs 7.1 (EPYC Milan, 2 vCPUs, 2026-11-28)"),
    WaitRow("AuthenticAMD", (0x17, 0x17), None, SPIN,
            "AMD Zen 1/2: a 20k spin won, idle 17.8 vs 15.6 tok/s for passive, beside 2 busy processes "
            "10.2 vs 7.6 (EPYC Naples, 2 vCPUs, 2026-11-24)"),
    WaitRow("GenuineIntel", (0x06, 0x06), True, SPIN,
            "Intel Skylake-SP (model 55h, which Cascade Lake shares): a 20k spin won idle, 1.5B Q4_K_M 11.7 vs "
            "9.9 tok/s for passive, 0.5B 28.4 vs 23.8; beside 2 busy processes a wash, 4.7 vs 5.1 and 13.8 vs 13.2 "
            "(Xeon VM, 2 vCPUs, 2026-12-01, medians of 3)", models=(0x55, 0x55)),
)


def table_wait(cpu: CpuId) -> Optional[WaitRow]:
    for row in WAIT_TABLE:
        if cpu.vendor == row.vendor and row.families[0] <= cpu.family <= row.families[1] \
                and (row.models is None or row.models[0] <= cpu.model <= row.models[1]) \
                and (row.avx512 is None or row.avx512 == cpu.avx512):
            return row
    return None


def library_prefetch_measured(cpu: CpuId) -> bool:
    """Whether the library's prefetch table (kQuantPrefetchTable in src/utils/cpu_isa.cpp) has
    a measured row for this kind: Intel, AMD family 19h (Zen 3, Zen 4) and AVX-512 AMD after it.
    Zen 1/2 (17h) are not measured: they are calibrated."""
    if cpu.vendor == "GenuineIntel":
        return True
    if cpu.vendor == "AuthenticAMD":
        return cpu.family == 0x19 or (cpu.family > 0x19 and cpu.avx512)
    return False


@dataclass
class Choice:
    env: dict = field(default_factory=dict)      # what the loader sets around the load
    wait: str = ""      # why the wait policy is what it is
    prefetch: str = ""  # why, where this module chose the prefetch ("" when the library's table did)


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    return Path(environ.get("LLAISYS_HOME") or "~/.cache/llaisys").expanduser() / "tuning"


def choose(cpu: CpuId, environ: Mapping[str, str] = os.environ, calibrate=None) -> Choice:
    """What to set before the load for `cpu`, and why. `calibrate(cpu, environ)` -> dict (the
    calibration's cached result) is called only for kinds without a table row."""
    ch = Choice()
    mine = [f"{k}={environ[k]}" for k in WAIT_VARS if k in environ]
    need_wait = not mine
    need_prefetch = PREFETCH_VAR not in environ and not library_prefetch_measured(cpu)
    if mine:
        ch.wait = "from the environment: " + " ".join(mine)
    elif (row := table_wait(cpu)) is not None:
        ch.env.update(row.env)
        ch.wait = row.reason
        need_wait = False
    if not (need_wait or need_prefetch):
        return ch
    result = None
    if environ.get("LLAISYS_CALIBRATE", "1") != "0":
        result = (calibrate or load_or_calibrate)(cpu, environ)
    if need_wait:
        if result:
            ch.env.update(result["wait_env"])
            ch.wait = f"{cpu.key}: calibrated: {result['wait_why']}"
        else:
            ch.env.update(SPIN)
            ch.wait = f"{cpu.key}: not measured and not calibrated (LLAISYS_CALIBRATE=0): a 20k spin"
    if need_prefetch and result:
        ch.env[PREFETCH_VAR] = str(result["prefetch"])
        ch.prefetch = f"{cpu.key}: calibrated: {result['prefetch_why']}"
    return ch


def load_or_calibrate(cpu: CpuId, environ: Mapping[str, str] = os.environ) -> Optional[dict]:
    """The cached calibration of this kind, else a new one (written to the cache); None when the
    calibration could not run (then the defaults stand and nothing is cached)."""
    path = cache_dir(environ) / f"{cpu.key}.json"
    try:
        got = json.loads(path.read_text())
        if got.get("version") == CALIBRATION_VERSION and got.get("cpu") == cpu.key:
            return got
    except (OSError, ValueError, AttributeError):
        pass  # absent or damaged: measure again
    print(f"llaisys: calibrating the thread wait policy and prefetch for {cpu} (once; cached in {path})",
          file=sys.stderr, flush=True)
    result = calibrate(environ)
    if result is None:
        return None
    result.update(version=CALIBRATION_VERSION, cpu=cpu.key, name=cpu.name,
                  date=time.strftime("%Y-%m-%d", time.gmtime()))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, path)
    except OSError as e:  # a read-only home still gets this process's result
        print(f"llaisys: could not cache the calibration: {e}", file=sys.stderr)
    return result


def run_child(env: dict, mode: str, timeout: float = 60.0) -> Optional[float]:
    """Seconds per call of one calibration child (llaisys/calibrate_child.py) under `env`, None if it failed."""
    try:
        proc = subprocess.run([sys.executable, "-m", "llaisys.calibrate_child", mode], env=env,
                              capture_output=True, text=True, timeout=timeout)
        return float(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def calibrate(environ: Mapping[str, str] = os.environ) -> Optional[dict]:
    """Time the candidates in child processes; the choices and the figures behind them, or
    None when a child failed (the caller keeps the defaults). The comparisons:

    - sleeping (OMP_WAIT_POLICY=passive) against a 20k spin: passive is kept when it costs at most
      WAIT_TOLERANCE of the idle speed, since beside busy processes it is the one that does not
      collapse (a spinning team holds the cores its late thread needs);
    - each PREFETCH_CANDIDATES software prefetch against none: the fastest is kept when it is
      PREFETCH_GAIN faster."""
    base = {k: v for k, v in environ.items() if k not in WAIT_VARS and k != PREFETCH_VAR}
    base["LLAISYS_CALIBRATE"] = "0"  # a child never calibrates itself
    user_wait = {k: environ[k] for k in WAIT_VARS if k in environ}
    wait_known = bool(user_wait)
    spin = {**base, **(user_wait or SPIN), PREFETCH_VAR: "0"}
    t_spin = run_child(spin, "decode")
    if t_spin is None:
        return None
    # the host's load when measured: a busy host favours sleeping (delete the cache file to redo)
    out: dict = {"seconds_per_pass": {"spin_20k": t_spin}, "load_average": list(os.getloadavg())}
    out["wait_env"] = dict(user_wait or SPIN)
    out["wait_why"] = "kept from the environment"
    if not wait_known:
        t_passive = run_child({**base, **PASSIVE, PREFETCH_VAR: "0"}, "decode")
        if t_passive is None:
            return None
        out["seconds_per_pass"]["passive"] = t_passive
        ratio = t_passive / t_spin
        if ratio <= WAIT_TOLERANCE:
            out["wait_env"] = dict(PASSIVE)
            out["wait_why"] = (f"passive (idle cost {100 * (ratio - 1):+.1f}%, at most {100 * (WAIT_TOLERANCE - 1):.0f}%"
                               " allowed; it keeps its speed beside busy processes)")
        else:
            out["wait_why"] = f"a 20k spin (passive cost {100 * (ratio - 1):.1f}% idle)"
    for n in PREFETCH_CANDIDATES:
        t_pf = run_child({**base, **(user_wait or SPIN), PREFETCH_VAR: str(n)}, "decode")
        if t_pf is None:
            return None
        out["seconds_per_pass"][f"prefetch_{n}"] = t_pf
    best = min(PREFETCH_CANDIDATES, key=lambda n: out["seconds_per_pass"][f"prefetch_{n}"])
    gain = out["seconds_per_pass"][f"prefetch_{best}"] / t_spin
    out["prefetch"] = best if gain <= PREFETCH_GAIN else 0
    out["prefetch_why"] = (f"{best} B ({100 * (1 - gain):.1f}% faster than none)" if out["prefetch"]
                           else f"none (the best distance, {best} B, changed a pass by {100 * (gain - 1):+.1f}%)")
    return out
