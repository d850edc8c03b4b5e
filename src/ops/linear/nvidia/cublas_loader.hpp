// cuBLAS, loaded at run time. libllaisys links cudart statically so that it loads (and
// reports 0 devices) on machines without CUDA libraries; linking libcublas would break that,
// and the toolkit this is built with need not ship cuBLAS at all. So the few entry points
// linear needs are declared here (the stable C ABI of cublas_api.h, cuBLAS 12 and 13) and
// resolved with dlopen on first use: $LLAISYS_CUBLAS_LIBRARY if set, else libcublas.so.13,
// libcublas.so.12, libcublas.so from the loader's search path.
// Where cublas_api.h is available at build time, cublas_loader.cpp checks every constant and
// signature below against it (LLAISYS_HAVE_CUBLAS_HEADER, set by CMakeLists.txt).
#pragma once

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstddef>

struct cublasContext;  // cuBLAS's opaque handle type (global, as in cublas_api.h)

namespace llaisys::ops::nvidia::cublas {

using Handle = cublasContext *;  // cublasHandle_t

// cublasStatus_t, cublasOperation_t, cublasMath_t, cublasComputeType_t, cublasGemmAlgo_t values
constexpr int kStatusSuccess = 0;
constexpr int kOpN = 0, kOpT = 1;
constexpr int kDefaultMath = 0;
constexpr int kCompute32F = 68;           // f32 accumulation (bf16/f16 inputs on tensor cores)
constexpr int kCompute32FPedantic = 69;   // f32 throughout: no TF32, no reduced-precision tricks
constexpr int kGemmDefault = -1;

struct Api {
    int (*create)(Handle *);                    // cublasCreate_v2
    int (*destroy)(Handle);                     // cublasDestroy_v2
    // cublasSetStream_v2, then the handle's workspace bound again (bind_workspace): cuBLAS
    // resets a handle to its own workspace pool on every cublasSetStream
    int (*set_stream)(Handle, cudaStream_t);
    int (*set_math_mode)(Handle, int);          // cublasSetMathMode
    const char *(*status_string)(int);          // cublasGetStatusString
    // cublasGemmEx: C = alpha op(A) op(B) + beta C, column-major, alpha/beta host floats
    int (*gemm_ex)(Handle, int transa, int transb, int m, int n, int k, const void *alpha, const void *A,
                   cudaDataType_t Atype, int lda, const void *B, cudaDataType_t Btype, int ldb, const void *beta,
                   void *C, cudaDataType_t Ctype, int ldc, int compute, int algo);
};

// The loaded API (loaded once, thread-safe). Throws UNSUPPORTED, naming what was tried, when
// no cuBLAS library can be loaded.
const Api &api();

// Makes `workspace` [bytes] (DEVICE memory the caller owns, which must outlive the binding)
// the workspace of every later cuBLAS call on `h`, so cuBLAS allocates none of its own and the
// bytes are counted where the caller allocated them; api().set_stream keeps it bound.
// workspace NULL forgets the binding (before the handle or the buffer goes away).
void bind_workspace(Handle h, void *workspace, size_t bytes);

// Throws DEVICE_ERROR "<what> failed: <cuBLAS status>" unless status is success (DEVICE_LOST when the
// CUDA runtime holds a sticky error: the context is corrupted).
void check(int status, const char *what);

}  // namespace llaisys::ops::nvidia::cublas
