/*
 * collection/receiver.h — what the blocking receivers share: LiveView
 * subscriptions, StreamBuffer subscriptions and Pipe receivers each read
 * one item on a blocking handle of their own (core/blocking.h), keep the
 * entity and name they were opened with, and end a wait in progress when
 * stopped. Not installed.
 *
 * Thread-safety: a receiver is used by one thread at a time, except
 * wk__receiver_stop(), which any thread (or a signal handler) may call
 * while it is open.
 */
#ifndef WK_COLLECTION_RECEIVER_H
#define WK_COLLECTION_RECEIVER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <wakuwaku/async.h>
#include <wakuwaku/query.h>

#include "collection/op.h"

typedef struct wk__async_sub wk__async_sub;

typedef struct wk__receiver {
    wk_db *b;         /* the blocking handle: its own connection */
    wk__held held;    /* the entity (for the capability check) and name, copied */
    atomic_bool stop; /* set by wk__receiver_stop(): lock-free for signal handlers */
    /* Through the event loop (collection/receiver_loop.c; b is NULL): the
     * hidden handle, and the receive outstanding (done, arg; busy). */
    wk__async_sub *sub;
    const struct wk__receiver_loop *fns;
    wk_async_done_fn done;
    void *done_arg;
    bool busy;
    int inflight;  /* the kind's name of the query in flight (0: none) */
    char msg[256]; /* the last failure's message */
} wk__receiver;

/*
 * Open `r` (zeroed by the caller) on item `name` of entity `e` (checked by
 * the caller, of `kind`): copy both and open a blocking handle with the
 * settings and capability of `db`. Returns WK_OK, WK_ENOMEM, or what
 * wk__blocking_open() returns, with the message in `err`. On failure
 * wk__receiver_close() frees what was made.
 */
int wk__receiver_open(wk__receiver *r, wk_db *db, const wk_entity *e, const char *kind,
                      const wk_name *name, char *err, size_t errlen);

/* Set the stop flag and cut the wait in progress (or the next one). */
void wk__receiver_stop(wk__receiver *r);

/* Whether wk__receiver_stop() was called. */
bool wk__receiver_stopped(const wk__receiver *r);

/* The message of the last failure on the blocking handle ("" before it
 * is open). Borrowed until the next call on `r`. */
const char *wk__receiver_errmsg(const wk__receiver *r);

/* Fail with `status` and the message (printf), on the blocking handle or,
 * through the loop, in r->msg: returns status. */
int wk__receiver_fail(wk__receiver *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Close the blocking handle and free the copies. A zeroed `r` is a no-op. */
void wk__receiver_close(wk__receiver *r);

/* Entries one wk__receiver_xread() asks for (a StreamBuffer's queue holds
 * that many; LiveView asks as many, as the crate). */
#define WK__RECEIVER_BATCH 128

/*
 * XREAD COUNT WK__RECEIVER_BATCH BLOCK block_ms STREAMS key <after_ms>-<after_seq> on the
 * receiver's connection, a READ of the receiver's entity named `op`: as
 * wk__receiver_send(), with `parse` and `out` as the query's (the
 * parser also sees WK_REPLY_ERROR replies: WK_QUERY_PARSE_ERRORS).
 */
int wk__receiver_xread(wk__receiver *r, const char *op, const char *key, size_t key_len,
                       uint64_t after_ms, uint64_t after_seq, int64_t block_ms, wk_parse_fn parse,
                       void *out);

/* wk__op_run() of `op` on the receiver's item, on its connection (not a
 * blocking command: a probe between waits); through the loop, queued. */
int wk__receiver_run(wk__receiver *r, const wk__op *op, const char *const *args, const size_t *lens,
                     int nargs, void *out);

/* ---- through the event loop (collection/receiver_loop.c) ----------------
 *
 * A receiver opened through an event-loop handle's processor waits on a
 * hidden handle of its own (core/async_internal.h, wk__async_sub): the
 * same queries as the blocking form, each completing into the kind's
 * `reply`. One receive is outstanding at a time; it ends with
 * wk__receiver_deliver(), which runs the caller's callback. */

typedef struct wk__receiver_loop {
    /* The query in flight (`was`: r->inflight when sent, reset to 0 now)
     * completed while a receive is outstanding (a reply that comes after
     * the receive ended — a stop — reaches nobody). */
    void (*reply)(void *self, int was, int status, const char *msg);
    /* Whether the receive outstanding is decided without a query (the
     * end, a stop, what was read), and writing that outcome into the
     * receive's output (its status; delivered from the handle's next
     * turn, after wk__receiver_kick or a first receive). */
    bool (*decided)(const void *self);
    int (*local)(void *self);
    int (*first)(void *self); /* send a receive's first query */
} wk__receiver_loop;

/* Through the loop: p is an event-loop handle's processor (or a
 * wrapper's). */
bool wk__receiver_is_loop(const wk_processor *p);

/* As wk__receiver_open(), through the loop handle behind `p`: the hidden
 * handle's callbacks go to `fns` with `self`. */
int wk__receiver_open_loop(wk__receiver *r, wk_processor *p, const wk_entity *e, const char *kind,
                           const wk_name *name, const wk__receiver_loop *fns, void *self, char *err,
                           size_t errlen);

/* A receive begins (done(a, status, msg, arg) its completion; `open`:
 * the open's query was answered): WK_OK, or WK_EINVAL (a blocking
 * receiver, not open, NULL done, one outstanding: message in r->msg),
 * WK_EIO (the handle closed). */
int wk__receiver_begin(wk__receiver *r, const char *op, bool open, wk_async_done_fn done,
                       void *arg);
/* … and goes on: decided (fns) ends it in the next turn (local); else
 * first(self) sends its first query, in flight as `inflight`. WK_OK, or
 * that refusal (the receive is then not outstanding: its callback is
 * never called). */
int wk__receiver_first(wk__receiver *r, void *self, int inflight);
/* The outstanding receive ends: its callback runs now. */
void wk__receiver_deliver(wk__receiver *r, int status, const char *msg);
/* local(self), delivered, in the handle's next wk_async_process() if the receive
 * outstanding is decided by then (a stop: never inside the stop's call). */
void wk__receiver_kick(wk__receiver *r);
/* Queue q (a blocking command blocking up to block_ms, or 0) on the
 * receiver's connection: blocking, as wk__blocking_process(); through the
 * loop, queued (WK_OK: reply(self, …) comes later). */
int wk__receiver_send(wk__receiver *r, wk_query *q, int64_t block_ms);

#endif /* WK_COLLECTION_RECEIVER_H */
