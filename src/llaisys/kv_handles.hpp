// The KV cache handle type, shared by its wrappers (kv_cache.cc, and the model wrappers
// through model_handles.hpp).
#pragma once

#include "../kv_cache/kv_cache.hpp"
#include "handles.hpp"
#include "llaisys/kv_cache.h"

LLAISYS_HANDLE_TYPE(llaisysKVCache_t, llaisys::kv::KVCache, llaisys::capi::HandleKind::KVCache);
