/* A mixture-of-experts model through the general model ABI from plain C99: the MoE params,
 * 3-D expert weights set by (kind, layer) and by name, and the sparse FFN's arithmetic, checked
 * against a dense model: when every expert holds the dense MLP's weights and the top-k weights
 * are renormalised (they sum to 1), the routed sum equals the dense MLP whatever the router
 * chooses, so both models' logits must agree. Then the MoE contradictions, each refused with a
 * status and a message naming the field. */
#include <llaisys.h>
#include <llaisys/kv_cache.h>
#include <llaisys/models/model.h>
#include <llaisys/sampler.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

enum { L = 3, H = 16, I = 24, NH = 4, NKV = 2, HD = 8, V = 40, E = 4, K = 2, BS = 16, T = 7 };

static unsigned long long rng;
static float frand(void) { /* uniform in [-0.5, 0.5) */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
}

static llaisysModelParams_t params(int moe) {
    llaisysModelParams_t p = llaisysModelDefaultParams();
    p.arch = moe ? LLAISYS_ARCH_QWEN3_MOE : LLAISYS_ARCH_QWEN3;
    p.dtype = LLAISYS_DTYPE_F32;
    p.n_layers = L, p.hidden_size = H, p.intermediate_size = I;
    p.n_heads = NH, p.n_kv_heads = NKV, p.head_dim = HD, p.vocab_size = V;
    p.max_position_embeddings = 64;
    p.qk_norm = 1, p.tie_word_embeddings = 1;
    if (moe) p.n_experts = E, p.n_experts_per_tok = K, p.moe_intermediate_size = I, p.norm_topk_prob = 1;
    return p;
}

static void fill(float *x, size_t n, float bias) {
    size_t i;
    for (i = 0; i < n; i++) x[i] = frand() + bias;
}

static llaisysStatus_t set(llaisysModel_t m, const char *name, llaisysWeightKind_t kind, int32_t layer,
                           const float *data, size_t ndim, size_t d0, size_t d1, size_t d2) {
    size_t shape[3] = {d0, d1, d2};
    return llaisysModelSetWeight(m, name, kind, layer, data, LLAISYS_DTYPE_F32, shape, ndim);
}

/* The same random weights into a dense and a MoE model: each expert of the MoE one is the dense
 * MLP (the layer-1 experts set by name); its routers are random. */
static void set_both(llaisysModel_t dense, llaisysModel_t moe) {
    static float embed[V * H], norm[H], q[NH * HD * H], k[NKV * HD * H], v[NKV * HD * H], o[H * NH * HD];
    static float qn[HD], kn[HD], gate[I * H], up[I * H], down[H * I], router[E * H];
    static float egate[E * I * H], eup[E * I * H], edown[E * H * I];
    llaisysModel_t both[2] = {dense, moe};
    int32_t l;
    int j, e;
    rng = 4242;
    fill(embed, V * H, 0), fill(norm, H, 1);
    for (j = 0; j < 2; j++) {
        EXPECT(set(both[j], NULL, LLAISYS_WEIGHT_EMBED, -1, embed, 2, V, H, 0) == LLAISYS_STATUS_OK, "embed");
        EXPECT(set(both[j], NULL, LLAISYS_WEIGHT_FINAL_NORM, -1, norm, 1, H, 0, 0) == LLAISYS_STATUS_OK, "norm");
    }
    for (l = 0; l < L; l++) {
        fill(norm, H, 1), fill(q, NH * HD * H, 0), fill(k, NKV * HD * H, 0), fill(v, NKV * HD * H, 0);
        fill(o, H * NH * HD, 0), fill(qn, HD, 1), fill(kn, HD, 1);
        fill(gate, I * H, 0), fill(up, I * H, 0), fill(down, H * I, 0), fill(router, E * H, 0);
        for (e = 0; e < E; e++) {
            memcpy(egate + e * I * H, gate, sizeof gate), memcpy(eup + e * I * H, up, sizeof up);
            memcpy(edown + e * H * I, down, sizeof down);
        }
        for (j = 0; j < 2; j++) {
            llaisysModel_t m = both[j];
            EXPECT(set(m, NULL, LLAISYS_WEIGHT_ATTN_NORM, l, norm, 1, H, 0, 0) == LLAISYS_STATUS_OK, "attn norm");
            EXPECT(set(m, NULL, LLAISYS_WEIGHT_MLP_NORM, l, norm, 1, H, 0, 0) == LLAISYS_STATUS_OK, "mlp norm");
            EXPECT(set(m, NULL, LLAISYS_WEIGHT_Q, l, q, 2, NH * HD, H, 0) == LLAISYS_STATUS_OK, "q");
            EXPECT(set(m, NULL, LLAISYS_WEIGHT_K, l, k, 2, NKV * HD, H, 0) == LLAISYS_STATUS_OK, "k");
            EXPECT(set(m, NULL, LLAISYS_WEIGHT_V, l, v, 2, NKV * HD, H, 0) == LLAISYS_STATUS_OK, "v");
            EXPECT(set(m, NULL, LLAISYS_WEIGHT_O, l, o, 2, H, NH * HD, 0) == LLAISYS_STATUS_OK, "o");
            EXPECT(set(m, NULL, LLAISYS_WEIGHT_Q_NORM, l, qn, 1, HD, 0, 0) == LLAISYS_STATUS_OK, "q norm");
            EXPECT(set(m, NULL, LLAISYS_WEIGHT_K_NORM, l, kn, 1, HD, 0, 0) == LLAISYS_STATUS_OK, "k norm");
        }
        EXPECT(set(dense, NULL, LLAISYS_WEIGHT_GATE, l, gate, 2, I, H, 0) == LLAISYS_STATUS_OK, "gate");
        EXPECT(set(dense, NULL, LLAISYS_WEIGHT_UP, l, up, 2, I, H, 0) == LLAISYS_STATUS_OK, "up");
        EXPECT(set(dense, NULL, LLAISYS_WEIGHT_DOWN, l, down, 2, H, I, 0) == LLAISYS_STATUS_OK, "down");
        EXPECT(set(moe, NULL, LLAISYS_WEIGHT_ROUTER, l, router, 2, E, H, 0) == LLAISYS_STATUS_OK, "router");
        if (l == 1) {
            EXPECT(set(moe, "model.layers.1.mlp.experts.gate_proj.weight", LLAISYS_WEIGHT_EMBED, 0, egate, 3, E, I,
                       H) == LLAISYS_STATUS_OK, "expert gate by name");
            EXPECT(set(moe, "model.layers.1.mlp.experts.up_proj.weight", LLAISYS_WEIGHT_EMBED, 0, eup, 3, E, I,
                       H) == LLAISYS_STATUS_OK, "expert up by name");
            EXPECT(set(moe, "model.layers.1.mlp.experts.down_proj.weight", LLAISYS_WEIGHT_EMBED, 0, edown, 3, E,
                       H, I) == LLAISYS_STATUS_OK, "expert down by name");
        } else {
            EXPECT(set(moe, NULL, LLAISYS_WEIGHT_EXPERT_GATE, l, egate, 3, E, I, H) == LLAISYS_STATUS_OK, "e gate");
            EXPECT(set(moe, NULL, LLAISYS_WEIGHT_EXPERT_UP, l, eup, 3, E, I, H) == LLAISYS_STATUS_OK, "e up");
            EXPECT(set(moe, NULL, LLAISYS_WEIGHT_EXPERT_DOWN, l, edown, 3, E, H, I) == LLAISYS_STATUS_OK, "e down");
        }
    }
}

/* Logits [T, V] of a T-token prefill, every token a sample row. */
static llaisysStatus_t prefill(llaisysModel_t m, float *logits) {
    llaisysKVCache_t cache = NULL;
    int64_t tokens[T] = {1, 7, 22, 5, 39, 12, 3}, pos[T], slots[T], ids[T];
    int32_t qs[2] = {0, T}, table[1] = {0}, ctx[1] = {T}, rows[T];
    llaisysSamplingParams_t sp[T];
    llaisysBatch_t b;
    llaisysStepOutput_t out;
    llaisysStatus_t s;
    int i;
    s = llaisysModelCreateKVCache(m, LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_DTYPE_F32, BS, BS, &cache);
    if (s != LLAISYS_STATUS_OK) return s;
    for (i = 0; i < T; i++) pos[i] = i, slots[i] = i, rows[i] = i, sp[i] = llaisysSamplingDefaultParams();
    memset(&b, 0, sizeof b);
    b.n_tokens = T, b.token_ids = tokens, b.positions = pos, b.n_seqs = 1, b.query_start = qs;
    b.slot_mapping = slots, b.block_tables = table, b.max_blocks = 1, b.context_lens = ctx;
    b.n_sample = T, b.sample_rows = rows;
    memset(&out, 0, sizeof out);
    out.sample.token_ids = ids;
    out.logits = logits;
    s = llaisysModelStep(m, cache, &b, sp, &out);
    EXPECT(llaisysKVCacheDestroy(cache) == LLAISYS_STATUS_OK, "destroy cache");
    return s;
}

static void test_identical_experts_equal_the_dense_mlp(void) {
    llaisysModelParams_t pd = params(0), pm = params(1), got;
    llaisysModel_t dense = NULL, moe = NULL;
    static float ld[T * V], lm[T * V];
    size_t missing = 0, i;
    char first[128];
    float diff = 0, spread = 0;
    EXPECT(llaisysModelCreate(&pd, LLAISYS_DEVICE_CPU, 0, &dense) == LLAISYS_STATUS_OK, "create dense");
    EXPECT(llaisysModelCreate(&pm, LLAISYS_DEVICE_CPU, 0, &moe) == LLAISYS_STATUS_OK, "create moe");
    EXPECT(llaisysModelMissingWeights(moe, &missing, first, sizeof first) == LLAISYS_STATUS_OK && missing > 0 &&
               strcmp(first, "model.norm.weight") == 0, "a fresh MoE model lists its slots as missing");
    set_both(dense, moe);
    EXPECT(llaisysModelMissingWeights(moe, &missing, NULL, 0) == LLAISYS_STATUS_OK && missing == 0, "all set");
    got = llaisysModelDefaultParams();
    EXPECT(llaisysModelGetParams(moe, &got) == LLAISYS_STATUS_OK && got.n_experts == E &&
               got.n_experts_per_tok == K && got.layer_sparse && got.layer_sparse[0] == 1 && got.layer_sparse[2] == 1,
           "GetParams returns the MoE fields, every layer sparse (layer_sparse NULL)");
    EXPECT(prefill(dense, ld) == LLAISYS_STATUS_OK && prefill(moe, lm) == LLAISYS_STATUS_OK, "both step");
    for (i = 0; i < T * V; i++) {
        diff = fabsf(ld[i] - lm[i]) > diff ? fabsf(ld[i] - lm[i]) : diff;
        spread = fabsf(ld[i]) > spread ? fabsf(ld[i]) : spread;
    }
    EXPECT(spread > 0.1f && diff < 1e-4f, "identical experts, renormalised: the MoE logits are the dense ones");
    EXPECT(llaisysModelDestroy(dense) == LLAISYS_STATUS_OK && llaisysModelDestroy(moe) == LLAISYS_STATUS_OK,
           "destroy");
}

static void expect_refused(const llaisysModelParams_t *p, const char *field) {
    llaisysModel_t m = (llaisysModel_t)1;
    EXPECT(llaisysModelCreate(p, LLAISYS_DEVICE_CPU, 0, &m) == LLAISYS_STATUS_INVALID_ARGUMENT && m == NULL &&
               strstr(llaisysGetLastError(), field) != NULL,
           field);
}

static void test_bad_moe_params(void) {
    llaisysModelParams_t p;
    uint8_t sparse[L] = {1, 2, 1};
    p = params(1), p.n_experts_per_tok = E + 1;
    expect_refused(&p, "n_experts_per_tok");
    p = params(1), p.moe_intermediate_size = 0;
    expect_refused(&p, "moe_intermediate_size");
    p = params(1), p.norm_topk_prob = 3;
    expect_refused(&p, "norm_topk_prob");
    p = params(1), p.layer_sparse = sparse;
    expect_refused(&p, "layer_sparse[1]");
    p = params(0), p.n_experts_per_tok = 2;
    expect_refused(&p, "n_experts is 0");
    /* a caller built before the MoE fields: struct_size stops before n_experts, the bytes past
     * it are ignored and the model is dense */
    p = params(1), p.struct_size = offsetof(llaisysModelParams_t, n_experts);
    {
        llaisysModel_t m = NULL;
        llaisysModelParams_t got = llaisysModelDefaultParams();
        EXPECT(llaisysModelCreate(&p, LLAISYS_DEVICE_CPU, 0, &m) == LLAISYS_STATUS_OK, "an older struct");
        EXPECT(llaisysModelGetParams(m, &got) == LLAISYS_STATUS_OK && got.n_experts == 0 && got.layer_sparse == NULL,
               "an older struct makes a dense model");
        EXPECT(llaisysModelDestroy(m) == LLAISYS_STATUS_OK, "destroy");
    }
}

int main(void) {
    test_identical_experts_equal_the_dense_mlp();
    test_bad_moe_params();
    return finish();
}
