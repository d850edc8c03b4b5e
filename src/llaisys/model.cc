// C ABI: the decoder model of every architecture (include/llaisys/models/model.h).
#include "model_handles.hpp"

#include "../models/decoder/params.hpp"
#ifdef LLAISYS_ENABLE_NVIDIA
#include "../ops/linear/nvidia/gemm_common.hpp"  // scratch_bytes
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>

using namespace llaisys;
using capi::guard;

namespace {

std::shared_ptr<models::Model> model_of(llaisysModel_t h) { return capi::live(h, "model"); }

}  // namespace

extern "C" {

llaisysModelParams_t llaisysModelDefaultParams(void) { return models::default_params(); }

llaisysStatus_t llaisysModelCreate(const llaisysModelParams_t *params, llaisysDeviceType_t device, int device_id,
                                   llaisysModel_t *out) {
    if (out) *out = nullptr;
    return guard([&] {
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        device = capi::enum_arg(device);
        const models::Config config = models::make_config(params);
        *out = capi::make_handle<llaisysModel_t>(std::make_shared<models::Model>(config, device, device_id));
    });
}

llaisysStatus_t llaisysModelDestroy(llaisysModel_t model) {
    return guard([&] {
        if (model) capi::take(model, "model");
    });
}

llaisysStatus_t llaisysModelGetParams(llaisysModel_t model, llaisysModelParams_t *out) {
    return guard([&] {
        const auto m = model_of(model);
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        // as many bytes as the caller's struct holds (an older header's struct is shorter)
        size_t size;
        std::memcpy(&size, out, sizeof size);
        constexpr size_t kMin = offsetof(llaisysModelParams_t, layer_window);
        LLAISYS_CHECK_ARG(size >= kMin, "out->struct_size ", size, " is smaller than ", kMin,
                          " (set it to sizeof(llaisysModelParams_t), e.g. with llaisysModelDefaultParams())");
        llaisysModelParams_t p = m->config().p;  // layer_window points into the model
        p.struct_size = std::min(size, sizeof p);
        std::memcpy(out, &p, p.struct_size);
    });
}

llaisysStatus_t llaisysModelSetWeight(llaisysModel_t model, const char *name, llaisysWeightKind_t kind, int32_t layer,
                                      const void *data, llaisysDataType_t dtype, const size_t *shape, size_t ndim) {
    return guard([&] {
        const auto m = model_of(model);
        dtype = capi::enum_arg(dtype);
        LLAISYS_CHECK_ARG(shape != nullptr || ndim == 0, "shape is NULL");
        LLAISYS_CHECK_ARG(ndim <= LLAISYS_TENSOR_MAX_DIMS, "ndim ", ndim, " is too large");
        // kind is read only through enum_in_range (an out-of-range value copied as the enum type
        // is an invalid load); with a name it is ignored
        const llaisysWeightKind_t k =
            name ? LLAISYS_WEIGHT_EMBED : capi::enum_in_range(kind, LLAISYS_WEIGHT_EMBED, LLAISYS_WEIGHT_SHARED_EXPERT_GATE, "weight kind");
        m->set_weight(name, k, layer, data, dtype, std::vector<size_t>(shape, shape + ndim));
    });
}

llaisysStatus_t llaisysModelMissingWeights(llaisysModel_t model, size_t *count, char *name_buf, size_t capacity) {
    return guard([&] { capi::missing_weights(*model_of(model), count, name_buf, capacity); });
}

llaisysStatus_t llaisysModelCreateKVCache(llaisysModel_t model, llaisysKVLayout_t layout, llaisysDataType_t dtype,
                                          size_t n_slots, size_t block_size, llaisysKVCache_t *out) {
    if (out) *out = nullptr;
    return guard([&] {
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        const auto m = model_of(model);
        *out = capi::make_handle<llaisysKVCache_t>(capi::model_kv_cache(*m, layout, dtype, n_slots, block_size));
    });
}

llaisysStatus_t llaisysModelGetStats(llaisysModel_t model, llaisysModelStats_t *out) {
    return guard([&] {
        const auto m = model_of(model);
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        *out = m->stats();
#ifdef LLAISYS_ENABLE_NVIDIA
        if (m->device() == LLAISYS_DEVICE_NVIDIA) out->scratch_bytes = ops::nvidia::scratch_bytes(m->device_id());
#endif
    });
}

llaisysStatus_t llaisysModelCaptureGraphs(llaisysModel_t model, llaisysKVCache_t cache, size_t max_rows,
                                          size_t *shapes) {
    return guard([&] {
        const auto m = capi::live(model, "model");
        const auto c = capi::live(cache, "cache");
        const size_t n = m->capture_graphs(*c, max_rows);
        if (shapes) *shapes = n;
    });
}

llaisysStatus_t llaisysModelStep(llaisysModel_t model, llaisysKVCache_t cache, const llaisysBatch_t *batch,
                                 const llaisysSamplingParams_t *params, llaisysStepOutput_t *out) {
    return capi::model_step(model, cache, batch, params, out);
}

llaisysStatus_t llaisysModelStepEmbeds(llaisysModel_t model, llaisysKVCache_t cache, const llaisysBatch_t *batch,
                                       const llaisysBatchEmbeds_t *embeds, const llaisysSamplingParams_t *params,
                                       llaisysStepOutput_t *out) {
    return capi::model_step(model, cache, batch, params, out, embeds);
}

}  // extern "C"
