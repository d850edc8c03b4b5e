/* llaisys: the base of the C ABI.
 *
 * Every exported symbol is declared in include/llaisys.h or include/llaisys/<area>.h.
 * Conventions (see doc/c_api.md):
 *   - functions that act return llaisysStatus_t: 0 ok, >0 recoverable, <0 error;
 *   - on any non-zero status a message is kept for the calling thread and returned by
 *     llaisysGetLastError();
 *   - constructors return a status and write the new handle to an out parameter (NULL on
 *     error); every Destroy returns a status (NULL a no-op). The deprecated handle-returning
 *     constructors (llaisysTensorCreate, llaisysKVCacheCreate, llaisysQwen2Model*) return NULL
 *     on error, with the status in llaisysGetLastStatus();
 *   - no C++ exception ever crosses this boundary, and bad input never aborts the process.
 * Enum values are explicit and append-only.
 */
#ifndef LLAISYS_H
#define LLAISYS_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define LLAISYS_API __declspec(dllexport)
#else
#define LLAISYS_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
#define LLAISYS_EXTERN_C_BEGIN extern "C" {
#define LLAISYS_EXTERN_C_END }
#else
#define LLAISYS_EXTERN_C_BEGIN
#define LLAISYS_EXTERN_C_END
#endif

LLAISYS_EXTERN_C_BEGIN

/* Where memory lives and kernels run. */
typedef enum {
    LLAISYS_DEVICE_CPU = 0,
    LLAISYS_DEVICE_NVIDIA = 1,
} llaisysDeviceType_t;

/* Element types. Values are part of the ABI. */
typedef enum {
    LLAISYS_DTYPE_INVALID = 0,
    LLAISYS_DTYPE_F32 = 1,
    LLAISYS_DTYPE_F16 = 2,
    LLAISYS_DTYPE_BF16 = 3,
    LLAISYS_DTYPE_I32 = 4,
    LLAISYS_DTYPE_I64 = 5,
    LLAISYS_DTYPE_U8 = 6,
    LLAISYS_DTYPE_I8 = 7,
    LLAISYS_DTYPE_F64 = 8,
    LLAISYS_DTYPE_BOOL = 9,
    /* Block-quantized weights, laid out byte for byte as GGUF stores them: a row of k
     * elements is k / block_size blocks (llaisysDataTypeBlockSize) of block_bytes bytes
     * (llaisysDataTypeBlockBytes). Each value is 100 + the format's GGML type id, so a GGUF
     * tensor's type maps by addition. */
    /* 32 elements in 18 bytes: an f16 scale and 4-bit values */
    LLAISYS_DTYPE_Q4_0 = 102,
    /* 32 elements in 20 bytes: an f16 scale and min, 4-bit values (d * q + m) */
    LLAISYS_DTYPE_Q4_1 = 103,
    /* 32 elements in 22 bytes: an f16 scale and 5-bit values */
    LLAISYS_DTYPE_Q5_0 = 106,
    /* 32 elements in 24 bytes: an f16 scale and min, 5-bit values (d * q + m) */
    LLAISYS_DTYPE_Q5_1 = 107,
    /* 32 elements in 34 bytes: an f16 scale and 8-bit values */
    LLAISYS_DTYPE_Q8_0 = 108,
    /* 256 elements in 84 bytes: f16 scale and min, 16 sub-blocks with 4-bit scales and mins, 2-bit values */
    LLAISYS_DTYPE_Q2_K = 110,
    /* 256 elements in 110 bytes: an f16 scale, 16 sub-blocks with 6-bit scales, 3-bit values */
    LLAISYS_DTYPE_Q3_K = 111,
    /* 256 elements in 144 bytes: f16 scale and min, 8 sub-blocks with 6-bit scales and mins */
    LLAISYS_DTYPE_Q4_K = 112,
    /* 256 elements in 176 bytes: as Q4_K with a fifth bit per value */
    LLAISYS_DTYPE_Q5_K = 113,
    /* 256 elements in 210 bytes: an f16 scale, 16 sub-blocks with 8-bit scales, 6-bit values */
    LLAISYS_DTYPE_Q6_K = 114,
    /* 256 elements in 136 bytes: an f16 scale, 8 sub-blocks with 6-bit scales, 4-bit indices
     * into llama.cpp's 16-value non-linear table */
    LLAISYS_DTYPE_IQ4_XS = 123,
    /* The i-quants of 1.56-3.44 bits a weight: 256 elements whose runs of 8 (IQ1, IQ2) or 4 (IQ3)
     * values are entries of llama.cpp's fixed grids, with sign bits and small odd scales;
     * bytes per block: IQ2_XXS 66, IQ2_XS 74, IQ2_S 82, IQ3_XXS 98, IQ3_S 110, IQ1_S 50, IQ1_M 56 */
    LLAISYS_DTYPE_IQ2_XXS = 116,
    LLAISYS_DTYPE_IQ2_XS = 117,
    LLAISYS_DTYPE_IQ3_XXS = 118,
    LLAISYS_DTYPE_IQ1_S = 119,
    LLAISYS_DTYPE_IQ3_S = 121,
    LLAISYS_DTYPE_IQ2_S = 122,
    LLAISYS_DTYPE_IQ1_M = 129,
} llaisysDataType_t;

/* Result of every function that acts. 0 ok, >0 recoverable, <0 error. */
typedef int32_t llaisysStatus_t;
enum {
    LLAISYS_STATUS_OK = 0,
    /* recoverable */
    LLAISYS_STATUS_NOT_READY = 1,       /* an event or stream has work still pending */
    LLAISYS_STATUS_NO_KV_SPACE = 2,     /* the KV cache has no room for the request */
    /* errors */
    LLAISYS_STATUS_INVALID_ARGUMENT = -1, /* a bad value: NULL handle, bad enum, bad size */
    LLAISYS_STATUS_SHAPE_MISMATCH = -2,
    LLAISYS_STATUS_DTYPE_MISMATCH = -3,
    LLAISYS_STATUS_DEVICE_MISMATCH = -4,
    LLAISYS_STATUS_OUT_OF_RANGE = -5,     /* an index or position outside its bounds */
    LLAISYS_STATUS_BUFFER_TOO_SMALL = -6, /* a caller-given output buffer is too small */
    LLAISYS_STATUS_OUT_OF_MEMORY = -7,
    LLAISYS_STATUS_UNSUPPORTED = -8,      /* a device, dtype or layout this build cannot do */
    LLAISYS_STATUS_DEVICE_ERROR = -9,     /* the device runtime (e.g. CUDA) reported an error */
    /* the device hit a sticky error (CUDA: an illegal address, a kernel assert, an uncorrectable
     * ECC error...): its context is unusable, every later call on it fails, and the process must
     * exit and start again to use the device. Close what lives there; retrying cannot help. */
    LLAISYS_STATUS_DEVICE_LOST = -10,
    LLAISYS_STATUS_INTERNAL = -100,       /* a bug in llaisys: please report it */
};

/* The message of the last non-zero status on the calling thread ("" if none).
 * Owned by the library; valid until the next failing call on the same thread. */
LLAISYS_API const char *llaisysGetLastError(void);

/* The status of the last failing call on the calling thread (LLAISYS_STATUS_OK if none):
 * how a NULL from a deprecated handle-returning constructor tells its cause. */
LLAISYS_API llaisysStatus_t llaisysGetLastStatus(void);

/* Clear the calling thread's last error message and status. */
LLAISYS_API void llaisysClearLastError(void);

/* Size in bytes of one element of `dtype`, or 0 for an invalid value or a block-quantized
 * dtype (whose elements have no whole size: see the two functions below). */
LLAISYS_API size_t llaisysDataTypeSize(llaisysDataType_t dtype);

/* Elements per block: 32 or 256 for a block-quantized dtype, 1 for any other valid dtype,
 * 0 for an invalid value. */
LLAISYS_API size_t llaisysDataTypeBlockSize(llaisysDataType_t dtype);

/* Bytes per block: the block's size for a block-quantized dtype, the element size for any
 * other valid dtype, 0 for an invalid value. */
LLAISYS_API size_t llaisysDataTypeBlockBytes(llaisysDataType_t dtype);

/* Static name of a dtype ("f32", "bf16", ...); "invalid" for unknown values. */
LLAISYS_API const char *llaisysDataTypeName(llaisysDataType_t dtype);

/* Library version string, static storage. */
LLAISYS_API const char *llaisysVersion(void);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_H */
