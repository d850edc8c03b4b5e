"""Build llama.cpp, the benchmark peer, once per CPU kind, outside the repository.

    python tools/build_llama_cpp.py [--print-env]

What it builds, all under $LLAISYS_HOME/peers (default ~/.cache/llaisys/peers):
- the llama-cpp-python sdist (pinned below), fetched with `pip download` and unpacked;
- from the llama.cpp source vendored in it, one CMake build per CPU kind (`build-avx2`,
  `build-avx512`, `build-avx512bf16`, with `-noamx` on CPUs with AMX: see NO_AMX; -march=native
  code from one machine can fault on another): the shared libraries (libllama, libggml*),
  `llama-server` (llama.cpp's own HTTP server: parallel slots, continuous batching) and
  `llama-bench` and `llama-batched-bench` (its own C++ benchmarks, the cross-check in every
  sitting);
- a virtualenv `venv` with llama-cpp-python's Python package and its server extras, installed
  without its own copy of the native build (-DLLAMA_BUILD=OFF): at run time
  LLAMA_CPP_LIB_PATH points it at the libraries above, so the bindings, llama-cpp-python's
  server and llama-server all run the very same compiled llama.cpp.

The build compiles for about 20 minutes on 2 cores and is skipped when already done. It is a
benchmarking aid: nothing in llaisys' build, tests or CI runs it. --print-env prints the
paths as shell assignments (LLAMA_SERVER, LLAMA_CPP_PYTHON, LLAMA_CPP_LIB_PATH).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit.peer import ensure  # noqa: E402  (the peer's paths, build steps and description)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print-env", action="store_true", help="print the paths as shell assignments")
    args = ap.parse_args()
    info = ensure()
    if args.print_env:
        print(f"LLAMA_SERVER={info['server']}\nLLAMA_CPP_PYTHON={info['python']}\nLLAMA_CPP_LIB_PATH={info['lib_path']}")
    else:
        print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
