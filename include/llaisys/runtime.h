/* Device runtime: devices, memory, copies, streams and events.
 *
 * The same calls work for every device type. On the CPU, streams run work in order on the
 * calling thread (async copies complete before returning) and events time with the host's
 * steady clock; the NVIDIA backend maps them onto CUDA streams and events.
 */
#ifndef LLAISYS_RUNTIME_H
#define LLAISYS_RUNTIME_H

#include "../llaisys.h"

LLAISYS_EXTERN_C_BEGIN

/* What kind of memory an allocation is. */
typedef enum {
    LLAISYS_MEMORY_HOST = 0,        /* ordinary host memory */
    LLAISYS_MEMORY_PINNED_HOST = 1, /* page-locked host memory (plain host memory on CPU) */
    LLAISYS_MEMORY_DEVICE = 2,      /* memory of the device itself */
} llaisysMemoryKind_t;

/* Direction of a copy. */
typedef enum {
    LLAISYS_MEMCPY_H2H = 0,
    LLAISYS_MEMCPY_H2D = 1,
    LLAISYS_MEMCPY_D2H = 2,
    LLAISYS_MEMCPY_D2D = 3,
} llaisysMemcpyKind_t;

/* Opaque handles. */
typedef struct LlaisysStream *llaisysStream_t;
typedef struct LlaisysEvent *llaisysEvent_t;

/* Number of devices of `device` type in this build and machine (0 when the backend is not
 * compiled in or no device is present). `count` must not be NULL. */
LLAISYS_API llaisysStatus_t llaisysGetDeviceCount(llaisysDeviceType_t device, int *count);

/* Static name of the SIMD path the CPU kernels take in this process: "scalar", "avx2",
 * "avx512" or "avx512bf16" (AVX-512 with the bf16 dot products, which bf16 packed linears
 * then use, rounding their activations to bf16). The best the CPU has, or a lower one forced
 * with the environment variable LLAISYS_ISA; chosen once per process. */
LLAISYS_API const char *llaisysCpuIsa(void);

/* 1 when the quantized linear's float path (many activation rows of a block-quantized weight)
 * runs on AMX tiles in this process, weights and activations rounded to bf16 and summed in f32;
 * 0 otherwise. It does where the CPU has AMX-TILE and AMX-BF16, Linux grants the process the
 * tile state, llaisysCpuIsa() is "avx512bf16" and the environment variable LLAISYS_AMX is not
 * "0"; chosen once per process. */
LLAISYS_API int llaisysCpuUsesAmx(void);

/* 1 when this library was built with the AMX kernel of the quantized float path (CMake option
 * LLAISYS_AMX, on where the compiler takes the AMX flags), 0 otherwise: without it
 * llaisysCpuUsesAmx() is 0 on every CPU. */
LLAISYS_API int llaisysCpuAmxBuilt(void);

/* 1 when this CPU executes 256-bit vector ops as two 128-bit halves (AMD Zen 1 and Zen+: family
 * 17h, models below 30h; LLAISYS_SPLIT_256=0|1 overrides it), 0 otherwise. Chosen once per process. */
LLAISYS_API int llaisysCpuSplits256(void);

/* 1 when the block-quantized weights' int8 kernels run on vpdpbusd in this process: AVX-512
 * VNNI (llaisysCpuIsa() "avx512" or "avx512bf16" on a CPU with it), or AVX-VNNI (Intel's client
 * cores without AVX-512; not with llaisysCpuIsa() "scalar" or the environment variable
 * LLAISYS_AVX_VNNI=0); 0 otherwise. Chosen once per process. */
LLAISYS_API int llaisysCpuQuantVnni(void);

/* 1 when block-quantized weights of `dtype` (a llaisysDataType_t) are repacked 16 rows at a time
 * at load in this process (the "x16" layout of the int8 kernels: Q4_K, Q8_0, Q5_0, Q4_1 and Q5_1 from AVX2 on,
 * Q6_K only where those kernels are AVX-512 VNNI's, Q2_K, Q3_K and IQ4_XS where they are AVX-512
 * VNNI's or AVX-VNNI's; none with LLAISYS_QUANT_X16=0 or
 * llaisysCpuIsa() "scalar"), 0 otherwise (any other dtype included). Chosen once per process. */
LLAISYS_API int llaisysCpuQuantRepacked(int dtype);

/* How this process runs a linear over block-quantized weights of `dtype`, into *text: one
 * NUL-terminated line naming the layout (the file's rows or x16 groups), the int8 kernel, the
 * activation row count from which the float path (dequantize + GEMM) takes over and what that
 * runs on, e.g. "q3_k: file rows, int8 on AVX2 row kernels below 128 rows, float path (f32
 * GEMM, AVX2) from there". Owned by the library, valid and unchanged until the process ends.
 * INVALID_ARGUMENT for a dtype that is not block-quantized. Chosen once per process. */
LLAISYS_API llaisysStatus_t llaisysCpuQuantPlan(int dtype, const char **text);

/* Batch invariance, for the whole process (off by default). Off, a CPU linear over
 * block-quantized weights runs the int8 kernels below a crossover of rows per call and the
 * float path (dequantize + GEMM) from it (llaisysCpuQuantPlan), and the two round differently,
 * so a sequence's logits, and at times its greedy tokens, depend on the rows it shares a step
 * with, on how its prompt was cut into chunks and on how much of it came from the prefix cache.
 * On, every such call keeps one path at every row count (the int8 kernels; the float path where
 * LLAISYS_QUANT_F32_ROWS=0 forces it everywhere): prefill runs slower where a crossover was
 * finite, and what remains between a row alone and in a batch is f32 summation order. Float
 * weights and attention have one path at every size already. It does not govern the NVIDIA
 * backend. llaisysSetBatchInvariant: on is 0 or 1 (else INVALID_ARGUMENT); takes effect from the
 * next call, so set it between steps. llaisysGetBatchInvariant: 0 or 1 into *out
 * (INVALID_ARGUMENT if NULL). */
LLAISYS_API llaisysStatus_t llaisysSetBatchInvariant(int on);
LLAISYS_API llaisysStatus_t llaisysGetBatchInvariant(int *out);

/* How far ahead, in bytes, the block-quantized weights' kernels prefetch each weight row in this
 * process, into *bytes (0: not at all, the hardware prefetchers alone), and why, into *reason: a
 * NUL-terminated line naming the CPU kind and the measurement behind the value, or the environment
 * variable LLAISYS_QUANT_PREFETCH=<bytes> (0..65536) that overrode it. The string is owned by the
 * library and stays valid, unchanged, until the process ends; the caller must not free or modify
 * it. Either pointer may be NULL. Chosen once per process from a table of measured CPU kinds
 * (Intel and AMD Zen 4/5: 2048; AMD Zen 1-3 and any CPU not measured: 0). */
LLAISYS_API llaisysStatus_t llaisysCpuQuantPrefetch(size_t *bytes, const char **reason);

/* Threads of the CPU kernels (OpenMP), one count for the whole process, used by every call
 * into the library from any thread after it is set. The default is the number of physical
 * cores the process may run on (SMT siblings count once; affinity mask and cgroup CPU quota
 * respected), or OMP_NUM_THREADS when the environment sets it.
 * llaisysSetNumThreads: INVALID_ARGUMENT (naming `threads`) unless 1 <= threads <=
 * LLAISYS_MAX_THREADS; takes effect from the next call. Do not call it while another thread
 * runs a step. llaisysGetNumThreads: the current count into *out (INVALID_ARGUMENT if NULL).
 * How idle threads wait (spin or sleep) is OpenMP's, read from OMP_WAIT_POLICY and
 * GOMP_SPINCOUNT when the library loads (doc/architecture.md, "Threads"). */
#define LLAISYS_MAX_THREADS 1024
LLAISYS_API llaisysStatus_t llaisysSetNumThreads(int threads);
LLAISYS_API llaisysStatus_t llaisysGetNumThreads(int *out);

/* Make `device_id` the current device of its type for the calling thread. */
LLAISYS_API llaisysStatus_t llaisysSetDevice(llaisysDeviceType_t device, int device_id);

/* Wait until all work queued on the device has finished. */
LLAISYS_API llaisysStatus_t llaisysDeviceSynchronize(llaisysDeviceType_t device, int device_id);

/* Allocate `size` bytes of `kind` memory on (device, device_id) into *out. The caller owns
 * the memory and must release it with llaisysFree with the same device and kind.
 * size 0 gives *out == NULL and LLAISYS_STATUS_OK. */
LLAISYS_API llaisysStatus_t llaisysMalloc(llaisysDeviceType_t device, int device_id,
                                          llaisysMemoryKind_t kind, size_t size, void **out);

/* Release memory from llaisysMalloc. NULL is a no-op. A pointer that did not come from
 * llaisysMalloc with this device and kind is an error and is left alone. */
LLAISYS_API llaisysStatus_t llaisysFree(llaisysDeviceType_t device, int device_id,
                                        llaisysMemoryKind_t kind, void *ptr);

/* Bytes currently handed out (allocated, as requested) and held from the system (reserved,
 * >= allocated: the NVIDIA backend rounds blocks up and caches freed ones) on
 * (device, device_id), for all memory kinds that belong to that device. Either pointer may
 * be NULL. */
LLAISYS_API llaisysStatus_t llaisysMemoryStats(llaisysDeviceType_t device, int device_id,
                                               size_t *allocated, size_t *reserved);

/* Bytes of (device, device_id)'s memory free now and in total, as the system sees it (cudaMemGetInfo on
 * a GPU, so blocks cached by this library count as used; MemAvailable and MemTotal of the host for
 * the CPU). Either pointer may be NULL. The engine sizes its KV pool on a GPU from these. */
LLAISYS_API llaisysStatus_t llaisysGetMemoryInfo(llaisysDeviceType_t device, int device_id, size_t *free,
                                                 size_t *total);

/* Give every cached free block of (device, device_id) back to the system (cudaFree /
 * cudaFreeHost), so reserved counts live blocks only. A no-op on the CPU, which does not
 * cache. Live allocations are untouched. */
LLAISYS_API llaisysStatus_t llaisysEmptyCache(llaisysDeviceType_t device, int device_id);

/* Copy `size` bytes; blocks until done. Host pointers are ordinary or pinned memory. */
LLAISYS_API llaisysStatus_t llaisysMemcpy(llaisysDeviceType_t device, int device_id,
                                          void *dst, const void *src, size_t size,
                                          llaisysMemcpyKind_t kind);

/* Queue a copy on `stream` (NULL: the device's default stream). The buffers must stay
 * valid until the stream is synchronized. */
LLAISYS_API llaisysStatus_t llaisysMemcpyAsync(llaisysDeviceType_t device, int device_id,
                                               void *dst, const void *src, size_t size,
                                               llaisysMemcpyKind_t kind, llaisysStream_t stream);

/* Create a stream on (device, device_id) into *out (NULL on error); the caller frees it with
 * llaisysStreamDestroy. */
LLAISYS_API llaisysStatus_t llaisysStreamCreate(llaisysDeviceType_t device, int device_id,
                                                llaisysStream_t *out);
/* Destroy a stream after its queued work completes. NULL is a no-op returning OK; a
 * destroyed, foreign or non-stream handle is INVALID_ARGUMENT and left alone. */
LLAISYS_API llaisysStatus_t llaisysStreamDestroy(llaisysStream_t stream);
/* Wait for all work queued on `stream`. */
LLAISYS_API llaisysStatus_t llaisysStreamSynchronize(llaisysStream_t stream);

/* Create an event on (device, device_id) into *out (NULL on error); the caller frees it
 * with llaisysEventDestroy. */
LLAISYS_API llaisysStatus_t llaisysEventCreate(llaisysDeviceType_t device, int device_id,
                                               llaisysEvent_t *out);
/* Destroy an event. NULL is a no-op returning OK; a destroyed, foreign or non-event handle
 * is INVALID_ARGUMENT and left alone. */
LLAISYS_API llaisysStatus_t llaisysEventDestroy(llaisysEvent_t event);
/* Record `event` on `stream` (NULL: default stream). Both must be on the same device. */
LLAISYS_API llaisysStatus_t llaisysEventRecord(llaisysEvent_t event, llaisysStream_t stream);
/* LLAISYS_STATUS_OK if the event's work has completed, LLAISYS_STATUS_NOT_READY if not yet,
 * an error status if the event was never recorded. */
LLAISYS_API llaisysStatus_t llaisysEventQuery(llaisysEvent_t event);
/* Wait until the event's work has completed. */
LLAISYS_API llaisysStatus_t llaisysEventSynchronize(llaisysEvent_t event);
/* Milliseconds between two recorded, completed events into *ms. */
LLAISYS_API llaisysStatus_t llaisysEventElapsedTime(llaisysEvent_t start, llaisysEvent_t end,
                                                    float *ms);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_RUNTIME_H */
