/*
 * wakuwaku/stream_buffer.h — StreamBuffer: an append-only array of bodies
 * with an end, such as the chunks of a streamed response. Any number of
 * subscribers read it from any index and follow it as it grows; a late
 * subscriber reads from the start. Byte-compatible with the Rust crate's
 * `StreamBuffer` (wakuwaku-entity, dynamic/stream_buffer.rs).
 *
 * Redis layout: one stream @@wakuwaku-entity:StreamBuffer:<ns>:<name>
 * (single key, no braces). The body at index i is the entry 0-(i+1) with
 * the field `b`; a finished buffer ends with one more entry, `end ""`.
 * Every append and the finish restart the key's TTL. Entries written here
 * carry a second field, `g` <generation> (16 random hex digits taken when
 * the buffer is created, copied by appends; the crate ignores it; a
 * buffer the crate created gets none): a subscription that meets another
 * generation knows the buffer was removed and re-created, and reports
 * GONE rather than the new buffer's bodies (docs/dynamic.md, StreamBuffer, "Re-creation").
 *
 *   wk_stream_buffer_append     script: refuse if the last entry's first   WRITE
 *                               field is `end`; else XADD 0-(XLEN+1) b body,
 *                               PEXPIRE; outputs the index
 *   wk_stream_buffer_finish     script: the same check; XADD end ""        WRITE
 *   wk_stream_buffer_read       XRANGE key 0-(from+1) +                    READ
 *   wk_stream_buffer_remove     UNLINK key                                 WRITE
 *   wk_stream_buffer_subscribe  opens a subscription on its own connection READ
 *   wk_stream_buffer_recv       XREAD COUNT 128 BLOCK ttl STREAMS key <after>
 *
 * A subscription reads what is already there first (XREAD after its
 * cursor returns every newer entry at once), then waits; it never skips a
 * body, and a subscription started before the first append (or before the
 * buffer exists, within one TTL) gets every body too. XREAD only reads,
 * so a killed connection or a stop loses nothing: the next call reads on
 * from the same cursor.
 *
 * Outcomes of a subscription, distinct from errors: a body; the end; the
 * buffer GONE (nothing appended for a whole TTL and the key no longer
 * exists: it expired or was removed before it finished); stopped. A
 * corrupted entry (neither `b` nor `end`) is WK_ECORRUPT, and it is
 * skipped: the next call goes on after it (as in the crate).
 */
#ifndef WAKUWAKU_STREAM_BUFFER_ENTITY
#define WAKUWAKU_STREAM_BUFFER_ENTITY
#define WK_KIND_STREAM_BUFFER "StreamBuffer"
/* A StreamBuffer entity: namespace and TTL (ttl_ms > 0): how long a buffer
 * lives after its last change, and how long a subscriber waits before it
 * checks that the buffer still exists. */
#define WK_STREAM_BUFFER_ENTITY(ns_, ttl_ms_)                                                      \
    WK__ENTITY(WK_KIND_STREAM_BUFFER, ns_, ttl_ms_, 0, 0, 0)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_STREAM_BUFFER_OPS(XX)                                                                   \
    XX(stream_buffer, append, WRITE,                                                               \
       (wk_name name, const void *body, size_t len, int64_t *index),                               \
       "append a body (index -1: the buffer was finished)")                                        \
    XX(stream_buffer, finish, WRITE, (wk_name name, bool *finished_now),                           \
       "end the buffer: subscribers end after its last body")                                      \
    XX(stream_buffer, read, READ, (wk_name name, uint64_t from, wk_stream_buffer_contents *out),   \
       "the bodies from index from on (free with wk_stream_buffer_contents_free())")               \
    XX(stream_buffer, remove, WRITE, (wk_name name, bool *removed), "delete the buffer")           \
    XX(stream_buffer, subscribe, READ,                                                             \
       (wk_name name, uint64_t from, wk_stream_buffer_subscription **subscription),                \
       "follow the buffer from index from on (its own connection; wk_stream_buffer_recv())")
/* What an entity with a body record gets instead, for wk-codegen: the _typed
 * functions (the accessor takes the record for `codec, value`), and the
 * plain rows it words otherwise. */
#define WK_STREAM_BUFFER_TYPED_OPS(XX)                                                             \
    XX(stream_buffer, append_typed, WRITE,                                                         \
       (wk_name name, const wk_codec *codec, const void *value, int64_t *index),                   \
       "encode and append a body (index -1: the buffer was finished)")                             \
    XX(stream_buffer, read, READ, (wk_name name, uint64_t from, wk_stream_buffer_contents *out),   \
       "the encoded bodies from index from on (free with wk_stream_buffer_contents_free())")       \
    XX(stream_buffer, subscribe, READ,                                                             \
       (wk_name name, uint64_t from, wk_stream_buffer_subscription **subscription),                \
       "follow the buffer (decode with wk_stream_buffer_recv_typed() and the body's codec)")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_STREAM_BUFFER_SCHEMA(KIND, PARAM)                                                       \
    KIND(STREAM_BUFFER, ", TTL {ttl}", BODY, WK__SCHEMA_NO_CHECK, NO_FAIR, NO_PARTS)               \
    WK__SCHEMA_TTL(PARAM)
#endif

#if !defined(WAKUWAKU_STREAM_BUFFER_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_STREAM_BUFFER_H

#include <wakuwaku/async.h>
#include <wakuwaku/cache.h>
#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Entries one XREAD of a subscription asks for (the crate's batch). */
#define WK_STREAM_BUFFER_BATCH 128

/*
 * wk_stream_buffer_append — append `len` bytes of `body` to the buffer
 * `name` (creating it) and restart its TTL.
 *
 *   index     OUT, may be NULL: the body's index (0 for the first), or
 *             -1 when the buffer was already finished (nothing changed,
 *             not even the TTL). Written by the reply's parser, so it
 *             works in a batch.
 *
 * Returns WK_OK, WK_EINVAL (bad entity, name; body NULL with len > 0;
 * len > WK_BODY_MAX), WK_EDENIED, or a connection / server error (a key
 * of another type: WK_EREDIS, the script's error). WRITE effect.
 * WK_EUNKNOWN: the body may have been appended; appending it again may
 * store it twice. Works in a batch.
 */
WK_API int wk_stream_buffer_append(wk_processor *p, const wk_entity *sb, wk_name name,
                                   const void *body, size_t len, int64_t *index);

/* wk_stream_buffer_append_typed — codec->encode(value), then append. */
WK_API int wk_stream_buffer_append_typed(wk_processor *p, const wk_entity *sb, wk_name name,
                                         const wk_codec *codec, const void *value, int64_t *index);

/*
 * wk_stream_buffer_finish — finish the buffer `name` (creating it empty):
 * subscribers end after its last body, appends are refused.
 * *finished_now (may be NULL) is false when it was already finished.
 * Returns as wk_stream_buffer_append(). WRITE effect.
 */
WK_API int wk_stream_buffer_finish(wk_processor *p, const wk_entity *sb, wk_name name,
                                   bool *finished_now);

/* One body: `len` bytes at `data` (NUL-terminated for convenience). */
typedef struct wk_stream_buffer_body {
    const uint8_t *data;
    size_t len;
} wk_stream_buffer_body;

/* What wk_stream_buffer_read() read. Owned by the caller: free it with
 * wk_stream_buffer_contents_free(). Zero it (WK_STREAM_BUFFER_CONTENTS_INIT)
 * before the first read. */
typedef struct wk_stream_buffer_contents {
    wk_stream_buffer_body *bodies; /* `count` bodies from index `from` on, in order */
    size_t count;
    bool finished; /* no body follows these */
} wk_stream_buffer_contents;

#define WK_STREAM_BUFFER_CONTENTS_INIT                                                             \
    {                                                                                              \
        NULL, 0, false                                                                             \
    }

/*
 * wk_stream_buffer_read — the bodies of `name` from index `from` on, and
 * whether it is finished. An absent buffer reads as empty and unfinished
 * (so does a `from` past its end, as in the crate).
 *
 * Returns WK_OK, WK_EINVAL, WK_EDENIED, WK_ECORRUPT (an entry with neither
 * `b` nor `end`, or a key of another type: `out` then holds nothing),
 * WK_ENOMEM, or a connection error. READ effect, retry-safe. A previous
 * content of `out` is freed first.
 */
WK_API int wk_stream_buffer_read(wk_processor *p, const wk_entity *sb, wk_name name, uint64_t from,
                                 wk_stream_buffer_contents *out);

/* Free what a read stored in `c` and zero it. NULL is a no-op. */
WK_API void wk_stream_buffer_contents_free(wk_stream_buffer_contents *c);

/* wk_stream_buffer_remove — delete the buffer (UNLINK). *removed (may be
 * NULL): whether it existed. Its subscribers report WK_STREAM_BUFFER_GONE
 * once one TTL passes without an append, or at the first entry of a buffer
 * re-created under the name. WRITE effect. */
WK_API int wk_stream_buffer_remove(wk_processor *p, const wk_entity *sb, wk_name name,
                                   bool *removed);

/* A subscription (opaque): follows one buffer on its own connection. */
typedef struct wk_stream_buffer_subscription wk_stream_buffer_subscription;

/*
 * wk_stream_buffer_subscribe — follow `name` from index `from` on.
 *
 *   p    a processor that is not deferred (a batch: WK_EINVAL). The
 *        subscription opens a connection of its own from the settings and
 *        capability of the handle behind `p` (core/blocking.h); the
 *        handle may be closed while the subscription lives.
 *   out  OUT: the subscription, or NULL on failure. Free it with
 *        wk_stream_buffer_subscription_close().
 *
 * Sends one read through `p` (`stream_buffer.subscribe`, XRANGE key - +
 * COUNT 1: the generation followed; the crate sends nothing) so that hooks and the capability check see the
 * subscription. Returns WK_OK, WK_EINVAL, WK_EDENIED (nothing sent,
 * nothing opened), WK_ENOMEM, or a connection error. READ effect: a
 * read-only handle may subscribe.
 */
WK_API int wk_stream_buffer_subscribe(wk_processor *p, const wk_entity *sb, wk_name name,
                                      uint64_t from, wk_stream_buffer_subscription **out);

typedef enum wk_stream_buffer_got {
    WK_STREAM_BUFFER_BODY = 1,   /* item->body/len/index hold the next body */
    WK_STREAM_BUFFER_END = 2,    /* the buffer is finished; every later call says so too */
    WK_STREAM_BUFFER_GONE = 3,   /* expired or removed before it finished; sticky */
    WK_STREAM_BUFFER_STOPPED = 4 /* wk_stream_buffer_subscription_stop(); sticky */
} wk_stream_buffer_got;

typedef struct wk_stream_buffer_item {
    wk_stream_buffer_got got;
    uint64_t index;   /* BODY: the body's index */
    const void *body; /* BODY: borrowed until the next recv or close */
    size_t len;
} wk_stream_buffer_item;

/*
 * wk_stream_buffer_recv — the next body, waiting for it to be appended.
 *
 * Returns WK_OK (see item->got); WK_EINVAL; WK_ECORRUPT (a corrupted entry,
 * skipped: call again for the next one; the reason is in
 * wk_stream_buffer_subscription_errmsg()); WK_EIO, WK_ETIMEDOUT (the
 * connection failed: call again, it reconnects and reads on from where it
 * was; nothing is skipped); WK_ECORRUPT also for a key of another Redis
 * type; WK_EREDIS (another error reply); WK_EPROTO (a reply of the wrong
 * shape); WK_ENOMEM.
 * Thread-safety: one thread at a time (the stop excepted).
 */
WK_API int wk_stream_buffer_recv(wk_stream_buffer_subscription *s, wk_stream_buffer_item *item);

/*
 * wk_stream_buffer_recv_async — wk_stream_buffer_recv() through the event
 * loop: the next body of a subscription opened through an event-loop
 * handle (wk_stream_buffer_subscribe(wk_async_with(a, on_open, arg), …):
 * *out is written at once, and the subscription is ready when on_open
 * ran — with WK_OK, or WK_ECORRUPT for a key of another type, which
 * every receive then reports; after another status, close it; do not
 * close it before on_open ran).
 *
 *   item  OUT: what came, written before `done` runs (the body is valid
 *         until the next receive or the close). Keep it valid until then.
 *   done  called once, from wk_async_process() (never inside this call),
 *         as done(a, status, msg_text, arg): the status of
 *         wk_stream_buffer_recv().
 *
 * The subscription reads on a connection of its own, which joins the
 * handle's descriptor (wakuwaku/async.h, 8.), with the blocking
 * subscription's queries and guarantees: bodies in order from its cursor,
 * none skipped or repeated (XREAD only reads: a lost reply, WK_EIO, reads
 * again from the same cursor), WK_STREAM_BUFFER_END after the last body,
 * GONE when the buffer expired, was removed or was re-created. One
 * receive at a time. wk_stream_buffer_subscription_stop() (on the loop's
 * thread) ends the receive outstanding with STOPPED at the next
 * wk_async_process(). wk_stream_buffer_subscription_close() drops it (its
 * callback is not called). When the handle closes, the receive
 * outstanding ends with WK_EIO and every later one returns WK_EIO.
 *
 * Returns WK_OK (queued), WK_EINVAL (NULL argument, a blocking
 * subscription, one outstanding, not open: message in
 * wk_stream_buffer_subscription_errmsg()), WK_EIO (the handle closed).
 * wk_stream_buffer_recv() and _recv_typed() on a loop subscription return
 * WK_EINVAL (they would block the loop).
 */
WK_API int wk_stream_buffer_recv_async(wk_stream_buffer_subscription *s,
                                       wk_stream_buffer_item *item, wk_async_done_fn done,
                                       void *arg);

/* wk_stream_buffer_recv_typed — recv, then codec->decode a body into
 * `value`; a body that does not decode is WK_ECORRUPT (and skipped). */
WK_API int wk_stream_buffer_recv_typed(wk_stream_buffer_subscription *s, const wk_codec *codec,
                                       void *value, wk_stream_buffer_got *got);

/* Make the wait in progress (or the next one) end at once: recv then
 * reports WK_STREAM_BUFFER_STOPPED, now and later. Any thread, or a
 * signal handler, while the subscription is open. NULL is a no-op. */
WK_API void wk_stream_buffer_subscription_stop(wk_stream_buffer_subscription *s);

/* The detail message of the last failure (borrowed until the next call
 * on it). Never NULL. */
WK_API const char *wk_stream_buffer_subscription_errmsg(const wk_stream_buffer_subscription *s);

/* Close the subscription and its connection. NULL is a no-op. */
WK_API void wk_stream_buffer_subscription_close(wk_stream_buffer_subscription *s);

WK__OPS(WK_STREAM_BUFFER_OPS)
WK__OPS_TYPED(WK_STREAM_BUFFER_TYPED_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_STREAM_BUFFER_H */
