// Qwen2 in the core: three structs for three concerns (config, weights, run state) and one
// step() that reads top to bottom (forward.cpp).
#pragma once

#include "../../kv_cache/kv_cache.hpp"
#include "../../ops/linear/cpu/logit_screen.hpp"
#include "../../ops/linear/cpu/packed.hpp"
#include "../../tensor/tensor.hpp"
#include "llaisys/models/qwen2.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llaisys::models::qwen2 {

using packed_t = std::unique_ptr<ops::cpu::PackedWeight>;

// A linear layer's weight W [n, k], in the model dtype, stored once in the form its device's
// GEMM streams: on the CPU packed at load into panels (ops/linear/cpu/packed.hpp, host
// memory; the HF-layout copy is never kept), on a GPU as the HF layout in device memory
// (cuBLAS reads it as is). Exactly one of the two is set.
struct LinearWeight {
    packed_t packed;  // CPU
    tensor_t dense;   // NVIDIA: [n, k]
};

struct LayerWeights {
    tensor_t in_norm;        // [H]
    LinearWeight qkv_w;      // [(nh + 2 nkv) * hd, H]  rows: q heads, then k heads, then v heads
    tensor_t qkv_b;          // [(nh + 2 nkv) * hd]
    LinearWeight o_w;        // [H, nh * hd]
    tensor_t post_norm;      // [H]
    LinearWeight gate_up_w;  // [2 I, H]  rows: gate, then up
    LinearWeight down_w;     // [H, I]
};

struct Weights {
    tensor_t embed;        // [V, H]; null when tied: the lookup then reads rows of lm_head
    tensor_t final_norm;   // [H]
    LinearWeight lm_head;  // [V, H]; holds the embedding too when tied (stored once)
    // CPU: an int8 copy of lm_head that finds greedy rows' tokens exactly while reading half
    // its bytes (logit_screen.hpp); null on a GPU or with LLAISYS_GREEDY_SCREEN=0.
    std::unique_ptr<ops::cpu::LogitScreen> screen;
    std::vector<LayerWeights> layers;
};

// Where a named HF weight lands: rows [row0, row0 + shape[0]) of `dst`, or of `packed`
// when that is set (a dense linear weight on a GPU is a plain `dst`).
struct WeightSlot {
    tensor_t dst;
    ops::cpu::PackedWeight *packed;  // owned by Weights
    size_t row0;
    std::vector<size_t> shape;  // the HF shape
    bool set = false;
};

// Per-step buffers, f32, grown (never shrunk) when a larger batch arrives.
struct RunState {
    size_t capacity_tokens = 0;
    size_t capacity_samples = 0;
    std::vector<float> x;       // [n, H] residual stream
    std::vector<float> h;       // [n, H] normed input of a block
    std::vector<float> qkv;     // [n, (nh + 2 nkv) * hd]
    std::vector<float> attn;    // [n, nh * hd]
    std::vector<float> proj;    // [n, H] output of o_proj / down_proj
    std::vector<float> gate_up; // [n, 2 I]
    std::vector<float> act;     // [n, I]
    std::vector<float> xs;      // [n_sample, H] final hidden of the sample rows
    std::vector<float> logits;  // [n_sample, V]
    // attention view (host index arrays)
    std::vector<int32_t> kv_start;  // [n_seqs + 1]
    std::vector<int32_t> kv_slots;  // [total visible]
    std::vector<int64_t> kv_pos;    // [total visible]
    std::vector<int64_t> write_slot;  // [n] where each token's K/V goes
};

// The GPU's run state (nvidia/forward_nvidia.cpp): stream, device buffers, pinned staging.
struct NvidiaState;

class Model {
public:
    Model(const llaisysQwen2Meta_t &meta, llaisysDeviceType_t device, int device_id);

    const llaisysQwen2Meta_t &meta() const { return meta_; }
    llaisysDeviceType_t device() const { return device_; }
    int device_id() const { return device_id_; }

    void set_weight(const std::string &name, const void *data, llaisysDataType_t dtype,
                    const std::vector<size_t> &shape);
    std::vector<std::string> missing_weights() const;

    // One engine step (forward.cpp). Returns NO_KV_SPACE with nothing changed when a SLOT
    // cache is full.
    llaisysStatus_t step(kv::KVCache &cache, const llaisysBatch_t &batch, const llaisysSamplingParams_t *params,
                         const llaisysStepOutput_t &out);

private:
    void validate_batch(const kv::KVCache &cache, const llaisysBatch_t &b) const;
    bool plan_kv(kv::KVCache &cache, const llaisysBatch_t &b);  // fills write_slot and the view
    void reserve(size_t n_tokens, size_t n_sample);
    void forward_layers(kv::KVCache &cache, const llaisysBatch_t &b);
    // The forward and sampling of step() on an NVIDIA GPU, after validation and plan_kv
    // (nvidia/forward_nvidia.cpp; only in builds with the NVIDIA backend).
    void step_nvidia(kv::KVCache &cache, const llaisysBatch_t &b, const llaisysSamplingParams_t *params,
                     const llaisysStepOutput_t &out);

    llaisysQwen2Meta_t meta_;
    llaisysDeviceType_t device_;
    int device_id_;
    Weights w_;
    std::map<std::string, WeightSlot> slots_;  // HF name -> destination
    RunState rs_;                      // CPU
    std::shared_ptr<NvidiaState> gpu_;  // NVIDIA, created by the first step
};

}  // namespace llaisys::models::qwen2
