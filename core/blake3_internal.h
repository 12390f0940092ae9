/*
** core/blake3_internal.h — private interface between the BLAKE3 files.
**
**   core/blake3.c           hasher: chunk state, CV stack, output, XOF
**   core/blake3_portable.c  compression function in plain C
**   core/blake3_sse41.c     4-way hash_many (SSE4.1)
**   core/blake3_avx2.c      8-way hash_many (AVX2)
**   core/blake3_avx512.c    16-way hash_many (AVX-512F)
**   core/blake3_dispatch.c  picks an implementation from the CPU's features
**
** Constants come from the BLAKE3 specification, section 2. Nothing here is
** public; tests include this header to pin the implementation they check.
*/
#ifndef WAKUWAKU_CORE_BLAKE3_INTERNAL_H
#define WAKUWAKU_CORE_BLAKE3_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "wakuwaku/blake3.h"

/* Domain separation flags (specification, table 3). */
/* clang-format off */
#define WK__B3_CHUNK_START         (1u << 0) /* first block of a chunk */
#define WK__B3_CHUNK_END           (1u << 1) /* last block of a chunk */
#define WK__B3_PARENT              (1u << 2) /* a parent node's block */
#define WK__B3_ROOT                (1u << 3) /* the root: output bytes */
#define WK__B3_KEYED_HASH          (1u << 4) /* keyed_hash mode */
#define WK__B3_DERIVE_KEY_CONTEXT  (1u << 5) /* derive_key: the context */
#define WK__B3_DERIVE_KEY_MATERIAL (1u << 6) /* derive_key: the key material */
/* clang-format on */

/* Blocks per chunk. */
#define WK__B3_CHUNK_BLOCKS (WK_BLAKE3_CHUNK_LEN / WK_BLAKE3_BLOCK_LEN)

/* Most inputs any hash_many processes in parallel (AVX-512: 16 lanes). */
#define WK__B3_MAX_SIMD_DEGREE 16

/* The x86 SIMD files compile to nothing elsewhere. */
#if defined(__x86_64__) || defined(__i386__)
#define WK__B3_X86 1
#else
#define WK__B3_X86 0
#endif

/* The IV: the first 32 bits of the fractional parts of the square roots of
** the first 8 primes (the same as SHA-256's). */
static const uint32_t wk__b3_iv[8] = {
    0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
    0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u,
};

/* Message word order of each of the 7 rounds: row 0 is the identity, and
** row r+1 is row r put through the specification's permutation
** {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8}. Precomputing it
** lets every implementation index the message directly instead of
** permuting it between rounds. */
/* clang-format off */
static const uint8_t wk__b3_schedule[7][16] = {
    { 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15},
    { 2,  6,  3, 10,  7,  0,  4, 13,  1, 11, 12,  5,  9, 14, 15,  8},
    { 3,  4, 10, 12, 13,  2,  7, 14,  6,  5,  9,  0, 11, 15,  8,  1},
    {10,  7, 12,  9, 14,  3, 13, 15,  4,  0, 11,  2,  5,  8,  1,  6},
    {12, 13,  9, 11, 15, 10, 14,  8,  7,  2,  5,  3,  0,  1,  6,  4},
    { 9, 14, 11,  5,  8, 12, 15,  1, 13,  3,  0, 10,  2,  6,  4,  7},
    {11, 15,  5,  0,  1,  9,  8,  6, 14, 10,  2, 12,  3,  4,  7, 13},
};
/* clang-format on */

/* Little-endian loads and stores that work at any alignment and on any
** host byte order; compilers turn them into single moves on x86. */
static inline uint32_t wk__b3_load32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void wk__b3_store32(uint8_t *p, uint32_t w)
{
    p[0] = (uint8_t)w;
    p[1] = (uint8_t)(w >> 8);
    p[2] = (uint8_t)(w >> 16);
    p[3] = (uint8_t)(w >> 24);
}

/* Serialise a chaining value (8 words) as 32 bytes, and back. */
static inline void wk__b3_store_cv(uint8_t out[32], const uint32_t cv[8])
{
    for (int i = 0; i < 8; i++)
        wk__b3_store32(out + 4 * i, cv[i]);
}

static inline void wk__b3_load_cv(uint32_t cv[8], const uint8_t in[32])
{
    for (int i = 0; i < 8; i++)
        cv[i] = wk__b3_load32(in + 4 * i);
}

/*
** The three primitives an implementation provides.
**
** compress_in_place: cv = first 8 words of compress(cv, block, counter,
**   block_len, flags). `block` is 64 bytes at any alignment; bytes past
**   block_len must be zero.
**
** compress_xof: out = all 16 words of the compression output, as 64 bytes
**   (words 0..7 are v[i] ^ v[i+8], words 8..15 are v[i+8] ^ cv[i]).
**
** hash_many: hash n inputs of `blocks` full blocks each, in parallel, all
**   starting from `key`. Input i is at inputs[i] (any alignment) and uses
**   counter + i when increment_counter is nonzero, else counter. Every
**   block gets `flags`; the first also gets flags_start and the last
**   flags_end. The 32-byte CV of input i goes to out + 32 * i. Chunks are
**   blocks = 16, CHUNK_START/CHUNK_END, incrementing counter; parent nodes
**   are blocks = 1, PARENT, counter 0. out must not overlap the inputs.
*/
typedef void wk__b3_compress_in_place_fn(uint32_t cv[8], const uint8_t block[64], uint8_t block_len,
                                         uint64_t counter, uint8_t flags);
typedef void wk__b3_compress_xof_fn(const uint32_t cv[8], const uint8_t block[64],
                                    uint8_t block_len, uint64_t counter, uint8_t flags,
                                    uint8_t out[64]);
typedef void wk__b3_hash_many_fn(const uint8_t *const *inputs, size_t n, size_t blocks,
                                 const uint32_t key[8], uint64_t counter, int increment_counter,
                                 uint8_t flags, uint8_t flags_start, uint8_t flags_end,
                                 uint8_t *out);

/* One implementation: a name for wk_blake3_implementation() and its
** primitives. */
typedef struct wk__b3_impl {
    const char *name;
    wk__b3_compress_in_place_fn *compress_in_place;
    wk__b3_compress_xof_fn *compress_xof;
    wk__b3_hash_many_fn *hash_many;
} wk__b3_impl;

/* core/blake3_dispatch.c */

/* The implementation in use: the forced one if any, else the best one this
** CPU supports (decided on the first call). Never NULL. Thread-safe. */
const wk__b3_impl *wk__blake3_impl(void);

/* Force the implementation named `name` ("portable", "sse41", "avx2",
** "avx512") for
** every later call in this process, or go back to automatic selection when
** name is NULL. Returns 0, or -1 (and changes nothing) when the name is
** unknown or the CPU cannot run it. For tests and benchmarks only: not
** synchronised with hashing in other threads. */
int wk__blake3_force(const char *name);

/* Same as wk__blake3_force("portable") (on != 0) or wk__blake3_force(NULL). */
void wk__blake3_force_portable(int on);

/* core/blake3_portable.c */
void wk__blake3_compress_in_place_portable(uint32_t cv[8], const uint8_t block[64],
                                           uint8_t block_len, uint64_t counter, uint8_t flags);
void wk__blake3_compress_xof_portable(const uint32_t cv[8], const uint8_t block[64],
                                      uint8_t block_len, uint64_t counter, uint8_t flags,
                                      uint8_t out[64]);
void wk__blake3_hash_many_portable(const uint8_t *const *inputs, size_t n, size_t blocks,
                                   const uint32_t key[8], uint64_t counter, int increment_counter,
                                   uint8_t flags, uint8_t flags_start, uint8_t flags_end,
                                   uint8_t *out);

#if WK__B3_X86
/* core/blake3_sse41.c — call only when the CPU has SSE4.1. */
void wk__blake3_hash_many_sse41(const uint8_t *const *inputs, size_t n, size_t blocks,
                                const uint32_t key[8], uint64_t counter, int increment_counter,
                                uint8_t flags, uint8_t flags_start, uint8_t flags_end,
                                uint8_t *out);

/* core/blake3_avx2.c — call only when the CPU has AVX2 and SSE4.1. */
void wk__blake3_hash_many_avx2(const uint8_t *const *inputs, size_t n, size_t blocks,
                               const uint32_t key[8], uint64_t counter, int increment_counter,
                               uint8_t flags, uint8_t flags_start, uint8_t flags_end, uint8_t *out);

/* core/blake3_avx512.c — call only when the CPU has AVX-512F, AVX2 and
** SSE4.1. */
void wk__blake3_hash_many_avx512(const uint8_t *const *inputs, size_t n, size_t blocks,
                                 const uint32_t key[8], uint64_t counter, int increment_counter,
                                 uint8_t flags, uint8_t flags_start, uint8_t flags_end,
                                 uint8_t *out);
#endif

#endif /* WAKUWAKU_CORE_BLAKE3_INTERNAL_H */
