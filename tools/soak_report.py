"""The soak test's measurements and verdicts (tools/soak.py): the server's RSS and gauges sampled
over the trace, where its memory grew (smaps), the flatness verdict, and the summary and text
report of a run (the method is in soak.py's docstring)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from types import SimpleNamespace
from typing import Optional

from benchkit.host import vm_rss_kib
from benchkit.server import metrics_of
from benchkit.stats import percentile


def smaps_rss_kib(pid: int) -> dict:
    """{"start-end name": Rss KiB} of every mapping of the process that holds memory."""
    out, key = {}, None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 6)
                if "-" in head[0] and not head[0].endswith(":"):
                    key = head[0] + (" " + head[5].strip() if len(head) > 5 else "")
                elif head[0] == "Rss:" and key is not None and int(head[1]):
                    out[key] = int(head[1])
    except (OSError, ValueError, IndexError):
        return {}
    return out


def smaps_growth(before: dict, after: dict, top: int = 8) -> dict:
    """Where RSS went between two smaps_rss_kib() snapshots: the mappings that grew most."""
    diffs = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    grew = sorted(((d, k) for k, d in diffs.items() if d), reverse=True)
    return {"total_kib": sum(diffs.values()), "top": [{"mapping": k, "before_kib": before.get(k, 0),
                                                       "after_kib": after.get(k, 0), "delta_kib": d}
                                                      for d, k in grew[:top]]}


class Sampler(threading.Thread):
    """Every `every` seconds: (t since the trace's start, RSS KiB, running, waiting, kv usage)."""

    def __init__(self, pid: Optional[int], url: str, every: float, t0: float, stop: threading.Event):
        super().__init__(daemon=True, name="sampler")
        self.pid, self.srv, self.every, self.t0, self.stop = pid, SimpleNamespace(url=url), every, t0, stop
        self.samples: list = []
        self.smaps_at: Optional[float] = None  # when to snapshot /proc/<pid>/smaps (the warm-up's end)
        self.smaps_warm: dict = {}

    def sample(self) -> None:
        rss = vm_rss_kib(self.pid) if self.pid else None
        try:
            m = metrics_of(self.srv)
        except Exception as e:  # noqa: BLE001 - a failed scrape is recorded, not fatal
            m = {"error": f"{type(e).__name__}: {e}"}
        t = time.perf_counter() - self.t0
        self.samples.append({"t_s": round(t, 2), "rss_kib": rss, **m})
        if self.pid and self.smaps_at is not None and t >= self.smaps_at and not self.smaps_warm:
            self.smaps_warm = smaps_rss_kib(self.pid)

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.sample()


def rss_verdict(samples: list, duration: float, warmup_frac: float, tolerance: float) -> dict:
    """Flatness of the RSS samples taken after the warm-up (see the module docstring)."""
    cut = duration * warmup_frac
    post = [(s["t_s"], s["rss_kib"]) for s in samples if s["rss_kib"] and s["t_s"] >= cut and s["t_s"] <= duration]
    out = {"warmup_s": round(cut, 1), "tolerance": tolerance, "n_post_warmup": len(post)}
    if len(post) < 3:
        return {**out, "flat": False, "why": "fewer than 3 RSS samples after warm-up"}
    rss = [r for _, r in post]
    lo, hi = min(rss), max(rss)
    ts = [t for t, _ in post]
    mt, mr = sum(ts) / len(ts), sum(rss) / len(rss)
    var = sum((t - mt) ** 2 for t in ts)
    slope = sum((t - mt) * (r - mr) for t, r in post) / var if var else 0.0  # KiB/s
    spread = (hi - lo) / lo
    return {**out, "first_kib": rss[0], "min_kib": lo, "max_kib": hi, "last_kib": rss[-1],
            "median_kib": percentile(rss, 50), "spread": spread, "max_vs_first": (hi - rss[0]) / rss[0],
            "slope_mib_per_hour": slope * 3600 / 1024, "flat": spread <= tolerance}


def _stats_ms(values: list) -> dict:
    ms = [v * 1000.0 for v in values if v is not None]
    return {"n": len(ms), "p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms) if ms else None}


def summarize(results: list, samples: list, duration: float, args, idle: dict, server_exit) -> dict:
    errors: dict = {}
    for r in results:
        if not r.ok:
            e = errors.setdefault(r.error_kind, {"count": 0, "example": r.error, "kinds": Counter()})
            e["count"] += 1
            e["kinds"][r.kind] += 1
    for e in errors.values():
        e["kinds"] = dict(e["kinds"])
    n_errors = sum(e["count"] for e in errors.values())
    if idle.get("not_idle"):
        n_errors += 1
        errors["not_idle"] = {"count": 1, "example": f"after the trace: {idle['gauges']}", "kinds": {}}
    if server_exit not in (None, 0):
        n_errors += 1
        errors["server_exit"] = {"count": 1, "example": f"server exit status {server_exit}", "kinds": {}}
    done = [r for r in results if r.ok and r.e2e is not None]
    rss = rss_verdict(samples, duration, args.warmup_frac, args.rss_tolerance)
    return {
        "requests": len(results), "ok": sum(r.ok for r in results), "errors": n_errors, "errors_by_kind": errors,
        "by_kind": dict(Counter(r.kind for r in results)),
        "notes": dict(Counter(r.note for r in results if r.note)),
        "duration_s": duration, "requests_per_s": len(results) / duration if duration else None,
        "output_tokens": sum(r.output_tokens for r in results if r.ok),
        "e2e_ms": _stats_ms([r.e2e for r in done]),
        "ttft_ms": _stats_ms([r.ttft for r in results if r.ok and r.kind.endswith("_stream") and r.ttft is not None]),
        "idle_after": idle, "server_exit_status": server_exit, "rss": rss,
        "verdict": {"errors_zero": n_errors == 0, "rss_flat": rss["flat"]},
    }


def report_text(s: dict, samples: list, args) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.0f}"

    lines = [f"requests {s['requests']} ({s['requests_per_s']:.2f}/s over {s['duration_s']:.0f} s), "
             f"ok {s['ok']}, errors {s['errors']}, output tokens {s['output_tokens']}",
             "by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(s["by_kind"].items())),
             "notes: " + (", ".join(f"{k}: {v}" for k, v in sorted(s["notes"].items())) or "-")]
    for kind, e in s["errors_by_kind"].items():
        lines.append(f"  error {kind}: {e['count']} ({e['kinds']}) e.g. {e['example']}")
    for name in ("e2e_ms", "ttft_ms"):
        st = s[name]
        lines.append(f"{name[:-3].upper():5} n={st['n']} p50 {ms(st['p50'])} ms  p99 {ms(st['p99'])} ms  max {ms(st['max'])} ms")
    lines.append("RSS over time (t s: MiB, running/waiting, kv):")
    step = max(1, len(samples) // 20)
    for smp in samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else []):
        rss = "-" if not smp["rss_kib"] else f"{smp['rss_kib'] / 1024:.1f}"
        lines.append(f"  {smp['t_s']:8.1f}: {rss:>8} MiB  {smp.get('num_requests_running', '-')}/"
                     f"{smp.get('num_requests_waiting', '-')}  {smp.get('kv_cache_usage_perc', '-')}")
    r = s["rss"]
    if "spread" in r:
        lines.append(f"RSS after warm-up (t >= {r['warmup_s']} s, {r['n_post_warmup']} samples): min {r['min_kib'] / 1024:.1f} "
                     f"max {r['max_kib'] / 1024:.1f} first {r['first_kib'] / 1024:.1f} last {r['last_kib'] / 1024:.1f} MiB; "
                     f"spread (max-min)/min {100 * r['spread']:.2f} %; slope {r['slope_mib_per_hour']:+.1f} MiB/h")
    g = r.get("smaps_growth_after_warmup")
    if g:
        lines.append(f"mappings that grew from the warm-up's end to the trace's end (total {g['total_kib'] / 1024:+.1f} MiB):")
        for m in g["top"][:5]:
            lines.append(f"  {m['mapping']}: {m['before_kib']} -> {m['after_kib']} KiB ({m['delta_kib']:+d})")
    lines.append(f"VERDICT errors: {'PASS' if s['verdict']['errors_zero'] else 'FAIL'} ({s['errors']} errors)")
    lines.append(f"VERDICT rss flat within {100 * args.rss_tolerance:g} % after warm-up: "
                 f"{'PASS' if s['verdict']['rss_flat'] else 'FAIL'}" + (f" ({r['why']})" if "why" in r else
                                                                        f" (spread {100 * r['spread']:.2f} %)"))
    return "\n".join(lines)
