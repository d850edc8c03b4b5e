// C handle structs shared by the KV cache and model wrappers.
#pragma once

#include "../kv_cache/kv_cache.hpp"
#include "../models/qwen2/model.hpp"

#include <memory>

struct LlaisysKVCache {
    std::unique_ptr<llaisys::kv::KVCache> cache;
};

struct LlaisysQwen2Model {
    std::unique_ptr<llaisys::models::qwen2::Model> model;
};
