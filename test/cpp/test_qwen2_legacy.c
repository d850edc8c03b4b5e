/* A C99 program written only against the deprecated llaisysQwen2* API (include/llaisys/models/
 * qwen2.h), as programs built before the general model ABI were: it must keep working now that
 * those functions are wrappers over the one decoder. Creates a small random Qwen2, sets every
 * weight by its HF name, makes a KV cache, runs a prefill and a decode step, and checks the
 * statuses, that the sampled ids are in range, and that a second identical run gives the same
 * ids. It uses nothing the old qwen2.h lacked, so it compiles against either header. */
#include <llaisys.h>
#include <llaisys/kv_cache.h>
#include <llaisys/models/qwen2.h>
#include <llaisys/sampler.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

enum { L = 2, H = 16, I = 24, NH = 4, NKV = 2, HD = 4, V = 50, BS = 16, N_BLOCKS = 4, PROMPT = 5 };

static unsigned long long rng = 12345;
static float frand(void) { /* uniform in [-0.5, 0.5) */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
}

static void set(llaisysQwen2Model_t m, const char *name, size_t rows, size_t cols) {
    size_t shape[2] = {rows, cols}, n = rows * (cols ? cols : 1), i;
    float *data = malloc(n * sizeof(float));
    for (i = 0; i < n; i++) data[i] = frand();
    EXPECT(llaisysQwen2ModelSetWeight(m, name, data, LLAISYS_DTYPE_F32, shape, cols ? 2 : 1) == LLAISYS_STATUS_OK,
           name);
    free(data);
}

static llaisysQwen2Model_t make_model(void) {
    llaisysQwen2Meta_t meta;
    char name[96];
    int l;
    llaisysQwen2Model_t m;
    memset(&meta, 0, sizeof meta);
    meta.dtype = LLAISYS_DTYPE_F32;
    meta.n_layers = L, meta.hidden_size = H, meta.intermediate_size = I;
    meta.n_heads = NH, meta.n_kv_heads = NKV, meta.head_dim = HD, meta.vocab_size = V;
    meta.max_position_embeddings = 128, meta.rms_norm_eps = 1e-6f, meta.rope_theta = 10000.0f;
    meta.tie_word_embeddings = 0;
    m = llaisysQwen2ModelCreate(&meta, LLAISYS_DEVICE_CPU, 0);
    EXPECT(m != NULL, "create");
    if (!m) return NULL;
    rng = 12345; /* the same weights every time */
    set(m, "model.embed_tokens.weight", V, H);
    set(m, "model.norm.weight", H, 0);
    set(m, "lm_head.weight", V, H);
    for (l = 0; l < L; l++) {
#define LAYER(suffix, rows, cols)                                          \
    sprintf(name, "model.layers.%d.%s", l, suffix);                      \
    set(m, name, rows, cols)
        LAYER("input_layernorm.weight", H, 0);
        LAYER("self_attn.q_proj.weight", NH * HD, H);
        LAYER("self_attn.k_proj.weight", NKV * HD, H);
        LAYER("self_attn.v_proj.weight", NKV * HD, H);
        LAYER("self_attn.q_proj.bias", NH * HD, 0);
        LAYER("self_attn.k_proj.bias", NKV * HD, 0);
        LAYER("self_attn.v_proj.bias", NKV * HD, 0);
        LAYER("self_attn.o_proj.weight", H, NH * HD);
        LAYER("post_attention_layernorm.weight", H, 0);
        LAYER("mlp.gate_proj.weight", I, H);
        LAYER("mlp.up_proj.weight", I, H);
        LAYER("mlp.down_proj.weight", H, I);
#undef LAYER
    }
    return m;
}

/* Prefill PROMPT tokens, then decode the sampled one; the two sampled ids into ids[2]. */
static void run(llaisysQwen2Model_t m, int64_t ids[2]) {
    llaisysKVCache_t cache = llaisysQwen2ModelCreateKVCache(m, LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_DTYPE_F32,
                                                            N_BLOCKS * BS, BS);
    int64_t tokens[PROMPT] = {3, 14, 15, 9, 26}, positions[PROMPT], slots[PROMPT];
    int32_t query_start[2] = {0, PROMPT}, tables[N_BLOCKS] = {2, 0, 1, 3}, ctx[1] = {PROMPT}, sample[1] = {PROMPT - 1};
    llaisysSamplingParams_t greedy = llaisysSamplingDefaultParams();
    llaisysBatch_t b;
    llaisysStepOutput_t out;
    int i;
    ids[0] = ids[1] = -1;
    EXPECT(cache != NULL, "create KV cache");
    if (!cache) return;
    for (i = 0; i < PROMPT; i++) positions[i] = i, slots[i] = tables[0] * BS + i;
    memset(&b, 0, sizeof b);
    b.n_tokens = PROMPT, b.token_ids = tokens, b.positions = positions;
    b.n_seqs = 1, b.query_start = query_start;
    b.slot_mapping = slots, b.block_tables = tables, b.max_blocks = N_BLOCKS, b.context_lens = ctx;
    b.n_sample = 1, b.sample_rows = sample;
    memset(&out, 0, sizeof out);
    out.sample.token_ids = &ids[0];
    EXPECT(llaisysQwen2ModelStep(m, cache, &b, &greedy, &out) == LLAISYS_STATUS_OK, "prefill step");
    EXPECT(ids[0] >= 0 && ids[0] < V, "prefill id in range");

    /* decode: one token at position PROMPT */
    if (ids[0] >= 0 && ids[0] < V) {
        int64_t tok = ids[0], pos = PROMPT, slot = tables[0] * BS + PROMPT;
        int32_t qs[2] = {0, 1}, ctx2[1] = {PROMPT + 1}, row[1] = {0};
        b.n_tokens = 1, b.token_ids = &tok, b.positions = &pos, b.query_start = qs;
        b.slot_mapping = &slot, b.context_lens = ctx2, b.sample_rows = row;
        out.sample.token_ids = &ids[1];
        EXPECT(llaisysQwen2ModelStep(m, cache, &b, &greedy, &out) == LLAISYS_STATUS_OK, "decode step");
        EXPECT(ids[1] >= 0 && ids[1] < V, "decode id in range");
    }
    llaisysKVCacheDestroy(cache);
}

int main(void) {
    int64_t first[2], second[2];
    size_t missing = 99;
    llaisysQwen2Model_t m = make_model(), again;
    if (!m) return finish();
    EXPECT(llaisysQwen2ModelMissingWeights(m, &missing, NULL, 0) == LLAISYS_STATUS_OK && missing == 0,
           "every weight set");
    run(m, first);
    run(m, second);
    EXPECT(first[0] == second[0] && first[1] == second[1], "a second run on a fresh cache gives the same ids");
    again = make_model();
    run(again, second);
    EXPECT(first[0] == second[0] && first[1] == second[1], "a second model with the same weights gives the same ids");

    /* misuse: a status and a message, never an abort */
    {
        size_t shape[1] = {H + 1};
        float w[H + 1] = {0};
        EXPECT(llaisysQwen2ModelSetWeight(m, "model.norm.weight", w, LLAISYS_DTYPE_F32, shape, 1) ==
                   LLAISYS_STATUS_SHAPE_MISMATCH, "wrong shape refused");
        EXPECT(llaisysQwen2ModelSetWeight(m, "model.layers.9.mlp.up_proj.weight", w, LLAISYS_DTYPE_F32, shape, 1) ==
                   LLAISYS_STATUS_INVALID_ARGUMENT && strstr(llaisysGetLastError(), "unknown") != NULL,
               "unknown name refused");
    }
    /* as old callers did: Destroy's result ignored (it was void; the program compiles either way) */
    llaisysQwen2ModelDestroy(again);
    llaisysQwen2ModelDestroy(m);
    printf("sampled ids: %lld %lld\n", (long long)first[0], (long long)first[1]);
    return finish();
}
