/*
 * core/async.c — the event-loop handle (wakuwaku/async.h).
 *
 * A wk_async wraps a wk_db that is never connected the blocking way: its
 * settings, capability, script hashes and detail message are the
 * handle's, and the connection (db->conn->link) is driven here, one
 * non-blocking step per wk_async_process():
 *
 *   DOWN → CONNECTING → READY
 *
 * CONNECTING is the set-up machine every handle uses (core/conn_machine.c:
 * dial, TLS, AUTH / HELLO / SELECT, the Sentinel search), stepped from
 * the watch: its want is what the loop is shown.
 *
 * Queries are admitted and formatted into `store` when submitted (the
 * formatting and parsing of core/dispatch.c), and kept in a FIFO ring in
 * the order their bytes sit in `store`, which is the order they are
 * written and answered. Each entry has the state of core/exchange.h
 * (UNSENT, SENT, then a final status), settled by the same rules: a
 * write sent without a reply is WK_EUNKNOWN, a query never sent did not
 * run, a dropped connection is re-dialled once at once for what never
 * ran and for retry-safe reads, nothing else is re-sent.
 *
 * Callbacks run only from wk_async_process() and wk_async_close(), from
 * flush(), after the state is consistent: a callback may submit (the
 * ring and `store` may grow under it, so nothing holds pointers across
 * a callback).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wakuwaku/async.h>
#include <wakuwaku/clock.h>

#include "core/db_internal.h"
#include "core/conn_machine.h"
#include "core/exchange.h"

/* Spans kept inside an entry; a query with more arguments (rare: custom
 * queries) gets them on the heap. */
#define INLINE_SPANS 12

enum conn_state { DOWN, CONNECTING, READY };
enum entry_state { UNSENT = WK__UNSENT, SENT = WK__SENT, FINAL, CALLED };

typedef struct entry {
    const char *name;
    unsigned flags;
    const wk_script *script;
    int nkeys, argc;
    wk_parse_fn parse;
    void *out;
    wk_async_done_fn done;
    void *arg;
    size_t start, end;                   /* its command in store (and its WAIT) */
    size_t wait_len;                     /* bytes of its WAIT at the end (0: none) */
    redisReply *held;                    /* its reply, while its WAIT's is awaited */
    wk__span inline_spans[INLINE_SPANS]; /* offsets relative to start */
    wk__span *heap_spans;                /* when argc > INLINE_SPANS */
    int64_t sent_ms;
    int status;
    unsigned char state;
    bool writes, as_eval, resent, carried;
    char *msg; /* a final failure's message (heap, rare), or NULL */
} entry;

struct wk_async {
    wk_processor proc; /* first member */
    wk_db *db;
    wk_async_done_fn done;
    void *done_arg;
    wk_async_watch_fn watch;
    void *watch_arg;
    int seen_fd;
    unsigned seen_events;
    int64_t seen_due;

    enum conn_state state;
    wk__setup setup; /* CONNECTING: the set-up, and what it waits for */
    wk__want want;

    entry *ring;
    size_t head, count, cap;
    size_t unsent_from; /* ring index (relative) of the first entry not fully written */
    size_t sent_from;   /* … and of the first that may await a reply */
    size_t nfinal;      /* entries FINAL: their callbacks are due */
    wk__buf store;
    size_t wpos; /* bytes of store written */
    wk__buf scratch;
    const char **argv;
    size_t *argvlen;
    size_t argv_cap, argvlen_cap;
    wk_query query; /* an entry rebuilt for its parser */
    bool in_process;
    bool closing; /* in wk_async_close(): submissions are refused */
    char errmsg[WK__ERRMSG_MAX];
};

static entry *at(wk_async *a, size_t i)
{
    return &a->ring[(a->head + i) % a->cap];
}

static wk__span *spans_of(entry *e)
{
    return e->heap_spans ? e->heap_spans : e->inline_spans;
}

static int64_t command_timeout_ms(const wk_async *a)
{
    struct timeval tv = a->db->conn->command_timeout;
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* How long an entry's replies may take: a lease query's WAIT is held by
 * the server up to the ack timeout. */
static int64_t reply_timeout_ms(const wk_async *a, const struct entry *e)
{
    return command_timeout_ms(a) + (e->wait_len ? a->db->conn->lease_ack_timeout_ms : 0);
}

/* ---- completing --------------------------------------------------------- */

/* Give entry e its final status (callbacks run later, in flush()). */
static void finish(wk_async *a, entry *e, int status, const char *msg)
{
    if (e->held) {
        freeReplyObject(e->held); /* its WAIT's reply never came */
        e->held = NULL;
    }
    if (e->state != FINAL)
        a->nfinal++;
    e->state = FINAL;
    e->status = status;
    free(e->msg);
    e->msg = status != WK_OK && msg && msg[0] ? strdup(msg) : NULL;
}

static void finish_fmt(wk_async *a, entry *e, int status, const char *why)
{
    char text[WK__ERRMSG_MAX];
    const char *tail = "";
    if (status == WK_EUNKNOWN)
        tail = " (the write may or may not have happened)";
    else if (e->writes && e->state == UNSENT)
        tail = " (not sent: the write did not happen)";
    snprintf(text, sizeof(text), "%s: %s%s", e->name, why, tail);
    finish(a, e, status, text);
}

/* Pop finished entries off the front; free what they hold. */
static void pop_front(wk_async *a)
{
    while (a->count && at(a, 0)->state == CALLED) {
        entry *e = at(a, 0);
        free(e->heap_spans);
        free(e->msg);
        a->head = (a->head + 1) % a->cap;
        a->count--;
        if (a->unsent_from)
            a->unsent_from--;
        if (a->sent_from)
            a->sent_from--;
    }
    if (a->count == 0) {
        a->head = 0;
        a->unsent_from = a->sent_from = 0;
        if (a->wpos == a->store.len)
            a->store.len = a->wpos = 0;
    }
}

/* Run the callbacks of finished entries, in ring order. A callback may
 * submit: entries are found by index again after each one. */
static void flush(wk_async *a)
{
    for (size_t i = 0; i < a->count; i++) {
        entry *e = at(a, i);
        if (e->state != FINAL)
            continue;
        e->state = CALLED;
        a->nfinal--;
        wk_async_done_fn done = e->done;
        void *arg = e->arg;
        int status = e->status;
        char msg[WK__ERRMSG_MAX];
        wk__copy_text(msg, sizeof(msg), e->msg ? e->msg : "");
        if (done)
            done(a, status, msg, arg);
    }
    pop_front(a);
}

/* ---- the watch ---------------------------------------------------------- */

static bool any_final(const wk_async *a)
{
    return a->nfinal > 0;
}

int wk_async_fd(const wk_async *a)
{
    if (!a)
        return -1;
    if (a->state == CONNECTING)
        return a->want.fd;
    return a->state == DOWN || !a->db->conn->link.ctx ? -1 : a->db->conn->link.ctx->fd;
}

unsigned wk_async_events(const wk_async *a)
{
    if (!a)
        return 0;
    const wk__link *link = &a->db->conn->link;
    switch (a->state) {
    case DOWN:
        return 0;
    case CONNECTING:
        return (a->want.events & POLLIN ? WK_ASYNC_READ : 0) |
               (a->want.events & POLLOUT ? WK_ASYNC_WRITE : 0);
    case READY:
        return WK_ASYNC_READ |
               (a->wpos < a->store.len || link->want == POLLOUT ? WK_ASYNC_WRITE : 0);
    }
    return 0;
}

/* The first entry that awaits a reply (replies come in ring order), or
 * NULL. */
static entry *oldest_sent(wk_async *a)
{
    while (a->sent_from < a->count && at(a, a->sent_from)->state != SENT) {
        if (at(a, a->sent_from)->state == UNSENT)
            return NULL; /* nothing after it was written */
        a->sent_from++;
    }
    return a->sent_from < a->count ? at(a, a->sent_from) : NULL;
}

/* When wk_async_process() is due without events (monotonic ms), or -1. */
static int64_t next_due(wk_async *a)
{
    if (any_final(a))
        return 0; /* callbacks are due */
    switch (a->state) {
    case DOWN:
        for (size_t i = 0; i < a->count; i++)
            if (at(a, i)->state == UNSENT)
                return 0; /* to connect */
        return -1;
    case CONNECTING:
        return a->want.deadline;
    case READY: {
        const entry *e = oldest_sent(a);
        return e ? e->sent_ms + reply_timeout_ms(a, e) : -1;
    }
    }
    return -1;
}

int64_t wk_async_timeout_ms(const wk_async *a)
{
    if (!a)
        return -1;
    int64_t due = next_due((wk_async *)a);
    if (due < 0)
        return -1;
    int64_t now = wk_monotonic_ms();
    return due > now ? due - now : 0;
}

static void update_watch(wk_async *a)
{
    if (!a->watch)
        return;
    int fd = wk_async_fd(a);
    unsigned ev = wk_async_events(a);
    int64_t due = next_due(a);
    if (fd == a->seen_fd && ev == a->seen_events && due == a->seen_due && due != 0)
        return;
    a->seen_fd = fd;
    a->seen_events = ev;
    a->seen_due = due;
    a->watch(a, fd, ev, wk_async_timeout_ms(a), a->watch_arg);
}

/* ---- the connection ----------------------------------------------------- */

/* The descriptor the watch was shown is closed (or about to be): say so
 * before anything else is reported. A new socket often gets the same
 * number, and loops that keep descriptors registered (epoll: libuv,
 * libevent) must drop the old registration first, which they cannot do
 * if the number seems unchanged. */
static void fd_gone(wk_async *a)
{
    if (!a->watch || a->seen_fd < 0)
        return;
    a->seen_fd = -1;
    a->seen_events = 0;
    a->seen_due = -1;
    a->watch(a, -1, 0, -1, a->watch_arg);
}

static void close_link(wk_async *a)
{
    fd_gone(a);
    wk__setup_end(&a->setup);
    wk__conn_drop(a->db->conn);
    a->state = DOWN;
}

/* Connecting failed: nothing was sent; every entry (all UNSENT) fails
 * with the reason. */
static void connect_failed(wk_async *a, int rc, const char *why)
{
    /* `why` may be the set-up's own text, gone once it is ended. */
    wk__copy_text(a->errmsg, sizeof(a->errmsg), why);
    close_link(a);
    for (size_t i = 0; i < a->count; i++) {
        entry *e = at(a, i);
        if (e->state == UNSENT || e->state == SENT)
            finish_fmt(a, e, rc, a->errmsg);
    }
}

/* Step the set-up; once it ends, the connection is READY or failed. */
static void drive(wk_async *a, unsigned ready)
{
    a->want = wk__setup_step(&a->setup, (short)((ready & WK_ASYNC_READ ? POLLIN : 0) |
                                                (ready & WK_ASYNC_WRITE ? POLLOUT : 0)));
    if (!a->want.done)
        return;
    if (a->setup.rc) {
        connect_failed(a, a->setup.rc, a->setup.msg);
        return;
    }
    if (a->setup.cluster) {
        /* Not routed by slot yet: a cluster needs the blocking handle. */
        char msg[WK__ERRMSG_MAX];
        snprintf(msg, sizeof(msg),
                 "%s is a Redis Cluster node; the event-loop handle does not route by slot "
                 "yet (use wk_db_open)",
                 a->setup.addr);
        connect_failed(a, WK_EINVAL, msg);
        return;
    }
    wk__setup_take(&a->setup, &a->db->conn->link, NULL);
    wk__setup_end(&a->setup);
    a->state = READY;
    a->db->conn->last_io_ms = wk_monotonic_ms();
}

static void setup_closing(void *arg)
{
    fd_gone(arg);
}

static void start_connect(wk_async *a)
{
    wk__setup_begin(&a->setup, a->db->conn, NULL, 0, WK__SETUP_SELECT, 0);
    a->setup.closing = setup_closing;
    a->setup.closing_arg = a;
    a->state = CONNECTING;
    drive(a, 0);
}

/* ---- queries on the wire ------------------------------------------------ */

static void restage(wk_async *a);

/* The connection failed while READY (or at a set-up step after bytes
 * went out): settle every entry by its state, as core/exchange.c does. */
static void connection_lost(wk_async *a, int rc, const char *text)
{
    /* `text` may be the connection's own, gone once it is closed. */
    wk__copy_text(a->errmsg, sizeof(a->errmsg), text);
    const char *why = a->errmsg;
    close_link(a);
    bool again = false;
    for (size_t i = 0; i < a->count; i++) {
        entry *e = at(a, i);
        if (e->state == SENT) {
            if (e->held) { /* its WAIT's reply is lost with the connection */
                freeReplyObject(e->held);
                e->held = NULL;
            }
            if (wk__may_resend(e->flags, e->resent, rc)) {
                e->state = UNSENT; /* a lost retry-safe query goes once more */
                e->resent = true;
                again = true;
            } else
                finish_fmt(a, e, wk__lost_status(e->writes, rc), why);
        } else if (e->state == UNSENT) {
            /* Never ran. After a timeout a stalled server would stall
             * again; after a drop it gets one more connection. */
            if (rc != WK_EIO || e->carried)
                finish_fmt(a, e, rc, why);
            else {
                e->carried = true;
                again = true;
            }
        }
    }
    restage(a);
    if (again)
        start_connect(a);
}

/* After a lost connection: the commands still to send, packed at the
 * start of store in ring order (the old bytes were partly written). */
static void restage(wk_async *a)
{
    a->scratch.len = 0;
    for (size_t i = 0; i < a->count; i++) {
        entry *e = at(a, i);
        if (e->state != UNSENT)
            continue;
        size_t len = e->end - e->start;
        if (wk__buf_reserve(&a->scratch, len)) {
            finish(a, e, WK_ENOMEM, "out of memory re-queuing a query");
            continue;
        }
        memcpy(a->scratch.data + a->scratch.len, a->store.data + e->start, len);
        e->start = a->scratch.len;
        e->end = e->start + len;
        a->scratch.len += len;
    }
    /* Entries not UNSENT keep no bytes: point them at the front. */
    for (size_t i = 0; i < a->count; i++) {
        entry *e = at(a, i);
        if (e->state != UNSENT)
            e->start = e->end = 0;
    }
    wk__buf t = a->store;
    a->store = a->scratch;
    a->scratch = t;
    a->wpos = 0;
    a->unsent_from = a->sent_from = 0;
}

/* Entry e as a query, its arguments pointing into `bytes` (its command). */
static const wk_query *rebuild(wk_async *a, const entry *e, const char *bytes)
{
    const wk__span *sp = e->heap_spans ? e->heap_spans : e->inline_spans;
    for (int k = 0; k < e->argc; k++) {
        a->argv[k] = bytes + sp[k].off;
        a->argvlen[k] = sp[k].len;
    }
    a->query = (wk_query){.name = e->name,
                          .flags = e->flags,
                          .script = e->script,
                          .nkeys = e->nkeys,
                          .argc = e->argc,
                          .argv = a->argv,
                          .argvlen = a->argvlen,
                          .parse = e->parse,
                          .out = e->out};
    return &a->query;
}

/* Room for one more entry (the ring is unrolled when it grows). */
static int ring_reserve(wk_async *a)
{
    if (a->count < a->cap)
        return WK_OK;
    size_t n = a->cap ? a->cap * 2 : 64;
    entry *r = malloc(n * sizeof(*r));
    if (!r)
        return WK_ENOMEM;
    for (size_t i = 0; i < a->count; i++)
        r[i] = *at(a, i);
    free(a->ring);
    a->ring = r;
    a->cap = n;
    a->head = 0;
    return WK_OK;
}

/* Append the command of query q to store as a new UNSENT entry. */
static int enqueue(wk_async *a, const wk_query *q, bool as_eval, const entry *like)
{
    if (ring_reserve(a) ||
        wk__grow_array((void **)&a->argv, &a->argv_cap, (size_t)q->argc, sizeof(char *)) ||
        wk__grow_array((void **)&a->argvlen, &a->argvlen_cap, (size_t)q->argc, sizeof(size_t)))
        return WK_ENOMEM;
    entry e = like ? *like
                   : (entry){.name = q->name,
                             .flags = q->flags,
                             .script = q->script,
                             .nkeys = q->nkeys,
                             .argc = q->argc,
                             .parse = q->parse,
                             .out = q->out,
                             .done = a->done,
                             .arg = a->done_arg,
                             .writes = wk_effect_is_write(&q->effect)};
    e.heap_spans = NULL;
    e.msg = NULL;
    e.held = NULL;
    e.state = UNSENT;
    e.as_eval = as_eval;
    if (q->argc > INLINE_SPANS && !(e.heap_spans = malloc((size_t)q->argc * sizeof(wk__span))))
        return WK_ENOMEM;
    size_t mark = a->store.len, command_end = 0;
    int rc = wk__format_query(a->db, &a->store, q, as_eval, spans_of(&e), &command_end);
    if (rc) {
        a->store.len = mark;
        free(e.heap_spans);
        return rc;
    }
    wk__span *sp = spans_of(&e);
    for (int k = 0; k < q->argc; k++)
        sp[k].off -= mark;
    e.start = mark;
    e.end = a->store.len;
    e.wait_len = a->store.len - command_end;
    *at(a, a->count++) = e;
    return WK_OK;
}

/* A reply for the oldest SENT entry. */
static void deliver(wk_async *a, redisReply *reply)
{
    entry *e = oldest_sent(a);
    if (!e) {
        freeReplyObject(reply);
        connection_lost(a, WK_EPROTO, "a reply nobody asked for");
        return;
    }
    /* A lease query's own reply waits for its WAIT's, which follows. */
    redisReply *ack = NULL;
    if (e->wait_len) {
        if (!e->held) {
            e->held = reply;
            return;
        }
        ack = reply;
        reply = e->held;
        e->held = NULL;
    }
    if (e->script && !e->as_eval && wk__reply_is_noscript(reply)) {
        freeReplyObject(reply);
        if (ack)
            freeReplyObject(ack);
        /* It did not run: send it again as EVAL, behind the others. Its
         * old bytes are copied out first (store may move). */
        entry old = *e;
        size_t len = e->end - e->start;
        a->scratch.len = 0;
        int rc = wk__buf_reserve(&a->scratch, len);
        if (!rc) {
            memcpy(a->scratch.data, a->store.data + e->start, len);
            rc = enqueue(a, rebuild(a, &old, a->scratch.data), true, &old);
        }
        e = oldest_sent(a); /* the ring may have moved */
        if (rc)
            finish(a, e, rc, "out of memory re-sending a script as EVAL");
        else {
            free(e->heap_spans);
            e->heap_spans = NULL;
            e->state = CALLED; /* replaced by the EVAL entry: no callback */
        }
        return;
    }
    if (a->db->conn->url.service && wk__reply_is_readonly(reply)) {
        /* The node turned replica: the command did not run. It goes once
         * more, with what is queued, to the primary the sentinels name
         * (what was sent behind it settles as on any lost connection). */
        freeReplyObject(reply);
        if (ack)
            freeReplyObject(ack);
        e->state = UNSENT;
        connection_lost(a, WK_EIO, "READONLY: the node is a replica now");
        return;
    }
    a->db->errmsg[0] = '\0';
    int status = wk__parse_reply(a->db, rebuild(a, e, a->store.data + e->start), reply, ack);
    freeReplyObject(reply);
    if (ack)
        freeReplyObject(ack);
    finish(a, e, status, a->db->errmsg);
}

/* Write what is queued; mark what the kernel took whole as SENT. */
static void write_queued(wk_async *a)
{
    wk__link *link = &a->db->conn->link;
    while (a->wpos < a->store.len) {
        short want = POLLOUT;
        ssize_t n = link->tx->send(link, a->store.data + a->wpos, a->store.len - a->wpos, &want);
        if (n == WK__TX_AGAIN)
            break;
        if (n <= 0) {
            connection_lost(a, WK_EIO,
                            link->ctx && link->ctx->errstr[0] ? link->ctx->errstr : "write failed");
            return;
        }
        a->wpos += (size_t)n;
    }
    int64_t now = wk_monotonic_ms();
    for (; a->unsent_from < a->count; a->unsent_from++) {
        entry *e = at(a, a->unsent_from);
        if (e->state != UNSENT)
            continue;
        /* Sent once its command is written, whether or not its WAIT is. */
        if (e->end - e->wait_len > a->wpos)
            break;
        e->state = SENT;
        e->sent_ms = now;
    }
}

static void read_replies(wk_async *a)
{
    wk__link *link = &a->db->conn->link;
    int rc = wk__wire_receive(link);
    while (!rc && a->state == READY) {
        redisReply *r;
        rc = wk__wire_take(link, &r);
        if (rc || !r)
            break;
        deliver(a, r);
    }
    if (rc && a->state == READY)
        connection_lost(a, rc, link->ctx->errstr[0] ? link->ctx->errstr : "connection lost");
}

static void check_timers(wk_async *a)
{
    if (a->state != READY)
        return;
    const entry *e = oldest_sent(a);
    if (e && wk_monotonic_ms() - e->sent_ms >= reply_timeout_ms(a, e)) {
        char why[96];
        snprintf(why, sizeof(why), "no reply within %lld ms", (long long)command_timeout_ms(a));
        connection_lost(a, WK_ETIMEDOUT, why);
    }
}

/* Move the connection and the queries as far as they go now. */
static void step(wk_async *a, unsigned ready)
{
    for (int guard = 0; guard < 8; guard++) {
        enum conn_state before = a->state;
        switch (a->state) {
        case DOWN:
            for (size_t i = 0; i < a->count; i++)
                if (at(a, i)->state == UNSENT) {
                    start_connect(a);
                    break;
                }
            break;
        case CONNECTING:
            drive(a, ready);
            break;
        case READY:
            read_replies(a);
            if (a->state == READY)
                write_queued(a);
            break;
        }
        ready = 0;
        if (a->state == before)
            break;
    }
    check_timers(a);
}

/* ---- the public calls --------------------------------------------------- */

static int async_submit(wk_processor *self, wk_query *q)
{
    wk_async *a = (wk_async *)self;
    if (!q)
        return WK_EINVAL;
    wk_db *db = a->db;
    db->errmsg[0] = '\0';
    if (!q->name)
        q->name = "query";
    if (a->closing) /* from a callback run by wk_async_close() */
        return wk__db_fail(db, WK_EIO, "%s: the handle is closing (not sent)", q->name);
    int rc = wk__db_admit(db, q);
    if (rc)
        return rc;
    rc = enqueue(a, q, false, NULL);
    if (rc == WK_ENOMEM)
        return wk__db_fail(db, rc, "%s: out of memory queuing", q->name);
    if (rc)
        return rc;
    if (a->state == DOWN && !a->in_process)
        start_connect(a);
    update_watch(a);
    return WK_OK;
}

int wk_async_open(wk_async **out, const wk_db_options *opts, char *err, size_t errlen)
{
    if (!out) {
        if (err && errlen)
            snprintf(err, errlen, "out is NULL");
        return WK_EINVAL;
    }
    *out = NULL;
    wk_async *a = calloc(1, sizeof(*a));
    if (!a) {
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return WK_ENOMEM;
    }
    int rc = wk__db_new(&a->db, opts, err, errlen);
    if (rc) {
        free(a);
        return rc;
    }
    if (a->db->conn->url.nseeds) {
        /* The loop's connect state machine dials one node; a cluster's
         * seeds are for blocking handles (wakuwaku/db.h). */
        wk_db_close(a->db);
        free(a);
        if (err && errlen)
            snprintf(err, errlen,
                     "cluster seed lists are for blocking handles (wk_db_open); the "
                     "event-loop handle does not route by slot");
        return WK_EINVAL;
    }
    a->proc.process = async_submit;
    a->proc.db = a->db;
    a->proc.flags = WK_PROCESSOR_DEFERRED;
    a->setup.dial.fd = -1; /* nothing to end yet */
    a->seen_fd = -1;
    a->seen_due = -1;
    start_connect(a);
    *out = a;
    return WK_OK;
}

void wk_async_close(wk_async *a)
{
    if (!a)
        return;
    /* What is still queued completes now, by the outcome rules. */
    for (size_t i = 0; i < a->count; i++) {
        entry *e = at(a, i);
        if (e->state == SENT)
            finish_fmt(a, e, e->writes ? WK_EUNKNOWN : WK_EIO, "handle closed");
        else if (e->state == UNSENT)
            finish_fmt(a, e, WK_EIO, "handle closed");
    }
    close_link(a);
    a->in_process = true;
    a->closing = true;
    flush(a);
    for (size_t i = 0; i < a->count; i++) {
        free(at(a, i)->heap_spans);
        free(at(a, i)->msg);
    }
    free(a->ring);
    free(a->store.data);
    free(a->scratch.data);
    free(a->argv);
    free(a->argvlen);
    wk_db_close(a->db);
    free(a);
}

wk_processor *wk_async_with(wk_async *a, wk_async_done_fn done, void *arg)
{
    if (!a)
        return NULL;
    a->done = done;
    a->done_arg = arg;
    return &a->proc;
}

void wk_async_set_watch(wk_async *a, wk_async_watch_fn watch, void *arg)
{
    if (!a)
        return;
    a->watch = watch;
    a->watch_arg = arg;
    a->seen_fd = -2; /* report the current state at once */
    update_watch(a);
}

/* Keep store from growing without bound under a steady load: once the
 * finished front is more than half of it, move the rest down. */
static void compact(wk_async *a)
{
    if (a->count == 0)
        return;
    size_t base = at(a, 0)->start;
    for (size_t i = 0; i < a->count; i++) {
        const entry *e = at(a, i);
        if ((e->state == UNSENT || e->state == SENT) && e->start < base)
            base = e->start;
    }
    if (base == 0 || base < a->store.cap / 2 || base > a->wpos)
        return;
    memmove(a->store.data, a->store.data + base, a->store.len - base);
    a->store.len -= base;
    a->wpos -= base;
    for (size_t i = 0; i < a->count; i++) {
        entry *e = at(a, i);
        if (e->start >= base) {
            e->start -= base;
            e->end -= base;
        } else {
            e->start = e->end = 0;
        }
    }
}

void wk_async_process(wk_async *a, unsigned ready)
{
    if (!a || a->in_process)
        return;
    a->in_process = true;
    step(a, ready);
    flush(a);
    /* Callbacks may have queued more: send it in this turn. */
    if (a->state == READY && a->wpos < a->store.len)
        write_queued(a);
    else if (a->state == DOWN)
        step(a, 0);
    a->in_process = false;
    compact(a);
    if (any_final(a)) {
        a->in_process = true;
        flush(a);
        a->in_process = false;
    }
    update_watch(a);
}

size_t wk_async_pending(const wk_async *a)
{
    if (!a)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < a->count; i++) {
        unsigned char s = a->ring[(a->head + i) % a->cap].state;
        n += s != CALLED;
    }
    return n;
}

const wk_cap *wk_async_capability(const wk_async *a)
{
    return a ? a->db->cap : NULL;
}

const char *wk_async_errmsg(const wk_async *a)
{
    return a ? a->errmsg : "no handle";
}
