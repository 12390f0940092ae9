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
 * A child process would go on with its parent's stream and draw the very
 * tokens the parent draws next — two holders with one token. Fork
 * handlers (pthread_atfork) do not see every child: glibc's _Fork() and a
 * fork or clone system call made directly run none. So the streams live
 * in memory marked MADV_WIPEONFORK (Linux 4.14): the kernel hands any
 * child that shares no memory with its parent, whatever made it, a zeroed
 * copy, and a zeroed stream has no key (`keyed` 0), so the child's next
 * draw takes a new one. The check is on the draw path itself; no fork
 * handler is needed.
 *
 * Streams are slots of chunks mapped once and kept: a thread takes a free
 * slot (a bit of its chunk's `taken`, set by compare-and-swap) at its
 * first draw and gives it back, wiped, when it exits (a pthread key's
 * destructor). No lock, so a child made while another thread held one
 * cannot hang; no system call but the key's getrandom for a thread whose
 * slot is reused (a mapping of its own per thread made a thread's life
 * 42 us longer here: bench/README.md, bench_token). A chunk's header is
 * on pages of its own, not wiped: a child sees its parent's threads'
 * slots as taken (they are lost to it, like those threads' stacks).
 *
 * Where no chunk can be mapped or marked (an older kernel: madvise fails
 * with EINVAL), every token is a randombytes_buf() call.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* MAP_ANONYMOUS, MADV_WIPEONFORK */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sodium.h>

#include <wakuwaku/token.h>

#include "core/core_internal.h"

enum { KEY_LEN = randombytes_SEEDBYTES, BLOCK = 32 * WK_TOKEN_LEN, SLOTS = 64 };

typedef struct stream {
    unsigned char key[KEY_LEN];
    unsigned char block[BLOCK];
    size_t used;         /* bytes of block taken (wiped) */
    unsigned char keyed; /* 1 once key is drawn; 0 in a fresh or wiped copy */
} stream;

/* One mapping: this header on the first page(s), then SLOTS streams on
 * pages of their own, the only ones marked MADV_WIPEONFORK. */
typedef struct chunk {
    _Atomic uint64_t taken; /* bit i: slots[i] has a thread */
    struct chunk *next;     /* set before the chunk is published */
    stream *slots;
} chunk;

static _Atomic(chunk *) chunks;    /* newest first; never unmapped */
static _Thread_local stream *mine; /* this thread's slot, or NULL */

static pthread_key_t slot_key; /* its destructor gives `mine` back */
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static atomic_bool no_streams; /* no thread can keep one */

static void give_back(void *slot)
{
    stream *s = slot;
    sodium_memzero(s, sizeof(*s));
    for (chunk *c = atomic_load_explicit(&chunks, memory_order_acquire); c; c = c->next) {
        if (s >= c->slots && s < c->slots + SLOTS) {
            /* release: the wipe comes before the next owner's draws */
            atomic_fetch_and_explicit(&c->taken, ~((uint64_t)1 << (s - c->slots)),
                                      memory_order_release);
            break;
        }
    }
    /* (A destructor of another key may draw again: it takes a new one.) */
    mine = NULL;
}

static void init_slots(void)
{
    if (pthread_key_create(&slot_key, give_back) != 0)
        atomic_store(&no_streams, true);
}

/* A free slot of chunk `c`, taken; NULL when all are. */
static stream *take_in(chunk *c)
{
    uint64_t t = atomic_load_explicit(&c->taken, memory_order_relaxed);
    while (t != UINT64_MAX) {
        int i = __builtin_ctzll(~t);
        if (atomic_compare_exchange_weak_explicit(&c->taken, &t, t | (uint64_t)1 << i,
                                                  memory_order_acquire, memory_order_relaxed))
            return &c->slots[i];
    }
    return NULL;
}

/* A new chunk with its first slot taken, published; NULL when it cannot
 * be mapped or marked. */
static stream *take_in_new_chunk(void)
{
#ifdef MADV_WIPEONFORK
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t head = (sizeof(chunk) + page - 1) / page * page;
    size_t size = head + SLOTS * sizeof(stream);
    chunk *c = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED)
        return NULL; /* out of memory or mappings: try again next draw */
    if (madvise((char *)c + head, size - head, MADV_WIPEONFORK) != 0) {
        /* The kernel cannot wipe them: no stream for any thread. */
        atomic_store(&no_streams, true);
        munmap(c, size);
        return NULL;
    }
    c->slots = (stream *)((char *)c + head);
    atomic_init(&c->taken, 1);
    c->next = atomic_load_explicit(&chunks, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&chunks, &c->next, c, memory_order_release,
                                                  memory_order_relaxed))
        ;
    return &c->slots[0];
#else
    return NULL;
#endif
}

/* This thread's stream, taken now; NULL when there can be none (the
 * caller draws the token from randombytes_buf). */
static stream *take_slot(void)
{
    pthread_once(&slot_once, init_slots);
    if (atomic_load_explicit(&no_streams, memory_order_relaxed))
        return NULL;
    stream *s = NULL;
    for (chunk *c = atomic_load_explicit(&chunks, memory_order_acquire); c && !s; c = c->next)
        s = take_in(c);
    if (!s && !(s = take_in_new_chunk()))
        return NULL;
    if (pthread_setspecific(slot_key, s) != 0) {
        give_back(s);
        return NULL;
    }
    mine = s;
    return s;
}

void wk_token_random(wk_token *token)
{
    if (!token)
        return;
    stream *s = mine;
    if (!s && !(s = take_slot())) {
        randombytes_buf(token->bytes, sizeof(token->bytes));
        return;
    }
    if (!s->keyed) {
        /* A new thread's slot, or a child's zeroed copy. */
        randombytes_buf(s->key, sizeof(s->key));
        s->keyed = 1;
        s->used = BLOCK;
    }
    if (s->used == BLOCK) {
        unsigned char out[BLOCK + KEY_LEN];
        randombytes_buf_deterministic(out, sizeof(out), s->key);
        memcpy(s->block, out, BLOCK);
        memcpy(s->key, out + BLOCK, KEY_LEN);
        sodium_memzero(out, sizeof(out));
        s->used = 0;
    }
    memcpy(token->bytes, s->block + s->used, sizeof(token->bytes));
    sodium_memzero(s->block + s->used, sizeof(token->bytes));
    s->used += sizeof(token->bytes);
}

size_t wk__token_chunks(void)
{
    size_t n = 0;
    for (chunk *c = atomic_load_explicit(&chunks, memory_order_acquire); c; c = c->next)
        n++;
    return n;
}
