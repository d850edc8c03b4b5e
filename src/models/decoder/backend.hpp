// The per-device executor of the decoder: the primitives the one forward (decoder.cpp) is
// written in. A backend sees raw activation pointers into the model's workspace (f32, memory
// of its device), the model's weights and config; it never sees the layer loop.
//
// On the CPU each call runs to completion (OpenMP inside). On a GPU calls are queued on the
// model's stream in order; host-visible results (to_host, head) are complete after finish()
// or head() returns.
#pragma once

#include "../../kv_cache/kv_cache.hpp"
#include "llaisys/models/model.h"
#include "padded_decode.hpp"
#include "params.hpp"
#include "weights.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace llaisys::models {

// Where the step's tokens write K/V and what each row attends: both KV layouts reduced to one
// view (plan_kv in batch.cpp). Host arrays, reused from step to step.
struct KvPlan {
    std::vector<int64_t> write_slot;  // [n_tokens] cache slot of each token's K/V
    std::vector<int32_t> kv_start;    // [n_seqs + 1] range of each row in kv_slots / kv_pos
    std::vector<int32_t> kv_slots;    // [n_visible] cache slot of each visible entry
    std::vector<int64_t> kv_pos;      // [n_visible] its position, ascending within a row
    // The BLOCK layout for a backend that reads block tables (Backend::reads_block_tables):
    // the batch's own arrays (valid for the step), and the lists above stay empty; key j of
    // row s (position j) is in slot block_tables[s * max_blocks + j / block_size] *
    // block_size + j % block_size. block_tables == nullptr: the lists above are the view.
    const int32_t *block_tables = nullptr;  // [n_seqs, max_blocks]
    const int32_t *context_lens = nullptr;  // [n_seqs]
    size_t max_blocks = 0, block_size = 0;
};

class Backend {
public:
    virtual ~Backend() = default;

    // Makes the backend's device current for the life of the returned object (one step);
    // the previous device is restored when it goes. NULL where there is nothing to do (CPU).
    struct Scope {
        virtual ~Scope() = default;
    };
    virtual std::unique_ptr<Scope> enter() = 0;

    // Whether begin_step takes a BLOCK layout's attention view as its block tables (KvPlan's
    // block fields) instead of a list of every visible key's slot flattened on the host.
    virtual bool reads_block_tables() const { return false; }

    // Makes the step's index arrays (token ids, positions, write slots, the attention view,
    // the sample rows) readable by the kernels below; b and plan were validated.
    virtual void begin_step(const llaisysBatch_t &b, const KvPlan &plan) = 0;

    // x [n, H] = embedding rows of the step's token ids.
    virtual void embed(float *x, size_t n) = 0;
    // x[rows[j]] = data[j] for j < n_rows: input rows given by the caller (host f32 [n_rows, H],
    // read before the call returns; rows validated), replacing those tokens' embedding rows.
    virtual void embed_rows(float *x, const float *data, const int32_t *rows, size_t n_rows) = 0;
    // out [m, d] = rms_norm(in [m, d]) * w [d]; out may alias in.
    virtual void rms_norm(float *out, const float *in, const Tensor &w, size_t m, size_t d) = 0;
    // residual [m, d] += in; out [m, d] = rms_norm(residual) * w.
    virtual void add_rms_norm(float *out, float *residual, const float *in, const Tensor &w, size_t m, size_t d) = 0;
    // out [m, n] = in [m, k] @ W [n, k]^T (+ bias [n] when not null).
    virtual void linear(float *out, const float *in, const LinearWeight &w, const Tensor *bias, size_t m) = 0;
    // x [n, heads, head_dim] (tokens `stride` floats apart): each head RMS-normed with w [head_dim], in place.
    virtual void rms_norm_heads(float *x, const Tensor &w, size_t n, size_t heads, size_t stride) = 0;
    // x [n, heads, head_dim] (tokens `stride` floats apart) rotated in place at the step's
    // positions with the model's frequency table and rope scale.
    virtual void rope(float *x, size_t n, size_t heads, size_t stride) = 0;
    // The step's keys and values, qkv [n, qkv_dim] (k at q_dim, v at q_dim + kv_dim), into
    // `layer` of the cache at the planned write slots.
    virtual void kv_write(kv::KVCache &cache, size_t layer, const float *qkv, size_t n) = 0;
    // out [n, n_heads * head_dim] = attention of the queries in qkv [n, qkv_dim] over `layer`
    // of the cache through the step's view; a key at position k is visible to a query at p
    // when k <= p and (window == 0 or k > p - window).
    virtual void attention(float *out, const float *qkv, const kv::KVCache &cache, size_t layer, uint32_t window) = 0;
    // out [n, width] = silu(gate) * up of gate_up [n, 2 width] (gate first).
    virtual void swiglu(float *out, const float *gate_up, size_t n, size_t width) = 0;

    // Fused forms of the calls above, which a device may run as one launch; the defaults make
    // the separate calls. RoPE on the heads q heads and kv_heads k heads (at q_dim) of qkv
    // [n, qkv_dim], then kv_write of the rotated keys and the values.
    virtual void rope_kv_write(kv::KVCache &cache, size_t layer, float *qkv, size_t n, size_t heads, size_t kv_heads,
                               size_t q_dim, size_t qkv_dim) {
        rope(qkv, n, heads, qkv_dim);
        rope(qkv + q_dim, n, kv_heads, qkv_dim);
        kv_write(cache, layer, qkv, n);
    }
    // out [n, width] = swiglu of in [n, k] @ w^T, w being gate|up [2 width, k]; gate_up
    // [n, 2 width] is scratch the product may go through.
    virtual void linear_swiglu(float *out, float *gate_up, const float *in, const LinearWeight &w, size_t n,
                               size_t width) {
        linear(gate_up, in, w, nullptr, n);
        swiglu(out, gate_up, n, width);
    }

    // Folded norms: whether this step of n tokens should run every residual add inside the GEMV
    // that produces it and every RMSNorm inside the GEMV that reads it (the three calls below),
    // instead of add_rms_norm between them: one launch fewer per norm on a GPU. Only for models
    // without sparse layers.
    virtual bool folds_norms(size_t /*n*/) const { return false; }
    // out [n, w.n] = rms_norm(x [n, k]) * norm_w @ w^T + bias; h [n, k] is scratch the
    // normalised rows may go through.
    virtual void norm_linear(float *out, float *h, const float *x, const Tensor &norm_w, const LinearWeight &w,
                             const Tensor *bias, size_t n) {
        rms_norm(h, x, norm_w, n, w.k);
        linear(out, h, w, bias, n);
    }
    // linear_swiglu of rms_norm(x) * norm_w; h and gate_up scratch.
    virtual void norm_linear_swiglu(float *out, float *gate_up, float *h, const float *x, const Tensor &norm_w,
                                    const LinearWeight &w, size_t n, size_t width) {
        rms_norm(h, x, norm_w, n, w.k);
        linear_swiglu(out, gate_up, h, w, n, width);
    }
    // x [n, w.n] += in [n, k] @ w^T; proj [n, w.n] scratch.
    virtual void linear_residual(float *x, float *proj, const float *in, const LinearWeight &w, size_t n) {
        linear(proj, in, w, nullptr, n);
        add(x, proj, n * w.n);
    }

    // Mixture of experts (a sparse layer's FFN, Model::moe_ffn). moe_route reads the router's
    // logits [n, E] and decides each token's n_experts_per_tok (k) experts and their weights
    // (softmax over E, the top k, renormalised when norm_topk_prob), then orders the n k
    // (token, choice) pairs by expert: the route, held by the backend and read by the three
    // calls after it until the next moe_route.
    virtual void moe_route(const float *logits, size_t n) = 0;
    // xg [n k, H] = the row of x [n, H] of each routed pair, in the route's order.
    virtual void moe_gather(float *xg, const float *x) = 0;
    // out [n k, w.n] = each routed row of in [n k, w.k] times W_e^T of its expert e: a grouped
    // linear that reads the chosen experts' weights only, each once for all its rows.
    virtual void expert_linear(float *out, const float *in, const ExpertWeight &w) = 0;
    // out [n, H] = for each token, the sum over its k pairs of weight * that pair's row of y [n k, H].
    virtual void moe_combine(float *out, const float *y) = 0;
    // out [n, d] += sigmoid(gate [n]) * y [n, d], one gate per row (Qwen2-MoE's shared expert).
    virtual void add_sigmoid_gated(float *out, const float *y, const float *gate, size_t n, size_t d) = 0;
    // x [count] += y [count].
    virtual void add(float *x, const float *y, size_t count) = 0;
    // xs [n_sample, H] = rows sample_rows of x [n, H].
    virtual void gather_rows(float *xs, const float *x, size_t n_sample) = 0;
    // host dst <- src (bytes); complete after finish() (or head()).
    virtual void to_host(void *dst, const float *src, size_t bytes) = 0;
    // lm_head over xs [n_sample, H] into logits [n_sample, V] (workspace), a copy to
    // out.logits when set, and sampling with params (NULL: none) into out.sample; complete on
    // return. Nothing of this is needed when params and out.logits are both NULL.
    virtual void head(const float *xs, float *logits, size_t n_sample, const llaisysSamplingParams_t *params,
                      const llaisysStepOutput_t &out) = 0;
    // Waits for everything queued (KV writes, copies); a no-op on the CPU.
    virtual void finish() = 0;

    // Decode steps at fixed shapes (padded_decode.hpp; Model::padded_step). Whether this backend
    // wants pure decode steps padded: a GPU that replays them as CUDA graphs, the CPU only under
    // LLAISYS_PADDED_DECODE=1 (which tests the padding without a GPU).
    virtual bool pads_decode() const { return false; }
    // begin_step for a padded step of `shape`: on a GPU the index arrays go to addresses fixed
    // per shape, and attention's work is sized for the shape's table width, not the contexts.
    virtual void begin_padded_step(const llaisysBatch_t &b, const KvPlan &plan, PaddedShape /*shape*/) {
        begin_step(b, plan);
    }
    // Runs `body`, which queues a padded step's kernels from the embedding to the logits, all
    // in memory that stays put between steps of `shape` over `cache`. A GPU replays it as a
    // graph captured the first time (the first run is eager, and warms the scratch up).
    virtual void run_padded(PaddedShape /*shape*/, const kv::KVCache & /*cache*/, const std::function<void()> &body) {
        body();
    }
    // Forgets every graph: the memory they were captured over is about to be released.
    virtual void drop_graphs() {}
    // Graphs held now, and the total time spent capturing them (llaisysModelStats_t).
    virtual size_t graphs() const { return 0; }
    virtual double graph_capture_seconds() const { return 0.0; }
    // Bytes of device memory a padded step uses beside the workspace (its fixed index arrays).
    virtual size_t padded_bytes() const { return 0; }
    // head() after its lm_head, over the first ns rows of logits: the copy to out.logits when
    // set, sampling with params into out.sample; complete on return.
    virtual void sample_logits(float *logits, size_t ns, const llaisysSamplingParams_t *params,
                               const llaisysStepOutput_t &out) = 0;
};

// The backends. Both keep references to `c` and `w`, which must outlive them.
std::unique_ptr<Backend> make_cpu_backend(const Config &c, const Weights &w);
// Throws UNSUPPORTED in a build without the NVIDIA backend. Its mixture-of-experts route is
// decided on the host by the CPU's code (one synchronisation per sparse layer), its experts
// run as one linear per chosen expert (doc/nvidia.md).
std::unique_ptr<Backend> make_nvidia_backend(const Config &c, const Weights &w, int device_id);

}  // namespace llaisys::models
