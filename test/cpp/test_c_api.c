/* Uses libllaisys from plain C99 through include/llaisys*.h only: creates tensors, runs ops,
 * reads results back, and checks that misuse returns error statuses with messages. */
#include <llaisys.h>
#include <llaisys/ops.h>
#include <llaisys/runtime.h>
#include <llaisys/tensor.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

static llaisysTensor_t f32_tensor(const size_t *shape, size_t ndim, const float *values, size_t n) {
    llaisysTensor_t t = llaisysTensorCreate(shape, ndim, LLAISYS_DTYPE_F32, LLAISYS_DEVICE_CPU, 0);
    if (t && values) llaisysTensorLoad(t, values, n * sizeof(float));
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

int main(void) {
    printf("libllaisys %s\n", llaisysVersion());
    test_add_and_linear();
    test_misuse();
    return finish();
}
