// The processed sampling distribution of a row (include/llaisys/speculative.h).
#pragma once

#include "llaisys/speculative.h"

#include <cstddef>

namespace llaisys::sampling {

// probs [n_rows, vocab] <- the distribution sample() draws each row of logits [n_rows, vocab]
// from (params already checked with check_params). Rows in parallel.
void processed_probs(const float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
                     float *probs);

}  // namespace llaisys::sampling
