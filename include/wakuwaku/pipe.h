/*
 * wakuwaku/pipe.h — Pipe: messages from one sender to one receiver, each
 * taken once, in the order sent, until the sender closes the pipe. Two
 * pipes make a duplex channel. Byte-compatible with the Rust crate's
 * `Pipe` (wakuwaku-entity, dynamic/pipe.rs): a Rust sender and a C
 * receiver (or the other way round) share one pipe.
 *
 * Redis layout, three lists/hashes in one cluster slot:
 *   @@wakuwaku-entity:Pipe:{<ns>:<name>}:m   list: the messages (the crate's)
 *   @@wakuwaku-entity:Pipe:{<ns>:<name>}:c   list: close markers "" (the crate's)
 *   @@wakuwaku-entity:Pipe:{<ns>:<name>}:r   hash: this library's receiver
 *                                            state, n (messages taken), b (the
 *                                            last one), c ("1": it was the close)
 *
 *   wk_pipe_send     RPUSH :m body, PEXPIRE :m ttl (one script)   WRITE
 *   wk_pipe_finish   RPUSH :c "",   PEXPIRE :c ttl (one script)   WRITE
 *                    (wk_pipe_close: its old name, deprecated)
 *   wk_pipe_receive  HGET :r n; opens a receiver on a connection  WRITE
 *                    of its own (taking a message deletes it)
 *   wk_pipe_recv     the next message, waiting for it             (the receiver's)
 *
 * HOW A RECEIVER TAKES A MESSAGE, and why it differs from the crate. The
 * crate's receiver pops with `BLPOP :m :c ttl`: a message whose reply is
 * lost (connection killed, network drop, a stop from another thread) after
 * the server popped it is gone for good. This receiver never pops in a
 * blocking command. It takes with one script (`pipe.take`) that pops the
 * head of :m (or, when :m is empty, the close marker from :c, so messages
 * sent before the close come first, as with BLPOP) and records it in :r as
 * message number n+1. Asked again for the same number after a lost reply,
 * the script answers with the recorded message instead of popping another:
 * while a receiver lives, every message is delivered exactly once however
 * often its connection is killed. It waits, when :m is empty, with
 * `BLMOVE :m :m LEFT LEFT` (a rotation that changes nothing), in slices of
 * WK_PIPE_POLL_MS so that a close — which lands on another list — is seen
 * within one slice. The crate's sender and closer need no change.
 *
 * WARNING: one receiver per pipe at a time (the crate's rule too): two
 * receivers would take each other's messages. A receiver that dies (or is
 * closed) after a take was sent and before its reply arrived loses that
 * message — the crate's window, now limited to the death of the receiver.
 * A new receiver starts after the last message any receiver took.
 *
 * Lifetimes, as in the crate: every send restarts the TTL of :m, every
 * close that of :c; a pipe whose sender stopped without closing it
 * disappears one TTL later, and a receiver that gets nothing for a whole
 * TTL reports WK_PIPE_GONE (and may wait again). The close marker is
 * taken by the receiver: a second receiver after the close waits one TTL
 * and reports WK_PIPE_GONE. A message sent after the close is read when
 * the receiver has not taken the marker yet (the crate documents it as
 * never read; it is).
 */
#ifndef WAKUWAKU_PIPE_ENTITY
#define WAKUWAKU_PIPE_ENTITY
#define WK_KIND_PIPE "Pipe"
/* A Pipe entity: namespace and TTL (ttl_ms > 0): how long a pipe lives
 * without a message, and how long a receiver waits before WK_PIPE_GONE. */
#define WK_PIPE_ENTITY(ns_, ttl_ms_) WK__ENTITY(WK_KIND_PIPE, ns_, ttl_ms_, 0, 0, 0)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_PIPE_OPS(XX)                                                                            \
    XX(pipe, send, WRITE, (wk_name name, const void *body, size_t len),                            \
       "append a message and restart the pipe's TTL")                                              \
    XX(pipe, finish, WRITE, (wk_name name),                                                        \
       "finish the pipe: its receiver ends after the messages")                                    \
    XX(pipe, close, WRITE, (wk_name name), "the old name of finish (deprecated)")                  \
    XX(pipe, receive, WRITE, (wk_name name, wk_pipe_receiver **receiver),                          \
       "open the receiver (its own connection; wk_pipe_recv(), wk_pipe_receiver_close())")
/* What an entity with a body record gets instead, for wk-codegen: the _typed
 * functions (the accessor takes the record for `codec, value`), and the
 * plain rows it words otherwise. */
#define WK_PIPE_TYPED_OPS(XX)                                                                      \
    XX(pipe, send_typed, WRITE, (wk_name name, const wk_codec *codec, const void *value),          \
       "encode and append a message, restart the pipe's TTL")                                      \
    XX(pipe, receive, WRITE, (wk_name name, wk_pipe_receiver **receiver),                          \
       "open the receiver (decode with wk_pipe_recv_typed() and the body's codec)")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_PIPE_SCHEMA(KIND, PARAM)                                                                \
    KIND(PIPE, ", TTL {ttl}", BODY, WK__SCHEMA_NO_CHECK, NO_FAIR, NO_PARTS)                        \
    WK__SCHEMA_TTL(PARAM)
#endif

#if !defined(WAKUWAKU_PIPE_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_PIPE_H

#include <wakuwaku/async.h>
#include <wakuwaku/cache.h>
#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest a waiting receiver goes without looking for a close marker
 * (the ms of one BLMOVE slice). */
#define WK_PIPE_POLL_MS 100

/*
 * wk_pipe_send — append `len` bytes of `body` to the pipe `name` and
 * restart its TTL, atomically (one script; the crate sends the same two
 * commands in MULTI/EXEC, with the same effect).
 *
 * Returns WK_OK, WK_EINVAL (bad entity or name; body NULL with len > 0;
 * len > WK_BODY_MAX), WK_EDENIED, or a connection / server error. WRITE
 * effect. WK_EUNKNOWN: the message may have been queued; re-sending it may
 * deliver it twice. Works in a batch.
 */
WK_API int wk_pipe_send(wk_processor *p, const wk_entity *pipe, wk_name name, const void *body,
                        size_t len);

/*
 * wk_pipe_finish — finish the pipe `name` (the crate's "close"): its
 * receiver ends (WK_PIPE_END) after taking every message sent before.
 * Pushes the crate's marker "" on :c and restarts the TTL of :c. A second
 * finish leaves a stale marker (as in the crate). Returns as
 * wk_pipe_send(). WRITE effect. (As wk_stream_buffer_finish() ends a
 * stream; wk_pipe_receiver_close() frees a receiver.)
 */
WK_API int wk_pipe_finish(wk_processor *p, const wk_entity *pipe, wk_name name);

/* wk_pipe_close — the old name of wk_pipe_finish(), deprecated: the same
 * query, named pipe.close for hooks and metrics. Kept so that old code
 * compiles and links unchanged. */
WK_API int wk_pipe_close(wk_processor *p, const wk_entity *pipe, wk_name name);

/*
 * wk_pipe_send_typed — codec->encode(value), then wk_pipe_send(). The
 * encoder's failure is returned with its text on the handle. WRITE.
 */
WK_API int wk_pipe_send_typed(wk_processor *p, const wk_entity *pipe, wk_name name,
                              const wk_codec *codec, const void *value);

/* A receiver (opaque): one pipe's receiving end, with its own connection. */
typedef struct wk_pipe_receiver wk_pipe_receiver;

/*
 * wk_pipe_receive — open a receiver of the pipe `name`.
 *
 *   p    a processor that is not deferred (a batch gives WK_EINVAL). The
 *        receiver opens a connection of its own from the settings and
 *        capability of the handle behind `p` (core/blocking.h): its waits
 *        never hold the handle's connection. The handle may be closed
 *        while the receiver lives.
 *   out  OUT: the receiver, or NULL on failure. Free it with
 *        wk_pipe_receiver_close().
 *
 * Sends one query through `p` (`pipe.receive`, HGET of the state, so
 * hooks and the capability check see it) before opening the connection.
 * Returns WK_OK; WK_EINVAL; WK_EDENIED (the capability does not grant
 * WRITE: nothing sent, nothing opened); WK_ECORRUPT (the state hash holds
 * a count that is not a number); WK_ENOMEM; a connection or server error.
 * WRITE effect, as in the crate: taking a message deletes it.
 */
WK_API int wk_pipe_receive(wk_processor *p, const wk_entity *pipe, wk_name name,
                           wk_pipe_receiver **out);

/* What wk_pipe_recv() got. */
typedef enum wk_pipe_got {
    WK_PIPE_MESSAGE = 1, /* body/len hold the next message */
    WK_PIPE_END = 2,     /* the sender closed the pipe; every later call says so too */
    WK_PIPE_GONE = 3,    /* nothing came for a whole TTL: the pipe is abandoned (may wait again) */
    WK_PIPE_STOPPED = 4  /* wk_pipe_receiver_stop() was called; every later call says so too */
} wk_pipe_got;

typedef struct wk_pipe_message {
    wk_pipe_got got;
    const void *body; /* WK_PIPE_MESSAGE: borrowed until the next recv or close */
    size_t len;
} wk_pipe_message;

/*
 * wk_pipe_recv — the next message, waiting for it (see the banner).
 *
 *   r    the receiver.
 *   msg  OUT: what came (msg->got); the body is the receiver's, valid
 *        until the next call on `r`.
 *
 * Returns WK_OK (see msg->got); WK_EINVAL (NULL argument); WK_EIO,
 * WK_ETIMEDOUT (the connection failed while waiting or taking: nothing was
 * delivered, nothing was lost; call again, it reconnects and asks for the
 * same message); WK_ECORRUPT (a key of the pipe holds another Redis
 * type), WK_EREDIS (another error reply), WK_EPROTO (a reply of the wrong
 * shape), WK_ENOMEM. Never WK_EUNKNOWN: a take whose reply was
 * lost is asked again by the next call. Thread-safety: one thread at a
 * time per receiver (wk_pipe_receiver_stop() excepted).
 */
WK_API int wk_pipe_recv(wk_pipe_receiver *r, wk_pipe_message *msg);

/*
 * wk_pipe_recv_async — wk_pipe_recv() through the event loop: the next
 * message of a receiver opened through an event-loop handle
 * (wk_pipe_receive(wk_async_with(a, on_open, arg), …): *out is written at
 * once, and the receiver is ready when on_open ran with WK_OK; after
 * another status, close it; do not close it before on_open ran).
 *
 *   msg   OUT: what came, written before `done` runs (as wk_pipe_recv()'s;
 *         the body is valid until the next receive or the close). Keep it
 *         valid until then.
 *   done  called once, from wk_async_process() (never inside this call),
 *         as done(a, status, msg_text, arg): the status of wk_pipe_recv().
 *
 * The receiver waits on a connection of its own, which joins the handle's
 * descriptor (wakuwaku/async.h, 8.), with the blocking receiver's queries
 * and guarantees: each message delivered once, in order, a take whose
 * reply was lost asked again by the next receive (WK_EIO, never
 * WK_EUNKNOWN), WK_PIPE_END after the messages, WK_PIPE_GONE after a
 * whole TTL without one (counted from this call), a new receiver going
 * on after the last message taken. One receive at a time.
 * wk_pipe_receiver_stop() (on the loop's thread) ends a waiting receive
 * with WK_PIPE_STOPPED at the next wk_async_process(); a take in flight
 * is never cut. wk_pipe_receiver_close() drops the receive outstanding
 * (its callback is not called; a message whose take was in flight is
 * lost, as with the blocking receiver's death). When the handle closes,
 * the receive outstanding ends with WK_EIO and every later one returns
 * WK_EIO.
 *
 * Returns WK_OK (queued), WK_EINVAL (NULL argument, a blocking receiver,
 * one outstanding, not open: message in wk_pipe_receiver_errmsg()),
 * WK_EIO (the handle closed). wk_pipe_recv() and wk_pipe_recv_typed() on
 * a loop receiver return WK_EINVAL (they would block the loop).
 */
WK_API int wk_pipe_recv_async(wk_pipe_receiver *r, wk_pipe_message *msg, wk_async_done_fn done,
                              void *arg);

/*
 * wk_pipe_recv_typed — wk_pipe_recv(), then codec->decode the message into
 * `value` (storage the caller provides; release it with the type's free
 * function) when *got is WK_PIPE_MESSAGE. A message that does not decode
 * is WK_ECORRUPT (it is taken: the next call gets the next message), with
 * the decoder's reason in wk_pipe_receiver_errmsg().
 */
WK_API int wk_pipe_recv_typed(wk_pipe_receiver *r, const wk_codec *codec, void *value,
                              wk_pipe_got *got);

/*
 * wk_pipe_receiver_stop — make the receiver's wait in progress (or its
 * next one) end within a moment: wk_pipe_recv() then reports
 * WK_PIPE_STOPPED, now and on every later call. A take in progress is
 * never cut short, so a stop loses no message: what was not delivered
 * stays for the next receiver. Any thread may call it while the receiver
 * is open (not from a signal handler). NULL is a no-op.
 */
WK_API void wk_pipe_receiver_stop(wk_pipe_receiver *r);

/* The detail message of the receiver's last failure (borrowed until the
 * next call on it). Never NULL. */
WK_API const char *wk_pipe_receiver_errmsg(const wk_pipe_receiver *r);

/* Close the receiver and its connection. NULL is a harmless no-op; no
 * other thread may be in wk_pipe_recv() on it. */
WK_API void wk_pipe_receiver_close(wk_pipe_receiver *r);

WK__OPS(WK_PIPE_OPS)
WK__OPS_TYPED(WK_PIPE_TYPED_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_PIPE_H */
