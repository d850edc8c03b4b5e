"""llama.cpp's logits at every position of a prompt of token ids, and its greedy continuation,
printed as JSON: the reference that tests llaisys's reading of a GGUF file against llama.cpp's.

    LLAMA_CPP_LIB_PATH=<peer bin> <peer venv python> tools/llama_cpp_logits.py FILE.gguf '[ids]' [N_GEN]

Runs in the peer's own virtualenv (tools/build_llama_cpp.py builds both) and imports nothing from
llaisys. f32 KV cache, 2 threads, one sequence; prints {"logits": [[vocab] per position],
"greedy": [N_GEN ids]}.
"""

from __future__ import annotations

import ctypes
import json
import sys


def main() -> None:
    import llama_cpp as L
    import numpy as np

    path, ids = sys.argv[1], [int(i) for i in json.loads(sys.argv[2])]
    n_gen = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if not 0 < len(ids) + n_gen <= 512:
        raise SystemExit("prompt plus generated tokens must be 1..512")
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    if not model:
        raise SystemExit(f"llama.cpp could not load {path}")
    vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512
    cp.n_seq_max = 1
    cp.type_k = cp.type_v = L.GGML_TYPE_F32
    cp.n_threads = cp.n_threads_batch = 2
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit("llama.cpp could not create a context")
    batch = L.llama_batch_init(512, 0, 1)

    def run(toks: list, p0: int, every: bool) -> list:
        batch.n_tokens = len(toks)
        for i, t in enumerate(toks):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p0 + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = every or i == len(toks) - 1
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc}")
        rows = range(len(toks)) if every else [len(toks) - 1]
        return [np.ctypeslib.as_array(ctypes.cast(L.llama_get_logits_ith(ctx, i), ctypes.POINTER(ctypes.c_float)),
                                      shape=(vocab,)).copy() for i in rows]

    logits = run(ids, 0, True)
    greedy, nxt, pos = [], int(logits[-1].argmax()), len(ids)
    for _ in range(n_gen):
        greedy.append(nxt)
        nxt = int(run([nxt], pos, False)[0].argmax())
        pos += 1
    print(json.dumps({"logits": [row.tolist() for row in logits], "greedy": greedy}))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
