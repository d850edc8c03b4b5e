"""llama.cpp's own tokenization of test texts, as test data for our GGUF tokenizers: each text of
a llama.cpp vocabulary test file (.inp: texts separated by "\\n__ggml_vocab_test__\\n") encoded by
llama.cpp with a GGUF's vocabulary (no BOS, special tokens as text), one line of ids a text, in
the .out format of llama.cpp's own test files. Runs the peer's Python bindings
(tools/build_llama_cpp.py builds them):

    python tools/llama_cpp_tokenize.py MODEL.gguf TEXTS.inp OUT

(test/models/test_smollm2_real.py's ids were written so, from ggml-vocab-llama-bpe.gguf.inp.)"""

import argparse
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import sys, llama_cpp
model, inp, out = sys.argv[1:4]
sep = "\n__ggml_vocab_test__\n"
texts = open(inp, encoding="utf-8").read()
assert texts.endswith(sep), inp
m = llama_cpp.Llama(model, vocab_only=True, verbose=False)
with open(out, "w") as f:
    for t in texts[:-len(sep)].split(sep):
        f.write(" ".join(str(i) for i in m.tokenize(t.encode("utf-8"), add_bos=False, special=False)) + "\n")
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("texts", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchkit.peer import bindings_env, paths

    p = paths()
    if not p["python"].exists():
        sys.exit("the llama.cpp peer is not built: python tools/build_llama_cpp.py")
    subprocess.run([str(p["python"]), "-c", CHILD, str(a.model), str(a.texts), str(a.out)], check=True,
                   env=bindings_env({"lib_path": str(p["bin"])}))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
