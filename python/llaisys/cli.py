"""The `llaisys` command: download, convert-gguf, generate, serve, smoke."""

from __future__ import annotations

import argparse
import sys

from .cli_models import add_convert_gguf_parser, add_download_parser, add_export_gguf_parser


def run_smoke(args) -> int:
    """Build check: load the library, run one op, print the version."""
    import numpy as np

    import llaisys
    from llaisys import Tensor, ops

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.eye(3, dtype=np.float32)
    with Tensor.from_numpy(a) as ta, Tensor.from_numpy(w, "bf16") as tw, Tensor((2, 3)) as out:
        ops.linear(out, ta, tw)
        ok = np.array_equal(out.numpy(), a)
    print(f"libllaisys {llaisys.__version__}: {'ok' if ok else 'WRONG RESULT'}")
    return 0 if ok else 1


def add_generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="generate text offline (streams to stdout)",
                       description="Generate a completion for a prompt, or a chat answer with --chat.")
    p.add_argument("prompt", help="the prompt text ('-' reads standard input)")
    p.add_argument("--model", default=None, help="model directory or known name (default: the default model)")
    p.add_argument("--chat", action="store_true", help="treat the prompt as a user message (chat template)")
    p.add_argument("--system", default=None, help="system prompt (with --chat)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=-1)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dtype", default=None, choices=["bf16", "f16", "f32"], help="weight dtype override")
    p.add_argument("--kv-layout", default="block", choices=["block", "slot"])
    p.set_defaults(func=run_generate)


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
        with LLM(args.model, dtype=args.dtype, kv_layout=args.kv_layout) as llm:
            last = None
            for out in llm.stream(prompt, sp):
                sys.stdout.write(out.outputs[0].delta_text)
                sys.stdout.flush()
                last = out
            sys.stdout.write("\n")
            if last is not None:
                u = last.usage
                print(f"[{u.prompt_tokens} prompt + {u.completion_tokens} completion tokens, "
                      f"finish: {last.outputs[0].finish_reason}]", file=sys.stderr)
    except ValueError as e:
        print(f"llaisys generate: error: {e}", file=sys.stderr)
        return 2
    return 0


def add_serve_parser(sub) -> None:
    from .server.serve import add_serve_parser as add

    add(sub)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="llaisys",
                                     description="llaisys: LLM inference for Qwen2, Llama, Qwen3 and Mistral models")
    sub = parser.add_subparsers(dest="command", required=True)
    add_download_parser(sub)
    add_convert_gguf_parser(sub)
    add_export_gguf_parser(sub)
    add_generate_parser(sub)
    add_serve_parser(sub)
    smoke = sub.add_parser("smoke", help="check that the library loads and computes")
    smoke.set_defaults(func=run_smoke)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
