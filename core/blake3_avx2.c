/*
** core/blake3_avx2.c — BLAKE3 hash_many for eight inputs at once (AVX2).
**
** Vector i holds state word i of eight independent inputs, one per 32-bit
** lane: the portable round with every word widened to eight. Each block of
** the eight inputs is loaded as sixteen 256-bit rows and transposed 8x8 so
** that vector w holds message word w of every input; the final CVs are
** transposed back.
**
** Fewer than eight inputs go to the SSE4.1 code, which dispatch guarantees
** is also available. Every function carries target("avx2"); dispatch calls
** them only on CPUs that have it. Loads and stores are unaligned.
*/
#include "blake3_internal.h"

#if WK__B3_X86

#include <immintrin.h>

#define TARGET __attribute__((target("avx2")))

TARGET static inline __m256i rotr16(__m256i x)
{
    return _mm256_shuffle_epi8(x, _mm256_set_epi8(13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3,
                                                  2, 13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0,
                                                  3, 2));
}

TARGET static inline __m256i rotr12(__m256i x)
{
    return _mm256_or_si256(_mm256_srli_epi32(x, 12), _mm256_slli_epi32(x, 20));
}

TARGET static inline __m256i rotr8(__m256i x)
{
    return _mm256_shuffle_epi8(x, _mm256_set_epi8(12, 15, 14, 13, 8, 11, 10, 9, 4, 7, 6, 5, 0, 3, 2,
                                                  1, 12, 15, 14, 13, 8, 11, 10, 9, 4, 7, 6, 5, 0, 3,
                                                  2, 1));
}

TARGET static inline __m256i rotr7(__m256i x)
{
    return _mm256_or_si256(_mm256_srli_epi32(x, 7), _mm256_slli_epi32(x, 25));
}

TARGET static inline __m256i add3(__m256i a, __m256i b, __m256i c)
{
    return _mm256_add_epi32(_mm256_add_epi32(a, b), c);
}

/* Transpose the 8x8 matrix of 32-bit words in r[0..7] (row i = r[i]). */
TARGET static inline void transpose8(__m256i r[8])
{
    /* Interleave pairs of rows, then pairs of pairs, within 128-bit
    ** halves; finally swap halves between rows 4 apart. */
    __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]);
    __m256i t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]);
    __m256i t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]);
    __m256i t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]);
    __m256i t7 = _mm256_unpackhi_epi32(r[6], r[7]);

    __m256i u0 = _mm256_unpacklo_epi64(t0, t2); /* words 0 | 4 of rows 0-3 */
    __m256i u1 = _mm256_unpackhi_epi64(t0, t2); /* words 1 | 5 */
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3); /* words 2 | 6 */
    __m256i u3 = _mm256_unpackhi_epi64(t1, t3); /* words 3 | 7 */
    __m256i u4 = _mm256_unpacklo_epi64(t4, t6); /* same for rows 4-7 */
    __m256i u5 = _mm256_unpackhi_epi64(t4, t6);
    __m256i u6 = _mm256_unpacklo_epi64(t5, t7);
    __m256i u7 = _mm256_unpackhi_epi64(t5, t7);

    r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

/* m[w] = word w of block `block` of each of the eight inputs. */
TARGET static inline void load_msg8(__m256i m[16], const uint8_t *const in[8], size_t block)
{
    size_t off = block * WK_BLAKE3_BLOCK_LEN;
    for (int lane = 0; lane < 8; lane++) {
        m[lane] = _mm256_loadu_si256((const __m256i *)(const void *)(in[lane] + off));
        m[8 + lane] = _mm256_loadu_si256((const __m256i *)(const void *)(in[lane] + off + 32));
    }
    transpose8(&m[0]);
    transpose8(&m[8]);
}

#define GV(a, b, c, d, x, y)                                                                       \
    do {                                                                                           \
        v[a] = add3(v[a], v[b], (x));                                                              \
        v[d] = rotr16(_mm256_xor_si256(v[d], v[a]));                                               \
        v[c] = _mm256_add_epi32(v[c], v[d]);                                                       \
        v[b] = rotr12(_mm256_xor_si256(v[b], v[c]));                                               \
        v[a] = add3(v[a], v[b], (y));                                                              \
        v[d] = rotr8(_mm256_xor_si256(v[d], v[a]));                                                \
        v[c] = _mm256_add_epi32(v[c], v[d]);                                                       \
        v[b] = rotr7(_mm256_xor_si256(v[b], v[c]));                                                \
    } while (0)

#define ROUND8(r)                                                                                  \
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

TARGET static void hash8(const uint8_t *const in[8], size_t blocks, const uint32_t key[8],
                         uint64_t counter, int increment_counter, uint8_t flags,
                         uint8_t flags_start, uint8_t flags_end, uint8_t *out)
{
    __m256i h[8], v[16], m[16];
    uint32_t lo[8], hi[8];

    for (int i = 0; i < 8; i++) {
        uint64_t c = counter + (increment_counter ? (uint64_t)i : 0);
        lo[i] = (uint32_t)c;
        hi[i] = (uint32_t)(c >> 32);
    }
    const __m256i ctr_lo = _mm256_loadu_si256((const __m256i *)(const void *)lo);
    const __m256i ctr_hi = _mm256_loadu_si256((const __m256i *)(const void *)hi);

    for (int i = 0; i < 8; i++)
        h[i] = _mm256_set1_epi32((int)key[i]);

    for (size_t b = 0; b < blocks; b++) {
        size_t off = b * WK_BLAKE3_BLOCK_LEN;
        uint8_t f = flags;
        if (b == 0)
            f |= flags_start;
        if (b + 1 == blocks)
            f |= flags_end;

        load_msg8(m, in, b);
        /* Eight streams 1 KiB apart defeat the hardware prefetcher on
        ** some CPUs; asking for the block after next gains ~30% on
        ** inputs larger than the cache. */
        if (b + 2 < blocks) {
            for (int lane = 0; lane < 8; lane++)
                _mm_prefetch((const char *)(in[lane] + off + 2 * WK_BLAKE3_BLOCK_LEN), _MM_HINT_T0);
        }
        for (int i = 0; i < 8; i++)
            v[i] = h[i];
        v[8] = _mm256_set1_epi32((int)wk__b3_iv[0]);
        v[9] = _mm256_set1_epi32((int)wk__b3_iv[1]);
        v[10] = _mm256_set1_epi32((int)wk__b3_iv[2]);
        v[11] = _mm256_set1_epi32((int)wk__b3_iv[3]);
        v[12] = ctr_lo;
        v[13] = ctr_hi;
        v[14] = _mm256_set1_epi32(WK_BLAKE3_BLOCK_LEN);
        v[15] = _mm256_set1_epi32(f);

        ROUND8(0);
        ROUND8(1);
        ROUND8(2);
        ROUND8(3);
        ROUND8(4);
        ROUND8(5);
        ROUND8(6);

        for (int i = 0; i < 8; i++)
            h[i] = _mm256_xor_si256(v[i], v[i + 8]);
    }

    /* Back to one row of 8 words per input. */
    transpose8(h);
    for (int lane = 0; lane < 8; lane++)
        _mm256_storeu_si256((__m256i *)(void *)(out + 32 * lane), h[lane]);
}

TARGET void wk__blake3_hash_many_avx2(const uint8_t *const *inputs, size_t n, size_t blocks,
                                      const uint32_t key[8], uint64_t counter,
                                      int increment_counter, uint8_t flags, uint8_t flags_start,
                                      uint8_t flags_end, uint8_t *out)
{
    while (n >= 8) {
        hash8(inputs, blocks, key, counter, increment_counter, flags, flags_start, flags_end, out);
        inputs += 8;
        n -= 8;
        out += 8 * WK_BLAKE3_OUT_LEN;
        if (increment_counter)
            counter += 8;
    }
    wk__blake3_hash_many_sse41(inputs, n, blocks, key, counter, increment_counter, flags,
                               flags_start, flags_end, out);
}

#else /* !WK__B3_X86 */

/* ISO C wants at least one declaration in a translation unit. */
typedef int wk__blake3_avx2_unused;

#endif
