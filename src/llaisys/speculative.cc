// C ABI: speculative decoding support (include/llaisys/speculative.h).
#include "guard.hpp"

#include "../sampling/probs.hpp"
#include "../sampling/sampler.hpp"
#include "../utils/checked.hpp"

using namespace llaisys;

extern "C" {

llaisysStatus_t llaisysSampleProbs(const float *logits, size_t n_rows, size_t vocab,
                                   const llaisysSamplingParams_t *params, float *probs) {
    return capi::guard([&] {
        LLAISYS_CHECK_ARG(logits != nullptr || n_rows == 0, "logits is NULL");
        LLAISYS_CHECK_ARG(params != nullptr || n_rows == 0, "params is NULL");
        LLAISYS_CHECK_ARG(probs != nullptr || n_rows == 0, "probs is NULL");
        LLAISYS_CHECK_ARG(vocab > 0, "vocab must be > 0");
        checked_mul(n_rows, vocab, "n_rows * vocab");
        for (size_t r = 0; r < n_rows; r++) sampling::check_params(params[r], vocab, vocab);
        sampling::processed_probs(logits, n_rows, vocab, params, probs);
    });
}

}  // extern "C"
