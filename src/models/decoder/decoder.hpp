// A decoder-only transformer for every supported architecture (include/llaisys/models/model.h):
// the config (params.hpp), the weights (weights.hpp), the run state (workspace + KV plan), and
// one step() whose forward (decoder.cpp) reads top to bottom and runs on every device through
// its Backend (backend.hpp).
#pragma once

#include "../../kv_cache/kv_cache.hpp"
#include "backend.hpp"
#include "params.hpp"
#include "weights.hpp"
#include "workspace.hpp"

#include <memory>
#include <string>
#include <vector>

namespace llaisys::models {

class Model {
public:
    Model(const Config &config, llaisysDeviceType_t device, int device_id);
    ~Model();
    Model(const Model &) = delete;
    Model &operator=(const Model &) = delete;

    const Config &config() const { return c_; }
    llaisysDeviceType_t device() const { return device_; }
    int device_id() const { return device_id_; }

    // By HF `name` when not NULL, else by (kind, layer); see WeightStore::set.
    void set_weight(const char *name, llaisysWeightKind_t kind, int32_t layer, const void *data,
                    llaisysDataType_t dtype, const std::vector<size_t> &shape) {
        be_->drop_graphs();  // a graph holds the old weights' addresses
        store_.set(name, kind, layer, data, dtype, shape);
    }
    std::vector<std::string> missing_weights() const { return store_.missing(); }
    llaisysModelStats_t stats() const;

    // A KV cache shaped for this model, with its RoPE table for seq_add.
    std::shared_ptr<kv::KVCache> create_kv_cache(llaisysKVLayout_t layout, llaisysDataType_t dtype, size_t n_slots,
                                                 size_t block_size) const;

    // One engine step. Returns NO_KV_SPACE with nothing changed when a SLOT cache is full;
    // throws for malformed input before anything is written. `embeds` (NULL: none) gives some
    // tokens' input rows instead of their embedding lookup (llaisysModelStepEmbeds).
    llaisysStatus_t step(kv::KVCache &cache, const llaisysBatch_t &batch, const llaisysSamplingParams_t *params,
                         const llaisysStepOutput_t &out, const llaisysBatchEmbeds_t *embeds = nullptr);

    // Runs the padded decode step of every bucket up to max_rows at the narrowest table width,
    // over `cache`, with padding rows only (nothing is written to the cache): on a GPU with
    // LLAISYS_CUDA_GRAPHS=1 this captures their graphs at load instead of at the first step of
    // each shape. The number of shapes run; 0 where the backend does not pad, for a SLOT cache,
    // or a model with sparse layers.
    size_t capture_graphs(kv::KVCache &cache, size_t max_rows);

private:
    void check_cache(const kv::KVCache &cache) const;                    // decoder.cpp
    void validate_batch(const kv::KVCache &cache, const llaisysBatch_t &b) const;  // batch.cpp
    // batch.cpp: checks embeds against b; b with 0 for the embedded tokens' ids (in ids_) when
    // there are any, else b itself
    llaisysBatch_t with_embeds(const llaisysBatch_t &b, const llaisysBatchEmbeds_t *embeds);
    bool plan_kv(kv::KVCache &cache, const llaisysBatch_t &b);                    // batch.cpp: fills plan_
    // decoder.cpp: the layers over the n rows of ws, then the sample rows' head
    void forward(Workspace &ws, kv::KVCache &cache, size_t n, const llaisysBatchEmbeds_t *embeds);
    void moe_ffn(Workspace &ws, const LayerWeights &L, size_t n);
    void finish_rows(const llaisysBatch_t &b, const llaisysSamplingParams_t *params,
                     const llaisysStepOutput_t &out);
    // decoder.cpp: the shape a validated step is padded to (padded_decode.hpp), {0, 0} when it
    // runs as it comes; then the padded step itself
    PaddedShape padded_shape(const kv::KVCache &cache, const llaisysBatch_t &b, const llaisysSamplingParams_t *params,
                             const llaisysBatchEmbeds_t *embeds) const;
    void padded_step(kv::KVCache &cache, const llaisysBatch_t &b, PaddedShape shape,
                     const llaisysSamplingParams_t *params, const llaisysStepOutput_t &out);
    // the padded batch pb (pad_.pad) from the embedding to the logits, in pad_ws_
    void padded_forward(kv::KVCache &cache, const llaisysBatch_t &pb, PaddedShape shape);
    bool pads(const kv::KVCache &cache) const;  // whether decode steps over cache are padded
    void reserve_padded(size_t rows);

    Config c_;
    llaisysDeviceType_t device_;
    int device_id_;
    WeightStore store_;
    KvPlan plan_;
    std::vector<int64_t> ids_;         // [n_tokens] the step's token ids with embedded rows zeroed
    Workspace ws_;                     // declared before be_: released after the backend has drained
    PaddedDecode pad_;                 // the padded step's host arrays
    Workspace pad_ws_;                 // the padded steps' own: graphs bake its addresses in
    std::unique_ptr<Backend> be_;
};

}  // namespace llaisys::models
