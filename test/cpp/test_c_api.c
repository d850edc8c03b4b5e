/* Uses libllaisys from plain C99 through include/llaisys*.h only: creates tensors, runs ops,
 * reads results back, and checks that misuse returns error statuses with messages; and the
 * one handle convention (doc/c_api.md, "Conventions"): every type is made by a
 * `llaisysStatus_t llaisys<Noun>Create(..., out)` and released by a Destroy that returns a
 * status. */
#include <llaisys.h>
#include <llaisys/kv_cache.h>
#include <llaisys/ops.h>
#include <llaisys/runtime.h>
#include <llaisys/tensor.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

static llaisysTensor_t f32_tensor(const size_t *shape, size_t ndim, const float *values, size_t n) {
    llaisysTensor_t t = NULL;
    if (llaisysTensorCreate2(shape, ndim, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0, &t) != LLAISYS_STATUS_OK) return NULL;
    if (values) llaisysTensorLoad(t, values, n * sizeof(float));
    return t;
}

static void test_add_and_linear(void) {
    size_t shape[2] = {2, 3};
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60}, out[6];
    llaisysTensor_t ta = f32_tensor(shape, 2, a, 6), tb = f32_tensor(shape, 2, b, 6);
    llaisysTensor_t tc = f32_tensor(shape, 2, NULL, 0);
    EXPECT(ta && tb && tc, "create tensors");
    EXPECT(llaisysAdd(tc, ta, tb) == LLAISYS_STATUS_OK, "add");
    EXPECT(llaisysTensorRead(tc, out, sizeof out) == LLAISYS_STATUS_OK, "read");
    for (int i = 0; i < 6; i++) EXPECT(out[i] == a[i] + b[i], "add values");

    /* y[2,2] = a[2,3] @ w[2,3]^T + bias */
    size_t wshape[2] = {2, 3}, bshape[1] = {2}, yshape[2] = {2, 2};
    float w[6] = {1, 0, 0, 0, 1, 1}, bias[2] = {0.5f, -1}, y[4];
    llaisysTensor_t tw = f32_tensor(wshape, 2, w, 6), tbias = f32_tensor(bshape, 1, bias, 2);
    llaisysTensor_t ty = f32_tensor(yshape, 2, NULL, 0);
    EXPECT(llaisysLinear(ty, ta, tw, tbias) == LLAISYS_STATUS_OK, "linear");
    llaisysTensorRead(ty, y, sizeof y);
    EXPECT(fabsf(y[0] - 1.5f) < 1e-6f && fabsf(y[1] - 4.0f) < 1e-6f, "linear row 0");
    EXPECT(fabsf(y[2] - 4.5f) < 1e-6f && fabsf(y[3] - 10.0f) < 1e-6f, "linear row 1");

    /* a transposed view shares storage and reads back transposed */
    size_t order[2] = {1, 0}, tshape[2];
    llaisysTensor_t tt = llaisysTensorPermute(ta, order, 2);
    EXPECT(tt != NULL && llaisysTensorIsContiguous(tt) == 0, "permute gives a strided view");
    EXPECT(llaisysTensorShape(tt, tshape, 2) == LLAISYS_STATUS_OK && tshape[0] == 3 && tshape[1] == 2, "shape");
    llaisysTensorRead(tt, out, sizeof out);
    EXPECT(out[0] == 1 && out[1] == 4 && out[2] == 2 && out[5] == 6, "transposed read");

    llaisysTensorDestroy(ta); /* the view keeps the storage alive */
    llaisysTensorRead(tt, out, sizeof out);
    EXPECT(out[1] == 4, "view outlives its source handle");
    llaisysTensorDestroy(tt);
    llaisysTensorDestroy(tb);
    llaisysTensorDestroy(tc);
    llaisysTensorDestroy(tw);
    llaisysTensorDestroy(tbias);
    llaisysTensorDestroy(ty);
}

static void test_misuse(void) {
    size_t s23[2] = {2, 3}, s32[2] = {3, 2};
    llaisysTensor_t a = f32_tensor(s23, 2, NULL, 0), b = f32_tensor(s32, 2, NULL, 0);
    float small[2];
    EXPECT(llaisysAdd(NULL, a, a) == LLAISYS_STATUS_INVALID_ARGUMENT, "NULL handle");
    EXPECT(strlen(llaisysGetLastError()) > 0, "NULL handle sets a message");
    EXPECT(llaisysAdd(a, a, b) == LLAISYS_STATUS_SHAPE_MISMATCH, "shape mismatch");
    EXPECT(llaisysTensorRead(a, small, sizeof small) == LLAISYS_STATUS_BUFFER_TOO_SMALL, "small buffer");
    EXPECT(llaisysTensorSlice(a, 1, 2, 5) == NULL, "slice out of range");
    EXPECT(llaisysTensorCreate(s23, 2, (llaisysDataType_t)42, LLAISYS_DEVICE_CPU, 0) == NULL, "bad dtype");
    EXPECT(llaisysTensorCreate(s23, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 7) == NULL, "bad device id");
    void *p = NULL;
    size_t allocated = 0;
    EXPECT(llaisysMalloc(LLAISYS_DEVICE_CPU, 0, LLAISYS_MEMORY_HOST, 1000, &p) == LLAISYS_STATUS_OK, "malloc");
    EXPECT(llaisysMemoryStats(LLAISYS_DEVICE_CPU, 0, &allocated, NULL) == LLAISYS_STATUS_OK && allocated >= 1000,
           "memory stats count the allocation");
    EXPECT(llaisysFree(LLAISYS_DEVICE_CPU, 0, LLAISYS_MEMORY_HOST, (char *)p + 8) == LLAISYS_STATUS_INVALID_ARGUMENT,
           "free of a foreign pointer");
    EXPECT(llaisysFree(LLAISYS_DEVICE_CPU, 0, LLAISYS_MEMORY_HOST, p) == LLAISYS_STATUS_OK, "free");
    llaisysTensorDestroy(a);
    llaisysTensorDestroy(b);
}

/* A call refused with INVALID_ARGUMENT, its message naming `fragment`. */
#define REFUSED(status, fragment, what)                                                          \
    EXPECT((status) == LLAISYS_STATUS_INVALID_ARGUMENT && strstr(llaisysGetLastError(), fragment) != NULL, what)

static llaisysKVCacheParams_t kv_params(void) {
    llaisysKVCacheParams_t p;
    memset(&p, 0, sizeof p);
    p.layout = LLAISYS_KV_LAYOUT_SLOT;
    p.dtype = LLAISYS_DTYPE_F32;
    p.n_layers = 1;
    p.n_kv_heads = 1;
    p.head_dim = 2;
    p.n_slots = 8;
    p.block_size = 4;
    p.rope_theta = 1e4f;
    p.device = LLAISYS_DEVICE_CPU;
    return p;
}

/* The new constructors: OK with a live handle in *out; on error a status, a message and
 * *out NULL (even when it held a value before). */
static void test_constructors(void) {
    size_t s2[2] = {2, 2};
    float w[4] = {1, 2, 3, 4};
    llaisysTensor_t t = (llaisysTensor_t)&failures; /* a stale value: must be overwritten */
    EXPECT(llaisysTensorCreate2(s2, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0, &t) == LLAISYS_STATUS_OK && t,
           "TensorCreate2");
    EXPECT(llaisysTensorNumel(t) == 4 && llaisysTensorLoad(t, w, sizeof w) == LLAISYS_STATUS_OK, "a usable tensor");
    llaisysTensor_t bad = t;
    REFUSED(llaisysTensorCreate2(s2, 2, (llaisysDataType_t)42, LLAISYS_DEVICE_CPU, 0, &bad), "dtype",
            "TensorCreate2 bad dtype");
    EXPECT(bad == NULL, "TensorCreate2 error leaves *out NULL");
    REFUSED(llaisysTensorCreate2(NULL, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0, &bad), "shape",
            "TensorCreate2 NULL shape");
    REFUSED(llaisysTensorCreate2(s2, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0, NULL), "out is NULL",
            "TensorCreate2 NULL out");
    EXPECT(llaisysTensorCreate2(s2, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 7, &bad) < 0 && bad == NULL,
           "TensorCreate2 bad device id");

    llaisysKVCacheParams_t p = kv_params();
    llaisysKVCache_t c = NULL, cbad = (llaisysKVCache_t)&failures;
    EXPECT(llaisysKVCacheCreate2(&p, &c) == LLAISYS_STATUS_OK && c, "KVCacheCreate2");
    EXPECT(llaisysKVCacheClear(c) == LLAISYS_STATUS_OK, "a usable cache");
    REFUSED(llaisysKVCacheCreate2(NULL, &cbad), "params is NULL", "KVCacheCreate2 NULL params");
    EXPECT(cbad == NULL, "KVCacheCreate2 error leaves *out NULL");
    REFUSED(llaisysKVCacheCreate2(&p, NULL), "out is NULL", "KVCacheCreate2 NULL out");

    llaisysPackedLinear_t pl = NULL, plbad = (llaisysPackedLinear_t)&failures;
    EXPECT(llaisysPackedLinearCreate(t, &pl) == LLAISYS_STATUS_OK && pl, "PackedLinearCreate");
    REFUSED(llaisysPackedLinearCreate(NULL, &plbad), "weight", "PackedLinearCreate NULL weight");
    EXPECT(plbad == NULL, "PackedLinearCreate error leaves *out NULL");
    REFUSED(llaisysPackedLinearCreate(t, NULL), "out is NULL", "PackedLinearCreate NULL out");

    llaisysStream_t s = NULL, sbad = (llaisysStream_t)&failures;
    llaisysEvent_t e = NULL, ebad = (llaisysEvent_t)&failures;
    EXPECT(llaisysStreamCreate(LLAISYS_DEVICE_CPU, 0, &s) == LLAISYS_STATUS_OK && s, "StreamCreate");
    EXPECT(llaisysEventCreate(LLAISYS_DEVICE_CPU, 0, &e) == LLAISYS_STATUS_OK && e, "EventCreate");
    REFUSED(llaisysStreamCreate((llaisysDeviceType_t)42, 0, &sbad), "device", "StreamCreate bad device");
    REFUSED(llaisysEventCreate((llaisysDeviceType_t)42, 0, &ebad), "device", "EventCreate bad device");
    EXPECT(sbad == NULL && ebad == NULL, "Stream/EventCreate error leaves *out NULL");

    /* Every Destroy: OK once, then INVALID_ARGUMENT "destroyed"; NULL is OK. */
    EXPECT(llaisysStreamDestroy(s) == LLAISYS_STATUS_OK, "StreamDestroy");
    EXPECT(llaisysEventDestroy(e) == LLAISYS_STATUS_OK, "EventDestroy");
    EXPECT(llaisysPackedLinearDestroy(pl) == LLAISYS_STATUS_OK, "PackedLinearDestroy");
    EXPECT(llaisysKVCacheDestroy(c) == LLAISYS_STATUS_OK, "KVCacheDestroy");
    EXPECT(llaisysTensorDestroy(t) == LLAISYS_STATUS_OK, "TensorDestroy");
    REFUSED(llaisysStreamDestroy(s), "destroyed stream", "StreamDestroy twice");
    REFUSED(llaisysEventDestroy(e), "destroyed event", "EventDestroy twice");
    REFUSED(llaisysPackedLinearDestroy(pl), "destroyed packed-linear", "PackedLinearDestroy twice");
    REFUSED(llaisysKVCacheDestroy(c), "destroyed KV cache", "KVCacheDestroy twice");
    REFUSED(llaisysTensorDestroy(t), "destroyed tensor", "TensorDestroy twice");
    llaisysClearLastError();
    EXPECT(llaisysTensorDestroy(NULL) == LLAISYS_STATUS_OK && llaisysKVCacheDestroy(NULL) == LLAISYS_STATUS_OK &&
               llaisysPackedLinearDestroy(NULL) == LLAISYS_STATUS_OK && llaisysStreamDestroy(NULL) == LLAISYS_STATUS_OK &&
               llaisysEventDestroy(NULL) == LLAISYS_STATUS_OK,
           "Destroy(NULL) is OK for every type");
    EXPECT(llaisysGetLastStatus() == LLAISYS_STATUS_OK, "Destroy(NULL) records no error");
}

/* Destroy of a live handle of another type: INVALID_ARGUMENT naming both kinds, and the
 * handle passed is left alive. */
static void test_wrong_type_destroy(void) {
    size_t s1[1] = {4}, s2[2] = {4, 4};
    float w[16] = {0};
    llaisysTensor_t t = f32_tensor(s1, 1, NULL, 0), wt = f32_tensor(s2, 2, w, 16);
    llaisysKVCacheParams_t p = kv_params();
    llaisysKVCache_t c = NULL;
    llaisysPackedLinear_t pl = NULL;
    llaisysStream_t s = NULL;
    llaisysEvent_t e = NULL;
    EXPECT(t && wt && llaisysKVCacheCreate2(&p, &c) == LLAISYS_STATUS_OK, "tensor and cache");
    EXPECT(llaisysPackedLinearCreate(wt, &pl) == LLAISYS_STATUS_OK, "packed");
    EXPECT(llaisysStreamCreate(LLAISYS_DEVICE_CPU, 0, &s) == LLAISYS_STATUS_OK, "stream");
    EXPECT(llaisysEventCreate(LLAISYS_DEVICE_CPU, 0, &e) == LLAISYS_STATUS_OK, "event");
    REFUSED(llaisysTensorDestroy((llaisysTensor_t)c), "KV cache handle, not a tensor", "a cache as a tensor");
    REFUSED(llaisysKVCacheDestroy((llaisysKVCache_t)t), "tensor handle, not a KV cache", "a tensor as a cache");
    REFUSED(llaisysPackedLinearDestroy((llaisysPackedLinear_t)s), "stream handle, not a packed-linear",
            "a stream as a packed linear");
    REFUSED(llaisysStreamDestroy((llaisysStream_t)e), "event handle, not a stream", "an event as a stream");
    REFUSED(llaisysEventDestroy((llaisysEvent_t)pl), "packed-linear handle, not an event",
            "a packed linear as an event");
    REFUSED(llaisysTensorDestroy((llaisysTensor_t)w), "not a tensor handle", "a stack pointer as a tensor");
    /* each handle survived the wrong-type destroys */
    EXPECT(llaisysTensorNumel(t) == 4 && llaisysKVCacheClear(c) == LLAISYS_STATUS_OK &&
               llaisysStreamSynchronize(s) == LLAISYS_STATUS_OK && llaisysEventRecord(e, s) == LLAISYS_STATUS_OK,
           "handles intact after wrong-type destroys");
    EXPECT(llaisysPackedLinearDestroy(pl) == LLAISYS_STATUS_OK && llaisysStreamDestroy(s) == LLAISYS_STATUS_OK &&
               llaisysEventDestroy(e) == LLAISYS_STATUS_OK && llaisysKVCacheDestroy(c) == LLAISYS_STATUS_OK &&
               llaisysTensorDestroy(t) == LLAISYS_STATUS_OK && llaisysTensorDestroy(wt) == LLAISYS_STATUS_OK,
           "each destroyed once by its own Destroy");
}

/* The deprecated constructors still work, and a caller built against the old `void` Destroy
 * declarations (here: a call through a void-returning function pointer, as such a binary
 * makes it) still releases the handle. */
typedef void (*void_destroy_tensor)(llaisysTensor_t);
typedef void (*void_destroy_cache)(llaisysKVCache_t);

static void test_deprecated_and_old_callers(void) {
    size_t s2[2] = {2, 3};
    llaisysTensor_t t = llaisysTensorCreate(s2, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0);
    EXPECT(t != NULL && llaisysTensorNumel(t) == 6, "deprecated TensorCreate");
    llaisysClearLastError();
    EXPECT(llaisysTensorCreate(s2, 2, (llaisysDataType_t)42, LLAISYS_DEVICE_CPU, 0) == NULL &&
               llaisysGetLastStatus() == LLAISYS_STATUS_INVALID_ARGUMENT && strstr(llaisysGetLastError(), "dtype"),
           "deprecated TensorCreate error: NULL, status and message");
    llaisysKVCacheParams_t p = kv_params();
    llaisysKVCache_t c = llaisysKVCacheCreate(&p);
    EXPECT(c != NULL && llaisysKVCacheClear(c) == LLAISYS_STATUS_OK, "deprecated KVCacheCreate");
    llaisysClearLastError();
    EXPECT(llaisysKVCacheCreate(NULL) == NULL && llaisysGetLastStatus() == LLAISYS_STATUS_INVALID_ARGUMENT,
           "deprecated KVCacheCreate error");

    void_destroy_tensor old_tensor_destroy = (void_destroy_tensor)(void (*)(void))llaisysTensorDestroy;
    void_destroy_cache old_cache_destroy = (void_destroy_cache)(void (*)(void))llaisysKVCacheDestroy;
    old_tensor_destroy(t);
    old_cache_destroy(c);
    REFUSED(llaisysTensorDestroy(t), "destroyed", "the void-typed call released the tensor");
    REFUSED(llaisysKVCacheDestroy(c), "destroyed", "the void-typed call released the cache");
    llaisysTensorDestroy(NULL); /* ignoring the status still compiles (-Wall -Wextra -Werror) */
}

int main(void) {
    printf("libllaisys %s\n", llaisysVersion());
    test_add_and_linear();
    test_misuse();
    test_constructors();
    test_wrong_type_destroy();
    test_deprecated_and_old_callers();
    return finish();
}
