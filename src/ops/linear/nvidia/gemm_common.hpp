// What the float and the quantized CUDA linears share: one cuBLAS handle and one scratch
// buffer per (device, thread), and the dtype conversion kernel launcher. Split-K attention
// borrows the scratch buffer (thread_scratch), in stream order with the linears.
#pragma once

#include "llaisys.h"

#include "cublas_loader.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// This thread's state on one device: its cuBLAS handle, the handle's workspace and its
// scratch buffer. Both linears of a thread share it, so their calls must be ordered on one
// stream (never nested).
struct DeviceState {
    cublas::Handle handle = nullptr;
    std::byte *workspace = nullptr;  // [workspace_bytes] cuBLAS's workspace (core::allocate), bound to handle
    size_t workspace_bytes = 0;
    std::byte *scratch = nullptr;  // [scratch_bytes] device memory from core::allocate
    size_t scratch_bytes = 0;
};

// The calling thread's state for device_id, its cuBLAS handle created on first use with a
// workspace of our own (cublas::bind_workspace: 32 MiB on sm_90 and later, 4 MiB before), so
// cuBLAS allocates nothing the stats miss. Released with the scratch when the thread exits.
DeviceState &device_state(int device_id);

// A scratch buffer of at least `bytes` on this state: grown by half again when too small,
// after synchronizing the device (earlier launches may still read the old buffer).
std::byte *scratch(DeviceState &s, int device_id, size_t bytes);

// The calling thread's scratch buffer on device_id (the one `scratch` grows), for kernels
// that need no cuBLAS: no handle is created. Same lifetime rules as `scratch`.
std::byte *thread_scratch(int device_id, size_t bytes);

// A count of the scratch buffers (and cuBLAS workspaces, split counters) released so far, all
// threads and devices together. A CUDA graph bakes in the scratch pointers its kernels were
// captured with: it may be replayed only while this count is what it was at the capture.
uint64_t scratch_epoch();
// Counts one release (scratch_epoch); every owner of kernel scratch calls it after releasing.
void scratch_released();

// Bytes of all threads' scratch buffers and cuBLAS workspaces on device_id now (counted in
// the allocator's stats too; llaisysModelStats_t.scratch_bytes reports them).
size_t scratch_bytes(int device_id);

// x rounded up to 256 bytes (each scratch region starts aligned).
inline size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

// dst [count] of ddt = src [count] of sdt (f32, f16, bf16), asynchronously on stream.
void convert_dtype(void *dst, llaisysDataType_t ddt, const void *src, llaisysDataType_t sdt, size_t count,
                   cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
