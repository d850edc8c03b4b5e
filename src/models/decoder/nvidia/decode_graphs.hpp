// CUDA graphs of padded decode steps (padded_decode.hpp): one per shape (rows x block-table
// width), captured over one KV cache and the scratch buffers of the kernels as they were at the
// capture. The first step of a shape runs eagerly (its result, and the warm-up that grows every
// scratch buffer it needs); that same body is then captured, and later steps of the shape replay
// it with one cudaGraphLaunch. A graph is dropped when what it bakes in may have moved:
//   - another KV cache (its K/V addresses);
//   - a kernel scratch buffer released (ops::nvidia::scratch_epoch);
//   - the padded workspace or index arrays regrown, a weight set (the backend calls clear()).
// A shape whose capture fails stays eager, and the reason is printed once.
#pragma once

#include "../../../kv_cache/kv_cache.hpp"
#include "../padded_decode.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

namespace llaisys::models {

class DecodeGraphs {
public:
    DecodeGraphs() = default;
    ~DecodeGraphs();
    DecodeGraphs(const DecodeGraphs &) = delete;
    DecodeGraphs &operator=(const DecodeGraphs &) = delete;

    // LLAISYS_CUDA_GRAPHS: 1 pads pure decode steps and replays them as graphs; "padded" pads
    // them and runs them eagerly, never capturing (what a replay must equal bit for bit); 0 or
    // unset runs every step as it comes. Off by default until the graphs have run on a GPU
    // (doc/nvidia.md, "CUDA graphs").
    enum class Mode { Off, Graphs, PaddedOnly };
    static Mode mode();

    // The padded step's kernels (body) on `stream`: replayed when this shape has a graph over
    // `cache`, else run eagerly and then captured. The caller has synchronized the stream
    // since the last step.
    void run(PaddedShape shape, const kv::KVCache &cache, cudaStream_t stream, const std::function<void()> &body);
    // Destroys every graph (nothing may be running them).
    void clear();

    size_t size() const { return graphs_.size(); }
    double capture_seconds() const { return capture_s_; }

private:
    void capture(PaddedShape shape, cudaStream_t stream, const std::function<void()> &body);
    void refuse(PaddedShape shape, const std::string &why);

    struct Owner {  // what the graphs write: the K/V of one cache
        const void *k = nullptr, *v = nullptr;
        size_t slots = 0;
        bool operator!=(const Owner &o) const { return k != o.k || v != o.v || slots != o.slots; }
    };
    std::map<PaddedShape, cudaGraphExec_t> graphs_;
    std::set<PaddedShape> refused_;  // shapes whose capture failed: eager from then on
    Owner owner_;
    uint64_t epoch_ = 0;  // ops::nvidia::scratch_epoch() the graphs were captured at
    double capture_s_ = 0.0;
    bool told_ = false;  // a refusal was printed
};

}  // namespace llaisys::models
