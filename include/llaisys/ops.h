/* Tensor operators. Every op checks its arguments (non-NULL handles, one device, matching
 * dtypes and shapes, contiguous layout) and returns an error status instead of computing on
 * bad input. Floating ops take f32, f16 or bf16 and accumulate in f32. Outputs are written
 * in place into caller-created tensors; an output must not alias an input unless stated.
 */
#ifndef LLAISYS_OPS_H
#define LLAISYS_OPS_H

#include "models/model.h"
#include "tensor.h"

LLAISYS_EXTERN_C_BEGIN

/* out = a + b, elementwise; all three the same shape and dtype. out may alias a or b. */
LLAISYS_API llaisysStatus_t llaisysAdd(llaisysTensor_t out, llaisysTensor_t a, llaisysTensor_t b);

/* out = a * b, elementwise; all three the same shape and dtype. out may alias a or b. */
LLAISYS_API llaisysStatus_t llaisysMul(llaisysTensor_t out, llaisysTensor_t a, llaisysTensor_t b);

/* out[i, :] = weight[index[i], :], converted to out's dtype.
 * out [n, d] (a float dtype), index [n] i64 (each in [0, vocab), else OUT_OF_RANGE),
 * weight [vocab, d] (any float dtype, or a block-quantized one: the looked-up rows are
 * dequantized as llaisysDequantize does, then rounded once to out's dtype). */
LLAISYS_API llaisysStatus_t llaisysEmbedding(llaisysTensor_t out, llaisysTensor_t index,
                                             llaisysTensor_t weight);

/* out = in @ weight^T + bias.
 * out [m, n], in [m, k] of one float dtype; weight [n, k] and bias [n] (or NULL) of one
 * float dtype, which may differ from the activations' (e.g. f32 activations, bf16 weights).
 * weight may be block-quantized (GGUF Q4_0 .. Q6_K, contiguous), its bias then of any float
 * dtype: on the CPU with int8-quantized activations, on an NVIDIA GPU exactly in f32 for
 * m <= 8 and through bf16 (f16 for f16 activations) cuBLAS panels above (doc/nvidia.md). */
LLAISYS_API llaisysStatus_t llaisysLinear(llaisysTensor_t out, llaisysTensor_t in,
                                          llaisysTensor_t weight, llaisysTensor_t bias);

/* A linear weight packed once for the CPU GEMM (column panels of 16 or 32 outputs, in the
 * weight's own dtype; layout in doc/architecture.md). The model packs its weights this way;
 * these calls make the same kernel usable and testable on its own. */
typedef struct LlaisysPackedLinear *llaisysPackedLinear_t;

/* Pack weight [n, k] (f32, f16 or bf16, contiguous, CPU; n, k > 0). On success *out is a new
 * handle owned by the caller (free it with llaisysPackedLinearDestroy); it holds its own
 * packed copy, so `weight` may be destroyed afterwards. On error *out is NULL. */
LLAISYS_API llaisysStatus_t llaisysPackedLinearCreate(llaisysTensor_t weight, llaisysPackedLinear_t *out);

/* A packed weight from row blocks stacked in order: parts [n_parts] are block-quantized
 * tensors [n_i, k] (Q4_0 .. Q6_K, contiguous, CPU) with one k, making the weight
 * [sum n_i, k]; their dtypes may differ (a fused q|k|v weight whose v rows are Q6_K beside
 * Q4_K q and k rows). The parts are copied and borrowed for the call only; *out as for
 * llaisysPackedLinearCreate. */
LLAISYS_API llaisysStatus_t llaisysPackedLinearCreateStacked(const llaisysTensor_t *parts, size_t n_parts,
                                                             llaisysPackedLinear_t *out);

/* out = in @ weight^T + bias with the packed weight. out [m, n] and in [m, k] are f32 on the
 * CPU; bias [n] (or NULL) has the weight's dtype. All handles are borrowed for the call. */
LLAISYS_API llaisysStatus_t llaisysPackedLinearApply(llaisysPackedLinear_t packed, llaisysTensor_t out,
                                                     llaisysTensor_t in, llaisysTensor_t bias);

/* ids[i] = the argmax of row i of in @ weight^T under llaisysArgmax's NaN rule (first NaN wins):
 * the id llaisysPackedLinearApply (no bias) and a first-index argmax give, ties included.
 * in [m, k] is f32 on the CPU; ids [m] is caller-owned host memory. This is greedy decoding's
 * lm_head step: an int8 copy of the weight (n * k rounded up to 64 bytes, built by the first
 * call and kept with the handle) bounds every output, and only those that can be the largest
 * are computed (doc/architecture.md, "Greedy screen"). *screened (when not NULL) is 1 if
 * the screen decided every row, 0 if some rows had every output computed instead. Not to be
 * called on one handle from two threads at once. */
LLAISYS_API llaisysStatus_t llaisysPackedLinearArgmax(llaisysPackedLinear_t packed, llaisysTensor_t in,
                                                      int64_t *ids, int *screened);

/* Free a packed weight: OK, or INVALID_ARGUMENT (with the message) for a destroyed, foreign
 * or non-packed handle, which is left alone; NULL is a no-op returning OK. (Returned void
 * before; the status travels in a register that void-declared callers ignore: same ABI.) */
LLAISYS_API llaisysStatus_t llaisysPackedLinearDestroy(llaisysPackedLinear_t packed);

/* out[i, :] = in[i, :] / sqrt(mean(in[i, :]^2) + eps) * weight.
 * out [m, d], in [m, d] of one float dtype, weight [d] of any float dtype; eps > 0.
 * out may alias in. */
LLAISYS_API llaisysStatus_t llaisysRmsNorm(llaisysTensor_t out, llaisysTensor_t in,
                                           llaisysTensor_t weight, float eps);

/* The residual step of a transformer block, fused: residual += in (rounded to the
 * activations' dtype), then out = rms_norm(residual, weight, eps) as llaisysRmsNorm.
 * out, residual and in [m, d] of one float dtype, weight [d] of any float dtype; eps > 0.
 * residual is updated in place; out must not alias residual or in. */
LLAISYS_API llaisysStatus_t llaisysAddRmsNorm(llaisysTensor_t out, llaisysTensor_t residual,
                                              llaisysTensor_t in, llaisysTensor_t weight, float eps);

/* Rotary position embedding, HF "rotate half" convention: for j < d/2, with
 * angle = pos[i] * theta^(-2j/d),
 *   out[i,h,j]       = x[i,h,j] cos - x[i,h,j+d/2] sin
 *   out[i,h,j+d/2]   = x[i,h,j+d/2] cos + x[i,h,j] sin.
 * out [n, heads, d], in [n, heads, d] (d even), pos [n] i64 (>= 0); theta > 0.
 * out may alias in. */
LLAISYS_API llaisysStatus_t llaisysRope(llaisysTensor_t out, llaisysTensor_t in,
                                        llaisysTensor_t pos, float theta);

/* Causal self-attention with grouped-query heads.
 * out [q_len, heads, dv], q [q_len, heads, d], k [kv_len, kv_heads, d],
 * v [kv_len, kv_heads, dv]; q_len <= kv_len; heads % kv_heads == 0.
 * Query i sits at position kv_len - q_len + i and attends keys 0..that position.
 * Query head h reads kv head h / (heads / kv_heads). */
LLAISYS_API llaisysStatus_t llaisysSelfAttention(llaisysTensor_t out, llaisysTensor_t q,
                                                 llaisysTensor_t k, llaisysTensor_t v,
                                                 float scale);

/* Attention over cached keys/values, the kernel the model uses for both KV layouts.
 * A flat batch of n tokens in rows: row s has query tokens [query_start[s], query_start[s+1])
 * and sees cache entries kv_slots[kv_start[s] .. kv_start[s+1]) with positions kv_pos[..]
 * (ascending within a row); token t attends the entries of its row with kv_pos <= q_pos[t].
 * out [n, heads, dv], q [n, heads, d] (one float dtype); k_cache [n_slots, kv_heads, d],
 * v_cache [n_slots, kv_heads, dv] (one float dtype, or q8_0 on the CPU with d and dv multiples
 * of 32, read block by block; UNSUPPORTED on a GPU); q_pos [n] i64; query_start and
 * kv_start [n_seqs+1] i32; kv_slots [m] i32 (each < n_slots); kv_pos [m] i64.
 * A query that sees no entry gets zeros. */
LLAISYS_API llaisysStatus_t llaisysPagedAttention(llaisysTensor_t out, llaisysTensor_t q,
                                                  llaisysTensor_t k_cache, llaisysTensor_t v_cache,
                                                  llaisysTensor_t q_pos, llaisysTensor_t query_start,
                                                  llaisysTensor_t kv_start, llaisysTensor_t kv_slots,
                                                  llaisysTensor_t kv_pos, float scale);

/* llaisysPagedAttention computed by the plain key-by-key reference kernel (one scalar exp per
 * score), kept to check and benchmark the blocked SIMD kernel against; same arguments. */
LLAISYS_API llaisysStatus_t llaisysPagedAttentionReference(llaisysTensor_t out, llaisysTensor_t q,
                                                           llaisysTensor_t k_cache, llaisysTensor_t v_cache,
                                                           llaisysTensor_t q_pos, llaisysTensor_t query_start,
                                                           llaisysTensor_t kv_start, llaisysTensor_t kv_slots,
                                                           llaisysTensor_t kv_pos, float scale);

/* out = up * silu(gate) = up * gate / (1 + exp(-gate)); all the same shape. */
LLAISYS_API llaisysStatus_t llaisysSwiGLU(llaisysTensor_t out, llaisysTensor_t gate,
                                          llaisysTensor_t up);

/* Per row of `vals` [rows, n] (or [n], one row): the first index of the maximum into
 * max_idx [rows] (or [1]) i64 and the value into max_val [rows] (or [1]) of vals' dtype.
 * n >= 1. NaN counts as larger than every number, +inf included, and among NaNs the first
 * index wins: the first NaN if the row has one, else the first maximum (torch.argmax's and
 * numpy.argmax's rule, the sampler's too: doc/architecture.md, "NaN in argmax"). All -inf:
 * index 0. CPU (every ISA) and NVIDIA alike. */
LLAISYS_API llaisysStatus_t llaisysArgmax(llaisysTensor_t max_idx, llaisysTensor_t max_val,
                                          llaisysTensor_t vals);

/* Softmax along the last dimension: out [.., n], in [.., n], same shape; out may alias in. */
LLAISYS_API llaisysStatus_t llaisysSoftmax(llaisysTensor_t out, llaisysTensor_t in);

/* The RoPE frequency table the model uses for these rope fields (as llaisysModelParams_t;
 * transformers' modeling_rope_utils default / linear / llama3 / yarn, YaRN with truncate):
 * inv_freq [head_dim / 2] f32 CPU tensor (written), *attn_scale (written; may be NULL) the
 * factor multiplying cos and sin (1 but for YaRN). Bad fields are INVALID_ARGUMENT naming
 * the field (rope_theta, rope_factor, ...). */
LLAISYS_API llaisysStatus_t llaisysRopeFrequencies(float rope_theta, llaisysRopeScaling_t rope_scaling,
                                                   float rope_factor, float rope_low_freq_factor,
                                                   float rope_high_freq_factor, size_t rope_original_max_position,
                                                   float rope_beta_fast, float rope_beta_slow,
                                                   float rope_attention_factor, size_t head_dim,
                                                   llaisysTensor_t inv_freq, float *attn_scale);

/* llaisysRope with a frequency table: angle = pos[i] * inv_freq[j], cos and sin multiplied by
 * attn_scale (> 0). inv_freq [d/2] f32 on out's device, finite. Other arguments as llaisysRope. */
LLAISYS_API llaisysStatus_t llaisysRopeTable(llaisysTensor_t out, llaisysTensor_t in, llaisysTensor_t pos,
                                             llaisysTensor_t inv_freq, float attn_scale);

/* llaisysPagedAttention (reference != 0: llaisysPagedAttentionReference) with a sliding
 * window: token t sees the entries of its row with
 *   kv_pos <= q_pos[t]  and  (window == 0  or  kv_pos > q_pos[t] - window),
 * transformers' sliding_window_causal_mask (a query sees itself and the window - 1 positions
 * before it). window >= 0 (0: no window). */
LLAISYS_API llaisysStatus_t llaisysPagedAttentionWindow(llaisysTensor_t out, llaisysTensor_t q,
                                                        llaisysTensor_t k_cache, llaisysTensor_t v_cache,
                                                        llaisysTensor_t q_pos, llaisysTensor_t query_start,
                                                        llaisysTensor_t kv_start, llaisysTensor_t kv_slots,
                                                        llaisysTensor_t kv_pos, float scale, int64_t window,
                                                        int reference);

/* Per-head RMSNorm in place (Qwen3's q_norm / k_norm): each x[i, h, :] becomes
 * round(x * rsqrt(mean(x^2) + eps)) * weight, computed in f32 and rounded to x's dtype before
 * the weight multiplies, as transformers' Qwen3RMSNorm. x [n, heads, d] of a float dtype,
 * weight [d] of any float dtype; eps > 0. */
LLAISYS_API llaisysStatus_t llaisysRmsNormHeads(llaisysTensor_t x, llaisysTensor_t weight, float eps);

/* Mixture-of-experts routing, as a sparse layer of the decoder routes (CPU): for each row of
 * logits [n, E] (f32), softmax, the k = ids.shape[1] largest (largest first, the lower index on
 * ties) into ids [n, k] (i32) and their probabilities into weights [n, k] (f32), divided by
 * their sum when norm_topk_prob is nonzero. INVALID_ARGUMENT unless 1 <= k <= E. */
LLAISYS_API llaisysStatus_t llaisysMoeTopk(llaisysTensor_t ids, llaisysTensor_t weights, llaisysTensor_t logits,
                                           int norm_topk_prob);

/* The experts of a sparse FFN, over the rows routed to them, as the decoder runs them (CPU):
 * out [n, H] (f32) = sum over j of weights[t, j] * down_e(silu(gate_e(x_t)) * up_e(x_t)) with
 * e = ids[t, j]; x [n, H] f32, ids [n, k] i32 in [0, E), weights [n, k] f32, gate_up [E, 2 Ie, H]
 * (each expert's gate rows, then its up rows) and down [E, H, Ie] of one float dtype. Only the
 * experts some row chose are read. */
LLAISYS_API llaisysStatus_t llaisysMoeExperts(llaisysTensor_t out, llaisysTensor_t x, llaisysTensor_t ids,
                                              llaisysTensor_t weights, llaisysTensor_t gate_up, llaisysTensor_t down);

/* Block-quantized tensors (GGUF layouts; include/llaisys.h, LLAISYS_DTYPE_Q4_0 .. IQ1_M).
 * out [.., k] of f32, f16 or bf16 = the values of in [.., k] (a block-quantized dtype), same
 * shape, both contiguous, on the CPU or one NVIDIA GPU (identical bits on both). The f32
 * values are bit-identical to gguf-py's gguf.quants.dequantize; f16 / bf16 are those values
 * rounded once. NaN or Inf in a block's f16 scale propagates (as gguf-py). DTYPE_MISMATCH
 * when in is not block-quantized or out not a float dtype; SHAPE_MISMATCH for differing
 * shapes; UNSUPPORTED on other devices. */
LLAISYS_API llaisysStatus_t llaisysDequantize(llaisysTensor_t out, llaisysTensor_t in);

/* out [.., k] (a block-quantized dtype) = in [.., k] (f32, f16 or bf16, widened exactly to
 * f32) quantized row by row; same shape, both contiguous, CPU. Q4_0, Q5_0 and Q8_0 are
 * bit-identical to gguf-py's gguf.quants.quantize; Q4_K, Q5_K and Q6_K follow llama.cpp's
 * reference quantizers (quantize_row_q*_K_ref) operation for operation. in must be finite:
 * a NaN or Inf is INVALID_ARGUMENT naming the element, and out is left unwritten. Q4_1, Q5_1,
 * Q2_K, Q3_K, IQ4_XS and the i-quants (IQ1_*, IQ2_*, IQ3_*) have no quantizer (they run as GGUF
 * files store them): UNSUPPORTED.
 * Other errors as llaisysDequantize, UNSUPPORTED on any device but the CPU. */
LLAISYS_API llaisysStatus_t llaisysQuantize(llaisysTensor_t out, llaisysTensor_t in);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_OPS_H */
