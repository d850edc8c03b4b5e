/* A decoder-only transformer in the core, for every supported architecture: one params
 * struct, weights set by name or by slot, and one forward + sampling call per engine step.
 *
 * Supported families: Qwen2 (optionally with sliding-window layers), Llama 2 / 3.x (with the
 * llama3 rope scaling), Qwen3 dense (per-head q/k RMSNorm), Mistral (sliding window), and the
 * mixture-of-experts Qwen2-MoE, Qwen3-MoE and Mixtral (n_experts > 0; CPU only so far). They
 * differ only in the fields below; the core runs one decoder for all of them.
 *
 * A step computes a flat batch of tokens from many sequences at once: prefill chunks
 * (query length L) and decode tokens (query length 1) alike. Activations are f32; weights
 * keep the model dtype and are widened inside the kernels.
 * Threads: one model (and one cache) must not be used by two threads at once; the step
 * reuses the model's workspace. Distinct model/cache pairs may run concurrently.
 * Reference: doc/c_api.md.
 */
#ifndef LLAISYS_MODELS_MODEL_H
#define LLAISYS_MODELS_MODEL_H

#include "../kv_cache.h"
#include "../sampler.h"

LLAISYS_EXTERN_C_BEGIN

/* The architecture. It names the family for messages and stats; the math follows the
 * explicit fields of llaisysModelParams_t. Append-only. */
typedef enum {
    LLAISYS_ARCH_QWEN2 = 0,
    LLAISYS_ARCH_LLAMA = 1,
    LLAISYS_ARCH_QWEN3 = 2,
    LLAISYS_ARCH_MISTRAL = 3,
    LLAISYS_ARCH_QWEN2_MOE = 4, /* Qwen1.5-MoE / Qwen2-MoE: experts + a sigmoid-gated shared expert */
    LLAISYS_ARCH_QWEN3_MOE = 5, /* Qwen3-MoE (Qwen3-30B-A3B): experts, q/k norm */
    LLAISYS_ARCH_MIXTRAL = 6,   /* Mixtral: experts, renormalised top-k */
} llaisysArch_t;

/* How RoPE frequencies are derived from rope_theta (HF "rope_scaling.rope_type").
 * Append-only. */
typedef enum {
    LLAISYS_ROPE_DEFAULT = 0, /* inv_freq[j] = theta^(-2j/d) */
    LLAISYS_ROPE_LINEAR = 1,  /* inv_freq / rope_factor */
    LLAISYS_ROPE_LLAMA3 = 2,  /* Llama 3.1: low / high frequency bands (rope_low_freq_factor,
                                 rope_high_freq_factor, rope_original_max_position) */
    LLAISYS_ROPE_YARN = 3,    /* YaRN: rope_factor, rope_beta_fast, rope_beta_slow,
                                 rope_original_max_position, rope_attention_factor */
} llaisysRopeScaling_t;

/* The gated MLP's activation: down(act(gate(x)) * up(x)). Append-only. */
typedef enum {
    LLAISYS_ACT_SILU = 0,
} llaisysActivation_t;

typedef struct {
    size_t struct_size;        /* sizeof(llaisysModelParams_t) as the caller compiled it; fields
                                  past it take their defaults (llaisysModelDefaultParams) */
    llaisysArch_t arch;
    llaisysDataType_t dtype;   /* weight dtype in the core: f32, f16 or bf16 */
    size_t n_layers;
    size_t hidden_size;
    size_t intermediate_size;
    size_t n_heads;
    size_t n_kv_heads;         /* divides n_heads (GQA) */
    size_t head_dim;           /* even; need not be hidden_size / n_heads (Qwen3) */
    size_t vocab_size;
    size_t max_position_embeddings; /* the context length the model was trained for */
    float rms_norm_eps;
    float rope_theta;
    llaisysRopeScaling_t rope_scaling;
    float rope_factor;               /* LINEAR, LLAMA3, YARN: > 0 (1: none) */
    float rope_low_freq_factor;      /* LLAMA3 */
    float rope_high_freq_factor;     /* LLAMA3: > rope_low_freq_factor */
    size_t rope_original_max_position; /* LLAMA3, YARN: the pre-scaling context */
    float rope_beta_fast;            /* YARN (HF default 32) */
    float rope_beta_slow;            /* YARN (HF default 1) */
    float rope_attention_factor;     /* YARN: multiplies cos and sin; 0: 0.1 ln(factor) + 1 */
    int qkv_bias;              /* 1: q/k/v projections have a bias (Qwen2) */
    int qk_norm;               /* 1: RMSNorm over each q and k head before RoPE (Qwen3) */
    int tie_word_embeddings;   /* 1: lm_head is embed_tokens (stored once) */
    llaisysActivation_t activation;
    const uint32_t *layer_window; /* [n_layers] sliding window of each layer in tokens (a query at
                                     position p sees keys at positions > p - window), 0: the
                                     whole context; NULL: every layer full. Copied by Create. */
    /* Mixture of experts (all 0: a dense model). A sparse layer's FFN routes each token to
     * n_experts_per_tok of n_experts SwiGLU experts of width moe_intermediate_size: router
     * logits [n_experts] -> softmax -> the top k (renormalised to sum 1 when norm_topk_prob)
     * -> the weighted sum of those experts' outputs, plus, when shared_expert_intermediate_size
     * > 0, sigmoid(shared_expert_gate . x) * the shared expert's output (Qwen2-MoE). A dense
     * layer (layer_sparse[l] == 0) runs the MLP of width intermediate_size. Needs the CPU. */
    size_t n_experts;                       /* E; 0: dense */
    size_t n_experts_per_tok;               /* top-k, in [1, n_experts] */
    size_t moe_intermediate_size;           /* each expert's inner width */
    size_t shared_expert_intermediate_size; /* 0: no shared expert */
    int norm_topk_prob;                     /* 1: the k chosen weights are divided by their sum */
    const uint8_t *layer_sparse;            /* [n_layers] 1: MoE FFN, 0: dense MLP; NULL: every layer
                                               sparse (when n_experts > 0). Copied by Create. */
} llaisysModelParams_t;

/* Defaults: struct_size set, Qwen2, bf16, silu, rope_theta 10000, DEFAULT rope, eps 1e-6,
 * YaRN betas 32 / 1, every size 0 (the caller must set them). */
LLAISYS_API llaisysModelParams_t llaisysModelDefaultParams(void);

typedef struct LlaisysModel *llaisysModel_t;

/* A model with unset weights in *out. Errors (no model is made, *out is NULL): an unknown
 * enum, zero or overflowing sizes, a contradiction (n_kv_heads not dividing n_heads, a window
 * larger than max_position_embeddings, bad rope factors), each naming the field. The caller
 * owns the model and releases it with llaisysModelDestroy. */
LLAISYS_API llaisysStatus_t llaisysModelCreate(const llaisysModelParams_t *params, llaisysDeviceType_t device,
                                               int device_id, llaisysModel_t *out);
/* Releases the model (NULL is a no-op). A second destroy or a foreign handle is
 * INVALID_ARGUMENT. KV caches made from it stay valid. */
LLAISYS_API llaisysStatus_t llaisysModelDestroy(llaisysModel_t model);

/* The params the model was made with, validated (layer_window points into the model; valid
 * while it lives). Set out->struct_size first (llaisysModelDefaultParams() does): the library
 * writes min(out->struct_size, its sizeof) bytes, so a struct of an older header is not
 * overrun, and sets struct_size to the bytes written. INVALID_ARGUMENT naming struct_size
 * when it is below the offset of layer_window. */
LLAISYS_API llaisysStatus_t llaisysModelGetParams(llaisysModel_t model, llaisysModelParams_t *out);

/* Weight slots. Per-layer kinds take a layer index, the others layer -1. Append-only. */
typedef enum {
    LLAISYS_WEIGHT_EMBED = 0,      /* [vocab, hidden]  model.embed_tokens.weight */
    LLAISYS_WEIGHT_FINAL_NORM = 1, /* [hidden]         model.norm.weight */
    LLAISYS_WEIGHT_LM_HEAD = 2,    /* [vocab, hidden]  lm_head.weight (not when tied) */
    LLAISYS_WEIGHT_ATTN_NORM = 3,  /* [hidden]         model.layers.N.input_layernorm.weight */
    LLAISYS_WEIGHT_Q = 4,          /* [n_heads * head_dim, hidden]     self_attn.q_proj.weight */
    LLAISYS_WEIGHT_K = 5,          /* [n_kv_heads * head_dim, hidden]  self_attn.k_proj.weight */
    LLAISYS_WEIGHT_V = 6,          /* [n_kv_heads * head_dim, hidden]  self_attn.v_proj.weight */
    LLAISYS_WEIGHT_Q_BIAS = 7,     /* [n_heads * head_dim]             (qkv_bias) */
    LLAISYS_WEIGHT_K_BIAS = 8,     /* [n_kv_heads * head_dim]          (qkv_bias) */
    LLAISYS_WEIGHT_V_BIAS = 9,     /* [n_kv_heads * head_dim]          (qkv_bias) */
    LLAISYS_WEIGHT_O = 10,         /* [hidden, n_heads * head_dim]     self_attn.o_proj.weight */
    LLAISYS_WEIGHT_Q_NORM = 11,    /* [head_dim]  self_attn.q_norm.weight (qk_norm) */
    LLAISYS_WEIGHT_K_NORM = 12,    /* [head_dim]  self_attn.k_norm.weight (qk_norm) */
    LLAISYS_WEIGHT_MLP_NORM = 13,  /* [hidden]    post_attention_layernorm.weight */
    LLAISYS_WEIGHT_GATE = 14,      /* [intermediate, hidden]  mlp.gate_proj.weight */
    LLAISYS_WEIGHT_UP = 15,        /* [intermediate, hidden]  mlp.up_proj.weight */
    LLAISYS_WEIGHT_DOWN = 16,      /* [hidden, intermediate]  mlp.down_proj.weight */
    /* sparse layers (n_experts > 0 and layer_sparse[l]); E experts of width Ie, shared width Is */
    LLAISYS_WEIGHT_ROUTER = 17,      /* [E, hidden]      mlp.gate.weight */
    LLAISYS_WEIGHT_EXPERT_GATE = 18, /* [E, Ie, hidden]  mlp.experts.gate_proj.weight (stacked) */
    LLAISYS_WEIGHT_EXPERT_UP = 19,   /* [E, Ie, hidden]  mlp.experts.up_proj.weight (stacked) */
    LLAISYS_WEIGHT_EXPERT_DOWN = 20, /* [E, hidden, Ie]  mlp.experts.down_proj.weight (stacked) */
    LLAISYS_WEIGHT_SHARED_GATE = 21, /* [Is, hidden]     mlp.shared_expert.gate_proj.weight */
    LLAISYS_WEIGHT_SHARED_UP = 22,   /* [Is, hidden]     mlp.shared_expert.up_proj.weight */
    LLAISYS_WEIGHT_SHARED_DOWN = 23, /* [hidden, Is]     mlp.shared_expert.down_proj.weight */
    LLAISYS_WEIGHT_SHARED_EXPERT_GATE = 24, /* [1, hidden] mlp.shared_expert_gate.weight */
} llaisysWeightKind_t;

/* Copy one weight from host memory into its slot, converting from `dtype` (f32, f16 or
 * bf16) to the model dtype. Expert weights are 3-D, [E, rows, cols], expert e's matrix at
 * e * rows * cols (block-quantized: e * rows * row bytes); each expert is stored on its own so
 * that a step reads only the chosen experts. The slot is `name` when it is not NULL (the HF name of the
 * comment above, "model.layers.3.self_attn.q_proj.weight"), else (kind, layer).
 * `shape[ndim]` must be the slot's shape; `data` is only read during the call. Unknown
 * names, slots this model does not have (a bias without qkv_bias, lm_head when tied, a
 * layer out of range) and wrong shapes are errors naming the slot. */
LLAISYS_API llaisysStatus_t llaisysModelSetWeight(llaisysModel_t model, const char *name, llaisysWeightKind_t kind,
                                                  int32_t layer, const void *data, llaisysDataType_t dtype,
                                                  const size_t *shape, size_t ndim);

/* Number of weights still unset; with `name_buf` (capacity bytes), the first missing name. */
LLAISYS_API llaisysStatus_t llaisysModelMissingWeights(llaisysModel_t model, size_t *count, char *name_buf,
                                                       size_t capacity);

/* A KV cache shaped for this model (layers, kv heads, head dim, its RoPE for seq_add,
 * device) in *out. `n_slots` slots of `dtype`; block_size used by the BLOCK layout. The
 * caller owns it (llaisysKVCacheDestroy). */
LLAISYS_API llaisysStatus_t llaisysModelCreateKVCache(llaisysModel_t model, llaisysKVLayout_t layout,
                                                      llaisysDataType_t dtype, size_t n_slots, size_t block_size,
                                                      llaisysKVCache_t *out);

/* Memory the model holds, in bytes. */
typedef struct {
    size_t weight_bytes;         /* weights as stored (packed panels on the CPU) */
    size_t workspace_bytes;      /* the per-step activation workspace now reserved */
    size_t workspace_tokens;     /* the largest step (tokens) it is sized for */
    size_t scratch_bytes;        /* NVIDIA: the kernels' per-thread scratch and cuBLAS workspaces
                                    on the model's device, all threads together (shared by every
                                    model there; grows with the largest GEMM); 0 on the CPU */
    size_t graphs;               /* NVIDIA: CUDA graphs of decode steps held now (one per padded
                                    shape seen: rows x block-table width); 0 on the CPU */
    size_t graph_capture_us;     /* the time spent capturing them so far, microseconds */
    size_t padded_bytes;         /* device memory of the padded decode steps (their own workspace
                                    and index arrays, which the graphs read); 0 when none ran */
} llaisysModelStats_t;

LLAISYS_API llaisysStatus_t llaisysModelGetStats(llaisysModel_t model, llaisysModelStats_t *out);

/* Decode steps padded to fixed shapes, replayed as CUDA graphs on an NVIDIA GPU when
 * LLAISYS_CUDA_GRAPHS=1 (doc/nvidia.md, "CUDA graphs"): runs the padded step of every bucket
 * of rows up to max_rows (1, 2, 4, then multiples of 8) over `cache` once, with padding rows
 * only, so that their graphs are captured now rather than at the first step of each shape.
 * Nothing is written to the cache. `*shapes` (may be NULL) gets how many ran: 0 where steps are
 * not padded (no graphs, a SLOT cache, a model with sparse layers), which is not an error. */
LLAISYS_API llaisysStatus_t llaisysModelCaptureGraphs(llaisysModel_t model, llaisysKVCache_t cache, size_t max_rows,
                                                      size_t *shapes);

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
LLAISYS_API llaisysStatus_t llaisysModelStep(llaisysModel_t model, llaisysKVCache_t cache,
                                             const llaisysBatch_t *batch, const llaisysSamplingParams_t *params,
                                             llaisysStepOutput_t *out);

/* Input embeddings for some rows of a step (a prompt given as embeddings, the output of a vision
 * or audio encoder): those tokens enter the first layer as the given rows instead of the
 * embedding lookup of their token id. Added after llaisysBatch_t, which has no struct_size and so
 * cannot grow; this struct carries one, for later fields. */
typedef struct {
    size_t struct_size;     /* sizeof(llaisysBatchEmbeds_t) as the caller compiled it */
    size_t n_rows;          /* tokens of the batch given as embeddings (0: none) */
    const int32_t *rows;    /* [n_rows] their flat token indices, strictly increasing, < n_tokens */
    const float *data;      /* [n_rows, hidden_size] f32 host memory, row j for token rows[j];
                               finite values; only read during the call */
} llaisysBatchEmbeds_t;

/* llaisysModelStep with input embeddings for the tokens embeds->rows (embeds NULL, or n_rows 0:
 * exactly llaisysModelStep). The token_ids of those tokens are ignored (any value; the engine
 * passes 0), the rest of the batch is as llaisysModelStep's, and so are the statuses. More:
 * INVALID_ARGUMENT naming the field for a struct_size below the fields above, NULL rows or data
 * with n_rows > 0, n_rows above n_tokens, rows not increasing or outside the batch, and a NaN or
 * infinite value (naming its row and column); all checked before anything is written. Every
 * device: on a GPU the rows are copied to the device in the step. */
LLAISYS_API llaisysStatus_t llaisysModelStepEmbeds(llaisysModel_t model, llaisysKVCache_t cache,
                                                   const llaisysBatch_t *batch, const llaisysBatchEmbeds_t *embeds,
                                                   const llaisysSamplingParams_t *params, llaisysStepOutput_t *out);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_MODELS_MODEL_H */
