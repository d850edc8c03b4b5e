// One engine step on an NVIDIA GPU: the same forward as forward.cpp, layer by layer, with
// the CUDA launchers of src/ops/*/nvidia/ on one stream of the model's own.
//
// Per step the host does validation and plan_kv (forward.cpp) as on the CPU, then:
//   1. packs the step's index arrays (token ids, positions, write slots, the attention view,
//      the sample rows) into one pinned staging buffer and copies it to the device in one
//      cudaMemcpyAsync;
//   2. queues every kernel of the forward on the stream (nothing waits on the host);
//   3. for the sample rows only: gathers their hidden rows, final norm, lm_head, and samples
//      on the device (sampling/nvidia), so only ids and logprobs come back (plus the logits
//      or hidden rows when the caller asked for them).
// Activations are f32 like on the CPU; each linear converts its input to the weight dtype and
// multiplies on the tensor cores with f32 accumulation (ops/linear/nvidia).
#include "../model.hpp"

#include "../../../core/allocator.hpp"
#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../ops/elementwise/nvidia/elementwise_nvidia.hpp"
#include "../../../ops/embedding/nvidia/embedding_nvidia.hpp"
#include "../../../ops/linear/nvidia/linear_nvidia.hpp"
#include "../../../ops/paged_attention/nvidia/kv_write_nvidia.hpp"
#include "../../../ops/paged_attention/nvidia/paged_attention_nvidia.hpp"
#include "../../../ops/rms_norm/nvidia/rms_norm_nvidia.hpp"
#include "../../../ops/rope/nvidia/rope_nvidia.hpp"
#include "../../../ops/swiglu/nvidia/swiglu_nvidia.hpp"
#include "../../../sampling/nvidia/sampler_nvidia.hpp"
#include "../../../utils/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace llaisys::models::qwen2 {
namespace {

using device::nvidia::DeviceGuard;

// A buffer from the library allocator (caching on the GPU), grown and never shrunk.
class Buffer {
public:
    Buffer(llaisysMemoryKind_t kind, int device_id) : kind_(kind), device_id_(device_id) {}
    ~Buffer() { release(); }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;

    std::byte *data() const { return data_; }
    template <class T>
    T *as() const { return reinterpret_cast<T *>(data_); }
    void reserve(size_t bytes) {
        if (bytes <= size_) return;
        release();
        data_ = static_cast<std::byte *>(core::allocate(LLAISYS_DEVICE_NVIDIA, device_id_, kind_, bytes));
        size_ = bytes;
    }

private:
    void release() {
        if (data_) core::release(LLAISYS_DEVICE_NVIDIA, device_id_, kind_, data_);
        data_ = nullptr;
        size_ = 0;
    }
    llaisysMemoryKind_t kind_;
    int device_id_;
    std::byte *data_ = nullptr;
    size_t size_ = 0;
};

// Offsets of the step's index arrays inside one staging buffer (8-byte aligned each).
struct IndexLayout {
    size_t token_ids, positions, write_slot, sample_rows;  // int64 [n], [n], [n], [n_sample]
    size_t query_start, kv_start;                           // int32 [n_seqs + 1] each
    size_t kv_slots, kv_pos;                                // int32 / int64 [n_visible]
    size_t bytes;
};

IndexLayout layout_of(size_t n, size_t n_seqs, size_t n_visible, size_t n_sample) {
    IndexLayout L{};
    size_t at = 0;
    auto take = [&](size_t count, size_t elem) {
        size_t off = at;
        at += (count * elem + 7) / 8 * 8;
        return off;
    };
    L.token_ids = take(n, 8);
    L.positions = take(n, 8);
    L.write_slot = take(n, 8);
    L.sample_rows = take(n_sample, 8);
    L.query_start = take(n_seqs + 1, 4);
    L.kv_start = take(n_seqs + 1, 4);
    L.kv_slots = take(n_visible, 4);
    L.kv_pos = take(n_visible, 8);
    L.bytes = at;
    return L;
}

}  // namespace

struct NvidiaState {
    explicit NvidiaState(int id)
        : device_id(id),
          staging(LLAISYS_MEMORY_PINNED_HOST, id),
          index(LLAISYS_MEMORY_DEVICE, id),
          x(LLAISYS_MEMORY_DEVICE, id),
          h(LLAISYS_MEMORY_DEVICE, id),
          qkv(LLAISYS_MEMORY_DEVICE, id),
          attn(LLAISYS_MEMORY_DEVICE, id),
          proj(LLAISYS_MEMORY_DEVICE, id),
          gate_up(LLAISYS_MEMORY_DEVICE, id),
          act(LLAISYS_MEMORY_DEVICE, id),
          xs(LLAISYS_MEMORY_DEVICE, id),
          logits(LLAISYS_MEMORY_DEVICE, id) {
        DeviceGuard guard(id);
        LLAISYS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    }
    ~NvidiaState() {
        if (stream) {
            DeviceGuard guard(device_id);
            (void)cudaStreamSynchronize(stream);  // the buffers below must not be in use
            (void)cudaStreamDestroy(stream);
        }
    }
    NvidiaState(const NvidiaState &) = delete;
    NvidiaState &operator=(const NvidiaState &) = delete;

    int device_id;
    cudaStream_t stream = nullptr;
    Buffer staging;  // pinned host: the step's index arrays (IndexLayout)
    Buffer index;    // device copy of staging
    // f32 activations, as RunState on the CPU
    Buffer x;        // [n, H] residual stream
    Buffer h;        // [n, H] normed input of a block
    Buffer qkv;      // [n, (nh + 2 nkv) * hd]
    Buffer attn;     // [n, nh * hd]
    Buffer proj;     // [n, H]
    Buffer gate_up;  // [n, 2 I]
    Buffer act;      // [n, I]
    Buffer xs;       // [n_sample, H]
    Buffer logits;   // [n_sample, V]
};

void Model::step_nvidia(kv::KVCache &cache, const llaisysBatch_t &b, const llaisysSamplingParams_t *params,
                        const llaisysStepOutput_t &out) {
    DeviceGuard guard(device_id_);
    if (!gpu_) gpu_ = std::make_shared<NvidiaState>(device_id_);
    NvidiaState &g = *gpu_;
    RunState &rs = rs_;  // host side of the attention view (plan_kv)
    cudaStream_t st = g.stream;
    const size_t n = b.n_tokens, H = meta_.hidden_size, I = meta_.intermediate_size, hd = meta_.head_dim;
    const size_t V = meta_.vocab_size, nh = meta_.n_heads, nkv = meta_.n_kv_heads;
    const size_t q_dim = nh * hd, kv_dim = nkv * hd, qkv_dim = q_dim + 2 * kv_dim;
    const size_t n_sample = b.n_sample, n_visible = rs.kv_slots.size();
    const llaisysDataType_t f32 = LLAISYS_DTYPE_F32, wdt = meta_.dtype;
    const float scale = 1.0f / std::sqrt(float(hd));

    // 1. index arrays: host staging -> device, one copy
    const IndexLayout ix = layout_of(n, b.n_seqs, n_visible, n_sample);
    g.staging.reserve(ix.bytes);
    g.index.reserve(ix.bytes);
    std::byte *hs = g.staging.data();
    std::memcpy(hs + ix.token_ids, b.token_ids, n * sizeof(int64_t));
    std::memcpy(hs + ix.positions, b.positions, n * sizeof(int64_t));
    std::memcpy(hs + ix.write_slot, rs.write_slot.data(), n * sizeof(int64_t));
    for (size_t i = 0; i < n_sample; i++) reinterpret_cast<int64_t *>(hs + ix.sample_rows)[i] = b.sample_rows[i];
    std::memcpy(hs + ix.query_start, b.query_start, (b.n_seqs + 1) * sizeof(int32_t));
    std::memcpy(hs + ix.kv_start, rs.kv_start.data(), (b.n_seqs + 1) * sizeof(int32_t));
    std::memcpy(hs + ix.kv_slots, rs.kv_slots.data(), n_visible * sizeof(int32_t));
    std::memcpy(hs + ix.kv_pos, rs.kv_pos.data(), n_visible * sizeof(int64_t));
    LLAISYS_CUDA_CHECK(cudaMemcpyAsync(g.index.data(), hs, ix.bytes, cudaMemcpyHostToDevice, st));
    const std::byte *dix = g.index.data();
    auto i64 = [&](size_t off) { return reinterpret_cast<const int64_t *>(dix + off); };
    auto i32 = [&](size_t off) { return reinterpret_cast<const int32_t *>(dix + off); };
    const ops::cpu::ViewBounds bounds = ops::cpu::view_bounds(b.n_seqs, b.query_start, rs.kv_start.data());
    const ops::cpu::AttentionView view{b.n_seqs, i32(ix.query_start), i64(ix.positions), i32(ix.kv_start),
                                       i32(ix.kv_slots), i64(ix.kv_pos)};

    // 2. the layers (f32 activations)
    g.x.reserve(n * H * 4);
    g.h.reserve(n * H * 4);
    g.qkv.reserve(n * qkv_dim * 4);
    g.attn.reserve(n * q_dim * 4);
    g.proj.reserve(n * H * 4);
    g.gate_up.reserve(n * 2 * I * 4);
    g.act.reserve(n * I * 4);
    const tensor_t &embed = w_.embed ? w_.embed : w_.lm_head.dense;  // tied: lm_head holds the embedding
    ops::nvidia::embedding(g.x.data(), f32, i64(ix.token_ids), embed->data(), wdt, n, V, H, st);
    ops::nvidia::rms_norm(g.h.data(), g.x.data(), f32, w_.layers[0].in_norm->data(), wdt, n, H, meta_.rms_norm_eps,
                          st);
    for (size_t l = 0; l < meta_.n_layers; l++) {
        const LayerWeights &L = w_.layers[l];
        // attention block (h = in_norm(x) already)
        ops::nvidia::linear(g.qkv.data(), g.h.data(), f32, L.qkv_w.dense->data(), L.qkv_b->data(), wdt, n, qkv_dim, H,
                            device_id_, st);  // [n, qkv_dim]
        ops::nvidia::rope(g.qkv.data(), g.qkv.data(), i64(ix.positions), f32, n, nh, hd, qkv_dim, meta_.rope_theta, st);
        std::byte *k_rows = g.qkv.data() + q_dim * 4;
        ops::nvidia::rope(k_rows, k_rows, i64(ix.positions), f32, n, nkv, hd, qkv_dim, meta_.rope_theta, st);
        ops::nvidia::kv_write(cache.k(l), cache.v(l), cache.dtype(), g.qkv.data(), f32, qkv_dim, q_dim, q_dim + kv_dim,
                              i64(ix.write_slot), n, kv_dim, st);
        ops::nvidia::paged_attention(g.attn.data(), q_dim, g.qkv.data(), qkv_dim, f32, cache.k(l), cache.v(l),
                                     cache.dtype(), view, n, bounds.max_q, bounds.max_kv, nh, nkv, hd, hd, scale, st);
        ops::nvidia::linear(g.proj.data(), g.attn.data(), f32, L.o_w.dense->data(), nullptr, wdt, n, H, q_dim,
                            device_id_, st);  // [n, H]
        // MLP block: x += o_proj; h = post_norm(x)
        ops::nvidia::add_rms_norm(g.h.data(), g.x.data(), g.proj.data(), f32, L.post_norm->data(), wdt, n, H,
                                  meta_.rms_norm_eps, st);
        ops::nvidia::linear(g.gate_up.data(), g.h.data(), f32, L.gate_up_w.dense->data(), nullptr, wdt, n, 2 * I, H,
                            device_id_, st);  // [n, 2 I]
        ops::nvidia::swiglu(g.act.data(), g.gate_up.data(), g.gate_up.data() + I * 4, f32, n, I, 2 * I, I, st);
        ops::nvidia::linear(g.proj.data(), g.act.data(), f32, L.down_w.dense->data(), nullptr, wdt, n, H, I,
                            device_id_, st);  // [n, H]
        if (l + 1 < meta_.n_layers) {  // x += down_proj; h = next layer's in_norm(x)
            ops::nvidia::add_rms_norm(g.h.data(), g.x.data(), g.proj.data(), f32, w_.layers[l + 1].in_norm->data(), wdt,
                                      n, H, meta_.rms_norm_eps, st);
        } else {  // the final norm runs on the sampled rows only
            ops::nvidia::binary(ops::cpu::BinaryOp::Add, g.x.data(), g.x.data(), g.proj.data(), f32, n * H, st);
        }
    }
    if (n_sample == 0) {
        LLAISYS_CUDA_CHECK(cudaStreamSynchronize(st));  // the KV writes have landed; staging is free again
        return;
    }

    // 3. sample rows: gather (an embedding lookup into the [n, H] rows), final norm, lm_head
    g.xs.reserve(n_sample * H * 4);
    ops::nvidia::embedding(g.xs.data(), f32, i64(ix.sample_rows), g.x.data(), f32, n_sample, n, H, st);
    ops::nvidia::rms_norm(g.xs.data(), g.xs.data(), f32, w_.final_norm->data(), wdt, n_sample, H, meta_.rms_norm_eps,
                          st);
    if (out.hidden) {
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(out.hidden, g.xs.data(), n_sample * H * 4, cudaMemcpyDeviceToHost, st));
    }
    if (params || out.logits) {
        g.logits.reserve(n_sample * V * 4);
        ops::nvidia::linear(g.logits.data(), g.xs.data(), f32, w_.lm_head.dense->data(), nullptr, wdt, n_sample, V, H,
                            device_id_, st);  // [n_sample, V]
        if (out.logits) {
            LLAISYS_CUDA_CHECK(
                cudaMemcpyAsync(out.logits, g.logits.data(), n_sample * V * 4, cudaMemcpyDeviceToHost, st));
        }
    }
    if (params) {
        // may use the logits as scratch: queued after the copy above, so the copy sees them raw;
        // returns once the stream is synchronized
        sampling::nvidia::sample(g.logits.as<float>(), n_sample, V, params, out.sample, device_id_, st);
    } else {
        LLAISYS_CUDA_CHECK(cudaStreamSynchronize(st));  // the hidden/logits copies have landed
    }
}

}  // namespace llaisys::models::qwen2
