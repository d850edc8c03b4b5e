// C ABI: Qwen2 model (include/llaisys/models/qwen2.h).
#include "guard.hpp"

#include "kv_handles.hpp"
#include "llaisys/models/qwen2.h"

#include <cstring>

using namespace llaisys;
using capi::guard;
using capi::guard_value;

namespace {

std::shared_ptr<models::qwen2::Model> model_of(llaisysQwen2Model_t h) { return capi::live(h, "model"); }

}  // namespace

extern "C" {

llaisysQwen2Model_t llaisysQwen2ModelCreate(const llaisysQwen2Meta_t *meta, llaisysDeviceType_t device, int device_id) {
    return guard_value<llaisysQwen2Model_t>(nullptr, [&] {
        LLAISYS_CHECK_ARG(meta != nullptr, "meta is NULL");
        device = capi::enum_arg(device);
        return capi::make_handle<llaisysQwen2Model_t>(
            std::make_shared<models::qwen2::Model>(capi::checked(*meta), device, device_id));
    });
}

void llaisysQwen2ModelDestroy(llaisysQwen2Model_t model) {
    guard([&] {
        if (model) capi::take(model, "model");
    });
}

llaisysStatus_t llaisysQwen2ModelSetWeight(llaisysQwen2Model_t model, const char *name, const void *data,
                                           llaisysDataType_t dtype, const size_t *shape, size_t ndim) {
    return guard([&] {
        LLAISYS_CHECK_ARG(name != nullptr, "name is NULL");
        dtype = capi::enum_arg(dtype);
        LLAISYS_CHECK_ARG(shape != nullptr || ndim == 0, "shape is NULL");
        LLAISYS_CHECK_ARG(ndim <= LLAISYS_TENSOR_MAX_DIMS, "ndim ", ndim, " is too large");
        model_of(model)->set_weight(name, data, dtype, std::vector<size_t>(shape, shape + ndim));
    });
}

llaisysStatus_t llaisysQwen2ModelMissingWeights(llaisysQwen2Model_t model, size_t *count, char *name_buf,
                                                size_t capacity) {
    return guard([&] {
        auto missing = model_of(model)->missing_weights();
        if (count) *count = missing.size();
        if (name_buf && capacity > 0) {
            std::string first = missing.empty() ? "" : missing.front();
            LLAISYS_CHECK(first.size() < capacity, LLAISYS_STATUS_BUFFER_TOO_SMALL, "name buffer of ", capacity,
                          " bytes is too small for '", first, "'");
            std::memcpy(name_buf, first.c_str(), first.size() + 1);
        }
    });
}

llaisysKVCache_t llaisysQwen2ModelCreateKVCache(llaisysQwen2Model_t model, llaisysKVLayout_t layout,
                                                llaisysDataType_t dtype, size_t n_slots, size_t block_size) {
    return guard_value<llaisysKVCache_t>(nullptr, [&] {
        const auto m = model_of(model);
        layout = capi::enum_arg(layout);
        dtype = capi::enum_arg(dtype);
        llaisysKVCacheParams_t p{};
        p.layout = layout;
        p.dtype = dtype;
        p.n_layers = m->meta().n_layers;
        p.n_kv_heads = m->meta().n_kv_heads;
        p.head_dim = m->meta().head_dim;
        p.n_slots = n_slots;
        p.block_size = block_size;
        p.rope_theta = m->meta().rope_theta;
        p.device = m->device();
        p.device_id = m->device_id();
        return capi::make_handle<llaisysKVCache_t>(std::make_shared<kv::KVCache>(p));
    });
}

llaisysStatus_t llaisysQwen2ModelStep(llaisysQwen2Model_t model, llaisysKVCache_t cache, const llaisysBatch_t *batch,
                                      const llaisysSamplingParams_t *params, llaisysStepOutput_t *out) {
    llaisysStatus_t status = LLAISYS_STATUS_OK;
    llaisysStatus_t guarded = guard([&] {
        const auto m = model_of(model);
        const auto c = capi::live(cache, "cache");
        LLAISYS_CHECK_ARG(batch != nullptr, "batch is NULL");
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        status = m->step(*c, *batch, params, *out);
    });
    if (guarded != LLAISYS_STATUS_OK) return guarded;
    if (status == LLAISYS_STATUS_NO_KV_SPACE) {
        return capi::report(status, "the KV cache has too few free cells for this batch");
    }
    return status;
}

}  // extern "C"
