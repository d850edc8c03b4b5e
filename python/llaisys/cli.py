"""The `llaisys` command: download, models, convert-gguf, export-gguf, generate, serve, info, smoke."""

from __future__ import annotations

import argparse
import sys
import time

from .cli_args import THREADS_HELP, add_quant_arguments
from .cli_info import add_info_parser
from .cli_models import add_convert_gguf_parser, add_download_parser, add_export_gguf_parser, add_models_parser


class HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to a flag's help once: not when the help already speaks of its
    default, and not for defaults that say nothing (None, False, an empty list)."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if "default" in text or d is None or d is False or d is argparse.SUPPRESS or d == []:
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            return f"{text} (default: %(default)s)"
        return text


def run_smoke(args) -> int:
    """Build check: load the library, run one op, print the version, SIMD path and threads."""
    import numpy as np

    import llaisys
    from llaisys import Tensor, ops, runtime

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.eye(3, dtype=np.float32)
    with Tensor.from_numpy(a) as ta, Tensor.from_numpy(w, "bf16") as tw, Tensor((2, 3)) as out:
        ops.linear(out, ta, tw)
        ok = np.array_equal(out.numpy(), a)
    print(f"libllaisys {llaisys.__version__}: {'ok' if ok else 'WRONG RESULT'} "
          f"(SIMD path {runtime.cpu_isa()}, {runtime.num_threads()} threads)")
    return 0 if ok else 1


def add_generate_parser(sub) -> None:
    from .models.hub import DEFAULT_MODEL

    p = sub.add_parser("generate", help="generate text offline (streams to stdout)",
                       description="Generate a completion for a prompt, or a chat answer with --chat. The text "
                                   "goes to stdout; token counts, time to first token and tokens/s to stderr.")
    p.add_argument("prompt", help="the prompt text ('-' reads standard input)")
    p.add_argument("--model", default=None, help="model directory, .gguf file or known name "
                                                  f"(default: {DEFAULT_MODEL}, downloaded on first use)")
    p.add_argument("--chat", action="store_true", help="treat the prompt as a user message (chat template)")
    p.add_argument("--system", default=None, help="system prompt (with --chat)")
    p.add_argument("--max-tokens", type=int, default=256, help="most tokens to generate")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep the tokens of this much "
                                                            "probability (1: all)")
    p.add_argument("--top-k", type=int, default=-1, help="keep only the k most likely tokens (-1: all)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed, for a repeatable sample "
                                                          "(default: a random one)")
    p.add_argument("--dtype", default=None, choices=["bf16", "f16", "f32"],
                   help="float weight dtype (default: the checkpoint's; f32 beside a GGUF's quantized weights)")
    add_quant_arguments(p)
    p.add_argument("--kv-layout", default="block", choices=["block", "slot"],
                   help="KV cache layout: paged blocks, or llama.cpp-style cells")
    from .engine.config import DEFAULT_KV_DTYPE, KV_DTYPES

    p.add_argument("--kv-dtype", default=DEFAULT_KV_DTYPE, choices=list(KV_DTYPES),
                   help="K/V storage dtype (default: %(default)s, chosen by measurement: doc/benchmarks.md)")
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.set_defaults(func=run_generate)


def _timing(start: float, first: float, end: float, completion_tokens: int) -> str:
    """'TTFT x s, y tok/s': time to the first token, and the decode rate after it (the whole
    generation's rate when there is only one token)."""
    ttft = (first if first is not None else end) - start
    if completion_tokens > 1 and first is not None and end > first:
        rate = (completion_tokens - 1) / (end - first)
    else:
        rate = completion_tokens / max(end - start, 1e-9)
    return f"TTFT {ttft:.2f} s, {rate:.1f} tok/s"


def run_generate(args) -> int:
    from .engine import LLM, SamplingParams

    text = sys.stdin.read() if args.prompt == "-" else args.prompt
    try:
        sp = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, seed=args.seed)
        prompt = text
        if args.chat:
            prompt = ([{"role": "system", "content": args.system}] if args.system else []) + [
                {"role": "user", "content": text}]
        with LLM(args.model, dtype=args.dtype, kv_layout=args.kv_layout, kv_dtype=args.kv_dtype, threads=args.threads, quant=args.quant,
                 quantize=args.quantize, batch_invariant=args.batch_invariant) as llm:
            last, first = None, None
            start = time.perf_counter()
            for out in llm.stream(prompt, sp):
                if first is None and out.outputs[0].token_ids:
                    first = time.perf_counter()
                sys.stdout.write(out.outputs[0].delta_text)
                sys.stdout.flush()
                last = out
            end = time.perf_counter()
            sys.stdout.write("\n")
            sys.stdout.flush()  # the text ends before the stderr line on a shared terminal
            if last is not None:
                u = last.usage
                print(f"[{u.prompt_tokens} prompt + {u.completion_tokens} completion tokens, "
                      f"finish: {last.outputs[0].finish_reason}; {_timing(start, first, end, u.completion_tokens)}]",
                      file=sys.stderr)
    except ValueError as e:
        print(f"llaisys generate: error: {e}", file=sys.stderr)
        return 2
    return 0


def add_serve_parser(sub) -> None:
    from .server.serve import add_serve_parser as add

    add(sub).set_defaults(func=run_serve)


def run_serve(args) -> int:
    """`llaisys serve`: in this process (server.serve), or on Ray Serve replicas with --ray (ray.cli)."""
    if args.ray:
        from .ray.cli import run_serve_ray

        return run_serve_ray(args)
    from .server.serve import run_serve as run_here

    return run_here(args)


def _subparsers(parser: argparse.ArgumentParser) -> list:
    """`parser` and every parser below it."""
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                out += _subparsers(child)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llaisys",
                                     description="llaisys: LLM inference for Qwen2, Llama, Qwen3 and Mistral models")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_download_parser(sub)
    add_models_parser(sub)
    add_convert_gguf_parser(sub)
    add_export_gguf_parser(sub)
    add_generate_parser(sub)
    add_serve_parser(sub)
    add_info_parser(sub)
    smoke = sub.add_parser("smoke", help="check that the library loads and computes (shows the SIMD path and threads)",
                           description="Check the build: load libllaisys, run one small matrix product and print "
                                       "the version, the SIMD path and the thread count it chose. Exits 0 when the "
                                       "result is right, 1 when it is wrong.")
    smoke.set_defaults(func=run_smoke)
    for p in _subparsers(parser):
        p.formatter_class = HelpFormatter
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
