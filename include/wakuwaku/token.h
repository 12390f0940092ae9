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
 * so a token costs no system call; a process made by fork() re-keys in
 * the child (pthread_atfork), so parent and child never draw the same
 * tokens. A child made by a raw clone() system call, which runs no fork
 * handlers, is not covered. Thread-safe once any handle has been opened
 * (sodium_init). NULL is ignored. */
WK_API void wk_token_random(wk_token *token);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_TOKEN_H */
