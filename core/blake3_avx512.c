/*
** core/blake3_avx512.c — BLAKE3 hash_many for sixteen inputs at once
** (AVX-512F).
**
** The same layout as core/blake3_avx2.c, twice as wide: vector i holds
** state word i of sixteen independent inputs. AVX-512 adds a rotate
** instruction, so each rotation is one operation instead of a shuffle or
** two shifts and an OR; on CPUs with AVX-512 this is the path b3sum takes,
** and it is ~1.5x the AVX2 code here.
**
** One block of one input is exactly one 512-bit row, so a block of all
** sixteen inputs is sixteen rows, transposed 16x16 so that vector w holds
** message word w of every input.
**
** Fewer than sixteen inputs go to the AVX2 code, which every AVX-512 CPU
** has and dispatch checks. Every function carries target("avx512f");
** dispatch calls them only on CPUs (and OSes) that support it.
*/
#include "blake3_internal.h"

#if WK__B3_X86

#include <immintrin.h>

#define TARGET __attribute__((target("avx512f")))

TARGET static inline __m512i add3(__m512i a, __m512i b, __m512i c)
{
    return _mm512_add_epi32(_mm512_add_epi32(a, b), c);
}

/* Transpose the 16x16 matrix of 32-bit words in r[0..15] (row i = r[i]). */
TARGET static inline void transpose16(__m512i r[16])
{
    __m512i t[16], u[16];

    /* Within each 128-bit lane L: interleave words, then pairs of words.
    ** Afterwards u[4g + j], lane L, holds word 4L + j of rows 4g..4g+3. */
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int g = 0; g < 4; g++) {
        u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    /* Row 4L + j gathers lane L of u[j], u[4 + j], u[8 + j], u[12 + j]:
    ** a 4x4 transpose of 128-bit lanes. */
    for (int j = 0; j < 4; j++) {
        __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(2, 0, 2, 0));
        __m512i x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 1, 3, 1));
        __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(2, 0, 2, 0));
        __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 1, 3, 1));
        r[0 + j] = _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(2, 0, 2, 0));
        r[4 + j] = _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(2, 0, 2, 0));
        r[8 + j] = _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(3, 1, 3, 1));
        r[12 + j] = _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

#define GV(a, b, c, d, x, y)                                                                       \
    do {                                                                                           \
        v[a] = add3(v[a], v[b], (x));                                                              \
        v[d] = _mm512_ror_epi32(_mm512_xor_si512(v[d], v[a]), 16);                                 \
        v[c] = _mm512_add_epi32(v[c], v[d]);                                                       \
        v[b] = _mm512_ror_epi32(_mm512_xor_si512(v[b], v[c]), 12);                                 \
        v[a] = add3(v[a], v[b], (y));                                                              \
        v[d] = _mm512_ror_epi32(_mm512_xor_si512(v[d], v[a]), 8);                                  \
        v[c] = _mm512_add_epi32(v[c], v[d]);                                                       \
        v[b] = _mm512_ror_epi32(_mm512_xor_si512(v[b], v[c]), 7);                                  \
    } while (0)

#define ROUND16(r)                                                                                 \
    do {                                                                                           \
        const uint8_t *s = wk__b3_schedule[r];                                                     \
        GV(0, 4, 8, 12, m[s[0]], m[s[1]]);                                                         \
        GV(1, 5, 9, 13, m[s[2]], m[s[3]]);                                                         \
        GV(2, 6, 10, 14, m[s[4]], m[s[5]]);                                                        \
        GV(3, 7, 11, 15, m[s[6]], m[s[7]]);                                                        \
        GV(0, 5, 10, 15, m[s[8]], m[s[9]]);                                                        \
        GV(1, 6, 11, 12, m[s[10]], m[s[11]]);                                                      \
        GV(2, 7, 8, 13, m[s[12]], m[s[13]]);                                                       \
        GV(3, 4, 9, 14, m[s[14]], m[s[15]]);                                                       \
    } while (0)

TARGET static void hash16(const uint8_t *const in[16], size_t blocks, const uint32_t key[8],
                          uint64_t counter, int increment_counter, uint8_t flags,
                          uint8_t flags_start, uint8_t flags_end, uint8_t *out)
{
    __m512i h[16], v[16], m[16];
    uint32_t lo[16], hi[16];

    for (int i = 0; i < 16; i++) {
        uint64_t c = counter + (increment_counter ? (uint64_t)i : 0);
        lo[i] = (uint32_t)c;
        hi[i] = (uint32_t)(c >> 32);
    }
    const __m512i ctr_lo = _mm512_loadu_si512((const void *)lo);
    const __m512i ctr_hi = _mm512_loadu_si512((const void *)hi);

    for (int i = 0; i < 8; i++)
        h[i] = _mm512_set1_epi32((int)key[i]);

    for (size_t b = 0; b < blocks; b++) {
        size_t off = b * WK_BLAKE3_BLOCK_LEN;
        uint8_t f = flags;
        if (b == 0)
            f |= flags_start;
        if (b + 1 == blocks)
            f |= flags_end;

        for (int lane = 0; lane < 16; lane++)
            m[lane] = _mm512_loadu_si512((const void *)(in[lane] + off));
        transpose16(m);
        /* As in the AVX2 code: help the prefetcher with 16 streams. */
        if (b + 2 < blocks) {
            for (int lane = 0; lane < 16; lane++)
                _mm_prefetch((const char *)(in[lane] + off + 2 * WK_BLAKE3_BLOCK_LEN), _MM_HINT_T0);
        }

        for (int i = 0; i < 8; i++)
            v[i] = h[i];
        v[8] = _mm512_set1_epi32((int)wk__b3_iv[0]);
        v[9] = _mm512_set1_epi32((int)wk__b3_iv[1]);
        v[10] = _mm512_set1_epi32((int)wk__b3_iv[2]);
        v[11] = _mm512_set1_epi32((int)wk__b3_iv[3]);
        v[12] = ctr_lo;
        v[13] = ctr_hi;
        v[14] = _mm512_set1_epi32(WK_BLAKE3_BLOCK_LEN);
        v[15] = _mm512_set1_epi32(f);

        ROUND16(0);
        ROUND16(1);
        ROUND16(2);
        ROUND16(3);
        ROUND16(4);
        ROUND16(5);
        ROUND16(6);

        for (int i = 0; i < 8; i++)
            h[i] = _mm512_xor_si512(v[i], v[i + 8]);
    }

    /* Back to one row per input: transpose with eight zero rows; row i
    ** then starts with the 8 CV words of input i. */
    for (int i = 8; i < 16; i++)
        h[i] = _mm512_setzero_si512();
    transpose16(h);
    for (int lane = 0; lane < 16; lane++)
        _mm256_storeu_si256((__m256i *)(void *)(out + 32 * lane), _mm512_castsi512_si256(h[lane]));
}

TARGET void wk__blake3_hash_many_avx512(const uint8_t *const *inputs, size_t n, size_t blocks,
                                        const uint32_t key[8], uint64_t counter,
                                        int increment_counter, uint8_t flags, uint8_t flags_start,
                                        uint8_t flags_end, uint8_t *out)
{
    while (n >= 16) {
        hash16(inputs, blocks, key, counter, increment_counter, flags, flags_start, flags_end, out);
        inputs += 16;
        n -= 16;
        out += 16 * WK_BLAKE3_OUT_LEN;
        if (increment_counter)
            counter += 16;
    }
    wk__blake3_hash_many_avx2(inputs, n, blocks, key, counter, increment_counter, flags,
                              flags_start, flags_end, out);
}

#else /* !WK__B3_X86 */

/* ISO C wants at least one declaration in a translation unit. */
typedef int wk__blake3_avx512_unused;

#endif
