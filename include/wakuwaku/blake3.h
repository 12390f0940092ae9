/*
** wakuwaku/blake3.h — the BLAKE3 hash function.
**
** This header is the specification of wakuwaku's own BLAKE3 implementation
** (https://github.com/BLAKE3-team/BLAKE3-specs). HashedCache stores the
** 32-byte BLAKE3 hash of every body next to it; applications may use the
** same functions for their own content hashes, MACs and key derivation.
**
** The three modes of the specification are provided:
**
**   hash         wk_blake3_init()              / wk_blake3()
**   keyed_hash   wk_blake3_init_keyed()        (a 32-byte secret key; a MAC)
**   derive_key   wk_blake3_init_derive_key()   (a context string; a KDF)
**
** Every mode can produce output of any length (extended output, XOF); the
** first 32 bytes are the default hash and any longer output starts with
** the shorter one.
**
** Streaming:
**
**     wk_blake3_hasher h;                       caller-allocated, e.g. stack
**     wk_blake3_init(&h);
**     wk_blake3_update(&h, part1, len1);        any number of times,
**     wk_blake3_update(&h, part2, len2);        pieces of any size
**     wk_blake3_final(&h, out, WK_BLAKE3_OUT_LEN);
**
** The result does not depend on how the input is split between calls to
** wk_blake3_update().
**
** The compression code is picked once, at run time, from the CPU's
** features (AVX-512, AVX2, SSE4.1 or portable C); wk_blake3_implementation()
** tells which. All implementations give identical results.
**
** Thread safety: a hasher belongs to one thread at a time; distinct hashers
** may be used concurrently. Every function here may be called from any
** thread without other synchronisation.
**
** Memory: none of these functions allocates memory or fails. The hasher
** owns no resources, so it needs no destructor and may be copied with
** memcpy() or plain assignment to fork a hash state (e.g. to hash a common
** prefix once).
*/
#ifndef WAKUWAKU_BLAKE3_H
#define WAKUWAKU_BLAKE3_H

#include <stddef.h>
#include <stdint.h>

#include <wakuwaku/common.h> /* WK_API */

#ifdef __cplusplus
extern "C" {
#endif

/* Length in bytes of the default output (the hash HashedCache stores). */
#define WK_BLAKE3_OUT_LEN 32
/* Length in bytes of the key of wk_blake3_init_keyed(). */
#define WK_BLAKE3_KEY_LEN 32
/* Length in bytes of one compression-function block. */
#define WK_BLAKE3_BLOCK_LEN 64
/* Length in bytes of one chunk, the leaf of the hash tree. */
#define WK_BLAKE3_CHUNK_LEN 1024

/* Depth of the CV stack: enough for 2^64 bytes of input (2^54 chunks),
** plus one entry for a pair of subtrees that has not been merged yet. */
#define WK_BLAKE3_MAX_DEPTH 55

/*
** The state of one hash computation.
**
** Allocate it yourself (the stack is fine), initialise it with one of the
** wk_blake3_init*() functions, feed it with wk_blake3_update() and read the
** result with wk_blake3_final().
**
** WARNING: all fields are private. Their names, types, order and the size
** of the struct may change in any release; do not read or write them, and
** do not rely on sizeof(wk_blake3_hasher) across library versions. A hasher
** that was never initialised must not be passed to any other function.
*/
typedef struct wk_blake3_hasher {
    uint32_t key[8];                    /* private: key words (IV, key or KDF key) */
    uint32_t cv[8];                     /* private: chaining value of the current chunk */
    uint64_t chunk_counter;             /* private: index of the current chunk */
    uint8_t block[WK_BLAKE3_BLOCK_LEN]; /* private: bytes of a partial block */
    uint8_t block_len;                  /* private: bytes used in block[] */
    uint8_t blocks_compressed;          /* private: blocks of the current chunk done */
    uint8_t flags;                      /* private: mode flags of every compression */
    uint8_t cv_stack_len;               /* private: entries in cv_stack[] */
    uint8_t cv_stack[WK_BLAKE3_MAX_DEPTH * WK_BLAKE3_OUT_LEN]; /* private */
} wk_blake3_hasher;

/*
** Begin a hash in the default mode ("hash" in the specification).
**
** h: the hasher to (re)initialise; must not be NULL. Any previous state in
** *h is discarded, so a hasher may be reused by calling an init function
** again.
*/
WK_API void wk_blake3_init(wk_blake3_hasher *h);

/*
** Begin a keyed hash ("keyed_hash"): a message authentication code or a
** PRF under a secret key.
**
** key: exactly WK_BLAKE3_KEY_LEN (32) bytes, not NULL; the bytes are copied,
** so the key buffer may be wiped or freed as soon as this returns.
**
** WARNING: compare MACs with a constant-time function (sodium_memcmp()),
** never with memcmp().
*/
WK_API void wk_blake3_init_keyed(wk_blake3_hasher *h, const uint8_t key[WK_BLAKE3_KEY_LEN]);

/*
** Begin a key derivation ("derive_key"). The input fed with
** wk_blake3_update() is the key material; the output is the derived key,
** of any length.
**
** context: a NUL-terminated string, not NULL, that is hard-coded, globally
** unique and application-specific, e.g.
** "wakuwaku 2024-05-01 session tokens v1". The string is hashed here and
** not referenced afterwards.
**
** WARNING: the context must not contain secrets or vary at run time; put
** variable or secret data in the key material instead.
*/
WK_API void wk_blake3_init_derive_key(wk_blake3_hasher *h, const char *context);

/*
** Same as wk_blake3_init_derive_key() with a context given as bytes:
** `len` bytes at `context` (which may contain NUL bytes). context may be
** NULL only when len is 0.
*/
WK_API void wk_blake3_init_derive_key_raw(wk_blake3_hasher *h, const void *context, size_t len);

/*
** Append `len` bytes at `input` to the message being hashed.
**
** input may be NULL only when len is 0 (a harmless no-op). The bytes are
** read during the call and not referenced afterwards. The input may be
** split into calls of any sizes, including after wk_blake3_final().
**
** The speed-up from SIMD comes from hashing several 1 KiB chunks at once,
** so large calls (tens of KiB or more) are faster than many small ones.
*/
WK_API void wk_blake3_update(wk_blake3_hasher *h, const void *input, size_t len);

/*
** Write the first `out_len` bytes of the output of everything fed so far
** into `out` (OUT). Any out_len is allowed: 32 (WK_BLAKE3_OUT_LEN) is the
** default hash and the usual choice; shorter outputs are prefixes of it,
** longer ones extend it (XOF). out_len 0 writes nothing, and then out may
** be NULL.
**
** The hasher is not modified: wk_blake3_final() may be called again, and
** wk_blake3_update() may continue the message afterwards (the next final
** then covers everything fed, as if final had not been called).
**
** WARNING: out_len is not a security parameter beyond 32 bytes; outputs
** shorter than 32 bytes give proportionally less collision resistance
** (16 bytes: 64-bit security).
*/
WK_API void wk_blake3_final(const wk_blake3_hasher *h, uint8_t *out, size_t out_len);

/*
** One-shot default hash: out = BLAKE3(input[0..len)), 32 bytes.
** Equivalent to init, update(input, len), final(out, 32). input may be
** NULL only when len is 0.
*/
WK_API void wk_blake3(const void *input, size_t len, uint8_t out[WK_BLAKE3_OUT_LEN]);

/*
** Name of the compression implementation chosen for this CPU: "avx512",
** "avx2", "sse41" or "portable". The string is static; do not free it. Meant for
** logs and benchmarks; results never depend on it.
*/
WK_API const char *wk_blake3_implementation(void);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_BLAKE3_H */
