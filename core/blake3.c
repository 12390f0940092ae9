/*
** core/blake3.c — the BLAKE3 hasher: modes, chunk state, the CV stack that
** builds the hash tree incrementally, root output and extended output.
**
** The compression primitives come from the implementation picked by
** core/blake3_dispatch.c; this file only decides what to compress.
**
** How the tree is built (specification, sections 2.1 and 5.1):
**
**  1. Input is split into 1 KiB chunks. A chunk is compressed block by
**     block into a chaining value (CV). Its last block stays buffered
**     until more input arrives: it needs the CHUNK_END flag, and if the
**     chunk is the only one, the ROOT flag too.
**  2. Finished CVs are pushed on the CV stack. Merging is lazy: before
**     pushing the CV of the subtree that starts at chunk index `c`, the
**     stack is merged (pairs replaced by their parent CV) until it holds
**     popcount(c) entries, one per completed power-of-two subtree. Merging
**     only when more input has arrived guarantees that no parent is
**     compressed before we know it is not the root.
**  3. When the current chunk is empty and more than one chunk of input is
**     available, whole aligned power-of-two subtrees are hashed at once
**     with hash_many (SIMD: many chunks in parallel, then each level of
**     parents in parallel). A subtree pushes its two children, not its own
**     CV: if it was the end of the input, its parent is the root.
**  4. final() folds the stack from the top with the last chunk (or with the
**     last pushed pair) and produces root output blocks for counter
**     0, 1, 2, ... (extended output).
*/
#include "blake3_internal.h"

#include <assert.h>

/* Largest subtree hashed in one piece (chunks; a power of two, at least
** 2 * WK__B3_MAX_SIMD_DEGREE). Bounds the 4 KiB buffer that
** hash_subtree() keeps on the stack. Larger subtrees are merged by the CV
** stack, costing one extra one-at-a-time compression per 64 KiB. */
#define SUBTREE_MAX_CHUNKS 64

static_assert((SUBTREE_MAX_CHUNKS & (SUBTREE_MAX_CHUNKS - 1)) == 0,
              "SUBTREE_MAX_CHUNKS must be a power of two");
static_assert(SUBTREE_MAX_CHUNKS >= 2 * WK__B3_MAX_SIMD_DEGREE,
              "SUBTREE_MAX_CHUNKS must cover a full SIMD batch of parents");

/* ------------------------------------------------------------------------
** Output: the inputs of one compression whose result is not known yet to
** be a CV or root output bytes.
** --------------------------------------------------------------------- */

typedef struct output {
    uint32_t cv[8];
    uint8_t block[WK_BLAKE3_BLOCK_LEN];
    uint8_t block_len;
    uint64_t counter;
    uint8_t flags;
} output;

/* The CV of a non-root node, as bytes. */
static void output_cv(const wk__b3_impl *impl, const output *o, uint8_t out[32])
{
    uint32_t cv[8];
    memcpy(cv, o->cv, sizeof cv);
    impl->compress_in_place(cv, o->block, o->block_len, o->counter, o->flags);
    wk__b3_store_cv(out, cv);
}

/* Root output bytes [0, out_len): output block k is the root compression
** with counter k. */
static void output_root_bytes(const wk__b3_impl *impl, const output *o, uint8_t *out,
                              size_t out_len)
{
    uint8_t buf[WK_BLAKE3_BLOCK_LEN];
    uint64_t k = 0;
    uint8_t flags = (uint8_t)(o->flags | WK__B3_ROOT);

    while (out_len >= WK_BLAKE3_BLOCK_LEN) {
        impl->compress_xof(o->cv, o->block, o->block_len, k++, flags, out);
        out += WK_BLAKE3_BLOCK_LEN;
        out_len -= WK_BLAKE3_BLOCK_LEN;
    }
    if (out_len > 0) {
        impl->compress_xof(o->cv, o->block, o->block_len, k, flags, buf);
        memcpy(out, buf, out_len);
    }
}

/* A parent node of two CVs given as 64 contiguous bytes (left, right). */
static output parent_output(const uint8_t children[64], const uint32_t key[8], uint8_t flags)
{
    output o;
    memcpy(o.cv, key, sizeof o.cv);
    memcpy(o.block, children, WK_BLAKE3_BLOCK_LEN);
    o.block_len = WK_BLAKE3_BLOCK_LEN;
    o.counter = 0;
    o.flags = (uint8_t)(flags | WK__B3_PARENT);
    return o;
}

/* ------------------------------------------------------------------------
** Chunk state (fields cv, chunk_counter, block, block_len and
** blocks_compressed of the hasher).
** --------------------------------------------------------------------- */

static size_t chunk_len(const wk_blake3_hasher *h)
{
    return (size_t)h->blocks_compressed * WK_BLAKE3_BLOCK_LEN + h->block_len;
}

static uint8_t chunk_start_flag(const wk_blake3_hasher *h)
{
    return h->blocks_compressed == 0 ? WK__B3_CHUNK_START : 0;
}

static void chunk_reset(wk_blake3_hasher *h, uint64_t counter)
{
    memcpy(h->cv, h->key, sizeof h->cv);
    h->chunk_counter = counter;
    memset(h->block, 0, sizeof h->block);
    h->block_len = 0;
    h->blocks_compressed = 0;
}

/* Add len bytes to the current chunk; len must fit in it. A full block is
** compressed only when more bytes follow it, so the chunk's last block is
** always still in h->block when the chunk is finished. */
static void chunk_update(const wk__b3_impl *impl, wk_blake3_hasher *h, const uint8_t *in,
                         size_t len)
{
    assert(len <= WK_BLAKE3_CHUNK_LEN - chunk_len(h));
    while (len > 0) {
        if (h->block_len == WK_BLAKE3_BLOCK_LEN) {
            impl->compress_in_place(h->cv, h->block, WK_BLAKE3_BLOCK_LEN, h->chunk_counter,
                                    (uint8_t)(h->flags | chunk_start_flag(h)));
            h->blocks_compressed++;
            h->block_len = 0;
            memset(h->block, 0, sizeof h->block);
        }
        /* Whole blocks straight from the input, keeping the last one. */
        while (h->block_len == 0 && len > WK_BLAKE3_BLOCK_LEN) {
            impl->compress_in_place(h->cv, in, WK_BLAKE3_BLOCK_LEN, h->chunk_counter,
                                    (uint8_t)(h->flags | chunk_start_flag(h)));
            h->blocks_compressed++;
            in += WK_BLAKE3_BLOCK_LEN;
            len -= WK_BLAKE3_BLOCK_LEN;
        }
        size_t take = WK_BLAKE3_BLOCK_LEN - h->block_len;
        if (take > len)
            take = len;
        memcpy(h->block + h->block_len, in, take);
        h->block_len = (uint8_t)(h->block_len + take);
        in += take;
        len -= take;
    }
}

/* The pending compression of the current chunk's last block. */
static output chunk_output(const wk_blake3_hasher *h)
{
    output o;
    memcpy(o.cv, h->cv, sizeof o.cv);
    memcpy(o.block, h->block, sizeof o.block); /* zero past block_len */
    o.block_len = h->block_len;
    o.counter = h->chunk_counter;
    o.flags = (uint8_t)(h->flags | chunk_start_flag(h) | WK__B3_CHUNK_END);
    return o;
}

/* ------------------------------------------------------------------------
** CV stack.
** --------------------------------------------------------------------- */

static unsigned popcount64(uint64_t x)
{
    unsigned n = 0;
    for (; x != 0; x &= x - 1)
        n++;
    return n;
}

/* Merge the top pairs of the stack until it holds one entry per 1-bit of
** `chunks`, the number of chunks it covers. Only called once more input is
** known to follow, so no merged parent is the root. The two top entries
** are contiguous, so they already form the parent's block. */
static void merge_cv_stack(const wk__b3_impl *impl, wk_blake3_hasher *h, uint64_t chunks)
{
    unsigned keep = popcount64(chunks);
    while (h->cv_stack_len > keep) {
        uint8_t *pair = h->cv_stack + (size_t)(h->cv_stack_len - 2) * WK_BLAKE3_OUT_LEN;
        output o = parent_output(pair, h->key, h->flags);
        output_cv(impl, &o, pair);
        h->cv_stack_len--;
    }
}

/* Push the CV of a subtree that starts at chunk index `counter`. */
static void push_cv(const wk__b3_impl *impl, wk_blake3_hasher *h, const uint8_t cv[32],
                    uint64_t counter)
{
    merge_cv_stack(impl, h, counter);
    assert(h->cv_stack_len < WK_BLAKE3_MAX_DEPTH);
    memcpy(h->cv_stack + (size_t)h->cv_stack_len * WK_BLAKE3_OUT_LEN, cv, WK_BLAKE3_OUT_LEN);
    h->cv_stack_len++;
}

/* ------------------------------------------------------------------------
** Subtrees: many chunks at once.
** --------------------------------------------------------------------- */

/* Hash the `chunks` whole chunks at `in` (a power of two, at most
** SUBTREE_MAX_CHUNKS) whose first has index `counter`. Writes the chunk's
** CV to out[0..32) if chunks == 1, else the CVs of the subtree's two
** children to out[0..64) (the subtree's own node may be the root, so it is
** left to the caller). */
static void hash_subtree(const wk__b3_impl *impl, const uint8_t *in, size_t chunks,
                         const uint32_t key[8], uint64_t counter, uint8_t flags, uint8_t out[64])
{
    const uint8_t *inputs[SUBTREE_MAX_CHUNKS];
    uint8_t cvs[2][SUBTREE_MAX_CHUNKS * WK_BLAKE3_OUT_LEN];
    int cur = 0;

    inputs[0] = in; /* chunks >= 1; also tells gcc the array is set */
    for (size_t i = 1; i < chunks; i++)
        inputs[i] = in + i * WK_BLAKE3_CHUNK_LEN;
    impl->hash_many(inputs, chunks, WK__B3_CHUNK_BLOCKS, key, counter, 1, flags, WK__B3_CHUNK_START,
                    WK__B3_CHUNK_END, cvs[cur]);

    /* Each level halves the CVs: CV pairs are contiguous, so the parent
    ** blocks are read in place; the result goes to the other buffer. */
    size_t n = chunks;
    while (n > 2) {
        for (size_t i = 0; i < n / 2; i++)
            inputs[i] = cvs[cur] + i * 2 * WK_BLAKE3_OUT_LEN;
        impl->hash_many(inputs, n / 2, 1, key, 0, 0, (uint8_t)(flags | WK__B3_PARENT), 0, 0,
                        cvs[cur ^ 1]);
        cur ^= 1;
        n /= 2;
    }
    memcpy(out, cvs[cur], n * WK_BLAKE3_OUT_LEN);
}

/* Largest power of two <= x, for x >= 1. */
static uint64_t floor_pow2(uint64_t x)
{
    while (x & (x - 1))
        x &= x - 1;
    return x;
}

/* ------------------------------------------------------------------------
** Public API.
** --------------------------------------------------------------------- */

static void hasher_init(wk_blake3_hasher *h, const uint32_t key[8], uint8_t flags)
{
    memcpy(h->key, key, sizeof h->key);
    h->flags = flags;
    h->cv_stack_len = 0;
    chunk_reset(h, 0);
}

void wk_blake3_init(wk_blake3_hasher *h)
{
    hasher_init(h, wk__b3_iv, 0);
}

void wk_blake3_init_keyed(wk_blake3_hasher *h, const uint8_t key[WK_BLAKE3_KEY_LEN])
{
    uint32_t k[8];
    wk__b3_load_cv(k, key);
    hasher_init(h, k, WK__B3_KEYED_HASH);
}

void wk_blake3_init_derive_key_raw(wk_blake3_hasher *h, const void *context, size_t len)
{
    uint8_t context_key[WK_BLAKE3_KEY_LEN];
    uint32_t k[8];

    /* The context is hashed on its own, with the IV as the key; the result
    ** keys the hashing of the key material. */
    hasher_init(h, wk__b3_iv, WK__B3_DERIVE_KEY_CONTEXT);
    wk_blake3_update(h, context, len);
    wk_blake3_final(h, context_key, sizeof context_key);
    wk__b3_load_cv(k, context_key);
    hasher_init(h, k, WK__B3_DERIVE_KEY_MATERIAL);
}

void wk_blake3_init_derive_key(wk_blake3_hasher *h, const char *context)
{
    wk_blake3_init_derive_key_raw(h, context, strlen(context));
}

void wk_blake3_update(wk_blake3_hasher *h, const void *input, size_t len)
{
    const wk__b3_impl *impl;
    const uint8_t *in = input;
    uint8_t cvs[64];

    if (len == 0)
        return;
    impl = wk__blake3_impl();

    /* 1. Top up a chunk that already has bytes. If input remains after it
    **    is full, the chunk is not the last one: push its CV. */
    if (chunk_len(h) > 0) {
        size_t take = WK_BLAKE3_CHUNK_LEN - chunk_len(h);
        if (take > len)
            take = len;
        chunk_update(impl, h, in, take);
        in += take;
        len -= take;
        if (len == 0)
            return;
        output o = chunk_output(h);
        output_cv(impl, &o, cvs);
        push_cv(impl, h, cvs, h->chunk_counter);
        chunk_reset(h, h->chunk_counter + 1);
    }

    /* 2. The chunk is empty: hash whole subtrees while more than one chunk
    **    remains. A subtree must start at a multiple of its size (the tree
    **    is aligned) and is at most SUBTREE_MAX_CHUNKS chunks. */
    while (len > WK_BLAKE3_CHUNK_LEN) {
        uint64_t counter = h->chunk_counter;
        uint64_t chunks = floor_pow2(len / WK_BLAKE3_CHUNK_LEN);
        if (chunks > SUBTREE_MAX_CHUNKS)
            chunks = SUBTREE_MAX_CHUNKS;
        while (counter & (chunks - 1))
            chunks >>= 1;

        hash_subtree(impl, in, (size_t)chunks, h->key, counter, h->flags, cvs);
        if (chunks == 1) {
            push_cv(impl, h, cvs, counter);
        } else {
            push_cv(impl, h, cvs, counter);
            push_cv(impl, h, cvs + 32, counter + chunks / 2);
        }
        h->chunk_counter = counter + chunks;
        in += chunks * WK_BLAKE3_CHUNK_LEN;
        len -= (size_t)chunks * WK_BLAKE3_CHUNK_LEN;
    }

    /* 3. The rest (at most one chunk) starts the chunk state. More input
    **    has arrived, so pending merges are safe now; doing them here keeps
    **    the stack fully merged whenever the chunk has bytes. */
    if (len > 0) {
        merge_cv_stack(impl, h, h->chunk_counter);
        chunk_update(impl, h, in, len);
    }
}

void wk_blake3_final(const wk_blake3_hasher *h, uint8_t *out, size_t out_len)
{
    const wk__b3_impl *impl;
    output o;
    size_t i;

    if (out_len == 0)
        return;
    impl = wk__blake3_impl();

    if (h->cv_stack_len == 0) {
        /* At most one chunk in all: it is the root. */
        o = chunk_output(h);
        i = 0;
    } else if (chunk_len(h) > 0) {
        /* The stack is fully merged; the current chunk is the last leaf. */
        o = chunk_output(h);
        i = h->cv_stack_len;
    } else {
        /* The input ended with a subtree: its two children are on top. */
        i = (size_t)h->cv_stack_len - 2;
        o = parent_output(h->cv_stack + i * WK_BLAKE3_OUT_LEN, h->key, h->flags);
    }
    while (i > 0) {
        uint8_t children[64];
        i--;
        memcpy(children, h->cv_stack + i * WK_BLAKE3_OUT_LEN, WK_BLAKE3_OUT_LEN);
        output_cv(impl, &o, children + WK_BLAKE3_OUT_LEN);
        o = parent_output(children, h->key, h->flags);
    }
    output_root_bytes(impl, &o, out, out_len);
}

void wk_blake3(const void *input, size_t len, uint8_t out[WK_BLAKE3_OUT_LEN])
{
    wk_blake3_hasher h;
    wk_blake3_init(&h);
    wk_blake3_update(&h, input, len);
    wk_blake3_final(&h, out, WK_BLAKE3_OUT_LEN);
}

const char *wk_blake3_implementation(void)
{
    return wk__blake3_impl()->name;
}
