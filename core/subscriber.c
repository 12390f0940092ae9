/*
 * core/subscriber.c — a Pub/Sub subscriber connection opened from a
 * handle's connection settings (see core/subscriber.h).
 *
 * The connection is driven by the exchange machine (core/exchange.h) in
 * continuous push mode, as every connection is: SUBSCRIBE, CLIENT ID and
 * the keep-alive PING are queries whose replies are the confirmations,
 * and the messages are the pushes the machine hands over in the order
 * read, queued here until next() / poll() takes them. The machine also
 * keeps each reply's deadline (a PING unanswered within the command
 * timeout fails with WK_ETIMEDOUT) and fails the connection on EOF or
 * garbage; this file polls around it, together with an optional wake
 * descriptor, so a stop request or a timeout is noticed at once. A
 * subscriber never reconnects: its owner opens a new one.
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
#include <strings.h>

#include <wakuwaku/clock.h>

#include "core/core_internal.h"
#include "core/db_internal.h"
#include "core/exchange.h"
#include "core/subscriber.h"

/* A SUBSCRIBE or CLIENT ID being waited for (its query's OUT). */
typedef struct sub_call {
    bool done;
    int status;
    long long id; /* CLIENT ID's */
    char msg[200];
} sub_call;

struct wk__subscriber {
    /* The machine's handle and connection, of this subscriber alone:
     * conn.link is the connection (ctx NULL: closed), conn.notice the
     * failover notice (redis-sentinel://; ctx NULL: none). No URL: it
     * never reconnects. */
    wk_db db;
    wk__conn conn;
    wk__exchange x;
    wk__engine m;
    wk__kept k;    /* the queries on the way */
    char *service; /* the Sentinel service the notice is about */
    int keepalive_ms;
    int64_t last_rx_ms;   /* monotonic ms of the last bytes received */
    int64_t ping_sent_ms; /* 0: no keep-alive PING outstanding */
    /* What came, in the order read: a push (a message), or NULL for the
     * answer to a PING. */
    redisReply **events;
    size_t ev_head, ev_count, ev_cap;
    redisReply *last; /* the message handed out by the last next() / poll() */
    int failed;       /* a failure the machine settled (a PING's) */
    bool cancelled;   /* what is on the way was settled by a cancel */
    char errmsg[256];
    /* While it opens: its connection's set-up (the machine's) goes with
     * the handle's settings to host:port alone, or (host NULL) the URL's
     * target; `opening` is told the end. */
    const wk__conn *from;
    const char *host;
    int port;
    sub_call *opening;
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

/* The machine's push: a message, queued in the order read. */
static void on_push(void *arg, redisReply *reply)
{
    wk__subscriber *s = arg;
    if (s->ev_head + s->ev_count == s->ev_cap && s->ev_head) {
        memmove(s->events, s->events + s->ev_head, s->ev_count * sizeof(*s->events));
        s->ev_head = 0;
    }
    if (wk__grow_array(&s->events, &s->ev_cap, s->ev_head + s->ev_count + 1,
                       sizeof(*s->events))) {
        freeReplyObject(reply);
        s->failed = sub_fail(s, WK_ENOMEM, "subscriber: out of memory queuing a message");
        return;
    }
    s->events[s->ev_head + s->ev_count++] = reply;
}

/* The machine settled query i: a call waited for, or a PING. */
static void on_settled(void *arg, size_t i, int status, const char *msg)
{
    wk__subscriber *s = arg;
    sub_call *c = s->k.entries[i].out;
    if (c) {
        c->done = true;
        c->status = status;
        wk__copy_text(c->msg, sizeof(c->msg), msg);
    } else if (s->cancelled) {
        return; /* the failure that cancelled it is the one to tell */
    } else if (status) {
        s->failed = status == WK_ETIMEDOUT
                        ? sub_fail(s, status, "subscriber: no answer to PING within %d ms",
                                   tv_ms(s->conn.command_timeout))
                        : sub_fail(s, status, "subscriber: %s", msg);
    } else {
        s->ping_sent_ms = 0;
        on_push(s, NULL); /* the PONG, in its place among the messages */
    }
}

int wk__sub_parse_subscribed(const wk_query *q, const wk_reply *reply, wk_diag *d)
{
    const redisReply *r = (const redisReply *)reply;
    if (r->type == REDIS_REPLY_ERROR)
        return wk_diag_fail(d, WK_EREDIS, "refused: %.150s", r->str);
    const redisReply *k = r->type == REDIS_REPLY_ARRAY && r->elements == 3 ? r->element[0] : NULL;
    const redisReply *ch = k ? r->element[1] : NULL;
    if (!k || k->type != REDIS_REPLY_STRING || k->len != 9 || memcmp(k->str, "subscribe", 9) ||
        ch->type != REDIS_REPLY_STRING || ch->len != q->argvlen[1] ||
        memcmp(ch->str, q->argv[1], ch->len))
        return wk_diag_fail(d, WK_EPROTO, "unexpected reply");
    return WK_OK;
}

static int parse_client_id(const wk_query *q, const wk_reply *reply, wk_diag *d)
{
    const redisReply *r = (const redisReply *)reply;
    if (r->type != REDIS_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "unexpected reply");
    ((sub_call *)q->out)->id = r->integer;
    return WK_OK;
}

/* A PING's answer: +PONG before SUBSCRIBE, ["pong", ""] after. */
int wk__sub_parse_pong(const wk_query *q, const wk_reply *reply, wk_diag *d)
{
    (void)q;
    const redisReply *r = (const redisReply *)reply;
    const redisReply *k = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 ? r->element[0] : r;
    if ((k->type != REDIS_REPLY_STRING && k->type != REDIS_REPLY_STATUS) || k->len != 4 ||
        strncasecmp(k->str, "pong", 4))
        return wk_diag_fail(d, WK_EPROTO, "expected PONG");
    return WK_OK;
}

/* Hand the machine a command of `argc` arguments; its reply goes to
 * `parse` (with `c` as OUT; NULL: a PING, settled into the events). */
static int send_query(wk__subscriber *s, const char *name, int argc, const char *const *argv,
                      const size_t *lens, wk_parse_fn parse, sub_call *c)
{
    if (!s->conn.link.ctx)
        return sub_fail(s, WK_EIO, "subscriber: connection is closed");
    /* Error replies are the parser's: they fail the call, not the lane. */
    wk_query q = {.name = name, .flags = WK_QUERY_PARSE_ERRORS, .parse = parse, .out = c};
    q.argc = argc;
    q.argv = argv;
    q.argvlen = lens;
    int rc = wk__kept_add(&s->k, &s->db, &q);
    if (rc)
        return sub_fail(s, rc, "subscriber: %s", s->db.errmsg);
    s->x.slots = s->k.slots;
    s->x.count = s->k.count;
    return WK_OK;
}

/* Let the settled queries at the front go. */
static void compact(wk__subscriber *s)
{
    size_t n = 0;
    while (n < s->x.count && s->k.slots[n].state == WK__REPLIED)
        n++;
    if (!n)
        return;
    wk__engine_shift(&s->m, n);
    wk__kept_drop_front(&s->k, n);
    s->x.slots = s->k.slots;
    s->x.count = s->k.count;
}

/* Hand the machine a PING (its answer is an event) and write it. */
static int send_ping(wk__subscriber *s)
{
    static const char *const argv[1] = {"PING"};
    static const size_t lens[1] = {4};
    int rc = send_query(s, "PING", 1, argv, lens, wk__sub_parse_pong, NULL);
    if (rc)
        return rc;
    s->ping_sent_ms = wk__boot_ms();
    wk__engine_step(&s->m);
    return s->conn.link.ctx ? WK_OK
                            : sub_fail(s, WK_EIO, "subscriber: PING: %s", s->m.why);
}

/*
 * Step the machine and poll around it until `ready(s, c)` (checked after
 * every step), the deadline (boot ms; 0: none — `c`'s reply is due by
 * the command timeout), or the wake descriptor (*woken). A lost
 * connection, a failover notice or a failed PING is the failure.
 */
static int run(wk__subscriber *s, int64_t deadline, int wake_fd, const sub_call *c, bool *woken)
{
    for (bool looked = false;;) {
        /* Lost, queries not written fail: no_reconnect (the machine). */
        wk__engine_step(&s->m);
        compact(s);
        if (s->failed)
            return s->failed;
        /* (The open's own call: the connection is being set up.) */
        if (!s->conn.link.ctx && !(s->opening && c == s->opening))
            return sub_fail(s, s->m.conn_rc ? s->m.conn_rc : WK_EIO,
                            "subscriber: connection lost: %s", s->m.why);
        if (c ? c->done : s->ev_count > 0)
            return WK_OK;
        /* Keep-alive: a PING after keepalive_ms without traffic (its
         * answer is due by the command timeout, as any reply is). */
        int64_t now = wk__boot_ms();
        int64_t idle_end = s->keepalive_ms && !s->ping_sent_ms && s->conn.link.ctx
                               ? wk__add_ms(s->last_rx_ms, s->keepalive_ms)
                               : 0;
        if (idle_end && now >= idle_end) {
            int rc = send_ping(s);
            if (rc)
                return rc;
            continue;
        }
        if (looked && deadline && now >= deadline)
            return WK_OK;
        int64_t until = wk__deadline_min(wk__deadline_min(wk__engine_due(&s->m), idle_end), deadline);
        looked = true;
        int fd = -1;
        short ev = wk__engine_lane_events(&s->m, 0, &fd);
        struct pollfd fds[3] = {{.fd = fd, .events = ev},
                                {.fd = wake_fd, .events = POLLIN},
                                {.fd = s->conn.notice.ctx ? s->conn.notice.ctx->fd : -1,
                                 .events = POLLIN}};
        /* The wait every blocking driver uses; a negative fd is ignored. */
        int n = wk__poll_until(fds, 3, until ? until : wk__boot_ms() + 1000);
        if (n < 0)
            return sub_fail(s, WK_EIO, "subscriber: poll failed: %s", strerror(errno));
        if (wake_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            *woken = true;
            return WK_OK;
        }
        if (fds[2].revents && wk__failover_noticed(s->service, &s->conn.notice))
            return sub_fail(s, WK_EIO, "subscriber: the sentinels switched the primary of %.100s",
                            s->service);
        if (fds[0].revents) {
            if (fds[0].revents & (POLLIN | POLLHUP | POLLERR))
                s->last_rx_ms = wk__boot_ms();
            wk__engine_ready(&s->m, 0, fds[0].revents);
        }
    }
}

/* Its one set-up, the machine's: as the handle's (SELECT aside: Pub/Sub
 * channels do not belong to a database), by its own deadline. */
static void open_begin(void *arg, wk__setup *st)
{
    wk__subscriber *s = arg;
    wk__setup_begin(st, s->from, s->host, s->port, s->host ? 0 : WK__SETUP_NOTICE, 0);
}

static int open_done(void *arg, wk__setup *st)
{
    wk__subscriber *s = arg;
    if (st->rc)
        sub_fail(s, st->rc, "subscriber: %s", st->msg);
    else
        wk__setup_take(st, &s->conn.link, &s->conn.notice);
    s->opening->done = true;
    s->opening->status = st->rc;
    return st->rc;
}

int wk__subscriber_open(wk__subscriber **out, wk_db *db, int keepalive_ms, char *err,
                        size_t errlen)
{
    return wk__subscriber_open_at(out, db, NULL, 0, keepalive_ms, err, errlen);
}

int wk__subscriber_open_at(wk__subscriber **out, wk_db *db, const char *host, int port,
                           int keepalive_ms, char *err, size_t errlen)
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
    s->db.conn = &s->conn;
    s->conn.command_timeout = conn->command_timeout;
    s->conn.wake_fd = s->conn.wake_signal_fd = -1;
    s->keepalive_ms = keepalive_ms;
    s->x = (wk__exchange){.db = &s->db, .query = wk__kept_query, .ctx = &s->k};
    wk__engine_open(&s->m, &s->x, on_settled, NULL, s);
    s->m.push = on_push;
    s->m.setup_begin = open_begin;
    s->m.setup_done = open_done;
    s->from = conn;
    s->host = host;
    s->port = port;
    sub_call opened = {0};
    s->opening = &opened;
    s->last_rx_ms = wk__boot_ms();
    wk__engine_dial(&s->m);
    bool woken = false;
    int rc = run(s, 0, -1, &opened, &woken);
    s->opening = NULL;
    s->m.no_reconnect = true; /* its own connection: a lost one is a failure */
    if (!rc)
        rc = opened.status;
    if (!rc && conn->url.service && !(s->service = strdup(conn->url.service)))
        rc = sub_fail(s, WK_ENOMEM, "subscriber: out of memory");
    if (rc) {
        copy_err(err, errlen, s->errmsg, rc);
        wk__subscriber_close(s);
        return rc;
    }
    s->last_rx_ms = s->conn.last_io_ms = wk__boot_ms();
    *out = s;
    return WK_OK;
}

/* Settle what is on the way and close the connection: the subscriber
 * failed (or closes). */
static void cancel(wk__subscriber *s)
{
    s->cancelled = true;
    wk__engine_cancel(&s->m, WK_EIO, "subscriber closed");
    wk__link_close(&s->conn.link);
}

/* Send a command and wait for its reply, within the command timeout;
 * what came meanwhile stays queued. */
static int call(wk__subscriber *s, const char *name, int argc, const char *const *argv,
                const size_t *lens, wk_parse_fn parse, sub_call *c)
{
    int rc = send_query(s, name, argc, argv, lens, parse, c);
    bool woken = false;
    if (!rc)
        rc = run(s, 0, -1, c, &woken);
    if (!rc && c->status)
        rc = sub_fail(s, c->status, "subscriber: %s", c->msg);
    if (!c->done)
        cancel(s); /* failed meanwhile: nothing may settle into *c later */
    return rc;
}

int wk__subscriber_subscribe(wk__subscriber *s, const char *channel, size_t len)
{
    if (!s || !s->conn.link.ctx || (!channel && len))
        return WK_EINVAL;
    const char *argv[2] = {"SUBSCRIBE", channel ? channel : ""};
    size_t lens[2] = {9, len};
    sub_call c = {0};
    int rc = call(s, "SUBSCRIBE", 2, argv, lens, wk__sub_parse_subscribed, &c);
    if (!rc)
        s->last_rx_ms = wk__boot_ms();
    return rc;
}

int wk__subscriber_client_id(wk__subscriber *s, long long *id)
{
    if (!s || !id || !s->conn.link.ctx)
        return WK_EINVAL;
    *id = 0;
    static const char *const argv[2] = {"CLIENT", "ID"};
    static const size_t lens[2] = {6, 2};
    sub_call c = {0};
    int rc = call(s, "CLIENT ID", 2, argv, lens, parse_client_id, &c);
    if (!rc)
        *id = c.id;
    return rc;
}

int wk__subscriber_ping(wk__subscriber *s)
{
    if (!s || !s->conn.link.ctx || s->conn.link.ctx->err)
        return s ? sub_fail(s, WK_EIO, "subscriber: connection is closed") : WK_EINVAL;
    return send_ping(s);
}

/* A message whose payload is an array of strings (client-side caching's
 * invalidation: the keys) or nil (everything invalidated). */
static bool keys_message(const redisReply *r)
{
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

/* Whether `r` (a push) is a "message" (not a pattern's). */
static bool is_message(const redisReply *r)
{
    const redisReply *k = r->type == REDIS_REPLY_ARRAY && r->elements == 3 ? r->element[0] : NULL;
    return k && k->type == REDIS_REPLY_STRING && k->len == 7 && memcmp(k->str, "message", 7) == 0;
}

const char *wk__sub_message(const redisReply *r, size_t *len)
{
    if (!is_message(r) || r->element[2]->type != REDIS_REPLY_STRING)
        return NULL;
    *len = r->element[2]->len;
    return r->element[2]->str;
}

/*
 * The events of wk__subscriber_next() and wk__subscriber_poll(): `all`
 * reports pongs and key-array messages too (poll); without it (next) they
 * are consumed here.
 */
static int next_event(wk__subscriber *s, int timeout_ms, int wake_fd, bool all, wk__sub_event *ev)
{
    *ev = (wk__sub_event){WK__SUB_NOTHING, NULL, 0, 0};
    if (s->last) {
        freeReplyObject(s->last);
        s->last = NULL;
    }
    if (!s->conn.link.ctx || s->conn.link.ctx->err)
        return sub_fail(s, WK_EIO, "subscriber: connection is closed");
    /* 0 takes only what came: one look, no wait. */
    int64_t deadline = wk__boot_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        while (s->ev_count) {
            redisReply *r = s->events[s->ev_head++];
            s->ev_count--;
            if (!r) {
                if (all) {
                    ev->type = WK__SUB_PONG;
                    return WK_OK;
                }
                continue;
            }
            size_t len;
            const char *data = wk__sub_message(r, &len);
            if (data) {
                s->last = r;
                *ev = (wk__sub_event){WK__SUB_MESSAGE, data, len, 0};
                return WK_OK;
            }
            if (all && is_message(r) && keys_message(r)) {
                s->last = r;
                const redisReply *p = r->element[2];
                if (p->type == REDIS_REPLY_NIL)
                    ev->type = WK__SUB_FLUSH;
                else
                    *ev = (wk__sub_event){WK__SUB_KEYS, NULL, 0, p->elements};
                return WK_OK;
            }
            freeReplyObject(r); /* a pattern's message: nobody subscribes to one */
        }
        s->ev_head = 0;
        bool woken = false;
        int rc = run(s, deadline, wake_fd, NULL, &woken);
        if (rc || woken || !s->ev_count)
            return rc;
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
    const redisReply *p = s && s->last ? s->last->element[2] : NULL;
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

int wk__subscriber_fd(const wk__subscriber *s)
{
    return s && s->conn.link.ctx ? s->conn.link.ctx->fd : -1;
}

const char *wk__subscriber_errmsg(const wk__subscriber *s)
{
    return s ? s->errmsg : "no subscriber";
}

void wk__subscriber_close(wk__subscriber *s)
{
    if (!s)
        return;
    cancel(s);
    if (s->last)
        freeReplyObject(s->last);
    for (size_t i = 0; i < s->ev_count; i++)
        if (s->events[s->ev_head + i])
            freeReplyObject(s->events[s->ev_head + i]);
    free(s->events);
    wk__kept_free(&s->k);
    wk__link_close(&s->conn.link);
    wk__link_close(&s->conn.notice);
    wk__lane_end_setup(&s->conn.lane);
    free(s->conn.lane.out.data);
    free(s->service);
    free(s);
}
