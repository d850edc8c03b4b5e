"""KV cache dtype: accuracy against f32 KV and decode speed, per KV layout.

    python tools/bench_kv_dtype.py [--model NAME|DIR] [--kv-dtypes f32 f16 bf16 q8_0]
        [--layouts block slot] [--part accuracy speed] [--ctx1 2048] [--ctx16 512]
        [--steps 16] [--repeats 3] [--threads 2] [--out FILE]

Accuracy, on the parity prompts (test/parity/test_qwen05_greedy.py's five chats, 64 greedy
tokens each, ignore_eos), per layout and KV dtype, against f32 KV of the same layout:
- greedy tokens through the engine (LLMEngine over the one loaded model, all chats batched):
  chats whose 64 tokens are identical, and the agreement rate = tokens before each chat's first
  difference / all tokens;
- teacher-forced logits (one model step per chat over prompt + f32's continuation): the largest
  |logit - f32 KV's logit| over every generated position and the vocabulary, and how often the
  argmax differs.

Speed: decode tok/s through the model API (one llaisysModelStep per token, greedy rows as the
engine samples them), batch 1 at --ctx1 tokens of context and batch 16 at --ctx16 each. Each
(layout, dtype) cache is filled once by a real prefill (stdlib text, tools/perplexity.py),
then the repeats alternate configurations (A B C .. A B C): each repeat decodes --steps tokens
at the same positions (the slots are overwritten), so repeats do the same work. The 1-minute
load average is recorded beside each repeat: on a busy machine compare within a repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit.host import describe, machine  # noqa: E402
from perplexity import stdlib_text  # noqa: E402

BLOCK = 16
PREFILL_TOKENS = 2048  # most tokens of one prefill step
from benchkit.prompts import CHATS, NEW_TOKENS  # noqa: E402  (the parity prompts)


# ---- accuracy -------------------------------------------------------------------------------
def greedy_tokens(model, tokenizer, prompts: list, layout: str, kv_dtype: str) -> list:
    from llaisys.engine import EngineConfig, LLMEngine, SamplingParams
    from llaisys.engine.model_runner import CoreModelRunner

    cfg = EngineConfig(max_num_seqs=len(prompts), max_num_batched_tokens=2048, max_model_len=1024, num_blocks=64 *
                       len(prompts), block_size=BLOCK, kv_layout=layout)
    sp = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    with model.create_kv_cache(layout, n_slots=cfg.num_kv_slots, block_size=BLOCK, dtype=kv_dtype) as cache:
        engine = LLMEngine(cfg, CoreModelRunner(model, cache), tokenizer)
        for i, ids in enumerate(prompts):
            engine.add_request(str(i), ids, sp)
        done = {}
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    done[int(out.request_id)] = list(out.outputs[0].token_ids)
    return [done[i] for i in range(len(prompts))]


def forced_logits(model, prompt: list, new: list, layout: str, kv_dtype: str) -> np.ndarray:
    """[len(new), vocab] logits of the positions that predict new[0..], prompt + new fed at once."""
    full = prompt + new[:-1]
    n = len(full)
    n_slots = -(-n // BLOCK) * BLOCK
    kw = (dict(slot_mapping=np.arange(n), block_tables=np.arange(n_slots // BLOCK)[None, :], context_lens=[n])
          if layout == "block" else dict(seq_ids=[0]))
    with model.create_kv_cache(layout, n_slots=n_slots, block_size=BLOCK, dtype=kv_dtype) as cache:
        return model.step(cache, token_ids=full, positions=np.arange(n), query_start=[0, n],
                          sample_rows=np.arange(len(prompt) - 1, n), want_logits=True, **kw).logits


def accuracy(model, tokenizer, layouts, dtypes) -> list:
    prompts = [tokenizer.encode(tokenizer.apply_chat_template(c)) for c in CHATS]
    rows = []
    for layout in layouts:
        ref_tokens = greedy_tokens(model, tokenizer, prompts, layout, "f32")
        ref_logits = [forced_logits(model, p, t, layout, "f32") for p, t in zip(prompts, ref_tokens)]
        for dt in dtypes:
            toks = ref_tokens if dt == "f32" else greedy_tokens(model, tokenizer, prompts, layout, dt)
            prefix = [next((j for j, (a, b) in enumerate(zip(x, y)) if a != b), len(x))
                      for x, y in zip(toks, ref_tokens)]
            diff, flips, n_pos = 0.0, 0, 0
            for p, t, ref in zip(prompts, ref_tokens, ref_logits):
                got = ref if dt == "f32" else forced_logits(model, p, t, layout, dt)
                diff = max(diff, float(np.abs(got - ref).max()))
                flips += int((got.argmax(1) != ref.argmax(1)).sum())
                n_pos += len(got)
            rows.append({"layout": layout, "kv_dtype": dt, "chats_identical": sum(x == y for x, y in
                                                                                   zip(toks, ref_tokens)),
                         "chats": len(prompts), "agreement": sum(prefix) / sum(len(t) for t in ref_tokens),
                         "first_difference": prefix, "max_abs_logit_diff": diff, "argmax_flips": flips,
                         "positions": n_pos})
            r = rows[-1]
            print(f"accuracy {layout:5} {dt:4}: {r['chats_identical']}/{r['chats']} chats identical, agreement "
                  f"{r['agreement']:.3f} (first differences {prefix}), max |dlogit| {diff:.4f}, "
                  f"argmax flips {flips}/{n_pos}", flush=True)
    return rows


# ---- speed ----------------------------------------------------------------------------------
class DecodeCase:
    """One (layout, dtype, batch, context) cache, prefilled once; decode() times `steps`
    greedy steps at positions ctx .. ctx + steps - 1 of every row, the same each call."""

    def __init__(self, model, layout: str, dtype: str, rows: list, steps: int):
        self.model, self.layout, self.dtype, self.steps = model, layout, dtype, steps
        self.n, self.ctx = len(rows), len(rows[0])
        self.per_row = -(-(self.ctx + steps) // BLOCK)  # blocks a row owns (BLOCK layout)
        n_slots = self.n * self.per_row * BLOCK
        self.cache = model.create_kv_cache(layout, n_slots=n_slots, block_size=BLOCK, dtype=dtype)
        self.tables = np.arange(self.n * self.per_row, dtype=np.int32).reshape(self.n, self.per_row)
        self.first = []  # [n] the token each row decodes first
        group = max(1, PREFILL_TOKENS // self.ctx)  # rows per prefill step: a bounded workspace
        for r0 in range(0, self.n, group):
            res = self._step(list(range(r0, min(self.n, r0 + group))), rows[r0:r0 + group], self.ctx)
            self.first += res.token_ids.tolist()

    def _step(self, rows: list, toks: list, ctx_after: int):
        from llaisys.models.model import RowSampling

        q = len(toks[0])
        pos = np.concatenate([np.arange(ctx_after - q, ctx_after)] * len(rows))
        starts = np.arange(len(rows) + 1, dtype=np.int32) * q
        if self.layout == "block":
            tables = self.tables[rows]
            slots = np.concatenate([tables[i][pos[:q] // BLOCK] * BLOCK + pos[:q] % BLOCK for i in range(len(rows))])
            kw = dict(slot_mapping=slots, block_tables=tables, context_lens=[ctx_after] * len(rows))
        else:
            kw = dict(seq_ids=np.asarray(rows, np.int32))  # [n_rows]
        res = self.model.step(self.cache, token_ids=np.concatenate(toks), positions=pos, query_start=starts,
                              sample_rows=starts[1:] - 1, sampling=[RowSampling()] * len(rows),
                              want_logprobs=False, **kw)
        if res is None:
            raise RuntimeError("no KV room")
        return res

    def decode(self) -> float:
        """tok/s over `steps` steps of all rows."""
        if self.layout == "slot":
            for r in range(self.n):
                self.cache.seq_rm(r, self.ctx, -1)
        nxt = list(self.first)
        t = time.perf_counter()
        for s in range(self.steps):
            res = self._step(list(range(self.n)), [[x] for x in nxt], self.ctx + s + 1)
            nxt = res.token_ids.tolist()
        return self.n * self.steps / (time.perf_counter() - t)

    def close(self) -> None:
        self.cache.close()


def speed(model, tokenizer, layouts, dtypes, ctx1: int, ctx16: int, steps: int, repeats: int) -> dict:
    ids = tokenizer.encode(stdlib_text())
    need = max(ctx1, 16 * ctx16)
    if len(ids) < need:
        raise ValueError(f"ctx: the text has {len(ids)} tokens, fewer than {need}")
    cases = {}
    for batch, ctx in ((1, ctx1), (16, ctx16)):
        rows = [ids[i * ctx:(i + 1) * ctx] for i in range(batch)]
        for layout in layouts:
            for dt in dtypes:
                t = time.perf_counter()
                cases[(batch, ctx, layout, dt)] = DecodeCase(model, layout, dt, rows, steps)
                print(f"prefilled batch {batch} x {ctx} {layout} {dt} in {time.perf_counter() - t:.0f} s", flush=True)
    out = {f"b{b}/ctx{c}/{lay}/{dt}": [] for (b, c, lay, dt) in cases}
    loads = []
    try:
        for case in cases.values():  # untimed warm-up of each
            case.decode()
        for rep in range(repeats):
            loads.append(os.getloadavg()[0])
            for key, case in cases.items():
                out["b{}/ctx{}/{}/{}".format(*key)].append(case.decode())
            print(f"repeat {rep + 1} (load {loads[-1]:.2f}): " + ", ".join(
                f"{k} {v[-1]:.1f}" for k, v in out.items()), flush=True)
    finally:
        for case in cases.values():
            case.close()
    return {"tok_s": out, "load_avg_1m": loads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--kv-dtypes", nargs="+", default=["f32", "f16", "bf16", "q8_0"])
    ap.add_argument("--layouts", nargs="+", default=["block", "slot"], choices=("block", "slot"))
    ap.add_argument("--part", nargs="+", default=["accuracy", "speed"], choices=("accuracy", "speed"))
    ap.add_argument("--ctx1", type=int, default=2048, help="context of the batch-1 decode")
    ap.add_argument("--ctx16", type=int, default=512, help="context of each row of the batch-16 decode")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench_kv_dtype.json")
    args = ap.parse_args()

    from llaisys import runtime
    from llaisys.models import hub
    from llaisys.models.model import Model
    from llaisys.models.checkpoint import load_checkpoint

    runtime.set_num_threads(args.threads)
    m = machine()
    print(describe(m), flush=True)
    path = hub.resolve_model(args.model)  # a GGUF file on CPUs whose default format it is
    loaded, tokenizer = load_checkpoint(path)
    model = Model(loaded)
    res = {"tool": "bench_kv_dtype", "machine": m, "model": str(path), "threads": args.threads,
           "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:])}
    with model:
        if "accuracy" in args.part:
            res["accuracy"] = accuracy(model, tokenizer, args.layouts, args.kv_dtypes)
        if "speed" in args.part:
            res["speed"] = speed(model, tokenizer, args.layouts, args.kv_dtypes, args.ctx1, args.ctx16, args.steps,
                                 args.repeats)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
