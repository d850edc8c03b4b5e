// The KV cache and model handle types, shared by their wrappers (kv_cache.cc, qwen2.cc).
#pragma once

#include "../kv_cache/kv_cache.hpp"
#include "../models/qwen2/model.hpp"
#include "handles.hpp"
#include "llaisys/kv_cache.h"
#include "llaisys/models/qwen2.h"

LLAISYS_HANDLE_TYPE(llaisysKVCache_t, llaisys::kv::KVCache, llaisys::capi::HandleKind::KVCache);
LLAISYS_HANDLE_TYPE(llaisysQwen2Model_t, llaisys::models::qwen2::Model, llaisys::capi::HandleKind::Model);
