// Per-row sampling on f32 logits, in the fixed order documented in include/llaisys/sampler.h.
#pragma once

#include "llaisys/sampler.h"

#include <cstddef>
#include <vector>

namespace llaisys::sampling {

// Throws INVALID_ARGUMENT naming the field when a parameter is out of range, or a token id
// in the penalty/bias lists is outside [0, vocab).
void check_params(const llaisysSamplingParams_t &p, size_t vocab, size_t top_capacity);

// Step 0 (include/llaisys/sampler.h, "Allowed mask"): whether id is allowed by p's mask
// (always when there is none), and the first allowed id (0 without a mask). check_params has
// made sure a mask has the right size and allows some id below vocab.
inline bool allowed(const llaisysSamplingParams_t &p, size_t id) {
    return p.allowed_mask == nullptr || ((p.allowed_mask[id / 32] >> (id % 32)) & 1u) != 0;
}
size_t first_allowed(const llaisysSamplingParams_t &p, size_t vocab);

// Throws INVALID_ARGUMENT when `out` cannot take n_rows results: token_ids NULL, or a
// top_capacity without both top arrays.
void check_output(const llaisysSampleOutput_t &out, size_t n_rows);

// Whether each of the n rows stops at step 4 on the raw logits after step 0: greedy, with no
// bias, no penalties and no top logprobs, so its token is the first index of the largest raw
// logit among the ids its allowed_mask allows (all without a mask): what the model's lm_head
// screen finds without computing every logit.
bool all_plain_greedy(const llaisysSamplingParams_t *params, size_t n);

// Sample each row of logits [n_rows, vocab] with params[n_rows] into out (rows in parallel).
void sample(const float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
            const llaisysSampleOutput_t &out);

// sample() for logits [n_rows, vocab] in the memory of (device, device_id): host memory on
// the CPU, device memory on NVIDIA (read only: the GPU sampler works on a copy). Results go
// to the host arrays of `out` on every device. Throws UNSUPPORTED for other devices.
void sample_on_device(llaisysDeviceType_t device, int device_id, const float *logits, size_t n_rows, size_t vocab,
                      const llaisysSamplingParams_t *params, const llaisysSampleOutput_t &out);

// Steps 2 and 3 of one row as lists, computed once here for the CPU and the GPU sampler.
struct Penalties {
    std::vector<int64_t> repeated;       // ids the repetition penalty divides/multiplies (sorted, unique)
    std::vector<int64_t> counted;        // ids seen in the output (sorted, unique)
    std::vector<float> subtract;         // [counted] presence + frequency * count, as a float
};
void penalties(const llaisysSamplingParams_t &p, Penalties &out);

// The uniform draw in [0, 1) for (seed, step): counter based, so independent of batching.
double uniform(uint64_t seed, uint64_t step);

}  // namespace llaisys::sampling
