#include "decode_graphs.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../ops/linear/nvidia/gemm_common.hpp"
#include "../../../utils/error.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace llaisys::models {

namespace {
using device::nvidia::is_sticky;
}  // namespace

DecodeGraphs::~DecodeGraphs() {
    try {
        clear();
    } catch (...) {  // at process exit CUDA may be gone already
    }
}

DecodeGraphs::Mode DecodeGraphs::mode() {
    static const Mode m = [] {
        const char *env = std::getenv("LLAISYS_CUDA_GRAPHS");
        if (!env) return Mode::Off;
        const std::string v(env);
        return v == "1" ? Mode::Graphs : v == "padded" ? Mode::PaddedOnly : Mode::Off;
    }();
    return m;
}

void DecodeGraphs::clear() {
    for (auto &[shape, exec] : graphs_) (void)cudaGraphExecDestroy(exec);
    graphs_.clear();
}

void DecodeGraphs::run(PaddedShape shape, const kv::KVCache &cache, cudaStream_t stream,
                       const std::function<void()> &body) {
    const Owner owner{cache.k(0), cache.v(0), cache.n_slots()};
    if (owner != owner_ || ops::nvidia::scratch_epoch() != epoch_) {
        clear();
        owner_ = owner;
    }
    if (auto it = graphs_.find(shape); it != graphs_.end()) {
        LLAISYS_CUDA_CHECK(cudaGraphLaunch(it->second, stream));
        return;
    }
    body();  // eager: this step's result, and every scratch buffer grown to what the shape needs
    if (mode() == Mode::Graphs && refused_.count(shape) == 0) capture(shape, stream, body);
}

// Records body's kernels without running them. The eager run before it left nothing to grow,
// so nothing in body synchronizes or allocates; should something still do so, the capture
// fails, and the shape stays eager.
void DecodeGraphs::capture(PaddedShape shape, cudaStream_t stream, const std::function<void()> &body) {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t epoch = ops::nvidia::scratch_epoch();
    if (epoch != epoch_) {  // the warm-up grew a scratch buffer: the older graphs read the old one
        clear();
        epoch_ = epoch;
    }
    LLAISYS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
        body();
    } catch (const Error &e) {
        (void)cudaStreamEndCapture(stream, &graph);
        if (graph) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        if (e.status() == LLAISYS_STATUS_DEVICE_LOST) throw;
        refuse(shape, e.what());
        return;
    }
    cudaError_t err = cudaStreamEndCapture(stream, &graph);
    cudaGraphExec_t exec = nullptr;
    if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) (void)cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
        if (is_sticky(err)) device::nvidia::cuda_fail(err, "capturing a decode step", __FILE__, __LINE__);
        (void)cudaGetLastError();
        refuse(shape, cudaGetErrorString(err));
        return;
    }
    if (ops::nvidia::scratch_epoch() != epoch) {  // cannot happen without a failed capture; never trust it
        (void)cudaGraphExecDestroy(exec);
        refuse(shape, "a scratch buffer moved during the capture");
        return;
    }
    graphs_[shape] = exec;
    capture_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DecodeGraphs::refuse(PaddedShape shape, const std::string &why) {
    refused_.insert(shape);
    if (told_) return;
    told_ = true;
    std::fprintf(stderr,
                 "llaisys: capturing a CUDA graph of decode steps (%zu rows, %zu block columns) failed: %s; "
                 "steps of that shape run without a graph\n",
                 shape.rows, shape.width, why.c_str());
}

}  // namespace llaisys::models
