/* The C ABI misused from plain C99: huge sizes, overflowing shapes, and dead, foreign and
 * wrong-type handles of every type (use after destroy, double destroy, a handle of one type
 * passed as another, random pointers, NULL). Every misuse must return an error status (every
 * Destroy returns one too, and leaves the handle alone), never crash: ctest runs this as its
 * own process, so a crash is a failed test. */
#include <llaisys.h>
#include <llaisys/models/qwen2.h>
#include <llaisys/ops.h>
#include <llaisys/runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

/* A call refused with INVALID_ARGUMENT, its message naming `fragment`. */
#define REFUSED(status, fragment, what)                                                          \
    EXPECT((status) == LLAISYS_STATUS_INVALID_ARGUMENT && strstr(llaisysGetLastError(), fragment), what)

/* A Destroy refused through the last error alone (the model's, owned by the model ABI):
 * nothing done, INVALID_ARGUMENT recorded. */
#define DESTROY_REFUSED(call, fragment, what)                                                    \
    do {                                                                                        \
        llaisysClearLastError();                                                                \
        call;                                                                                   \
        REFUSED(llaisysGetLastStatus(), fragment, what);                                        \
    } while (0)

static llaisysTensor_t vector4(void) {
    size_t shape[1] = {4};
    float v[4] = {1, 2, 3, 4};
    llaisysTensor_t t = llaisysTensorCreate(shape, 1, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0);
    if (t) llaisysTensorLoad(t, v, sizeof v);
    return t;
}

static llaisysKVCache_t kv_cache(void) {
    llaisysKVCacheParams_t p;
    memset(&p, 0, sizeof p);
    p.layout = LLAISYS_KV_LAYOUT_BLOCK;
    p.dtype = LLAISYS_DTYPE_F32;
    p.n_layers = 1;
    p.n_kv_heads = 1;
    p.head_dim = 2;
    p.n_slots = 16;
    p.block_size = 4;
    p.rope_theta = 1e4f;
    p.device = LLAISYS_DEVICE_CPU;
    return llaisysKVCacheCreate(&p);
}

static llaisysQwen2Meta_t tiny_meta(void) {
    llaisysQwen2Meta_t m;
    memset(&m, 0, sizeof m);
    m.dtype = LLAISYS_DTYPE_F32;
    m.n_layers = 1;
    m.hidden_size = 8;
    m.intermediate_size = 8;
    m.n_heads = 2;
    m.n_kv_heads = 1;
    m.head_dim = 4;
    m.vocab_size = 16;
    m.max_position_embeddings = 64;
    m.rms_norm_eps = 1e-6f;
    m.rope_theta = 1e4f;
    m.tie_word_embeddings = 1;
    return m;
}

static void test_huge_sizes(void) {
    const size_t huge[3] = {SIZE_MAX, SIZE_MAX - 10, (size_t)1 << 63};
    for (int i = 0; i < 3; i++) {
        void *p = (void *)&failures;
        llaisysStatus_t s = llaisysMalloc(LLAISYS_DEVICE_CPU, 0, LLAISYS_MEMORY_HOST, huge[i], &p);
        EXPECT(s == LLAISYS_STATUS_OUT_OF_MEMORY && p == NULL, "huge malloc is OUT_OF_MEMORY");
        if (s == LLAISYS_STATUS_OK) llaisysFree(LLAISYS_DEVICE_CPU, 0, LLAISYS_MEMORY_HOST, p);
    }
    size_t square[2] = {(size_t)1 << 62, (size_t)1 << 62}, empty[3] = {0, (size_t)1 << 62, (size_t)1 << 62};
    EXPECT(llaisysTensorCreate(square, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0) == NULL, "shape overflow");
    llaisysTensor_t e = llaisysTensorCreate(empty, 3, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0);
    EXPECT(e == NULL && llaisysGetLastStatus() == LLAISYS_STATUS_INVALID_ARGUMENT, "empty tensor, huge strides");
    if (e) llaisysTensorDestroy(e);

    llaisysQwen2Meta_t m = tiny_meta();
    m.vocab_size = SIZE_MAX; /* packed lm_head panels: ceil(SIZE_MAX / 16) wrapped to 0 */
    llaisysQwen2Model_t model = llaisysQwen2ModelCreate(&m, LLAISYS_DEVICE_CPU, 0);
    EXPECT(model == NULL && llaisysGetLastStatus() == LLAISYS_STATUS_INVALID_ARGUMENT, "vocab SIZE_MAX");
    if (model) llaisysQwen2ModelDestroy(model);
    m = tiny_meta();
    m.n_layers = (size_t)1 << 62;
    model = llaisysQwen2ModelCreate(&m, LLAISYS_DEVICE_CPU, 0);
    EXPECT(model == NULL && llaisysGetLastStatus() == LLAISYS_STATUS_INVALID_ARGUMENT, "n_layers 2^62");
    if (model) llaisysQwen2ModelDestroy(model);
}

static void test_tensor_and_packed(llaisysKVCache_t other) {
    llaisysTensor_t t = vector4(), x = NULL, y = NULL;
    float buf[4];
    size_t shape[2] = {1, 4}, wshape[2] = {4, 4};
    float w[16] = {0};
    EXPECT(t != NULL, "tensor");
    llaisysTensorDestroy(t);
    REFUSED(llaisysTensorRead(t, buf, sizeof buf), "destroyed", "tensor use after destroy");
    REFUSED(llaisysTensorDestroy(t), "destroyed", "tensor double destroy");
    llaisysTensor_t fresh = vector4(); /* may land at the freed address: t stays dead */
    REFUSED(llaisysTensorRead(t, buf, sizeof buf), "destroyed", "stale tensor after a new one");
    EXPECT(llaisysTensorRead(fresh, buf, sizeof buf) == LLAISYS_STATUS_OK && buf[3] == 4, "new tensor works");
    REFUSED(llaisysTensorRead((llaisysTensor_t)other, buf, sizeof buf), "not a tensor", "KV cache as a tensor");
    REFUSED(llaisysTensorDestroy((llaisysTensor_t)other), "not a tensor", "destroy a KV cache as a tensor");
    REFUSED(llaisysAdd(fresh, fresh, (llaisysTensor_t)buf), "not a tensor", "a stack pointer as a tensor");
    llaisysTensorDestroy(fresh);

    llaisysTensor_t wt = llaisysTensorCreate(wshape, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0);
    llaisysPackedLinear_t packed = NULL;
    llaisysTensorLoad(wt, w, sizeof w);
    EXPECT(llaisysPackedLinearCreate(wt, &packed) == LLAISYS_STATUS_OK, "pack");
    llaisysTensorDestroy(wt);
    x = llaisysTensorCreate(shape, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0);
    y = llaisysTensorCreate(shape, 2, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0);
    llaisysTensorLoad(x, w, 4 * sizeof(float));
    EXPECT(llaisysPackedLinearApply(packed, y, x, NULL) == LLAISYS_STATUS_OK, "packed apply");
    EXPECT(llaisysPackedLinearDestroy(packed) == LLAISYS_STATUS_OK, "packed destroy");
    REFUSED(llaisysPackedLinearApply(packed, y, x, NULL), "destroyed", "packed use after destroy");
    REFUSED(llaisysPackedLinearDestroy(packed), "destroyed", "packed double destroy");
    REFUSED(llaisysPackedLinearApply((llaisysPackedLinear_t)x, y, x, NULL), "not a", "a tensor as a packed linear");
    llaisysTensorDestroy(x);
    llaisysTensorDestroy(y);
}

static void test_streams_and_events(void) {
    llaisysStream_t s = NULL;
    llaisysEvent_t e = NULL;
    EXPECT(llaisysStreamCreate(LLAISYS_DEVICE_CPU, 0, &s) == LLAISYS_STATUS_OK, "stream");
    EXPECT(llaisysEventCreate(LLAISYS_DEVICE_CPU, 0, &e) == LLAISYS_STATUS_OK, "event");
    EXPECT(llaisysEventRecord(e, s) == LLAISYS_STATUS_OK, "record on a stream");
    REFUSED(llaisysEventRecord((llaisysEvent_t)s, NULL), "not a", "a stream as an event");
    REFUSED(llaisysStreamSynchronize((llaisysStream_t)e), "not a", "an event as a stream");
    REFUSED(llaisysStreamDestroy((llaisysStream_t)e), "not a", "destroy an event as a stream");
    EXPECT(llaisysStreamDestroy(s) == LLAISYS_STATUS_OK, "stream destroy");
    REFUSED(llaisysStreamDestroy(s), "destroyed", "stream double destroy");
    REFUSED(llaisysStreamSynchronize(s), "destroyed", "stream use after destroy");
    REFUSED(llaisysEventRecord(e, s), "destroyed", "record on a destroyed stream");
    char junk[16] = {0};
    REFUSED(llaisysMemcpyAsync(LLAISYS_DEVICE_CPU, 0, junk, junk + 8, 8, LLAISYS_MEMCPY_H2H, (llaisysStream_t)junk),
            "not a", "a stack pointer as a stream");
    EXPECT(llaisysEventDestroy(e) == LLAISYS_STATUS_OK, "event destroy");
    REFUSED(llaisysEventDestroy(e), "destroyed", "event double destroy");
    REFUSED(llaisysEventQuery(e), "destroyed", "event use after destroy");
}

static void test_caches_and_models(void) {
    llaisysKVCache_t c = kv_cache();
    llaisysQwen2Meta_t meta = tiny_meta();
    llaisysQwen2Model_t m = llaisysQwen2ModelCreate(&meta, LLAISYS_DEVICE_CPU, 0);
    size_t count = 0;
    EXPECT(c != NULL && m != NULL, "cache and model");
    REFUSED(llaisysKVCacheClear((llaisysKVCache_t)m), "model handle, not a KV cache", "a model as a cache");
    REFUSED(llaisysQwen2ModelMissingWeights((llaisysQwen2Model_t)c, &count, NULL, 0), "not a model",
            "a cache as a model");
    DESTROY_REFUSED(llaisysQwen2ModelDestroy((llaisysQwen2Model_t)c), "not a model", "destroy a cache as a model");
    REFUSED(llaisysKVCacheDestroy((llaisysKVCache_t)&count), "not a KV cache", "destroy a stack pointer");
    EXPECT(llaisysKVCacheDestroy(c) == LLAISYS_STATUS_OK, "cache destroy");
    REFUSED(llaisysKVCacheDestroy(c), "destroyed", "cache double destroy");
    REFUSED(llaisysKVCacheClear(c), "destroyed", "cache use after destroy");
    llaisysQwen2ModelDestroy(m);
    DESTROY_REFUSED(llaisysQwen2ModelDestroy(m), "destroyed", "model double destroy");
    REFUSED(llaisysQwen2ModelMissingWeights(m, &count, NULL, 0), "destroyed", "model use after destroy");
    EXPECT(llaisysQwen2ModelCreateKVCache(m, LLAISYS_KV_LAYOUT_BLOCK, LLAISYS_DTYPE_F32, 16, 4) == NULL,
           "a cache for a destroyed model");
    llaisysClearLastError();
    llaisysQwen2ModelDestroy(NULL); /* NULL stays a silent no-op */
    EXPECT(llaisysKVCacheDestroy(NULL) == LLAISYS_STATUS_OK && llaisysTensorDestroy(NULL) == LLAISYS_STATUS_OK &&
               llaisysPackedLinearDestroy(NULL) == LLAISYS_STATUS_OK,
           "Destroy(NULL) is OK");
    EXPECT(llaisysGetLastStatus() == LLAISYS_STATUS_OK, "Destroy(NULL) records no error");
}

int main(void) {
    llaisysKVCache_t other = kv_cache();
    test_huge_sizes();
    test_tensor_and_packed(other);
    test_streams_and_events();
    test_caches_and_models();
    llaisysKVCacheDestroy(other);
    return finish();
}
