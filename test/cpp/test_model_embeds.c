/* llaisysModelStepEmbeds from plain C99 (include/llaisys/models/model.h): some tokens of a step
 * given as input embedding rows instead of ids. A tiny random Qwen2-shaped f32 model with a tied
 * embedding; rows equal to the embedding table's rows of the ids must give bit-identical logits
 * to the id step, whichever tokens are embedded (their token_ids are set out of the vocabulary:
 * ignored). Then each malformed llaisysBatchEmbeds_t, refused with its status and a message naming
 * the field, leaving the cache as it was; NULL embeds is llaisysModelStep. */
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

enum { L = 2, H = 16, I = 24, NH = 4, NKV = 2, HD = 4, V = 40, BS = 16, T = 7 };

static const int64_t TOKENS[T] = {1, 7, 22, 5, 39, 12, 3};
static float embed[V * H];

static unsigned long long rng = 99;
static float frand(void) { /* uniform in [-0.5, 0.5) */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
}

static void fill(float *x, size_t n, float bias) {
    size_t i;
    for (i = 0; i < n; i++) x[i] = frand() + bias;
}

static void set(llaisysModel_t m, llaisysWeightKind_t kind, int32_t layer, size_t d0, size_t d1, float bias) {
    static float buf[V * H + I * H];
    size_t shape[2] = {d0, d1};
    fill(buf, d0 * (d1 ? d1 : 1), bias);
    if (kind == LLAISYS_WEIGHT_EMBED) memcpy(embed, buf, sizeof embed);
    EXPECT(llaisysModelSetWeight(m, NULL, kind, layer, buf, LLAISYS_DTYPE_F32, shape, d1 ? 2 : 1) ==
               LLAISYS_STATUS_OK,
           "set weight");
}

static llaisysModel_t make_model(void) {
    llaisysModelParams_t p = llaisysModelDefaultParams();
    llaisysModel_t m = NULL;
    size_t missing = 1;
    int32_t l;
    p.arch = LLAISYS_ARCH_QWEN2, p.dtype = LLAISYS_DTYPE_F32;
    p.n_layers = L, p.hidden_size = H, p.intermediate_size = I;
    p.n_heads = NH, p.n_kv_heads = NKV, p.head_dim = HD, p.vocab_size = V;
    p.max_position_embeddings = 64, p.tie_word_embeddings = 1;
    EXPECT(llaisysModelCreate(&p, LLAISYS_DEVICE_CPU, 0, &m) == LLAISYS_STATUS_OK, "create");
    set(m, LLAISYS_WEIGHT_EMBED, -1, V, H, 0);
    set(m, LLAISYS_WEIGHT_FINAL_NORM, -1, H, 0, 1);
    for (l = 0; l < L; l++) {
        set(m, LLAISYS_WEIGHT_ATTN_NORM, l, H, 0, 1), set(m, LLAISYS_WEIGHT_MLP_NORM, l, H, 0, 1);
        set(m, LLAISYS_WEIGHT_Q, l, NH * HD, H, 0), set(m, LLAISYS_WEIGHT_K, l, NKV * HD, H, 0);
        set(m, LLAISYS_WEIGHT_V, l, NKV * HD, H, 0), set(m, LLAISYS_WEIGHT_O, l, H, NH * HD, 0);
        set(m, LLAISYS_WEIGHT_GATE, l, I, H, 0), set(m, LLAISYS_WEIGHT_UP, l, I, H, 0);
        set(m, LLAISYS_WEIGHT_DOWN, l, H, I, 0);
    }
    EXPECT(llaisysModelMissingWeights(m, &missing, NULL, 0) == LLAISYS_STATUS_OK && missing == 0, "every weight set");
    return m;
}

/* One prefill step of TOKENS on a fresh BLOCK cache (or on `cache` when not NULL) into logits
 * [T, V]; tokens whose bit is set in `embedded` come as rows of the embedding table. */
static llaisysStatus_t step(llaisysModel_t m, llaisysKVCache_t cache, unsigned embedded, float *logits,
                            const llaisysBatchEmbeds_t *custom) {
    llaisysKVCache_t own = NULL;
    int64_t tokens[T], pos[T], slots[T];
    int32_t qs[2] = {0, T}, table[1] = {0}, ctx[1] = {T}, sample[T], rows[T];
    static float data[T * H];
    llaisysBatch_t b;
    llaisysBatchEmbeds_t e;
    llaisysStepOutput_t out;
    llaisysStatus_t s;
    int i, n = 0;
    if (!cache) {
        s = llaisysModelCreateKVCache(m, LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_DTYPE_F32, BS, BS, &own);
        if (s != LLAISYS_STATUS_OK) return s;
        cache = own;
    }
    for (i = 0; i < T; i++) {
        tokens[i] = TOKENS[i], pos[i] = i, slots[i] = i, sample[i] = i;
        if ((embedded >> i) & 1u) {
            memcpy(data + n * H, embed + TOKENS[i] * H, H * sizeof(float));
            rows[n++] = i;
            tokens[i] = 1000000; /* outside the vocabulary: ignored for an embedded token */
        }
    }
    memset(&b, 0, sizeof b);
    b.n_tokens = T, b.token_ids = tokens, b.positions = pos, b.n_seqs = 1, b.query_start = qs;
    b.slot_mapping = slots, b.block_tables = table, b.max_blocks = 1, b.context_lens = ctx;
    b.n_sample = T, b.sample_rows = sample;
    e.struct_size = sizeof e, e.n_rows = (size_t)n, e.rows = rows, e.data = data;
    memset(&out, 0, sizeof out);
    out.logits = logits;
    s = llaisysModelStepEmbeds(m, cache, &b, custom ? custom : (embedded ? &e : NULL), NULL, &out);
    if (own) EXPECT(llaisysKVCacheDestroy(own) == LLAISYS_STATUS_OK, "destroy cache");
    return s;
}

static void test_rows_give_the_ids_logits(llaisysModel_t m) {
    static float want[T * V], got[T * V];
    const unsigned masks[] = {1u, 0x7Fu, 0x0Au, 0x40u, 0x3Eu};
    size_t k;
    EXPECT(step(m, NULL, 0, want, NULL) == LLAISYS_STATUS_OK, "the id step");
    for (k = 0; k < sizeof masks / sizeof masks[0]; k++) {
        memset(got, 0, sizeof got);
        EXPECT(step(m, NULL, masks[k], got, NULL) == LLAISYS_STATUS_OK, "an embeds step");
        EXPECT(memcmp(got, want, sizeof want) == 0, "embedded rows give the ids' logits bit for bit");
    }
}

static int error_has(const char *needle) { return strstr(llaisysGetLastError(), needle) != NULL; }

static void test_bad_embeds_are_refused(llaisysModel_t m) {
    static float want[T * V], got[T * V], data[(T + 1) * H];
    int32_t rows[T + 1] = {0, 1, 2, 3, 4, 5, 6, 7};
    llaisysBatchEmbeds_t e;
    llaisysKVCache_t cache = NULL;
    memcpy(data, embed, 2 * H * sizeof(float));
    EXPECT(llaisysModelCreateKVCache(m, LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_DTYPE_F32, BS, BS, &cache) ==
               LLAISYS_STATUS_OK,
           "cache");
    e.struct_size = sizeof e, e.n_rows = 2, e.rows = rows, e.data = data;

    e.struct_size = 8;
    EXPECT(step(m, cache, 0, got, &e) == LLAISYS_STATUS_INVALID_ARGUMENT && error_has("struct_size 8"), "size");
    e.struct_size = sizeof e, e.data = NULL;
    EXPECT(step(m, cache, 0, got, &e) == LLAISYS_STATUS_INVALID_ARGUMENT && error_has("rows and data"), "NULL");
    e.data = data, e.n_rows = T + 1;
    EXPECT(step(m, cache, 0, got, &e) == LLAISYS_STATUS_INVALID_ARGUMENT && error_has("n_rows 8 exceeds"), "count");
    e.n_rows = 2, rows[1] = T;
    EXPECT(step(m, cache, 0, got, &e) == LLAISYS_STATUS_OUT_OF_RANGE && error_has("rows[1] = 7"), "range");
    rows[1] = 0;
    EXPECT(step(m, cache, 0, got, &e) == LLAISYS_STATUS_INVALID_ARGUMENT && error_has("rows must increase"), "order");
    rows[1] = 1, data[H + 3] = INFINITY;
    EXPECT(step(m, cache, 0, got, &e) == LLAISYS_STATUS_INVALID_ARGUMENT && error_has("data[1, 3]"), "finite");
    data[H + 3] = NAN;
    EXPECT(step(m, cache, 0, got, &e) == LLAISYS_STATUS_INVALID_ARGUMENT && error_has("not finite"), "NaN");

    /* nothing was written: the same cache takes the step as a fresh one does; n_rows 0 is the plain step */
    e.n_rows = 0;
    EXPECT(step(m, NULL, 0, want, NULL) == LLAISYS_STATUS_OK, "fresh");
    EXPECT(step(m, cache, 0, got, &e) == LLAISYS_STATUS_OK, "after the refusals");
    EXPECT(memcmp(got, want, sizeof want) == 0, "the refused steps changed nothing");
    EXPECT(llaisysKVCacheDestroy(cache) == LLAISYS_STATUS_OK, "destroy cache");
}

int main(void) {
    llaisysModel_t m = make_model();
    test_rows_give_the_ids_logits(m);
    test_bad_embeds_are_refused(m);
    EXPECT(llaisysModelDestroy(m) == LLAISYS_STATUS_OK, "destroy");
    return finish();
}
