/* Qwen2 in the core: weights, and one forward + sampling call per engine step.
 *
 * A step computes a flat batch of tokens from many sequences at once: prefill chunks
 * (query length L) and decode tokens (query length 1) alike. Activations are f32; weights
 * keep the model dtype and are widened inside the kernels.
 * Threads: one model (and one cache) must not be used by two threads at once; the step
 * reuses the model's workspace. Distinct model/cache pairs may run concurrently.
 * Reference: doc/c_api.md.
 */
#ifndef LLAISYS_MODELS_QWEN2_H
#define LLAISYS_MODELS_QWEN2_H

#include "../kv_cache.h"
#include "../sampler.h"

LLAISYS_EXTERN_C_BEGIN

typedef struct {
    llaisysDataType_t dtype; /* weight dtype in the core: f32, f16 or bf16 */
    size_t n_layers;
    size_t hidden_size;
    size_t intermediate_size;
    size_t n_heads;
    size_t n_kv_heads;
    size_t head_dim;   /* usually hidden_size / n_heads */
    size_t vocab_size;
    size_t max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    int tie_word_embeddings; /* 1: lm_head is embed_tokens */
} llaisysQwen2Meta_t;

typedef struct LlaisysQwen2Model *llaisysQwen2Model_t;

/* A model with unset weights. NULL on error (bad enum, zero or overflowing sizes, ...).
 * The caller owns it. */
LLAISYS_API llaisysQwen2Model_t llaisysQwen2ModelCreate(const llaisysQwen2Meta_t *meta,
                                                        llaisysDeviceType_t device, int device_id);
LLAISYS_API void llaisysQwen2ModelDestroy(llaisysQwen2Model_t model);

/* Copy one weight from host memory, by its HuggingFace name (e.g.
 * "model.layers.3.self_attn.q_proj.weight"), converting from `dtype` to the model dtype.
 * `shape[ndim]` must be what the meta implies, and `data` holds that many elements of
 * `dtype` (f32, f16 or bf16). Unknown names and wrong shapes are errors. `data` is only
 * read during the call. */
LLAISYS_API llaisysStatus_t llaisysQwen2ModelSetWeight(llaisysQwen2Model_t model, const char *name,
                                                       const void *data, llaisysDataType_t dtype,
                                                       const size_t *shape, size_t ndim);

/* Number of weights still unset; with `name_buf` (capacity bytes), the first missing name. */
LLAISYS_API llaisysStatus_t llaisysQwen2ModelMissingWeights(llaisysQwen2Model_t model, size_t *count,
                                                            char *name_buf, size_t capacity);

/* A KV cache shaped for this model (layers, kv heads, head dim, rope theta, device).
 * `n_slots` slots of `dtype`; block_size used by the BLOCK layout. */
LLAISYS_API llaisysKVCache_t llaisysQwen2ModelCreateKVCache(llaisysQwen2Model_t model,
                                                            llaisysKVLayout_t layout,
                                                            llaisysDataType_t dtype, size_t n_slots,
                                                            size_t block_size);

/* One engine step: a flat batch of n_tokens tokens in n_seqs rows (one row per sequence).
 * Tokens of row s are [query_start[s], query_start[s+1]) in position order. */
typedef struct {
    size_t n_tokens;
    const int64_t *token_ids;    /* [n_tokens] ids in [0, vocab) */
    const int64_t *positions;    /* [n_tokens] logical position of each token (RoPE, causal mask) */
    size_t n_seqs;
    const int32_t *query_start;  /* [n_seqs + 1] token range of each row; query_start[0] = 0 */
    /* BLOCK layout */
    const int64_t *slot_mapping; /* [n_tokens] slot (block * block_size + offset) to write K/V */
    const int32_t *block_tables; /* [n_seqs, max_blocks] blocks of each row, in order */
    size_t max_blocks;
    const int32_t *context_lens; /* [n_seqs] KV length of each row after this step */
    /* SLOT layout */
    const int32_t *seq_ids;      /* [n_seqs] seq id of each row */
    /* outputs wanted */
    size_t n_sample;
    const int32_t *sample_rows;  /* [n_sample] flat token indices whose logits are needed */
} llaisysBatch_t;

/* What a step returns; every array is caller-owned and sized as noted (NULL: not wanted). */
typedef struct {
    llaisysSampleOutput_t sample; /* [n_sample] sampled ids and logprobs (token_ids required
                                     unless params is NULL) */
    float *logits;                /* [n_sample, vocab] raw logits, or NULL */
    float *hidden;                /* [n_sample, hidden_size] final normed hidden states, or NULL */
} llaisysStepOutput_t;

/* Run one step: write the batch's K/V into `cache`, compute, and for each sample row
 * sample with params[i] (params may be NULL to skip sampling, e.g. for embeddings).
 * Returns LLAISYS_STATUS_NO_KV_SPACE (recoverable, nothing written) when a SLOT cache has
 * too few free cells; errors for malformed batches (ids out of range, slots out of range,
 * ranges inconsistent), checked before anything is written: a refused step changes
 * neither the model nor the cache. On the CPU, when no logits are asked for, sample.logprobs
 * is NULL and every row is plain greedy (temperature 0, no bias, no penalties, n_logprobs 0),
 * up to 8 rows are decided by the lm_head screen without computing every logit: the same ids,
 * fewer bytes read (doc/architecture.md, "Greedy screen"; LLAISYS_GREEDY_SCREEN=0 at load
 * turns it off). */
LLAISYS_API llaisysStatus_t llaisysQwen2ModelStep(llaisysQwen2Model_t model, llaisysKVCache_t cache,
                                                  const llaisysBatch_t *batch,
                                                  const llaisysSamplingParams_t *params,
                                                  llaisysStepOutput_t *out);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_MODELS_QWEN2_H */
