/* The general model ABI (include/llaisys/models/model.h) from plain C99: create from params
 * (also with a struct_size shorter than today's struct), set weights by (kind, layer) and by
 * name, step, stats, sliding windows, and bad params each refused with a status and a message
 * naming the field (never an abort). */
#include <llaisys.h>
#include <llaisys/kv_cache.h>
#include <llaisys/models/model.h>
#include <llaisys/models/qwen2.h>
#include <llaisys/sampler.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

enum { L = 2, H = 16, I = 24, NH = 4, NKV = 2, HD = 8, V = 40, BS = 16, N_BLOCKS = 4, T = 6 };

static unsigned long long rng;
static float frand(void) { /* uniform in [-0.5, 0.5) */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
}

static llaisysModelParams_t small_params(void) {
    llaisysModelParams_t p = llaisysModelDefaultParams();
    p.arch = LLAISYS_ARCH_QWEN3; /* per-head q/k norm, no bias, tied */
    p.dtype = LLAISYS_DTYPE_F32;
    p.n_layers = L, p.hidden_size = H, p.intermediate_size = I;
    p.n_heads = NH, p.n_kv_heads = NKV, p.head_dim = HD, p.vocab_size = V;
    p.max_position_embeddings = 64;
    p.qk_norm = 1, p.tie_word_embeddings = 1;
    return p;
}

/* Status of setting (kind, layer) (name NULL) or `name` to seeded random values. */
static llaisysStatus_t set(llaisysModel_t m, const char *name, llaisysWeightKind_t kind, int32_t layer, size_t rows,
                           size_t cols) {
    size_t shape[2] = {rows, cols}, n = rows * (cols ? cols : 1), i;
    float *data = malloc(n * sizeof(float));
    llaisysStatus_t s;
    for (i = 0; i < n; i++) data[i] = frand() + (cols ? 0.0f : 1.0f); /* norms near 1 */
    s = llaisysModelSetWeight(m, name, kind, layer, data, LLAISYS_DTYPE_F32, shape, cols ? 2 : 1);
    free(data);
    return s;
}

/* Every weight of small_params(): by (kind, layer), except the final norm by name. */
static void set_all(llaisysModel_t m) {
    int32_t l;
    rng = 777;
    EXPECT(set(m, NULL, LLAISYS_WEIGHT_EMBED, -1, V, H) == LLAISYS_STATUS_OK, "embed");
    EXPECT(set(m, "model.norm.weight", LLAISYS_WEIGHT_EMBED, 0, H, 0) == LLAISYS_STATUS_OK, "final norm by name");
    for (l = 0; l < L; l++) {
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_ATTN_NORM, l, H, 0) == LLAISYS_STATUS_OK, "attn norm");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_Q, l, NH * HD, H) == LLAISYS_STATUS_OK, "q");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_K, l, NKV * HD, H) == LLAISYS_STATUS_OK, "k");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_V, l, NKV * HD, H) == LLAISYS_STATUS_OK, "v");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_O, l, H, NH * HD) == LLAISYS_STATUS_OK, "o");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_Q_NORM, l, HD, 0) == LLAISYS_STATUS_OK, "q norm");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_K_NORM, l, HD, 0) == LLAISYS_STATUS_OK, "k norm");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_MLP_NORM, l, H, 0) == LLAISYS_STATUS_OK, "mlp norm");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_GATE, l, I, H) == LLAISYS_STATUS_OK, "gate");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_UP, l, I, H) == LLAISYS_STATUS_OK, "up");
        EXPECT(set(m, NULL, LLAISYS_WEIGHT_DOWN, l, H, I) == LLAISYS_STATUS_OK, "down");
    }
}

/* A prefill of T tokens with every token a sample row: logits [T, V] and greedy ids [T]. */
static llaisysStatus_t prefill(llaisysModel_t m, float *logits, int64_t *ids) {
    llaisysKVCache_t cache = NULL;
    int64_t tokens[T] = {1, 7, 22, 5, 39, 12}, pos[T], slots[T];
    int32_t qs[2] = {0, T}, table[N_BLOCKS] = {1, 0, 2, 3}, ctx[1] = {T}, rows[T];
    llaisysSamplingParams_t params[T];
    llaisysBatch_t b;
    llaisysStepOutput_t out;
    llaisysStatus_t s;
    int i;
    s = llaisysModelCreateKVCache(m, LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_DTYPE_F32, N_BLOCKS * BS, BS, &cache);
    if (s != LLAISYS_STATUS_OK) return s;
    for (i = 0; i < T; i++) {
        pos[i] = i, slots[i] = table[0] * BS + i, rows[i] = i;
        params[i] = llaisysSamplingDefaultParams();
    }
    memset(&b, 0, sizeof b);
    b.n_tokens = T, b.token_ids = tokens, b.positions = pos, b.n_seqs = 1, b.query_start = qs;
    b.slot_mapping = slots, b.block_tables = table, b.max_blocks = N_BLOCKS, b.context_lens = ctx;
    b.n_sample = T, b.sample_rows = rows;
    memset(&out, 0, sizeof out);
    out.sample.token_ids = ids;
    out.logits = logits;
    s = llaisysModelStep(m, cache, &b, params, &out);
    EXPECT(llaisysKVCacheDestroy(cache) == LLAISYS_STATUS_OK, "destroy cache");
    return s;
}

/* llaisysModelCaptureGraphs: bad arguments are errors; on the CPU (without LLAISYS_PADDED_DECODE)
 * decode steps are not padded, so no shape runs. */
static void capture_graphs(llaisysModel_t m) {
    llaisysKVCache_t cache = NULL;
    size_t shapes = 99;
    EXPECT(llaisysModelCreateKVCache(m, LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_DTYPE_F32, N_BLOCKS * BS, BS, &cache) ==
               LLAISYS_STATUS_OK,
           "cache for capture");
    EXPECT(llaisysModelCaptureGraphs(m, cache, 0, &shapes) == LLAISYS_STATUS_INVALID_ARGUMENT &&
               strstr(llaisysGetLastError(), "max_rows") != NULL,
           "capture: max_rows 0 refused");
    EXPECT(llaisysModelCaptureGraphs(m, NULL, 8, &shapes) != LLAISYS_STATUS_OK, "capture: a NULL cache refused");
    EXPECT(llaisysModelCaptureGraphs(m, cache, 8, &shapes) == LLAISYS_STATUS_OK && shapes == 0,
           "capture on the CPU: nothing padded");
    EXPECT(llaisysModelCaptureGraphs(m, cache, 8, NULL) == LLAISYS_STATUS_OK, "capture: shapes may be NULL");
    EXPECT(llaisysKVCacheDestroy(cache) == LLAISYS_STATUS_OK, "destroy cache");
}

static int argmax(const float *row) {
    int j, best = 0;
    for (j = 1; j < V; j++) best = row[j] > row[best] ? j : best;
    return best;
}

static float max_diff(const float *a, const float *b, size_t n) {
    float d = 0;
    size_t i;
    for (i = 0; i < n; i++) d = fabsf(a[i] - b[i]) > d ? fabsf(a[i] - b[i]) : d;
    return d;
}

static void test_create_set_step_stats(void) {
    llaisysModelParams_t p = small_params(), got;
    llaisysModel_t m = NULL, short_m = NULL, win = NULL;
    llaisysModelStats_t st;
    static float logits[T * V], again[T * V], windowed[T * V];
    int64_t ids[T];
    uint32_t window[L] = {2, 0};
    size_t missing = 0;
    char name[128];
    int t;

    EXPECT(llaisysModelCreate(&p, LLAISYS_DEVICE_CPU, 0, &m) == LLAISYS_STATUS_OK && m, "create");
    EXPECT(llaisysModelMissingWeights(m, &missing, name, sizeof name) == LLAISYS_STATUS_OK, "missing");
    EXPECT(missing == 2 + (size_t)L * 11, "tied Qwen3 slots: embed, norm, 11 per layer");
    EXPECT(prefill(m, logits, ids) == LLAISYS_STATUS_INVALID_ARGUMENT &&
               strstr(llaisysGetLastError(), "not set") != NULL,
           "step with missing weights names them");
    /* slots this model lacks, by kind */
    EXPECT(set(m, NULL, LLAISYS_WEIGHT_LM_HEAD, -1, V, H) == LLAISYS_STATUS_INVALID_ARGUMENT &&
               strstr(llaisysGetLastError(), "LM_HEAD") != NULL,
           "tied: no LM_HEAD slot");
    EXPECT(set(m, NULL, LLAISYS_WEIGHT_Q_BIAS, 0, NH * HD, 0) == LLAISYS_STATUS_INVALID_ARGUMENT &&
               strstr(llaisysGetLastError(), "qkv_bias") != NULL,
           "no bias slot without qkv_bias");
    EXPECT(set(m, NULL, LLAISYS_WEIGHT_Q, L, NH * HD, H) == LLAISYS_STATUS_INVALID_ARGUMENT &&
               strstr(llaisysGetLastError(), "layer") != NULL,
           "layer out of range");
    EXPECT(set(m, NULL, (llaisysWeightKind_t)99, 0, H, 0) == LLAISYS_STATUS_INVALID_ARGUMENT &&
               strstr(llaisysGetLastError(), "kind") != NULL,
           "unknown kind");
    EXPECT(set(m, NULL, LLAISYS_WEIGHT_Q, 0, NH * HD + 1, H) == LLAISYS_STATUS_SHAPE_MISMATCH &&
               strstr(llaisysGetLastError(), "q_proj") != NULL,
           "wrong shape names the slot");
    set_all(m);
    EXPECT(llaisysModelMissingWeights(m, &missing, NULL, 0) == LLAISYS_STATUS_OK && missing == 0, "all set");
    EXPECT(prefill(m, logits, ids) == LLAISYS_STATUS_OK, "step");
    for (t = 0; t < T; t++) {
        EXPECT(ids[t] >= 0 && ids[t] < V && ids[t] == argmax(logits + t * V), "greedy id = argmax of its logits");
        EXPECT(isfinite(logits[t * V]), "finite logits");
    }
    EXPECT(llaisysModelGetStats(m, &st) == LLAISYS_STATUS_OK, "stats");
    EXPECT(st.workspace_tokens >= T && st.workspace_bytes > 0, "workspace sized for the step");
    EXPECT(st.graphs == 0 && st.graph_capture_us == 0 && st.padded_bytes == 0, "no graph, nothing padded");
    capture_graphs(m);
    EXPECT(st.weight_bytes >= sizeof(float) * ((size_t)V * H + H + (size_t)L * (2 * H + 2 * HD)), "weight bytes");
    got = llaisysModelDefaultParams();
    EXPECT(llaisysModelGetParams(m, &got) == LLAISYS_STATUS_OK && got.n_layers == L && got.qk_norm == 1 &&
               got.layer_window && got.layer_window[0] == 0 && got.struct_size == sizeof got,
           "params read back");
    /* a caller with a shorter (older) struct: nothing past its struct_size is written */
    memset(&got, 0xAB, sizeof got);
    got.struct_size = offsetof(llaisysModelParams_t, layer_window);
    EXPECT(llaisysModelGetParams(m, &got) == LLAISYS_STATUS_OK && got.n_layers == L &&
               got.struct_size == offsetof(llaisysModelParams_t, layer_window),
           "params read back into a short struct");
    {
        unsigned char tail[sizeof(got.layer_window)];
        memset(tail, 0xAB, sizeof tail);
        EXPECT(memcmp(&got.layer_window, tail, sizeof tail) == 0, "the short struct's tail is untouched");
    }
    got.struct_size = 4;
    EXPECT(llaisysModelGetParams(m, &got) == LLAISYS_STATUS_INVALID_ARGUMENT &&
               strstr(llaisysGetLastError(), "struct_size") != NULL,
           "GetParams refuses a struct_size below layer_window");

    /* a caller compiled before layer_window existed: struct_size stops there, windows default */
    p = small_params();
    p.struct_size = offsetof(llaisysModelParams_t, layer_window);
    p.layer_window = window; /* past struct_size: must be ignored */
    EXPECT(llaisysModelCreate(&p, LLAISYS_DEVICE_CPU, 0, &short_m) == LLAISYS_STATUS_OK, "create, short struct");
    set_all(short_m);
    EXPECT(prefill(short_m, again, ids) == LLAISYS_STATUS_OK, "step, short struct");
    EXPECT(max_diff(logits, again, T * V) == 0.0f, "short struct = the full one without windows");

    /* a window of 2 in layer 0 changes every token past the second, and only those */
    p = small_params();
    p.layer_window = window;
    EXPECT(llaisysModelCreate(&p, LLAISYS_DEVICE_CPU, 0, &win) == LLAISYS_STATUS_OK, "create with windows");
    window[0] = 1000; /* Create copied the windows */
    set_all(win);
    EXPECT(prefill(win, windowed, ids) == LLAISYS_STATUS_OK, "step with windows");
    EXPECT(max_diff(logits, windowed, 2 * V) < 1e-5f, "tokens 0 and 1 see all of a window of 2");
    EXPECT(max_diff(logits + 2 * V, windowed + 2 * V, (T - 2) * V) > 1e-4f, "later tokens see less");

    EXPECT(llaisysModelDestroy(m) == LLAISYS_STATUS_OK, "destroy");
    EXPECT(llaisysModelDestroy(m) == LLAISYS_STATUS_INVALID_ARGUMENT, "second destroy refused");
    EXPECT(llaisysModelDestroy(NULL) == LLAISYS_STATUS_OK, "destroy NULL");
    llaisysModelDestroy(short_m);
    llaisysModelDestroy(win);
}

/* Create must fail with `status` and a message containing `field`; *out stays NULL. */
static void expect_refused(const llaisysModelParams_t *p, llaisysStatus_t status, const char *field) {
    llaisysModel_t m = (llaisysModel_t)1;
    char what[160];
    llaisysStatus_t s = llaisysModelCreate(p, LLAISYS_DEVICE_CPU, 0, &m);
    sprintf(what, "refused naming '%s' (status %d)", field, (int)s);
    EXPECT(s == status && m == NULL && strstr(llaisysGetLastError(), field) != NULL, what);
}

static void test_bad_params(void) {
    llaisysModelParams_t p;
    uint32_t window[L] = {0, 65};
    int bad = 99;
    p = small_params(), memcpy(&p.arch, &bad, sizeof bad);
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "arch");
    p = small_params(), p.n_heads = 3;
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "n_kv_heads");
    p = small_params(), p.layer_window = window;
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "layer_window[1]");
    p = small_params(), memcpy(&p.rope_scaling, &bad, sizeof bad);
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "rope_scaling");
    p = small_params(), p.rope_scaling = LLAISYS_ROPE_LLAMA3, p.rope_factor = 8.0f;  /* original_max_position 0 */
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "original_max_position");
    p = small_params(), p.head_dim = 7;
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "head_dim");
    p = small_params(), p.rms_norm_eps = -1.0f;
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "rms_norm_eps");
    p = small_params(), p.vocab_size = 0;
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "vocab_size");
    p = small_params(), p.hidden_size = (size_t)1 << 40, p.vocab_size = (size_t)1 << 40;
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "overflows");
    p = small_params(), memcpy(&p.activation, &bad, sizeof bad);
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "activation");
    p = small_params(), p.dtype = LLAISYS_DTYPE_I32;
    expect_refused(&p, LLAISYS_STATUS_DTYPE_MISMATCH, "dtype");
    p = small_params(), p.struct_size = 8;
    expect_refused(&p, LLAISYS_STATUS_INVALID_ARGUMENT, "struct_size");
    expect_refused(NULL, LLAISYS_STATUS_INVALID_ARGUMENT, "params is NULL");
    EXPECT(llaisysModelCreate(NULL, LLAISYS_DEVICE_CPU, 0, NULL) == LLAISYS_STATUS_INVALID_ARGUMENT, "out NULL");
}

/* A Qwen2 handle of the deprecated API is the same model: it works with llaisysModel*. */
static void test_qwen2_handle_is_a_model(void) {
    llaisysQwen2Meta_t meta;
    llaisysQwen2Model_t q;
    llaisysModelParams_t got;
    memset(&meta, 0, sizeof meta);
    meta.dtype = LLAISYS_DTYPE_F32, meta.n_layers = 1, meta.hidden_size = H, meta.intermediate_size = I;
    meta.n_heads = NH, meta.n_kv_heads = NKV, meta.head_dim = HD, meta.vocab_size = V;
    meta.max_position_embeddings = 64, meta.rms_norm_eps = 1e-6f, meta.rope_theta = 1e6f;
    q = llaisysQwen2ModelCreate(&meta, LLAISYS_DEVICE_CPU, 0);
    EXPECT(q != NULL, "qwen2 create");
    got = llaisysModelDefaultParams();
    EXPECT(llaisysModelGetParams((llaisysModel_t)q, &got) == LLAISYS_STATUS_OK && got.qkv_bias == 1 &&
               got.qk_norm == 0 && got.rope_theta == 1e6f && got.arch == LLAISYS_ARCH_QWEN2,
           "qwen2 = qkv bias, no q/k norm");
    EXPECT(llaisysQwen2ModelDestroy(q) == LLAISYS_STATUS_OK, "qwen2 destroy returns OK");
    EXPECT(llaisysQwen2ModelDestroy(q) == LLAISYS_STATUS_INVALID_ARGUMENT, "qwen2 second destroy refused");
}

int main(void) {
    test_create_set_step_stats();
    test_bad_params();
    test_qwen2_handle_is_a_model();
    return finish();
}
