"""The `llaisys` command: download, convert-gguf, generate, smoke (and serve, later)."""

from __future__ import annotations

import argparse
import sys

from .cli_models import add_convert_gguf_parser, add_download_parser


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="llaisys", description="llaisys: LLM inference for Qwen2-family models")
    sub = parser.add_subparsers(dest="command", required=True)
    add_download_parser(sub)
    add_convert_gguf_parser(sub)
    smoke = sub.add_parser("smoke", help="check that the library loads and computes")
    smoke.set_defaults(func=run_smoke)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
