/* The KV cache: storage for keys and values of every layer, in one of two layouts.
 *
 * BLOCK (paged): a pool of n_blocks blocks of block_size slots. The caller (the Python block
 *   manager) owns block ids and tells each step where to write (slot_mapping) and what to
 *   read (block_tables); the cache stores, it keeps no per-sequence state.
 * SLOT (unified cells, llama.cpp style): n_cells cells, each with a position and the set of
 *   sequence ids that own it. A step names each row's seq id; the cache finds free cells,
 *   and attention is masked by seq id and position. Out of cells is the recoverable status
 *   LLAISYS_STATUS_NO_KV_SPACE, never a silent eviction.
 * Both layouts read K/V through one attention kernel over "the slots a query may see".
 */
#ifndef LLAISYS_KV_CACHE_H
#define LLAISYS_KV_CACHE_H

#include "../llaisys.h"

LLAISYS_EXTERN_C_BEGIN

typedef enum {
    LLAISYS_KV_LAYOUT_BLOCK = 0,
    LLAISYS_KV_LAYOUT_SLOT = 1,
} llaisysKVLayout_t;

/* The largest seq id + 1 in the SLOT layout. */
#define LLAISYS_KV_MAX_SEQS 256

typedef struct {
    llaisysKVLayout_t layout;
    llaisysDataType_t dtype; /* storage dtype of K and V: f32, f16, bf16, or q8_0 (CPU only; head_dim a
                              * multiple of 32; each head's row head_dim / 32 blocks of 34 bytes, as
                              * llama.cpp's -ctk/-ctv q8_0). q8_0 elsewhere is UNSUPPORTED. */
    size_t n_layers;
    size_t n_kv_heads;
    size_t head_dim;
    size_t n_slots;    /* total token slots, <= INT32_MAX; BLOCK: a multiple of block_size */
    size_t block_size; /* BLOCK: slots per block (e.g. 16); SLOT: ignored */
    float rope_theta;  /* SLOT: seq_add re-rotates stored keys with this base */
    llaisysDeviceType_t device;
    int device_id;
} llaisysKVCacheParams_t;

typedef struct LlaisysKVCache *llaisysKVCache_t;

/* Number of slots that fit in `bytes` for these params (n_slots ignored; rounded down to
 * whole blocks for BLOCK). */
LLAISYS_API size_t llaisysKVCacheSlotsForBytes(const llaisysKVCacheParams_t *params, size_t bytes);

/* Allocate the whole cache once, into *out. On error *out is NULL and the status says why
 * (INVALID_ARGUMENT naming the field for NULL params or out, an unknown enum, zero sizes;
 * OUT_OF_MEMORY; UNSUPPORTED). The caller owns it (llaisysKVCacheDestroy). */
LLAISYS_API llaisysStatus_t llaisysKVCacheCreate2(const llaisysKVCacheParams_t *params, llaisysKVCache_t *out);

/* DEPRECATED: use llaisysKVCacheCreate2. The same cache as the return value, NULL on error
 * (the cause in llaisysGetLastStatus / llaisysGetLastError). Kept working; the ABI is stable. */
LLAISYS_API llaisysKVCache_t llaisysKVCacheCreate(const llaisysKVCacheParams_t *params);

/* Release the cache: OK, or INVALID_ARGUMENT (with the message) for a destroyed, foreign or
 * non-cache handle, which is left alone. NULL is a no-op returning OK. (Returned void before;
 * the status travels in a register that callers built against the void declaration ignore,
 * so the ABI is unchanged.) */
LLAISYS_API llaisysStatus_t llaisysKVCacheDestroy(llaisysKVCache_t cache);

typedef struct {
    llaisysKVLayout_t layout;
    size_t capacity; /* token slots */
    size_t used;     /* SLOT: cells owned by at least one seq; BLOCK: 0 (the block manager counts) */
    size_t free;     /* capacity - used */
    size_t bytes;    /* bytes of K and V storage */
    size_t block_size;
} llaisysKVCacheStats_t;

LLAISYS_API llaisysStatus_t llaisysKVCacheGetStats(llaisysKVCache_t cache, llaisysKVCacheStats_t *out);

/* SLOT layout only (UNSUPPORTED on BLOCK). Positions ranges are [p0, p1); p1 < 0 means
 * "to the end". seq ids are in [0, LLAISYS_KV_MAX_SEQS); seq -1 in seq_rm means all seqs. */
/* Forget positions [p0, p1) of seq; cells left with no owner become free. */
LLAISYS_API llaisysStatus_t llaisysKVCacheSeqRm(llaisysKVCache_t cache, int32_t seq, int64_t p0, int64_t p1);
/* Make dst share src's cells in [p0, p1) (no copy of K/V). */
LLAISYS_API llaisysStatus_t llaisysKVCacheSeqCp(llaisysKVCache_t cache, int32_t src, int32_t dst, int64_t p0,
                                                int64_t p1);
/* Drop every cell not owned by seq (and seq's claim stays). */
LLAISYS_API llaisysStatus_t llaisysKVCacheSeqKeep(llaisysKVCache_t cache, int32_t seq);
/* Add delta to the positions of seq's cells in [p0, p1), re-rotating their keys; cells
 * whose position would become negative are removed from seq. The cells must belong to seq
 * alone (a shared cell cannot have two positions): INVALID_ARGUMENT otherwise. */
LLAISYS_API llaisysStatus_t llaisysKVCacheSeqAdd(llaisysKVCache_t cache, int32_t seq, int64_t p0, int64_t p1,
                                                 int64_t delta);
/* Largest position held by seq into *out, or -1 if it holds none. */
LLAISYS_API llaisysStatus_t llaisysKVCacheSeqPosMax(llaisysKVCache_t cache, int32_t seq, int64_t *out);
/* BLOCK layout only (UNSUPPORTED on SLOT): one block's K and V, all layers, to and from host
 * memory (the prompt cache's disk tier, doc/engine.md "Prompt cache on disk"). The bytes are
 * [n_layers][2: K then V][block_size, n_kv_heads, head_dim] in the cache's dtype; their count
 * is llaisysKVCacheBlockBytes. `block` is in [0, n_slots / block_size): OUT_OF_RANGE otherwise.
 * Read: BUFFER_TOO_SMALL when capacity is below the block's bytes. Write: SHAPE_MISMATCH unless
 * size is exactly the block's bytes. NULL buffers are INVALID_ARGUMENT. The buffers are only
 * used during the call; on a GPU the copy is synchronous. Nothing is changed on an error. */
LLAISYS_API llaisysStatus_t llaisysKVCacheBlockBytes(llaisysKVCache_t cache, size_t *out);
LLAISYS_API llaisysStatus_t llaisysKVCacheBlockRead(llaisysKVCache_t cache, size_t block, void *dst,
                                                    size_t capacity);
LLAISYS_API llaisysStatus_t llaisysKVCacheBlockWrite(llaisysKVCache_t cache, size_t block, const void *src,
                                                     size_t size);
/* BLOCK layout only (UNSUPPORTED on SLOT, which moves cells with SeqAdd): cache reuse, cached
 * tokens moved to new positions (doc/engine.md "Cache reuse"). For each i < n, in every layer,
 * slot dst_slots[i] gets slot src_slots[i]'s V and its K re-rotated by deltas[i] positions (RoPE
 * composes: the key stored for position p becomes the key for p + delta), with SeqAdd's rotation
 * and table: the model's (scaled) one for a cache the model made, else that of rope_theta (a
 * cache made with rope_theta 0 has none: a nonzero delta is then INVALID_ARGUMENT). Slots are in
 * [0, n_slots): OUT_OF_RANGE otherwise. The dst slots must be distinct and none may be a src
 * slot, |delta| <= INT32_MAX: INVALID_ARGUMENT otherwise. n = 0 is a no-op; NULL arrays with
 * n > 0 are INVALID_ARGUMENT. CPU caches, and NVIDIA ones in a build with that backend (one
 * launch, synchronous): UNSUPPORTED on other devices. Nothing is changed on an error. */
LLAISYS_API llaisysStatus_t llaisysKVCacheCopyShift(llaisysKVCache_t cache, size_t n, const int32_t *src_slots,
                                                    const int32_t *dst_slots, const int64_t *deltas);
/* Both layouts: forget everything (SLOT: all cells free). */
LLAISYS_API llaisysStatus_t llaisysKVCacheClear(llaisysKVCache_t cache);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_KV_CACHE_H */
