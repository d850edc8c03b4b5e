"""The engine's own cost per step: everything LLM.generate does around the C step, measured on a
model so small that the step itself is almost free (issue 41).

    python tools/bench_engine_cost.py [--batches 1 64] [--tokens 128] [--repeats 3] [--out FILE]
        [--modes sync async_output async_scheduling] [--model DIR_OR_GGUF] [--device cpu|nvidia]
        [--device-wait-us N]

The model is written here: a random Qwen2 of 2 layers, hidden 32, a 1,024-row vocabulary (f32,
safetensors written with numpy: no torch), with a byte-level BPE tokenizer of 1,024 ids trained
here (Qwen2's kind; its real vocabulary would make the lm_head the cost). For each batch size B, B
requests of a 16-token prompt each generate --tokens tokens greedily (ignore_eos) through one
LLM.generate call; the tool counts the engine's steps and times the runner's execute (the C
step and its argument marshalling) by wrapping it, and reports per output token at B = 1 and
per step at larger B:

  wall     the generate call's wall time
  execute  the time inside runner.execute (the core's step; tiny here)
  engine   wall - execute: scheduling, step inputs, sampling bookkeeping, detokenization,
           output processing (the figure issue 41 bounds: <= 100 us a token at B = 1,
           <= 700 us a step at B = 64, on a quiet machine)
  gc       the cyclic garbage collector's pauses in a run, the mean over the repeats (a full
           collection is rare, and as long as the objects it walks are many)
  longest  the longest gap between two steps' starts over the repeats (where such a pause shows)

--modes: the engine's step orders to measure, one LLM each, alternating repeat by repeat: sync
(the default), async_output (a step's outputs made while the next computes) and
async_scheduling (each step also planned while the one before computes). With either of the
last two, "engine" is the host time the steps did not hide.

Each repeat is a fresh generate on the same LLM after one untimed run of the same shape;
medians of the repeats, and the least engine time of them ("best": on a busy machine the figure
its load disturbs least). Prints a table and writes JSON with the machine (tools/benchkit/host.py).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import host  # noqa: E402

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 1024, 32, 2, 4, 2, 64


def write_tiny_model(path: Path, seed: int = 0) -> Path:
    """A random Qwen2 checkpoint of the sizes above, with its tokenizer."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    hd = HIDDEN // HEADS

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    t = {"model.embed_tokens.weight": w(VOCAB, HIDDEN), "model.norm.weight": np.ones(HIDDEN, np.float32),
         "lm_head.weight": w(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": np.ones(HIDDEN, np.float32),
                  p + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
                  p + "self_attn.q_proj.weight": w(HEADS * hd, HIDDEN), p + "self_attn.q_proj.bias": w(HEADS * hd),
                  p + "self_attn.k_proj.weight": w(KV_HEADS * hd, HIDDEN), p + "self_attn.k_proj.bias": w(KV_HEADS * hd),
                  p + "self_attn.v_proj.weight": w(KV_HEADS * hd, HIDDEN), p + "self_attn.v_proj.bias": w(KV_HEADS * hd),
                  p + "self_attn.o_proj.weight": w(HIDDEN, HEADS * hd),
                  p + "mlp.gate_proj.weight": w(FFN, HIDDEN), p + "mlp.up_proj.weight": w(FFN, HIDDEN),
                  p + "mlp.down_proj.weight": w(HIDDEN, FFN)})
    path.mkdir(parents=True, exist_ok=True)
    save_file(t, str(path / "model.safetensors"))
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": VOCAB, "hidden_size": HIDDEN,
           "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
           "num_key_value_heads": KV_HEADS, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu"}
    (path / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(path)
    return path


def write_tokenizer(path: Path) -> None:
    """A byte-level BPE of VOCAB ids (Qwen2's kind of tokenizer, trained here on the repository's
    README so that it has real merges), and its config: the real Qwen vocabulary would not fit."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    tok.train_from_iterator([text] * 4, trainer)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "bos_token": None}))


def measure(llm, batch: int, tokens: int, device_wait_s: float = 0.0) -> dict:
    """One timed generate of `batch` requests: wall, execute time and steps."""
    from llaisys import SamplingParams

    runner = llm.engine.runner
    spent, steps, starts = [0.0], [0], []
    real = runner.execute
    gc_s, gc_t0 = [0.0], [0.0]

    def gc_timer(phase, info):  # the cyclic garbage collector's pauses, all generations
        if phase == "start":
            gc_t0[0] = time.perf_counter()
        else:
            gc_s[0] += time.perf_counter() - gc_t0[0]

    def timed(step_input):
        t0 = time.perf_counter()
        starts.append(t0)
        try:
            res = real(step_input)
            if device_wait_s and step_input.n_tokens:
                time.sleep(device_wait_s)  # the GIL is released, as while a GPU step runs
            return res
        finally:
            spent[0] += time.perf_counter() - t0
            steps[0] += 1

    prompts = [[(37 * r + 11 * i) % 900 + 50 for i in range(16)] for r in range(batch)]
    params = SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0.0)
    runner.execute = timed
    gc.callbacks.append(gc_timer)
    try:
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params)
        wall = time.perf_counter() - t0
    finally:
        runner.execute = real
        gc.callbacks.remove(gc_timer)
    produced = sum(len(o.outputs[0].token_ids) for o in outs)
    gaps = [b - a for a, b in zip(starts, starts[1:])]  # step start to step start
    return {"wall_s": wall, "execute_s": spent[0], "steps": steps[0], "tokens": produced, "gc_s": gc_s[0],
            "max_step_s": max(gaps, default=0.0)}


def main(argv=None) -> int:
    from llaisys.engine.config import STEP_ORDERS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="kernel threads (the step is tiny: 1 avoids team wake-ups)")
    ap.add_argument("--modes", nargs="+", default=["sync"], choices=list(STEP_ORDERS),
                    help="the engine's step orders (one LLM each, alternating repeat by repeat); with the async "
                         "ones 'engine' is the host time the steps did not hide")
    ap.add_argument("--model", default=None,
                    help="a model to run instead of the tiny one (a directory or .gguf): the engine beside real steps")
    ap.add_argument("--device", default="cpu", choices=["cpu", "nvidia"])
    ap.add_argument("--device-wait-us", type=float, default=0.0,
                    help="a simulation: each step waits this long after its core call with the GIL released, as "
                         "the host does while a GPU step runs (0: off; labelled in the table and the JSON)")
    ap.add_argument("--kv-cache-memory", default="256MiB",
                    help="the KV pool (the tiny model's 256MiB: 131,072 blocks of 16 tokens, as many as a GPU's)")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="gc.freeze() once the engines are built, as `llaisys serve` does: the collector then "
                         "skips everything made at start-up")
    ap.add_argument("--out", default="bench_engine_cost.json")
    args = ap.parse_args(argv)
    from llaisys import LLM

    machine = host.machine()
    print(host.describe(machine), flush=True)
    rows = []
    modes = list(dict.fromkeys(args.modes))
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        model = args.model or str(write_tiny_model(Path(tmp) / "tiny"))
        llms = {a: stack.enter_context(LLM(model, threads=args.threads, max_num_seqs=max(args.batches),
                                           device=args.device, **STEP_ORDERS[a],
                                           kv_cache_memory=args.kv_cache_memory))
                for a in modes}
        if args.gc_freeze:
            gc.collect()
            gc.freeze()
        for b in args.batches:
            runs = {}
            for a in modes:
                measure(llms[a], b, args.tokens, args.device_wait_us / 1e6)  # untimed, the same shape
            for _ in range(args.repeats):
                for a in modes:
                    runs.setdefault(a, []).append(measure(llms[a], b, args.tokens, args.device_wait_us / 1e6))
            for a in modes:
                rows.append(summarize(b, a, runs[a]))
    what = f"model {args.model}" if args.model else f"tiny model ({LAYERS} layers, hidden {HIDDEN}, vocab {VOCAB})"
    wait = f", a simulated device wait of {args.device_wait_us:.0f} us a step" if args.device_wait_us else ""
    print(f"\nengine cost, {what} on {args.device}{wait}, {args.tokens} tokens a request, {args.threads} thread(s), "
          f"median of {args.repeats}")
    print("| batch | mode | per | wall us | execute us | engine us | best engine us | gc ms a run | "
          "longest step ms | steps |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['mode']} | {r['per']} | {r['wall_us']:.0f} | "
              f"{r['execute_us']:.0f} | {r['engine_us']:.0f} | {r['engine_us_best']:.0f} | {r['gc_ms']:.1f} | "
              f"{r['max_step_ms']:.2f} | {r['steps']} |")
    Path(args.out).write_text(json.dumps({"machine": machine, "args": vars(args), "rows": rows}, indent=1))
    print(f"wrote {args.out}")
    return 0


def summarize(b: int, mode: str, runs: list) -> dict:
    """One table row: the medians of one engine's repeats at batch b."""
    per = "token" if b == 1 else "step"
    unit = [r["tokens"] if b == 1 else r["steps"] for r in runs]
    return {"batch": b, "mode": mode, "per": per, "runs": runs,
            "wall_us": statistics.median(r["wall_s"] / u * 1e6 for r, u in zip(runs, unit)),
            "execute_us": statistics.median(r["execute_s"] / u * 1e6 for r, u in zip(runs, unit)),
            "engine_us": statistics.median((r["wall_s"] - r["execute_s"]) / u * 1e6 for r, u in zip(runs, unit)),
            # the least of the repeats: what a busy machine disturbs least
            "engine_us_best": min((r["wall_s"] - r["execute_s"]) / u * 1e6 for r, u in zip(runs, unit)),
            # the garbage collector's pauses in a run (their mean: a full collection is rare and long)
            "gc_ms": statistics.mean(r["gc_s"] for r in runs) * 1e3,
            "max_step_ms": max(r["max_step_s"] for r in runs) * 1e3,  # the longest gap between steps
            "steps": runs[0]["steps"]}


if __name__ == "__main__":
    sys.exit(main())
