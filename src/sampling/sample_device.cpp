// sampling::sample_on_device: the sampler for logits in the memory of a device (the C ABI's
// llaisysSampleDevice). The CPU samples in place; NVIDIA copies the logits to scratch first
// (the GPU sampler changes its input) and runs sampling::nvidia::sample on the default stream.
#include "sampler.hpp"

#include "../device/runtime_api.hpp"
#include "../utils/checked.hpp"
#include "../utils/error.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../core/allocator.hpp"
#include "../device/nvidia/cuda_check.hpp"
#include "nvidia/sampler_nvidia.hpp"
#endif

namespace llaisys::sampling {

#ifdef LLAISYS_ENABLE_NVIDIA
namespace {

void sample_nvidia(int device_id, const float *logits, size_t n_rows, size_t vocab,
                   const llaisysSamplingParams_t *params, const llaisysSampleOutput_t &out) {
    const size_t bytes = checked_mul(n_rows * vocab, sizeof(float), "logits bytes");
    void *copy = core::allocate(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, bytes);
    try {
        device::nvidia::DeviceGuard guard(device_id);
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(copy, logits, bytes, cudaMemcpyDeviceToDevice, nullptr));
        nvidia::sample(static_cast<float *>(copy), n_rows, vocab, params, out, device_id, nullptr);
    } catch (...) {
        (void)cudaStreamSynchronize(nullptr);  // nothing may still use `copy` when it is reused
        core::release(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, copy);
        throw;
    }
    core::release(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, copy);  // sample() synchronized
}

}  // namespace
#endif

void sample_on_device(llaisysDeviceType_t device, int device_id, const float *logits, size_t n_rows, size_t vocab,
                      const llaisysSamplingParams_t *params, const llaisysSampleOutput_t &out) {
    device::check_device(device, device_id);
    if (device == LLAISYS_DEVICE_CPU) {
        sample(logits, n_rows, vocab, params, out);
        return;
    }
#ifdef LLAISYS_ENABLE_NVIDIA
    if (device == LLAISYS_DEVICE_NVIDIA) {
        if (n_rows > 0) sample_nvidia(device_id, logits, n_rows, vocab, params, out);
        return;
    }
#endif
    fail(LLAISYS_STATUS_UNSUPPORTED, "sampling is not implemented on device type ", int(device));
}

}  // namespace llaisys::sampling
