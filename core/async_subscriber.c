/*
 * core/async_subscriber.c — a Pub/Sub subscriber through the event loop
 * (core/async_subscriber.h). The connection is a hidden handle
 * (core/async_sub.c) whose exchange is in push mode: SUBSCRIBE and PING
 * go as queries (their parsers are the blocking subscriber's), messages
 * come as pushes and go to the owner's `message` as they are read, and
 * the owner's `run` follows from wk_async_process() — never from inside
 * the hidden handle's processing, so the owner may close the subscriber
 * there. A socket lost once subscribed, a failed SUBSCRIBE or PING end the
 * subscriber (wk__loop_sub_failed()); it never subscribes again.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/clock.h>

#include "core/async_internal.h"
#include "core/async_subscriber.h"
#include "core/subscriber.h"

struct wk__loop_sub {
    wk__async_sub *sub;
    wk__loop_sub_fns fns;
    void *arg;
    int keepalive_ms;
    bool subscribed, ping_out;
    bool in_run, closed; /* closed from the owner's run: freed after it */
    int failed;
    int64_t last_rx_ms, owner_wake;
    char why[256];
};

static void ls_fail(wk__loop_sub *s, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void ls_fail(wk__loop_sub *s, int status, const char *fmt, ...)
{
    if (s->failed)
        return; /* the first failure is the one to tell */
    s->failed = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof(s->why), fmt, ap);
    va_end(ap);
}

/* Ask the hidden handle's timer for the owner's time or the next PING. */
static void rearm(wk__loop_sub *s)
{
    int64_t ping = s->subscribed && !s->failed && s->keepalive_ms && !s->ping_out
                       ? wk__add_ms(s->last_rx_ms, s->keepalive_ms)
                       : 0;
    int64_t when = s->owner_wake;
    if (ping && (!when || ping < when))
        when = ping;
    wk__async_sub_wake_at(s->sub, when);
}

static int send_command(wk__loop_sub *s, const char *name, int argc, const char *const *argv,
                        const size_t *lens, wk_parse_fn parse)
{
    /* Error replies are the parser's: they fail the command, not the lane. */
    wk_query q = {.name = name, .flags = WK_QUERY_PARSE_ERRORS, .parse = parse};
    q.argc = argc;
    q.argv = argv;
    q.argvlen = lens;
    return wk__async_sub_send(s->sub, &q, 0);
}

static void ls_push(void *arg, redisReply *r)
{
    wk__loop_sub *s = arg;
    s->last_rx_ms = wk__boot_ms();
    size_t len = 0;
    const char *data = wk__sub_message(r, &len);
    if (data && !s->failed && s->fns.message(s->arg, data, len) != WK_OK)
        ls_fail(s, WK_ENOMEM, "subscriber: out of memory keeping a message");
    freeReplyObject(r);
}

static void ls_reply(void *arg, int status, const char *msg)
{
    wk__loop_sub *s = arg;
    if (!s->subscribed) {
        if (status)
            ls_fail(s, status, "subscriber: SUBSCRIBE: %s", msg);
        else
            s->subscribed = true;
    } else {
        s->ping_out = false;
        if (status)
            ls_fail(s, status, "subscriber: PING: %s", msg);
    }
    if (!status)
        s->last_rx_ms = wk__boot_ms();
    wk__async_sub_kick(s->sub);
}

static bool connected(const wk__loop_sub *s)
{
    const wk_async *h = wk__async_sub_handle(s->sub);
    return h && h->lane[WK__LANE_MAIN].db->conn->link.ctx;
}

static void ls_run(void *arg)
{
    wk__loop_sub *s = arg;
    int64_t now = wk__boot_ms();
    if (s->subscribed && !connected(s))
        ls_fail(s, WK_EIO, "subscriber: connection lost: %s",
                wk_async_errmsg(wk__async_sub_handle(s->sub)));
    if (s->owner_wake && s->owner_wake <= now)
        s->owner_wake = 0;
    if (s->subscribed && !s->failed && s->keepalive_ms && !s->ping_out &&
        now >= wk__add_ms(s->last_rx_ms, s->keepalive_ms)) {
        static const char *const argv[1] = {"PING"};
        static const size_t lens[1] = {4};
        if (send_command(s, "PING", 1, argv, lens, wk__sub_parse_pong) != WK_OK)
            ls_fail(s, WK_EIO, "subscriber: PING: %s",
                    wk_async_errmsg(wk__async_sub_handle(s->sub)));
        else
            s->ping_out = true;
    }
    rearm(s);
    s->in_run = true;
    s->fns.run(s->arg);
    s->in_run = false;
    if (s->closed)
        free(s);
}

static void ls_gone(void *arg)
{
    wk__loop_sub *s = arg;
    ls_fail(s, WK_EIO, "subscriber: the event-loop handle closed");
    s->fns.gone(s->arg);
}

int wk__loop_sub_open(wk__loop_sub **out, wk_async *a, const char *chan, size_t len,
                      int keepalive_ms, const wk__loop_sub_fns *fns, void *arg, char *err,
                      size_t errlen)
{
    return wk__loop_sub_open_at(out, a, NULL, 0, chan, len, keepalive_ms, fns, arg, err, errlen);
}

int wk__loop_sub_open_at(wk__loop_sub **out, wk_async *a, const char *host, int port,
                         const char *chan, size_t len, int keepalive_ms,
                         const wk__loop_sub_fns *fns, void *arg, char *err, size_t errlen)
{
    *out = NULL;
    if (!host && (a->cl || a->db->conn->cluster))
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "a cluster handle: subscribe on one of its nodes");
    wk__loop_sub *s = calloc(1, sizeof(*s));
    if (!s)
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "out of memory");
    s->fns = *fns;
    s->arg = arg;
    s->keepalive_ms = keepalive_ms;
    int rc =
        wk__async_sub_open_at(&s->sub, a, host, port, ls_run, ls_gone, ls_reply, s, err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    wk__async_sub_push(s->sub, ls_push);
    const char *argv[2] = {"SUBSCRIBE", chan};
    size_t lens[2] = {9, len};
    rc = send_command(s, "SUBSCRIBE", 2, argv, lens, wk__sub_parse_subscribed);
    if (rc) {
        wk__errbuf_set(err, errlen, rc, "SUBSCRIBE: %s",
                       wk_async_errmsg(wk__async_sub_handle(s->sub)));
        wk__loop_sub_close(s);
        return rc;
    }
    *out = s;
    return WK_OK;
}

bool wk__loop_sub_subscribed(const wk__loop_sub *s)
{
    return s->subscribed && !s->failed;
}

int wk__loop_sub_failed(const wk__loop_sub *s, const char **why)
{
    if (why)
        *why = s->why;
    return s->failed;
}

void wk__loop_sub_wake_at(wk__loop_sub *s, int64_t when)
{
    s->owner_wake = when;
    rearm(s);
}

void wk__loop_sub_busy(wk__loop_sub *s, bool busy)
{
    wk__async_sub_busy(s->sub, busy);
}

void wk__loop_sub_kick(wk__loop_sub *s)
{
    wk__async_sub_kick(s->sub);
}

void wk__loop_sub_close(wk__loop_sub *s)
{
    if (!s)
        return;
    wk__async_sub_close(s->sub); /* nothing reaches s after this */
    if (s->in_run) {
        s->closed = true;
        return;
    }
    free(s);
}
