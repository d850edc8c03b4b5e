// Host side of the GPU sampler: prepare every row's parameters and token lists on the host
// (one pinned buffer, one copy in), launch one block per row, copy ids and logprobs back
// (one copy out), synchronize. The kernel is in sampler_kernel.cuh.
#include "sampler_nvidia.hpp"

#include "../../core/allocator.hpp"
#include "../../device/nvidia/cuda_check.hpp"
#include "../sampler.hpp"
#include "sampler_kernel.cuh"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

namespace llaisys::sampling::nvidia {
namespace {

// Scratch for candidates (8 bytes per logit per row in flight): rows are launched in groups
// that fit this budget.
constexpr size_t kScratchBudget = size_t(256) << 20;

// One allocation from core::allocate, released when the call ends (it goes back to the
// caching allocator, so a step's buffers cost no cudaMalloc after the first).
class Buffer {
public:
    Buffer(int device_id, llaisysMemoryKind_t kind, size_t bytes)
        : id_(device_id), kind_(kind), p_(core::allocate(LLAISYS_DEVICE_NVIDIA, device_id, kind, bytes)) {}
    ~Buffer() {
        try {
            core::release(LLAISYS_DEVICE_NVIDIA, id_, kind_, p_);
        } catch (...) {  // a destructor must not throw; the block is known to the allocator
        }
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    char *get() const { return static_cast<char *>(p_); }

private:
    int id_;
    llaisysMemoryKind_t kind_;
    void *p_;
};

// Waits for the stream when the call ends, also when it throws: buffers declared before it
// are released only after the work that uses them is done.
struct SyncOnExit {
    cudaStream_t stream;
    ~SyncOnExit() { (void)cudaStreamSynchronize(stream); }
};

// Every row's RowDesc and the token lists they point into, packed.
struct Plan {
    std::vector<RowDesc> rows;   // [n_rows]
    std::vector<int32_t> ids;    // [n_list] ids of all rows' lists
    std::vector<float> vals;     // [n_list] bias values / subtrahends / room for raw logits
    std::vector<uint32_t> masks; // [rows with a mask, words] their allowed masks, packed
    uint32_t n_top_max = 0;      // largest n_top of a row
    bool needs_scratch = false;  // some row selects candidates (top-k, top-p, top-N)
};

void append(Plan &plan, uint32_t range[2], const int64_t *ids, const float *vals, size_t n) {
    range[0] = uint32_t(plan.ids.size());
    for (size_t i = 0; i < n; i++) {
        plan.ids.push_back(int32_t(ids[i]));
        plan.vals.push_back(vals ? vals[i] : 0.0f);
    }
    LLAISYS_CHECK_ARG(plan.ids.size() <= UINT32_MAX, "penalty and bias lists are too long for the GPU sampler");
    range[1] = uint32_t(plan.ids.size());
}

Plan make_plan(const llaisysSamplingParams_t *params, size_t n_rows, size_t vocab, const llaisysSampleOutput_t &out) {
    Plan plan;
    plan.rows.resize(n_rows);
    Penalties pen;
    std::vector<std::pair<int64_t, float>> bias;
    std::vector<int64_t> bias_ids, merged, touched;
    std::vector<float> bias_vals;
    for (size_t r = 0; r < n_rows; r++) {
        const llaisysSamplingParams_t &p = params[r];
        RowDesc &d = plan.rows[r];
        d = RowDesc{};
        d.u = uniform(p.seed, p.step);
        d.greedy = p.temperature == 0.0f;
        d.inv_t = d.greedy ? 0.0f : 1.0f / p.temperature;
        d.top_p = p.top_p;
        d.min_p = p.min_p;
        d.repetition = p.repetition_penalty;
        d.k = (p.top_k > 0 && size_t(p.top_k) < vocab) ? uint32_t(p.top_k) : uint32_t(vocab);
        d.n_top = (p.n_logprobs > 0 && out.top_ids && out.top_logprobs) ? uint32_t(p.n_logprobs) : 0;
        d.want_lse = out.logprobs != nullptr || d.n_top > 0;

        // step 1: bias entries grouped by id, each id's values in the caller's order
        bias.clear();
        for (size_t i = 0; i < p.n_bias; i++) bias.emplace_back(p.bias_ids[i], p.bias_values[i]);
        std::stable_sort(bias.begin(), bias.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
        bias_ids.clear();
        bias_vals.clear();
        for (const auto &[id, v] : bias) {
            bias_ids.push_back(id);
            bias_vals.push_back(v);
        }
        append(plan, d.bias, bias_ids.data(), bias_vals.data(), bias_ids.size());
        // steps 2-3, as the CPU computes them
        penalties(p, pen);
        append(plan, d.repeated, pen.repeated.data(), nullptr, pen.repeated.size());
        append(plan, d.counted, pen.counted.data(), pen.subtract.data(), pen.counted.size());
        // the raw logits of the ids steps 1-3 change, for the chosen id's logprob
        touched.clear();
        if (out.logprobs) {
            merged.clear();
            std::set_union(bias_ids.begin(), bias_ids.end(), pen.repeated.begin(), pen.repeated.end(),
                           std::back_inserter(merged));
            std::set_union(merged.begin(), merged.end(), pen.counted.begin(), pen.counted.end(),
                           std::back_inserter(touched));
            touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
        }
        append(plan, d.touched, touched.data(), nullptr, touched.size());
        // step 0: the mask's words, packed (check_params checked its size and that it allows an id)
        if (p.allowed_mask) {
            d.has_mask = 1;
            d.first_allowed = uint32_t(first_allowed(p, vocab));
            d.mask_off = plan.masks.size();
            plan.masks.insert(plan.masks.end(), p.allowed_mask, p.allowed_mask + p.mask_words);
        }

        plan.n_top_max = std::max(plan.n_top_max, d.n_top);
        plan.needs_scratch = plan.needs_scratch || d.n_top > 0 || (!d.greedy && (d.k < vocab || d.top_p < 1.0f));
    }
    return plan;
}

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

// Byte offsets of one buffer laid out the same on the host (pinned) and the device.
struct Layout {
    size_t rows, ids, vals, masks, in_end;          // input: copied host -> device
    size_t token, top_ids, logprob, top_lps, end;   // output: copied device -> host
    Layout(size_t n_rows, size_t n_list, size_t n_mask_words, size_t n_top_max) {
        rows = 0;
        ids = align16(rows + n_rows * sizeof(RowDesc));
        vals = align16(ids + n_list * sizeof(int32_t));
        masks = align16(vals + n_list * sizeof(float));
        in_end = align16(masks + n_mask_words * sizeof(uint32_t));
        token = in_end;
        top_ids = align16(token + n_rows * sizeof(int64_t));
        logprob = align16(top_ids + n_rows * n_top_max * sizeof(int64_t));
        top_lps = align16(logprob + n_rows * sizeof(float));
        end = align16(top_lps + n_rows * n_top_max * sizeof(float));
    }
};

void scatter(const char *host, const Layout &L, const Plan &plan, size_t n_rows, const llaisysSampleOutput_t &out) {
    const auto *token = reinterpret_cast<const int64_t *>(host + L.token);
    const auto *logprob = reinterpret_cast<const float *>(host + L.logprob);
    const auto *top_ids = reinterpret_cast<const int64_t *>(host + L.top_ids);
    const auto *top_lps = reinterpret_cast<const float *>(host + L.top_lps);
    for (size_t r = 0; r < n_rows; r++) {
        out.token_ids[r] = token[r];
        if (out.logprobs) out.logprobs[r] = logprob[r];
        const size_t n_top = plan.rows[r].n_top;
        if (n_top > 0) {
            std::memcpy(out.top_ids + r * out.top_capacity, top_ids + r * plan.n_top_max, n_top * sizeof(int64_t));
            std::memcpy(out.top_logprobs + r * out.top_capacity, top_lps + r * plan.n_top_max, n_top * sizeof(float));
        }
    }
}

}  // namespace

void sample(float *logits, size_t n_rows, size_t vocab, const llaisysSamplingParams_t *params,
            const llaisysSampleOutput_t &out, int device_id, cudaStream_t stream) {
    if (n_rows == 0) return;
    LLAISYS_CHECK_ARG(vocab > 0 && vocab <= size_t(INT32_MAX), "vocab ", vocab, " is outside [1, 2^31) for the GPU sampler");
    LLAISYS_CHECK_ARG(n_rows <= size_t(INT32_MAX), "n_rows ", n_rows, " is too large for the GPU sampler");
    device::nvidia::DeviceGuard guard(device_id);

    const Plan plan = make_plan(params, n_rows, vocab, out);
    const Layout L(n_rows, plan.ids.size(), plan.masks.size(), plan.n_top_max);
    const size_t per_launch = plan.needs_scratch ? std::clamp<size_t>(kScratchBudget / (vocab * 8), 1, n_rows) : n_rows;
    const size_t scratch_each = per_launch * vocab * sizeof(uint32_t);

    Buffer host(device_id, LLAISYS_MEMORY_PINNED_HOST, L.end);
    Buffer dev(device_id, LLAISYS_MEMORY_DEVICE, L.end);
    Buffer scratch(device_id, LLAISYS_MEMORY_DEVICE, plan.needs_scratch ? 2 * scratch_each : 0);
    SyncOnExit sync{stream};  // destroyed before the buffers

    std::memcpy(host.get() + L.rows, plan.rows.data(), n_rows * sizeof(RowDesc));
    std::memcpy(host.get() + L.ids, plan.ids.data(), plan.ids.size() * sizeof(int32_t));
    std::memcpy(host.get() + L.vals, plan.vals.data(), plan.vals.size() * sizeof(float));
    std::memcpy(host.get() + L.masks, plan.masks.data(), plan.masks.size() * sizeof(uint32_t));
    LLAISYS_CUDA_CHECK(cudaMemcpyAsync(dev.get(), host.get(), L.in_end, cudaMemcpyHostToDevice, stream));

    KernelArgs a{};
    a.logits = logits;
    a.vocab = uint32_t(vocab);
    a.rows = reinterpret_cast<const RowDesc *>(dev.get() + L.rows);
    a.list_ids = reinterpret_cast<const int32_t *>(dev.get() + L.ids);
    a.list_vals = reinterpret_cast<float *>(dev.get() + L.vals);
    a.scratch_keys = plan.needs_scratch ? reinterpret_cast<uint32_t *>(scratch.get()) : nullptr;
    a.scratch_ids = plan.needs_scratch ? reinterpret_cast<int32_t *>(scratch.get() + scratch_each) : nullptr;
    a.token = reinterpret_cast<int64_t *>(dev.get() + L.token);
    a.logprob = reinterpret_cast<float *>(dev.get() + L.logprob);
    a.top_ids = reinterpret_cast<int64_t *>(dev.get() + L.top_ids);
    a.top_logprobs = reinterpret_cast<float *>(dev.get() + L.top_lps);
    a.n_top_max = plan.n_top_max;
    a.masks = plan.masks.empty() ? nullptr : reinterpret_cast<const uint32_t *>(dev.get() + L.masks);
    for (size_t r0 = 0; r0 < n_rows; r0 += per_launch) {
        a.row0 = uint32_t(r0);
        const unsigned blocks = unsigned(std::min(per_launch, n_rows - r0));
        sample_rows<<<blocks, kThreads, 0, stream>>>(a);
        LLAISYS_CUDA_CHECK(cudaGetLastError());
    }

    LLAISYS_CUDA_CHECK(cudaMemcpyAsync(host.get() + L.token, dev.get() + L.token, L.end - L.token,
                                       cudaMemcpyDeviceToHost, stream));
    LLAISYS_CUDA_CHECK(cudaStreamSynchronize(stream));
    scatter(host.get(), L, plan, n_rows, out);
}

}  // namespace llaisys::sampling::nvidia
