// SLOT layout on a GPU: re-rotate the cached keys of shifted cells (KVCache::seq_add).
//
// One launch covers every (layer, cell) pair (shift_kernel.cu), with the cell list copied to
// the device once. The cache cannot see the model's stream (a cache may serve any model, and
// seq_add is called between steps through llaisysKVCacheSeqAdd), so the work is queued on a
// stream the cache owns (created on first use, destroyed with the cache) and ordered by hand:
// the device is synchronized first (a step's K writes may still be queued on the model's
// stream, which does not order with this one), and this stream before returning (the next
// step reads the rotated keys from the model's stream). seq_add is rare (a context shift), so
// the two synchronizations cost nothing a step would notice.
#include "../kv_cache.hpp"

#include "../../core/allocator.hpp"
#include "../../device/nvidia/cuda_check.hpp"
#include "../../device/runtime_api.hpp"
#include "../../utils/types.hpp"
#include "shift_kernel.hpp"

namespace llaisys::kv {

void KVCache::rotate_keys_nvidia(const std::vector<int32_t> &cells, int64_t delta) {
    if (cells.empty()) return;
    device::nvidia::DeviceGuard guard(p_.device_id);
    auto &rt = device::runtime(p_.device);
    if (shift_stream_ == nullptr) shift_stream_ = rt.stream_create(p_.device_id);
    auto stream = static_cast<cudaStream_t>(shift_stream_);
    const size_t bytes = cells.size() * sizeof(int32_t);
    auto *d_cells = static_cast<int32_t *>(  // [n_cells] the shifted cells
        core::allocate(LLAISYS_DEVICE_NVIDIA, p_.device_id, LLAISYS_MEMORY_DEVICE, bytes));
    try {
        LLAISYS_CUDA_CHECK(cudaDeviceSynchronize());  // a step's K writes, queued on the model's stream
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(d_cells, cells.data(), bytes, cudaMemcpyHostToDevice, stream));
        kv::nvidia::rotate_cells(k(0), p_.dtype, p_.n_layers, p_.n_slots * row_elems(), d_cells, cells.size(),
                                 p_.n_kv_heads, p_.head_dim, inv_freq_dev_->data_as<float>(), delta, stream);
        LLAISYS_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (...) {
        // only after the stream is drained may the cells buffer go back to the cache allocator
        // (a failed synchronization is the error already being thrown)
        (void)cudaStreamSynchronize(stream);
        core::release(LLAISYS_DEVICE_NVIDIA, p_.device_id, LLAISYS_MEMORY_DEVICE, d_cells);
        throw;
    }
    core::release(LLAISYS_DEVICE_NVIDIA, p_.device_id, LLAISYS_MEMORY_DEVICE, d_cells);
}

}  // namespace llaisys::kv
