// SLOT layout on a GPU: re-rotate the cached keys of shifted cells (KVCache::seq_add).
#include "../kv_cache.hpp"

#include "../../core/allocator.hpp"
#include "../../device/nvidia/cuda_check.hpp"
#include "../../ops/rope/nvidia/rope_nvidia.hpp"
#include "../../utils/types.hpp"

namespace llaisys::kv {

void KVCache::rotate_keys_nvidia(const std::vector<int32_t> &cells, int64_t delta) {
    if (cells.empty()) return;
    device::nvidia::DeviceGuard guard(p_.device_id);
    // the rotation angle of every cell is delta: one device copy of it, read by each launch
    auto *d_delta = static_cast<int64_t *>(
        core::allocate(LLAISYS_DEVICE_NVIDIA, p_.device_id, LLAISYS_MEMORY_DEVICE, sizeof(int64_t)));
    try {
        LLAISYS_CUDA_CHECK(cudaMemcpy(d_delta, &delta, sizeof(int64_t), cudaMemcpyHostToDevice));
        const size_t row_bytes = row_elems() * dtype_size(p_.dtype);
        for (size_t layer = 0; layer < p_.n_layers; layer++) {
            for (int32_t cell : cells) {
                std::byte *row = k(layer) + size_t(cell) * row_bytes;  // [n_kv_heads, head_dim]
                ops::nvidia::rope(row, row, d_delta, p_.dtype, 1, p_.n_kv_heads, p_.head_dim, row_elems(),
                                  inv_freq_dev_->data_as<float>(), 1.0f, nullptr);
            }
        }
        LLAISYS_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    } catch (...) {
        core::release(LLAISYS_DEVICE_NVIDIA, p_.device_id, LLAISYS_MEMORY_DEVICE, d_delta);
        throw;
    }
    core::release(LLAISYS_DEVICE_NVIDIA, p_.device_id, LLAISYS_MEMORY_DEVICE, d_delta);
}

}  // namespace llaisys::kv
