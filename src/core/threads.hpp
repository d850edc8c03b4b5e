// How many threads the CPU kernels use: one process-wide count, set through the C ABI
// (llaisysSetNumThreads) and applied to the OpenMP team of whichever thread calls into the core.
//
// OpenMP's own setter (omp_set_num_threads) only changes the calling thread's ICV, and the
// engine calls the core from a loop thread, not the one that configured it. So the count lives
// here, and every C ABI entry point calls apply_threads() (src/llaisys/guard.hpp), which hands
// it to OpenMP for the calling thread when it changed since that thread's last call.
#pragma once

namespace llaisys::core {

// Upper bound of set_threads (llaisys.h LLAISYS_MAX_THREADS mirrors it).
constexpr int kMaxThreads = 1024;

// Physical cores this process may run on: distinct (package, core) pairs of the CPUs in its
// affinity mask (SMT siblings count once), capped by a cgroup CPU quota; at least 1.
int physical_cores();

// The count before any set_threads: OMP_NUM_THREADS when the environment sets it (OpenMP
// parsed it), else physical_cores().
int default_threads();

// The current count (default_threads() until set_threads is called).
int threads();

// Set the count; INVALID_ARGUMENT naming `threads` outside 1..kMaxThreads.
void set_threads(int n);

// Make the calling thread's next parallel regions use threads() (cheap when unchanged).
void apply_threads();

}  // namespace llaisys::core
