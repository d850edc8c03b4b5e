/* Sampling: turn one row of logits into a token, per-row parameters, in C++.
 *
 * The order is fixed (doc/sampling.md):
 *   0. allowed mask          logits of ids the row's allowed_mask leaves out become -inf
 *   1. logit bias            logits[id] += bias
 *   2. repetition penalty    for ids in prompt+output: l > 0 ? l / rp : l * rp
 *   3. presence / frequency  for ids in output: l -= presence + frequency * count
 *   4. temperature == 0      -> greedy: the first index of the maximum; stop here
 *   5. temperature           l /= temperature
 *   6. top-k                 keep the k largest (ties at the k-th value are kept)
 *   7. top-p                 keep the smallest prefix of the sorted distribution whose mass >= top_p
 *   8. min-p                 drop tokens whose probability < min_p * max probability
 *   9. draw                  from the renormalised distribution with the row's RNG: the
 *                            running sum walks the candidates sorted by logit (ties by id)
 *                            when top-p is on, else in id order, until it passes u * total
 * The RNG is counter based: the draw for a row depends only on (seed, step), so a request's
 * samples are reproducible whatever else shares its batch.
 * Log-probabilities are those of the model's distribution (log_softmax of the raw logits,
 * before steps 0-8), as vLLM reports them by default: with an allowed_mask the sampled id's
 * logprob and the top-N are still the unmasked model's (top-N may list disallowed ids).
 *
 * Allowed mask (structured output): bit (id % 32) of allowed_mask[id / 32] allows token id.
 * Step 0 sets every other logit to -inf, so greedy picks the first largest allowed logit and a
 * draw only ever returns allowed ids; a NaN logit of a disallowed id is masked like any other.
 * A row whose allowed logits are all -inf after steps 0-3 returns its first allowed id. Bits
 * at or past vocab in the last word are ignored. A mask that allows no id below vocab, or
 * whose mask_words is not (vocab + 31) / 32, is INVALID_ARGUMENT for the call (naming the
 * field): a defined token cannot be drawn from an empty set.
 *
 * NaN (one rule with llaisysArgmax, torch.argmax and numpy.argmax; doc/architecture.md,
 * "NaN in argmax"): a NaN logit counts as larger than every number, +inf included, and among
 * NaNs the first index wins. After steps 1-3 (bias values must be finite, so a NaN comes from
 * the logits, or from inf - inf in the penalties):
 *   - greedy rows take the first NaN if the row has one, else the first maximum;
 *   - a sampled row (temperature > 0) with any NaN skips steps 5-9 and returns its first NaN
 *     index, deterministically (a softmax over a NaN is undefined);
 *   - such a row's logprob and its top-N logprobs are NaN, and its top-N ids put the raw
 *     row's NaNs first (by id), then the largest logits (ties by id): the argmax's order,
 *     used for every row's top-N;
 *   - likewise a sampled row whose largest value is +inf, or which is -inf everywhere, has no
 *     softmax (inf - inf) and returns its argmax: the first +inf, or index 0.
 * Rows with a finite maximum are not affected by this rule. CPU and GPU samplers follow it alike.
 */
#ifndef LLAISYS_SAMPLER_H
#define LLAISYS_SAMPLER_H

#include "../llaisys.h"

LLAISYS_EXTERN_C_BEGIN

typedef struct {
    float temperature;        /* >= 0; 0 means greedy */
    int32_t top_k;            /* 0 (or <0): off */
    float top_p;              /* (0, 1]; 1: off */
    float min_p;              /* [0, 1]; 0: off */
    float repetition_penalty; /* > 0; 1: off */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    uint64_t seed;            /* the request's seed */
    uint64_t step;            /* the draw's index within the request (its number of output tokens) */
    int32_t n_logprobs;       /* top-N logprobs to return, 0..capacity of the output */
    const int64_t *prompt_tokens; /* [n_prompt] for the repetition penalty; borrowed for the call */
    size_t n_prompt;
    const int64_t *output_tokens; /* [n_output] for all penalties; borrowed for the call */
    size_t n_output;
    const int64_t *bias_ids;  /* [n_bias] token ids to bias; borrowed for the call */
    const float *bias_values; /* [n_bias] */
    size_t n_bias;
    const uint32_t *allowed_mask; /* [mask_words] allowed ids, one bit each (above); NULL: all
                                   * allowed. Borrowed for the call */
    size_t mask_words;            /* (vocab + 31) / 32 with a mask; 0 without */
} llaisysSamplingParams_t;

/* Greedy defaults: temperature 0, all filters off, no penalties, no logprobs, no mask. */
LLAISYS_API llaisysSamplingParams_t llaisysSamplingDefaultParams(void);

/* Where sampling results go; all arrays are caller-owned. */
typedef struct {
    int64_t *token_ids;    /* [n_rows] the sampled ids */
    float *logprobs;       /* [n_rows] logprob of each sampled id, or NULL */
    int64_t *top_ids;      /* [n_rows, top_capacity] top-N ids by logprob, or NULL */
    float *top_logprobs;   /* [n_rows, top_capacity] their logprobs, or NULL */
    size_t top_capacity;   /* entries per row in top_ids/top_logprobs (>= every n_logprobs) */
} llaisysSampleOutput_t;

/* Sample one token per row of `logits` [n_rows, vocab] (f32, host memory) with
 * params[n_rows]. INVALID_ARGUMENT for out-of-range parameters or token ids (>= vocab),
 * a bad allowed_mask (above), BUFFER_TOO_SMALL if a row asks for more logprobs than top_capacity. */
LLAISYS_API llaisysStatus_t llaisysSample(const float *logits, size_t n_rows, size_t vocab,
                                          const llaisysSamplingParams_t *params,
                                          llaisysSampleOutput_t *out);

/* llaisysSample for logits [n_rows, vocab] (f32) in the memory of (device, device_id): host
 * memory on the CPU (then exactly llaisysSample), device memory on NVIDIA, where the whole
 * sampler runs on the GPU (doc/models.md, "On the GPU") and only the ids and logprobs come
 * back. `logits` is only read; params and out are host memory as for llaisysSample. On
 * NVIDIA the call queues on the device's default stream and returns when the results are
 * in `out`; logits written on another stream must be synchronized first. Statuses: those
 * of llaisysSample, device checks (INVALID_ARGUMENT), UNSUPPORTED for a device type without
 * a sampler, OUT_OF_MEMORY, DEVICE_ERROR. */
LLAISYS_API llaisysStatus_t llaisysSampleDevice(llaisysDeviceType_t device, int device_id, const float *logits,
                                                size_t n_rows, size_t vocab,
                                                const llaisysSamplingParams_t *params,
                                                llaisysSampleOutput_t *out);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_SAMPLER_H */
