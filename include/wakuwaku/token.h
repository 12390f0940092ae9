/*
 * wakuwaku/token.h — lease tokens: 16 random bytes that name the holder of
 * a lease (Lock, RwLock, and any kind built like them).
 *
 * A core type: core/token.c fills it, the lock-like kinds store it in
 * Redis and compare it in their scripts. Included by wakuwaku/lock.h.
 */
#ifndef WAKUWAKU_TOKEN_H
#define WAKUWAKU_TOKEN_H

#include <wakuwaku/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WK_TOKEN_LEN 16

/* A lease token: 16 random bytes (wk_token_random). A value type;
 * copying it is how a lease moves between threads (e.g. a lease keeper). */
typedef struct wk_token {
    uint8_t bytes[WK_TOKEN_LEN];
} wk_token;

/* wk_token_random — fill `token` with 16 random bytes. Each thread draws
 * from a ChaCha20 stream of its own, keyed from libsodium's CSPRNG
 * (randombytes_buf) and re-keyed every 32 tokens with the old key erased,
 * so a token costs no system call (about 40 ns, against about 2 us for a
 * getrandom call; bench/bench_token.c). The streams are kept in memory the
 * kernel zeroes in any child process (MADV_WIPEONFORK, Linux 4.14), so a
 * child re-keys at its first draw whatever made it — fork(), glibc's
 * _Fork(), a fork or clone system call without CLONE_VM — and parent and
 * child never draw the same tokens; no fork handler is involved. Where
 * that memory cannot be had (an older kernel), every token is a
 * randombytes_buf call. A thread's stream is wiped and reused by a later
 * thread once it exits. Thread-safe once any handle has been opened
 * (sodium_init). NULL is ignored. */
WK_API void wk_token_random(wk_token *token);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_TOKEN_H */
