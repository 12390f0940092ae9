/*
 * core/subscriber.h — a Pub/Sub subscriber connection for helpers that
 * follow a channel (the settings follower). Private to the library: the
 * rest of the library never touches hiredis, so core opens and reads this
 * connection on their behalf. Not installed.
 *
 * A subscriber is a second connection made from a handle's settings (URL,
 * credentials, timeouts, client name). It is not a query path: it carries
 * no capability check, so a caller must check its right to read what it
 * subscribes to with a query on the handle first (the follower loads a
 * snapshot through dispatch before it trusts any message).
 *
 * The connection is driven by the exchange machine in push mode
 * (core/exchange.h): SUBSCRIBE, CLIENT ID and PING are queries whose
 * replies are the confirmations, messages are pushes queued in the order
 * read — one that comes in the same read as a confirmation or a reply,
 * before or after it, is neither lost nor reordered. A subscriber never
 * reconnects: after a failure, close it and open another.
 *
 * Thread-safety: a subscriber is used by one thread at a time. The wk_db
 * passed to wk__subscriber_open() is only read during that call.
 */
#ifndef WK_CORE_SUBSCRIBER_H
#define WK_CORE_SUBSCRIBER_H

#include <stdbool.h>
#include <stddef.h>

#include <wakuwaku/db.h>

typedef struct wk__subscriber wk__subscriber;
struct redisReply;

/*
 * Open a new connection with the connection settings of `db` (same server,
 * AUTH, CLIENT SETNAME, connect and command timeouts; no SELECT: Pub/Sub
 * ignores databases). Through Sentinel, also a failover notice (the
 * sentinel that named the primary, subscribed to +switch-master).
 *
 *   keepalive_ms  after this long without traffic, wk__subscriber_next()
 *                 sends a PING and fails with WK_ETIMEDOUT when no answer
 *                 arrives within the command timeout. 0: never.
 *
 * Returns WK_OK, WK_EINVAL, WK_ENOMEM, WK_EIO, WK_ETIMEDOUT or WK_EAUTH;
 * *out is NULL on failure, with a message in `err` (may be NULL).
 */
int wk__subscriber_open(wk__subscriber **out, wk_db *db, int keepalive_ms, char *err,
                        size_t errlen);
/* The same, connected to host:port (a cluster node) instead of db's
 * server (host NULL: db's, as wk__subscriber_open()). */
int wk__subscriber_open_at(wk__subscriber **out, wk_db *db, const char *host, int port,
                           int keepalive_ms, char *err, size_t errlen);

/*
 * SUBSCRIBE to one channel (binary-safe) and wait for the server's
 * confirmation (within the command timeout): once this returns WK_OK,
 * every message published later on the channel will be delivered; those
 * of channels subscribed before that came meanwhile stay queued, in
 * order. Returns WK_OK, WK_EREDIS (refused), or a connection / protocol
 * error (the subscriber is then unusable: close it).
 */
int wk__subscriber_subscribe(wk__subscriber *s, const char *channel, size_t len);

/*
 * Wait up to `timeout_ms` for the next message on a subscribed channel;
 * 0 takes only what has already arrived, without waiting.
 *
 *   wake_fd   a descriptor (a pipe's read end) that, once readable, makes
 *             the call return at once with *got false; -1: none.
 *   msg, len  OUT: the payload when *got; borrowed until the next call or
 *             wk__subscriber_close().
 *   got       OUT: whether a message was received (false: timeout/wake).
 *
 * Returns WK_OK, or WK_EIO (the connection dropped, e.g. killed by the
 * server; or, through Sentinel, the failover notice the subscriber keeps
 * said the primary switched: subscribe again), WK_ETIMEDOUT (no answer to
 * a keep-alive PING), WK_EPROTO,
 * WK_ENOMEM; after a failure the subscriber is unusable: close it.
 */
int wk__subscriber_next(wk__subscriber *s, int timeout_ms, int wake_fd, const char **msg,
                        size_t *len, bool *got);

/*
 * CLIENT ID of the subscriber's connection: the id a data connection names
 * in CLIENT TRACKING on REDIRECT <id> (the near cache). Ask it before
 * SUBSCRIBE: once subscribed, RESP2 allows no other command. Returns WK_OK
 * or a connection / protocol error (the subscriber is then unusable).
 */
int wk__subscriber_client_id(wk__subscriber *s, long long *id);

/*
 * Send a PING now (allowed once subscribed). Its answer comes back as a
 * WK__SUB_PONG event of wk__subscriber_poll(), in its place among the
 * messages; without one within the command timeout, poll fails with
 * WK_ETIMEDOUT. Send the next only after that PONG. Returns WK_OK or
 * WK_EIO (the subscriber is then unusable).
 */
int wk__subscriber_ping(wk__subscriber *s);

/* What wk__subscriber_poll() received. */
typedef enum wk__sub_event_type {
    WK__SUB_NOTHING = 0, /* timeout or wake-up */
    WK__SUB_MESSAGE,     /* a message with a string payload: data, len */
    WK__SUB_KEYS,        /* a message whose payload is an array of strings
                            (client-side caching's invalidation): nkeys,
                            each read with wk__subscriber_key() */
    WK__SUB_FLUSH,       /* a message with a nil payload: every key was
                            invalidated (FLUSHALL, FLUSHDB) */
    WK__SUB_PONG         /* the answer to wk__subscriber_ping() */
} wk__sub_event_type;

typedef struct wk__sub_event {
    wk__sub_event_type type;
    const char *data; /* borrowed until the next call or close */
    size_t len;
    size_t nkeys;
} wk__sub_event;

/*
 * wk__subscriber_next() reporting every kind of event (see above) instead
 * of only string messages. Same timeout, wake_fd, keep-alive and failure
 * rules; one event per call.
 */
int wk__subscriber_poll(wk__subscriber *s, int timeout_ms, int wake_fd, wk__sub_event *ev);

/* The subscriber's socket, to wait on several at once (then
 * wk__subscriber_poll(s, 0, …) takes what came); -1 when closed. */
int wk__subscriber_fd(const wk__subscriber *s);

/* Key i of the WK__SUB_KEYS event just returned (borrowed as its data);
 * NULL (and *len 0) when there is no such key. */
const char *wk__subscriber_key(const wk__subscriber *s, size_t i, size_t *len);

/* The database `db`'s connection selects (0 by default). Pub/Sub channels
 * are server-wide, so whoever publishes for one database and whoever
 * subscribes for it put this number in the channel name. */
int wk__subscriber_database(const wk_db *db);

/* The message of the last failure; never NULL. */
const char *wk__subscriber_errmsg(const wk__subscriber *s);

/* Shared with the loop's subscriber (core/async_subscriber.c): the
 * parsers of SUBSCRIBE's confirmation (of the channel in q->argv[1]) and
 * of a PING's answer (+PONG, or ["pong", ""] once subscribed), and the
 * payload of a push that is a "message" with a string payload (NULL:
 * another push). */
int wk__sub_parse_subscribed(const wk_query *q, const wk_reply *reply, wk_diag *d);
int wk__sub_parse_pong(const wk_query *q, const wk_reply *reply, wk_diag *d);
const char *wk__sub_message(const struct redisReply *r, size_t *len);

/* Close the connection and free the subscriber. NULL is a no-op. */
void wk__subscriber_close(wk__subscriber *s);

#endif /* WK_CORE_SUBSCRIBER_H */
