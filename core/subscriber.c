/*
 * core/subscriber.c — a Pub/Sub subscriber connection opened from a
 * handle's connection settings (see core/subscriber.h).
 *
 * Commands and replies go through the socket code queries use
 * (core/wire.c): the socket is polled together with an optional wake
 * descriptor, bytes are fed to the reply reader with wk__wire_receive(),
 * and complete replies are taken out with wk__wire_take(). So a stop
 * request or a timeout is noticed at once, and a killed connection (EOF)
 * is reported as WK_EIO.
 *
 * Through Sentinel the subscriber also keeps a failover notice (a sentinel
 * connection subscribed to +switch-master, as a handle does) and polls it
 * beside its socket: a switch of the service ends the subscriber with
 * WK_EIO at once, so its owner subscribes again on the new primary instead
 * of listening to the old one until the sentinels demote it (and close
 * its clients) seconds later, while changes are published elsewhere.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/clock.h>

#include "core/db_internal.h"
#include "core/core_internal.h"
#include "core/subscriber.h"

struct wk__subscriber {
    wk__link link;   /* link.ctx NULL: closed */
    wk__link notice; /* redis-sentinel://: the failover notice (ctx NULL: none) */
    char *service;   /* the Sentinel service the notice is about */
    int command_timeout_ms;
    int keepalive_ms;
    int64_t last_rx_ms;   /* monotonic ms of the last bytes received */
    int64_t ping_sent_ms; /* 0: no keep-alive PING outstanding */
    redisReply *last;     /* the message handed out by the last next() */
    char errmsg[256];
};

static int sub_fail(wk__subscriber *s, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int sub_fail(wk__subscriber *s, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof(s->errmsg), fmt, ap);
    va_end(ap);
    return status;
}

/* A failure of the socket code (status `rc`, reason on the context). */
static int ctx_fail(wk__subscriber *s, int rc, const char *what)
{
    redisContext *c = s->link.ctx;
    return sub_fail(s, rc, "subscriber: %s: %s", what,
                    c && c->errstr[0] ? c->errstr : "connection lost");
}

static int tv_ms(struct timeval tv)
{
    return (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
}

static int copy_err(char *err, size_t errlen, const char *msg, int rc)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
    return rc;
}

int wk__subscriber_open(wk__subscriber **out, wk_db *db, int keepalive_ms, char *err,
                        size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return copy_err(err, errlen, "subscriber: out is NULL", WK_EINVAL);
    *out = NULL;
    if (!db || !db->conn || keepalive_ms < 0)
        return copy_err(err, errlen, "subscriber: invalid arguments", WK_EINVAL);
    const wk__conn *conn = db->conn;
    wk__subscriber *s = calloc(1, sizeof(*s));
    if (!s)
        return copy_err(err, errlen, "subscriber: out of memory", WK_ENOMEM);
    s->command_timeout_ms = tv_ms(conn->command_timeout);
    s->keepalive_ms = keepalive_ms;

    /* Same connection set-up as the handle's (SELECT aside: Pub/Sub
     * channels do not belong to a database). */
    char why[sizeof(s->errmsg) - 16];
    int rc = wk__connect_noticed(conn, false, &s->link, &s->notice, why, sizeof(why));
    if (rc)
        sub_fail(s, rc, "subscriber: %s", why);
    else if (conn->url.service && !(s->service = strdup(conn->url.service)))
        rc = sub_fail(s, WK_ENOMEM, "subscriber: out of memory");
    if (rc) {
        copy_err(err, errlen, s->errmsg, rc);
        wk__subscriber_close(s);
        return rc;
    }
    s->last_rx_ms = wk_monotonic_ms();
    *out = s;
    return WK_OK;
}

/* Whether `r` is an array whose first element is the string `kind`. */
static bool push_is(const redisReply *r, const char *kind, size_t min_elements)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < min_elements || r->elements < 1)
        return false;
    const redisReply *k = r->element[0];
    size_t n = strlen(kind);
    return k->type == REDIS_REPLY_STRING && k->len == n && memcmp(k->str, kind, n) == 0;
}

/* Send a two-argument command and read its reply (*r, to free), within
 * the command timeout; a failure names `what`. */
static int command2(wk__subscriber *s, const char *a0, const char *a1, size_t a1_len,
                    const char *what, redisReply **r)
{
    const char *argv[2] = {a0, a1};
    size_t lens[2] = {strlen(a0), a1_len};
    /* One deadline for the command and its reply. */
    int64_t deadline = wk__add_ms(wk__boot_ms(), s->command_timeout_ms);
    *r = NULL;
    int rc = wk__wire_command(&s->link, deadline, 2, argv, lens);
    if (!rc)
        rc = wk__wire_read(&s->link, deadline, r);
    return rc ? ctx_fail(s, rc, what) : WK_OK;
}

int wk__subscriber_subscribe(wk__subscriber *s, const char *channel, size_t len)
{
    if (!s || !s->link.ctx || (!channel && len))
        return WK_EINVAL;
    redisReply *r;
    int rc = command2(s, "SUBSCRIBE", channel ? channel : "", len, "SUBSCRIBE", &r);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_ERROR)
        rc = sub_fail(s, WK_EREDIS, "subscriber: SUBSCRIBE refused: %.150s", r->str);
    else if (!push_is(r, "subscribe", 3) || r->element[1]->type != REDIS_REPLY_STRING ||
             r->element[1]->len != len || memcmp(r->element[1]->str, channel, len) != 0)
        rc = sub_fail(s, WK_EPROTO, "subscriber: unexpected reply to SUBSCRIBE");
    freeReplyObject(r);
    if (!rc)
        s->last_rx_ms = wk_monotonic_ms();
    return rc;
}

/* Send a keep-alive PING (allowed in subscribed mode). */
static int send_ping(wk__subscriber *s)
{
    static const char *const argv[1] = {"PING"};
    static const size_t lens[1] = {4};
    int rc = wk__wire_command(&s->link, wk__add_ms(wk__boot_ms(), s->command_timeout_ms), 1, argv,
                              lens);
    if (rc)
        return ctx_fail(s, rc, "PING");
    s->ping_sent_ms = wk_monotonic_ms();
    return WK_OK;
}

int wk__subscriber_client_id(wk__subscriber *s, long long *id)
{
    if (!s || !id || !s->link.ctx)
        return WK_EINVAL;
    *id = 0;
    redisReply *r;
    int rc = command2(s, "CLIENT", "ID", 2, "CLIENT ID", &r);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_INTEGER)
        *id = r->integer;
    else
        rc = sub_fail(s, WK_EPROTO, "subscriber: unexpected reply to CLIENT ID");
    freeReplyObject(r);
    return rc;
}

int wk__subscriber_ping(wk__subscriber *s)
{
    if (!s || !s->link.ctx || s->link.ctx->err)
        return s ? sub_fail(s, WK_EIO, "subscriber: connection is closed") : WK_EINVAL;
    return send_ping(s);
}

/* A message whose payload is an array of strings (client-side caching's
 * invalidation: the keys) or nil (everything invalidated). */
static bool keys_message(const redisReply *r)
{
    if (!push_is(r, "message", 3))
        return false;
    const redisReply *p = r->element[2];
    if (p->type == REDIS_REPLY_NIL)
        return true;
    if (p->type != REDIS_REPLY_ARRAY)
        return false;
    for (size_t i = 0; i < p->elements; i++) {
        if (p->element[i]->type != REDIS_REPLY_STRING)
            return false;
    }
    return true;
}

/*
 * The loop of wk__subscriber_next() and wk__subscriber_poll(): `all`
 * reports pongs and key-array messages too (poll); without it (next) they
 * are consumed here, as are (un)subscribe confirmations.
 */
static int next_event(wk__subscriber *s, int timeout_ms, int wake_fd, bool all, wk__sub_event *ev)
{
    *ev = (wk__sub_event){WK__SUB_NOTHING, NULL, 0, 0};
    if (s->last) {
        freeReplyObject(s->last);
        s->last = NULL;
    }
    if (!s->link.ctx || s->link.ctx->err)
        return sub_fail(s, WK_EIO, "subscriber: connection is closed");
    int64_t deadline = wk_monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    bool polled = false; /* the socket was looked at once at least */
    for (;;) {
        /* Replies already read come first. */
        redisReply *r = NULL;
        int rc = wk__wire_take(&s->link, &r);
        if (rc)
            return ctx_fail(s, rc, "reading a message");
        if (r) {
            if (push_is(r, "message", 3) && r->element[2]->type == REDIS_REPLY_STRING) {
                s->last = r;
                *ev = (wk__sub_event){WK__SUB_MESSAGE, r->element[2]->str, r->element[2]->len, 0};
                return WK_OK;
            }
            if (all && keys_message(r)) {
                s->last = r;
                const redisReply *p = r->element[2];
                if (p->type == REDIS_REPLY_NIL)
                    ev->type = WK__SUB_FLUSH;
                else
                    *ev = (wk__sub_event){WK__SUB_KEYS, NULL, 0, p->elements};
                return WK_OK;
            }
            bool pong = push_is(r, "pong", 1);
            bool error = r->type == REDIS_REPLY_ERROR;
            char text[160];
            if (error)
                snprintf(text, sizeof(text), "%.150s", r->str);
            freeReplyObject(r);
            if (error)
                return sub_fail(s, WK_EREDIS, "subscriber: Redis replied: %s", text);
            if (pong) {
                s->ping_sent_ms = 0;
                if (all) {
                    ev->type = WK__SUB_PONG;
                    return WK_OK;
                }
            }
            continue; /* (un)subscribe confirmations and the like */
        }

        int64_t now = wk_monotonic_ms();
        if (s->ping_sent_ms && now - s->ping_sent_ms >= s->command_timeout_ms)
            return sub_fail(s, WK_ETIMEDOUT, "subscriber: no answer to PING within %d ms",
                            s->command_timeout_ms);
        if (!s->ping_sent_ms && s->keepalive_ms && now - s->last_rx_ms >= s->keepalive_ms) {
            rc = send_ping(s);
            if (rc)
                return rc;
        }
        if (now >= deadline && (timeout_ms > 0 || polled))
            return WK_OK;

        /* Sleep until bytes, a wake-up, the deadline or the next check
         * (with timeout 0: look once, without sleeping). */
        int64_t wait = deadline - now;
        if (s->ping_sent_ms) {
            int64_t t = s->ping_sent_ms + s->command_timeout_ms - now;
            wait = t < wait ? t : wait;
        } else if (s->keepalive_ms) {
            int64_t t = s->last_rx_ms + s->keepalive_ms - now;
            wait = t < wait ? t : wait;
        }
        if (timeout_ms <= 0)
            wait = 0;
        else if (wait < 1)
            wait = 1;
        polled = true;
        /* wk__wire_receive() left nothing decoded unread, so the socket
         * is the place to wait (for what TLS asked, usually POLLIN). */
        short want = s->link.want ? s->link.want : POLLIN;
        struct pollfd fds[3] = {{.fd = s->link.ctx->fd, .events = want},
                                {.fd = wake_fd, .events = POLLIN},
                                {.fd = s->notice.ctx ? s->notice.ctx->fd : -1, .events = POLLIN}};
        /* The wait every blocking driver uses; a negative fd is ignored. */
        int n = wk__poll_until(fds, 3, wk__boot_ms() + wait);
        if (n < 0)
            return sub_fail(s, WK_EIO, "subscriber: poll failed: %s", strerror(errno));
        if (wake_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
            return WK_OK;
        if (fds[2].revents && wk__failover_noticed(s->service, &s->notice))
            return sub_fail(s, WK_EIO, "subscriber: the sentinels switched the primary of %.100s",
                            s->service);
        if (fds[0].revents & (want | POLLHUP | POLLERR)) {
            rc = wk__wire_receive(&s->link);
            if (rc)
                return ctx_fail(s, rc, "connection lost");
            s->last_rx_ms = wk_monotonic_ms();
        }
    }
}

int wk__subscriber_next(wk__subscriber *s, int timeout_ms, int wake_fd, const char **msg,
                        size_t *len, bool *got)
{
    if (!s || !msg || !len || !got)
        return WK_EINVAL;
    wk__sub_event ev;
    int rc = next_event(s, timeout_ms, wake_fd, false, &ev);
    *got = ev.type == WK__SUB_MESSAGE;
    *msg = ev.data;
    *len = ev.len;
    return rc;
}

int wk__subscriber_poll(wk__subscriber *s, int timeout_ms, int wake_fd, wk__sub_event *ev)
{
    if (!s || !ev)
        return WK_EINVAL;
    return next_event(s, timeout_ms, wake_fd, true, ev);
}

const char *wk__subscriber_key(const wk__subscriber *s, size_t i, size_t *len)
{
    const redisReply *p =
        s && s->last && push_is(s->last, "message", 3) ? s->last->element[2] : NULL;
    if (!p || p->type != REDIS_REPLY_ARRAY || i >= p->elements) {
        *len = 0;
        return NULL;
    }
    *len = p->element[i]->len;
    return p->element[i]->str;
}

int wk__subscriber_database(const wk_db *db)
{
    return db && db->conn ? db->conn->url.database : 0;
}

const char *wk__subscriber_errmsg(const wk__subscriber *s)
{
    return s ? s->errmsg : "no subscriber";
}

void wk__subscriber_close(wk__subscriber *s)
{
    if (!s)
        return;
    if (s->last)
        freeReplyObject(s->last);
    wk__link_close(&s->link);
    wk__link_close(&s->notice);
    free(s->service);
    free(s);
}
