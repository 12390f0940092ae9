/*
 * core/token.c — random lease tokens.
 *
 * A lock try draws a token, and randombytes_buf() is a getrandom system
 * call each time: on a batched lock cycle that call was a sixth of the
 * client's time. So each thread keeps a ChaCha20 stream of its own: a
 * 32-byte key from randombytes_buf(), expanded by libsodium
 * (randombytes_buf_deterministic) into a block of tokens and the next
 * key, the old key erased at once ("fast key erasure"): the state left in
 * memory never tells a token already handed out. Each token's bytes are
 * wiped from the block as it is taken.
 *
 * After fork() the child would go on with its parent's stream and draw
 * the very tokens the parent draws next — two holders with one token. A
 * pthread_atfork() child handler counts forks; a thread whose key was
 * drawn before the last fork draws a new one.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <sodium.h>

#include <wakuwaku/token.h>

enum { KEY_LEN = randombytes_SEEDBYTES, BLOCK = 32 * WK_TOKEN_LEN };

static atomic_uint forks;        /* fork()s this process came through */
static atomic_bool no_streams;   /* they cannot be counted */
static pthread_once_t forks_counted = PTHREAD_ONCE_INIT;

static void count_fork(void)
{
    atomic_fetch_add_explicit(&forks, 1, memory_order_relaxed);
}

static void count_forks(void)
{
    /* If they cannot be counted, no thread keeps a stream: every token
     * is a randombytes_buf() call. */
    if (pthread_atfork(NULL, NULL, count_fork) != 0)
        atomic_store(&no_streams, true);
}

static _Thread_local struct {
    unsigned char key[KEY_LEN];
    unsigned char block[BLOCK];
    size_t used;      /* bytes of block taken (wiped) */
    unsigned epoch;   /* `forks` + 1 when the key was drawn; 0: none yet */
} stream;

void wk_token_random(wk_token *token)
{
    if (!token)
        return;
    pthread_once(&forks_counted, count_forks);
    if (atomic_load_explicit(&no_streams, memory_order_relaxed)) {
        randombytes_buf(token->bytes, sizeof(token->bytes));
        return;
    }
    unsigned epoch = atomic_load_explicit(&forks, memory_order_relaxed) + 1;
    if (stream.epoch != epoch) {
        randombytes_buf(stream.key, sizeof(stream.key));
        stream.epoch = epoch;
        stream.used = BLOCK;
    }
    if (stream.used == BLOCK) {
        unsigned char out[BLOCK + KEY_LEN];
        randombytes_buf_deterministic(out, sizeof(out), stream.key);
        memcpy(stream.block, out, BLOCK);
        memcpy(stream.key, out + BLOCK, KEY_LEN);
        sodium_memzero(out, sizeof(out));
        stream.used = 0;
    }
    memcpy(token->bytes, stream.block + stream.used, sizeof(token->bytes));
    sodium_memzero(stream.block + stream.used, sizeof(token->bytes));
    stream.used += sizeof(token->bytes);
}
