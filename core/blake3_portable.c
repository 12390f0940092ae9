/*
** core/blake3_portable.c — the BLAKE3 compression function in plain C.
**
** This is the reference point for the SIMD files: it follows the
** specification (section 2.2) directly, one block at a time, and runs on
** any CPU. hash_many here is a loop over inputs; SIMD versions do several
** inputs per instruction.
*/
#include "blake3_internal.h"

static inline uint32_t rotr32(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

/* The quarter-round G mixes one column or diagonal of the state with two
** message words. */
#define G(a, b, c, d, x, y)                                                                        \
    do {                                                                                           \
        v[a] = v[a] + v[b] + (x);                                                                  \
        v[d] = rotr32(v[d] ^ v[a], 16);                                                            \
        v[c] = v[c] + v[d];                                                                        \
        v[b] = rotr32(v[b] ^ v[c], 12);                                                            \
        v[a] = v[a] + v[b] + (y);                                                                  \
        v[d] = rotr32(v[d] ^ v[a], 8);                                                             \
        v[c] = v[c] + v[d];                                                                        \
        v[b] = rotr32(v[b] ^ v[c], 7);                                                             \
    } while (0)

/* One round: the four columns, then the four diagonals. Indexing through
** the schedule with a constant r lets the compiler resolve every message
** word at compile time once the rounds are unrolled. */
#define ROUND(r)                                                                                   \
    do {                                                                                           \
        const uint8_t *s = wk__b3_schedule[r];                                                     \
        G(0, 4, 8, 12, m[s[0]], m[s[1]]);                                                          \
        G(1, 5, 9, 13, m[s[2]], m[s[3]]);                                                          \
        G(2, 6, 10, 14, m[s[4]], m[s[5]]);                                                         \
        G(3, 7, 11, 15, m[s[6]], m[s[7]]);                                                         \
        G(0, 5, 10, 15, m[s[8]], m[s[9]]);                                                         \
        G(1, 6, 11, 12, m[s[10]], m[s[11]]);                                                       \
        G(2, 7, 8, 13, m[s[12]], m[s[13]]);                                                        \
        G(3, 4, 9, 14, m[s[14]], m[s[15]]);                                                        \
    } while (0)

/* Run the 7 rounds; leaves the full 16-word state in v. */
static inline void compress_state(uint32_t v[16], const uint32_t cv[8], const uint8_t block[64],
                                  uint8_t block_len, uint64_t counter, uint8_t flags)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = wk__b3_load32(block + 4 * i);

    for (int i = 0; i < 8; i++)
        v[i] = cv[i];
    v[8] = wk__b3_iv[0];
    v[9] = wk__b3_iv[1];
    v[10] = wk__b3_iv[2];
    v[11] = wk__b3_iv[3];
    v[12] = (uint32_t)counter;
    v[13] = (uint32_t)(counter >> 32);
    v[14] = block_len;
    v[15] = flags;

    ROUND(0);
    ROUND(1);
    ROUND(2);
    ROUND(3);
    ROUND(4);
    ROUND(5);
    ROUND(6);
}

void wk__blake3_compress_in_place_portable(uint32_t cv[8], const uint8_t block[64],
                                           uint8_t block_len, uint64_t counter, uint8_t flags)
{
    uint32_t v[16];
    compress_state(v, cv, block, block_len, counter, flags);
    for (int i = 0; i < 8; i++)
        cv[i] = v[i] ^ v[i + 8];
}

void wk__blake3_compress_xof_portable(const uint32_t cv[8], const uint8_t block[64],
                                      uint8_t block_len, uint64_t counter, uint8_t flags,
                                      uint8_t out[64])
{
    uint32_t v[16];
    compress_state(v, cv, block, block_len, counter, flags);
    for (int i = 0; i < 8; i++) {
        wk__b3_store32(out + 4 * i, v[i] ^ v[i + 8]);
        wk__b3_store32(out + 32 + 4 * i, v[i + 8] ^ cv[i]);
    }
}

void wk__blake3_hash_many_portable(const uint8_t *const *inputs, size_t n, size_t blocks,
                                   const uint32_t key[8], uint64_t counter, int increment_counter,
                                   uint8_t flags, uint8_t flags_start, uint8_t flags_end,
                                   uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t cv[8];
        memcpy(cv, key, sizeof cv);
        for (size_t b = 0; b < blocks; b++) {
            uint8_t f = flags;
            if (b == 0)
                f |= flags_start;
            if (b + 1 == blocks)
                f |= flags_end;
            wk__blake3_compress_in_place_portable(cv, inputs[i] + b * WK_BLAKE3_BLOCK_LEN,
                                                  WK_BLAKE3_BLOCK_LEN, counter, f);
        }
        wk__b3_store_cv(out + 32 * i, cv);
        if (increment_counter)
            counter++;
    }
}
