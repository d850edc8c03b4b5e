// KV caches on a GPU: re-rotate the cached keys of shifted cells (SLOT seq_add) and copy cached
// tokens to new positions with their keys re-rotated (BLOCK copy_shift, cache reuse).
//
// One launch covers every (layer, cell) pair (shift_kernel.cu), with the index arrays copied to
// the device once. The cache cannot see the model's stream (a cache may serve any model, and
// seq_add / copy_shift are called between steps through the C API), so the work is queued on a
// stream the cache owns (created on first use, destroyed with the cache) and ordered by hand:
// the device is synchronized first (a step's K/V writes may still be queued on the model's
// stream, which does not order with this one), and this stream before returning (the next
// step reads the keys from the model's stream). Both are rare (a context shift; an admission
// that reuses cached tokens), so the two synchronizations cost nothing a step would notice.
#include "../kv_cache.hpp"

#include "../../core/allocator.hpp"
#include "../../device/nvidia/cuda_check.hpp"
#include "../../device/runtime_api.hpp"
#include "../../utils/types.hpp"
#include "shift_kernel.hpp"

#include <cstring>

namespace llaisys::kv {
namespace {

// Copies `bytes` of host arguments to a device buffer on `stream` (created here on first use),
// runs launch(device buffer, stream) after the device's queued work, and waits for the stream;
// the buffer goes back to the cache allocator once the stream is drained, also on an error.
template <class Launch>
void run_on_shift_stream(int device_id, void *&shift_stream, const void *args, size_t bytes, Launch &&launch) {
    device::nvidia::DeviceGuard guard(device_id);
    auto &rt = device::runtime(LLAISYS_DEVICE_NVIDIA);
    if (shift_stream == nullptr) shift_stream = rt.stream_create(device_id);
    auto stream = static_cast<cudaStream_t>(shift_stream);
    auto *d_args = static_cast<std::byte *>(core::allocate(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE,
                                                           bytes));
    try {
        LLAISYS_CUDA_CHECK(cudaDeviceSynchronize());  // a step's K/V writes, queued on the model's stream
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(d_args, args, bytes, cudaMemcpyHostToDevice, stream));
        launch(d_args, stream);
        LLAISYS_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (...) {
        // only after the stream is drained may the buffer go back to the cache allocator
        // (a failed synchronization is the error already being thrown)
        (void)cudaStreamSynchronize(stream);
        core::release(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, d_args);
        throw;
    }
    core::release(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, d_args);
}

}  // namespace

void KVCache::rotate_keys_nvidia(const std::vector<int32_t> &cells, int64_t delta) {
    if (cells.empty()) return;
    run_on_shift_stream(p_.device_id, shift_stream_, cells.data(), cells.size() * sizeof(int32_t),
                        [&](std::byte *d_cells, cudaStream_t stream) {  // [n_cells] the shifted cells
                            kv::nvidia::rotate_cells(k(0), p_.dtype, p_.n_layers, p_.n_slots * row_elems(),
                                                     reinterpret_cast<const int32_t *>(d_cells), cells.size(),
                                                     p_.n_kv_heads, p_.head_dim, inv_freq_dev_->data_as<float>(),
                                                     delta, stream);
                        });
}

void KVCache::copy_shift_nvidia(size_t n, const int32_t *src, const int32_t *dst, const int64_t *delta) {
    if (n == 0) return;
    // one upload: delta [n] int64 first (aligned), then src [n] and dst [n] int32
    std::vector<std::byte> args(n * (sizeof(int64_t) + 2 * sizeof(int32_t)));
    std::memcpy(args.data(), delta, n * sizeof(int64_t));
    std::memcpy(args.data() + n * sizeof(int64_t), src, n * sizeof(int32_t));
    std::memcpy(args.data() + n * (sizeof(int64_t) + sizeof(int32_t)), dst, n * sizeof(int32_t));
    const float *inv_freq = inv_freq_dev_ ? inv_freq_dev_->data_as<float>() : nullptr;  // NULL: every delta is 0
    run_on_shift_stream(p_.device_id, shift_stream_, args.data(), args.size(), [&](std::byte *d, cudaStream_t stream) {
        const auto *d_delta = reinterpret_cast<const int64_t *>(d);
        const auto *d_src = reinterpret_cast<const int32_t *>(d + n * sizeof(int64_t));
        const auto *d_dst = reinterpret_cast<const int32_t *>(d + n * (sizeof(int64_t) + sizeof(int32_t)));
        kv::nvidia::copy_shift(k(0), v(0), p_.dtype, p_.n_layers, p_.n_slots * row_elems(), d_src, d_dst, d_delta, n,
                               p_.n_kv_heads, p_.head_dim, inv_freq, stream);
    });
}

}  // namespace llaisys::kv
