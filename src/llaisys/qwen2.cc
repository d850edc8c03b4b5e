// C ABI: the deprecated Qwen2 model (include/llaisys/models/qwen2.h), thin wrappers over the
// one decoder of model.cc: Qwen2 = qkv bias, no q/k norm, no sliding window.
#include "model_handles.hpp"

#include "../models/decoder/params.hpp"

using namespace llaisys;
using capi::guard;
using capi::guard_value;

namespace {

std::shared_ptr<models::Model> model_of(llaisysQwen2Model_t h) { return capi::live(h, "model"); }

}  // namespace

extern "C" {

llaisysQwen2Model_t llaisysQwen2ModelCreate(const llaisysQwen2Meta_t *meta, llaisysDeviceType_t device, int device_id) {
    return guard_value<llaisysQwen2Model_t>(nullptr, [&] {
        LLAISYS_CHECK_ARG(meta != nullptr, "meta is NULL");
        device = capi::enum_arg(device);
        const models::Config config = models::config_from_qwen2(capi::checked(*meta));
        return capi::make_handle<llaisysQwen2Model_t>(std::make_shared<models::Model>(config, device, device_id));
    });
}

llaisysStatus_t llaisysQwen2ModelDestroy(llaisysQwen2Model_t model) {
    return guard([&] {
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
        model_of(model)->set_weight(name, LLAISYS_WEIGHT_EMBED, -1, data, dtype,
                                    std::vector<size_t>(shape, shape + ndim));
    });
}

llaisysStatus_t llaisysQwen2ModelMissingWeights(llaisysQwen2Model_t model, size_t *count, char *name_buf,
                                                size_t capacity) {
    return guard([&] { capi::missing_weights(*model_of(model), count, name_buf, capacity); });
}

llaisysKVCache_t llaisysQwen2ModelCreateKVCache(llaisysQwen2Model_t model, llaisysKVLayout_t layout,
                                                llaisysDataType_t dtype, size_t n_slots, size_t block_size) {
    return guard_value<llaisysKVCache_t>(nullptr, [&] {
        const auto m = model_of(model);
        return capi::make_handle<llaisysKVCache_t>(capi::model_kv_cache(*m, layout, dtype, n_slots, block_size));
    });
}

llaisysStatus_t llaisysQwen2ModelStep(llaisysQwen2Model_t model, llaisysKVCache_t cache, const llaisysBatch_t *batch,
                                      const llaisysSamplingParams_t *params, llaisysStepOutput_t *out) {
    return capi::model_step(model, cache, batch, params, out);
}

}  // extern "C"
