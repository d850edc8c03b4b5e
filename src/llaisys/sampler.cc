// C ABI: sampling (include/llaisys/sampler.h).
#include "guard.hpp"

#include "../sampling/sampler.hpp"
#include "../utils/checked.hpp"

using namespace llaisys;

extern "C" {

llaisysSamplingParams_t llaisysSamplingDefaultParams(void) {
    llaisysSamplingParams_t p{};
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

namespace {

void check_sample_args(const float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
                       const llaisysSampleOutput_t *out) {
    LLAISYS_CHECK_ARG(logits != nullptr || n_rows == 0, "logits is NULL");
    LLAISYS_CHECK_ARG(params != nullptr || n_rows == 0, "params is NULL");
    LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
    sampling::check_output(*out, n_rows);
    LLAISYS_CHECK_ARG(vocab > 0, "vocab must be > 0");
    checked_mul(n_rows, vocab, "n_rows * vocab");
    for (size_t r = 0; r < n_rows; r++) sampling::check_params(params[r], vocab, out->top_capacity);
}

}  // namespace

llaisysStatus_t llaisysSample(const float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
                              llaisysSampleOutput_t *out) {
    return capi::guard([&] {
        check_sample_args(logits, n_rows, vocab, params, out);
        sampling::sample(logits, n_rows, vocab, params, *out);
    });
}

llaisysStatus_t llaisysSampleDevice(llaisysDeviceType_t device, int device_id, const float *logits, size_t n_rows,
                                    size_t vocab, const llaisysSamplingParams_t *params, llaisysSampleOutput_t *out) {
    return capi::guard([&] {
        device = capi::enum_arg(device);
        check_sample_args(logits, n_rows, vocab, params, out);
        sampling::sample_on_device(device, device_id, logits, n_rows, vocab, params, *out);
    });
}

}  // extern "C"
