/*
 * core/async_subscriber.h — a Pub/Sub subscriber through the event loop:
 * the loop's counterpart of core/subscriber.h, for helpers that follow a
 * channel on a wk_async (the settings follower's loop form). Not
 * installed.
 *
 * Its connection is a hidden handle of the wk_async (core/async_sub.c:
 * made from the handle's settings, set up through the loop, its socket in
 * the handle's epoll set) whose exchange runs in push mode: SUBSCRIBE and
 * the keep-alive PINGs are queries whose replies are the confirmations,
 * the messages are pushes, kept in the order read. Nothing blocks the
 * loop. Like the blocking subscriber it never subscribes again: once it
 * failed (the connection lost or killed, SUBSCRIBE refused, a PING
 * unanswered within the command timeout) its owner closes it and opens
 * another. It carries no capability check: its owner checks its right to
 * read what it follows with a query through the handle first.
 */
#ifndef WK_CORE_ASYNC_SUBSCRIBER_H
#define WK_CORE_ASYNC_SUBSCRIBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <wakuwaku/async.h>

typedef struct wk__loop_sub wk__loop_sub;

typedef struct wk__loop_sub_fns {
    /* A message's payload (borrowed for the call), in the order received,
     * from inside the connection's processing: keep it and return; never
     * call the library from here. Non-zero (WK_ENOMEM): the subscriber
     * fails. */
    int (*message)(void *arg, const char *data, size_t len);
    /* From wk_async_process(): something happened — the subscription was
     * confirmed, messages were kept, it failed (wk__loop_sub_failed()),
     * or the time asked for with wk__loop_sub_wake_at() came. The owner
     * may close the subscriber (and open another) from here. */
    void (*run)(void *arg);
    /* The handle closes (wk_async_close()): nothing reaches arg after this;
     * the subscriber stays, cut off, to be closed. */
    void (*gone)(void *arg);
} wk__loop_sub_fns;

/*
 * Open a subscriber on a hidden connection of `a` (connecting at once) and
 * queue SUBSCRIBE `chan` (copied). `keepalive_ms`: after this long without
 * traffic once subscribed, a PING (0: never). Returns WK_OK, WK_EINVAL (a
 * cluster handle: see wk__loop_sub_open_at), WK_EIO (the handle is
 * closing) or WK_ENOMEM, with a message in err; *out NULL on failure.
 */
int wk__loop_sub_open(wk__loop_sub **out, wk_async *a, const char *chan, size_t len,
                      int keepalive_ms, const wk__loop_sub_fns *fns, void *arg, char *err,
                      size_t errlen);
/* The same on a plain connection to the cluster node host:port alone
 * (host NULL: as wk__loop_sub_open): on a cluster handle, the node that
 * owns the channel's slot, whose publishers need no cluster bus to reach
 * it. The owner follows the slot: when its map names another node, it
 * closes this subscriber and opens one there. */
int wk__loop_sub_open_at(wk__loop_sub **out, wk_async *a, const char *host, int port,
                         const char *chan, size_t len, int keepalive_ms,
                         const wk__loop_sub_fns *fns, void *arg, char *err, size_t errlen);
/* Whether SUBSCRIBE was confirmed: from then on every message published on
 * the channel is delivered, until it fails. */
bool wk__loop_sub_subscribed(const wk__loop_sub *s);
/* WK_OK, or the failure that ended it (*why: its message, borrowed). */
int wk__loop_sub_failed(const wk__loop_sub *s, const char **why);
/* Run the owner's run() at `when` (wk__boot_ms(); 0: no time). */
void wk__loop_sub_wake_at(wk__loop_sub *s, int64_t when);
/* Count the subscriber as one in wk_async_pending() (its owner has
 * a completion outstanding) or not. */
void wk__loop_sub_busy(wk__loop_sub *s, bool busy);
/* Run the owner's run() in the next turn of the loop. */
void wk__loop_sub_kick(wk__loop_sub *s);
/* Close the connection and free; nothing reaches arg after this. Allowed
 * from run(). NULL is a no-op. */
void wk__loop_sub_close(wk__loop_sub *s);

#endif /* WK_CORE_ASYNC_SUBSCRIBER_H */
