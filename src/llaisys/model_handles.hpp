// The model handle types and what the two model wrappers (model.cc, qwen2.cc) share: both
// handle types are the one decoder (models::Model) under the Model handle kind, so a Qwen2
// handle is also a valid llaisysModel_t.
#pragma once

#include "../models/decoder/decoder.hpp"
#include "guard.hpp"
#include "kv_handles.hpp"
#include "llaisys/models/model.h"
#include "llaisys/models/qwen2.h"

#include <cstring>
#include <string>

LLAISYS_HANDLE_TYPE(llaisysModel_t, llaisys::models::Model, llaisys::capi::HandleKind::Model);
LLAISYS_HANDLE_TYPE(llaisysQwen2Model_t, llaisys::models::Model, llaisys::capi::HandleKind::Model);

namespace llaisys::capi {

// The count of unset weights, and the first one's name into name_buf (capacity bytes).
inline void missing_weights(const models::Model &m, size_t *count, char *name_buf, size_t capacity) {
    auto missing = m.missing_weights();
    if (count) *count = missing.size();
    if (name_buf && capacity > 0) {
        std::string first = missing.empty() ? "" : missing.front();
        LLAISYS_CHECK(first.size() < capacity, LLAISYS_STATUS_BUFFER_TOO_SMALL, "name buffer of ", capacity,
                      " bytes is too small for '", first, "'");
        std::memcpy(name_buf, first.c_str(), first.size() + 1);
    }
}

// A step through guard(): NO_KV_SPACE (recoverable) gets its message too.
template <class H>
llaisysStatus_t model_step(H model, llaisysKVCache_t cache, const llaisysBatch_t *batch,
                           const llaisysSamplingParams_t *params, llaisysStepOutput_t *out,
                           const llaisysBatchEmbeds_t *embeds = nullptr) noexcept {
    llaisysStatus_t status = LLAISYS_STATUS_OK;
    llaisysStatus_t guarded = guard([&] {
        const auto m = live(model, "model");
        const auto c = live(cache, "cache");
        LLAISYS_CHECK_ARG(batch != nullptr, "batch is NULL");
        LLAISYS_CHECK_ARG(out != nullptr, "out is NULL");
        status = m->step(*c, *batch, params, *out, embeds);
    });
    if (guarded != LLAISYS_STATUS_OK) return guarded;
    if (status == LLAISYS_STATUS_NO_KV_SPACE) {
        return report(status, "the KV cache has too few free cells for this batch");
    }
    return status;
}

// A KV cache shaped for the model (enums checked).
// The enums come by reference: a caller's out-of-range value is only read through enum_arg
// (copying it as the enum type is what UBSan calls an invalid load).
inline std::shared_ptr<kv::KVCache> model_kv_cache(const models::Model &m, const llaisysKVLayout_t &layout,
                                                   const llaisysDataType_t &dtype, size_t n_slots,
                                                   size_t block_size) {
    return m.create_kv_cache(enum_arg(layout), enum_arg(dtype), n_slots, block_size);
}

}  // namespace llaisys::capi
