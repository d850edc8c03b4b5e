/* Qwen2 in the core: weights, and one forward + sampling call per engine step.
 *
 * DEPRECATED: use include/llaisys/models/model.h (llaisysModel*), which covers Qwen2 and the
 * other architectures. These functions stay, as thin wrappers over the same model (Qwen2 =
 * qkv bias, no q/k norm, no sliding window): a Qwen2 handle is also a valid llaisysModel_t.
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

#include "model.h"

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
/* Releases the model (NULL is a no-op, OK). A second destroy or a foreign handle is
 * INVALID_ARGUMENT (the status was void before; callers that ignore it are unaffected). */
LLAISYS_API llaisysStatus_t llaisysQwen2ModelDestroy(llaisysQwen2Model_t model);

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

/* A KV cache shaped for this model (layers, kv heads, head dim, its RoPE, device).
 * `n_slots` slots of `dtype`; block_size used by the BLOCK layout. */
LLAISYS_API llaisysKVCache_t llaisysQwen2ModelCreateKVCache(llaisysQwen2Model_t model,
                                                            llaisysKVLayout_t layout,
                                                            llaisysDataType_t dtype, size_t n_slots,
                                                            size_t block_size);

/* llaisysBatch_t and llaisysStepOutput_t are declared in model.h (the same layout as before). */

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
