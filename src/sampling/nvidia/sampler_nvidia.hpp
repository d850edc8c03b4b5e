// The sampler on an NVIDIA GPU: the same steps, order, RNG and results as sampling::sample
// (../sampler.hpp), with the logits left on the device. doc/models.md "On the GPU" lists
// where float rounding may differ from the CPU.
#pragma once

#include "llaisys/sampler.h"

#include <cuda_runtime_api.h>

#include <cstddef>

namespace llaisys::sampling::nvidia {

// Sample each row of logits [n_rows, vocab] (f32, DEVICE memory; may be modified in place
// as scratch) with params[n_rows] (HOST structs, their token lists in host memory) into out
// (HOST arrays, as llaisysSampleOutput_t documents). Same order, same RNG
// (sampling::uniform(seed, step), computed on the host), same results as
// sampling::sample on the CPU: greedy = first index of the max; sampled tokens equal for the
// same logits. Only ids and logprobs cross back to the host. Synchronizes `stream` before
// returning. Parameters were checked by sampling::check_params/check_output already.
void sample(float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
            const llaisysSampleOutput_t &out, int device_id, cudaStream_t stream);

}  // namespace llaisys::sampling::nvidia
