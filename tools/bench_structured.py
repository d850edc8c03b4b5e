"""Cost of structured output: decode tok/s of JSON-schema-constrained requests against the same
requests unconstrained, at batch 1 and 16 on the 0.5B (greedy, one engine, runs alternated).

A decode step is one in which every request of the batch is past its prompt and still running;
its tok/s is batch / step time. Constrained steps also pay the grammar masks (llguidance,
timed separately: `mask ms/step`); their greedy rows keep the lm_head screen, over the allowed
ids only (doc/architecture.md, "Greedy screen"). Prints a table and writes JSON (--json).

    python tools/bench_structured.py [--model DIR] [--batches 1 16] [--tokens 48] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string"},
    "steps": {"type": "array", "items": {"type": "object", "properties": {
        "action": {"type": "string"}, "minutes": {"type": "integer"}}, "required": ["action", "minutes"]}}},
    "required": ["title", "steps"]}
QUESTIONS = ["a pancake recipe", "how to change a tyre", "planting a tree", "a morning routine",
             "making tea", "cleaning a bike", "writing a resume", "packing for a trip"]


def _timed_masks(stats: dict):
    """Wrap Matcher.mask to add its wall time to stats['mask_s']; returns the undo."""
    from llaisys.engine import structured_matcher

    orig = structured_matcher.Matcher.mask

    def mask(self):
        t = time.perf_counter()
        try:
            return orig(self)
        finally:
            stats["mask_s"] += time.perf_counter() - t

    structured_matcher.Matcher.mask = mask
    return lambda: setattr(structured_matcher.Matcher, "mask", orig)


def run(llm, batch: int, tokens: int, constrained: bool, tag: str) -> dict:
    """Decode step times of one batch; {'tok_s', 'steps', 'mask_ms_per_step'}."""
    from llaisys.engine import SamplingParams
    from llaisys.engine.structured_spec import StructuredSpec

    spec = StructuredSpec.json_schema(SCHEMA) if constrained else None
    sp = SamplingParams(max_tokens=tokens, ignore_eos=True, structured=spec)
    eng = llm.engine
    for i in range(batch):
        q = QUESTIONS[i % len(QUESTIONS)]
        ids = llm.tokenizer.apply_chat_template([{"role": "user", "content": f"Give {q} as JSON steps."}],
                                                tokenize=True)
        eng.add_request(f"{tag}-{i}", ids, sp)
    stats = {"mask_s": 0.0}
    undo = _timed_masks(stats)
    times, masks = [], []
    try:
        while eng.has_unfinished_requests():
            reqs = list(eng.scheduler.requests.values())
            decoding = len(reqs) == batch and all(r.num_computed_tokens >= r.num_prompt_tokens for r in reqs)
            m0, t0 = stats["mask_s"], time.perf_counter()
            eng.step()
            if decoding:
                times.append(time.perf_counter() - t0)
                masks.append(stats["mask_s"] - m0)
    finally:
        undo()
    step = statistics.median(times)
    return {"tok_s": batch / step, "steps": len(times), "step_ms": step * 1e3, "best_step_ms": min(times) * 1e3,
            "mask_ms_per_step": 1e3 * statistics.median(masks)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model dir (default: qwen2.5-coder-0.5b-instruct)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    from llaisys.engine import LLM
    from llaisys.models import hub

    model = args.model or str(hub.resolve_model("qwen2.5-coder-0.5b-instruct"))
    llm = LLM(model, max_num_seqs=max(args.batches), kv_cache_memory=256 << 20)
    t = time.perf_counter()
    llm.engine.structured.warm()
    warm_s = time.perf_counter() - t
    run(llm, 1, 4, True, "warmup-c")  # compile the grammar, fault the weights in
    run(llm, 1, 4, False, "warmup-f")
    rows = []
    for b in args.batches:
        free, cons = [], []
        for r in range(args.repeats):  # alternated, so drift in machine load hits both
            free.append(run(llm, b, args.tokens, False, f"f{b}-{r}"))
            cons.append(run(llm, b, args.tokens, True, f"c{b}-{r}"))
        f = statistics.median(x["tok_s"] for x in free)
        c = statistics.median(x["tok_s"] for x in cons)
        rows.append({"batch": b, "free_tok_s": f, "constrained_tok_s": c, "cost_pct": 100 * (1 - c / f),
                     "mask_ms_per_step": statistics.median(x["mask_ms_per_step"] for x in cons),
                     "free_step_ms": statistics.median(x["step_ms"] for x in free),
                     "constrained_step_ms": statistics.median(x["step_ms"] for x in cons),
                     # the fastest step of all runs: less of the machine's other load in it
                     "free_best_ms": min(x["best_step_ms"] for x in free),
                     "constrained_best_ms": min(x["best_step_ms"] for x in cons),
                     "decode_steps": [x["steps"] for x in cons]})
    llm.close()
    print(f"tokenizer -> llguidance: {warm_s:.1f} s (once per process)")
    print(f"{'batch':>5} {'free tok/s':>11} {'json tok/s':>11} {'cost':>7} {'mask ms/step':>13} {'free ms':>8} "
          f"{'json ms':>8} {'best free/json ms':>18}")
    for r in rows:
        print(f"{r['batch']:>5} {r['free_tok_s']:>11.2f} {r['constrained_tok_s']:>11.2f} {r['cost_pct']:>6.1f}% "
              f"{r['mask_ms_per_step']:>13.2f} {r['free_step_ms']:>8.1f} {r['constrained_step_ms']:>8.1f} "
              f"{r['free_best_ms']:>8.1f}/{r['constrained_best_ms']:<8.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"model": model, "tokens": args.tokens, "tokenizer_build_s": warm_s, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
