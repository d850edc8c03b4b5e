/* Speculative decoding support: the processed sampling distribution of a row.
 *
 * Speculative sampling (doc/engine.md, "Speculative decoding") accepts a draft token d with
 * probability min(1, p(d) / q(d)) and otherwise resamples from norm(max(0, p - q)), where p
 * and q are the distributions the target and the draft actually sample from: the logits
 * after steps 0-8 of include/llaisys/sampler.h (allowed mask, bias, penalties, temperature,
 * top-k, top-p, min-p), renormalised. llaisysSampleProbs returns exactly that distribution, so that a
 * draw from it (walking ids in any order) has the same law as llaisysSample's step 9.
 */
#ifndef LLAISYS_SPECULATIVE_H
#define LLAISYS_SPECULATIVE_H

#include "sampler.h"

LLAISYS_EXTERN_C_BEGIN

/* For each row of `logits` [n_rows, vocab] (f32, host memory) with params[n_rows], write the
 * distribution llaisysSample draws that row's token from into probs [n_rows, vocab] (f32,
 * caller-owned): 0 outside the kept candidates, the kept weights renormalised to sum 1
 * (summed in double). A row that llaisysSample decides without a draw gets a one-hot at the
 * token it returns: greedy rows (temperature 0), rows with a NaN after steps 1-3, rows whose
 * largest value is +inf or which are -inf everywhere (the NaN rule of sampler.h).
 * `seed`, `step` and `n_logprobs` are ignored (nothing is drawn). Statuses: INVALID_ARGUMENT
 * for NULL arrays or out-of-range parameters or ids (as llaisysSample, naming the field). */
LLAISYS_API llaisysStatus_t llaisysSampleProbs(const float *logits, size_t n_rows, size_t vocab,
                                               const llaisysSamplingParams_t *params, float *probs);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_SPECULATIVE_H */
