/*
 * core/async.c — the event-loop handle (wakuwaku/async.h): an adapter
 * over the one machine every handle shares: the exchange machine
 * (core/exchange.h, continuous mode) sets up each connection it needs
 * (dial, TLS, AUTH / HELLO / SELECT, the Sentinel search: this file only
 * says where to and takes what was made) and stages, writes, reads and
 * judges the queries by the rules of every exchange. It is stepped from
 * wk_async_process(); its wants are what the loop is shown
 * (core/async_wait.c: the watch).
 *
 * Each connection is a lane (core/async_internal.h): the handle's own,
 * and, once something waits, the waits lane of core/async_wait.c. A lane
 * wraps a wk_db that is never connected the blocking way: the main
 * lane's settings, capability, script hashes and detail message are the
 * handle's. A query is admitted and kept formatted when submitted
 * (core/kept.c, as a batch's); entry i holds query i's callback.
 *
 * Callbacks run only from wk_async_process() and wk_async_close(), from
 * flush(), after the state is consistent: a callback may submit (the
 * arrays may grow under it, so nothing holds pointers across a callback).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wakuwaku/clock.h>

#include "core/async_cluster.h"

/* The machine settled query i of a lane (its callback runs later, in
 * flush()). */
static void settled(void *arg, size_t i, int status, const char *msg)
{
    wk__async_lane *l = arg;
    wk__async_entry *e = &l->e[i];
    l->nfinal++;
    e->state = WK__FINAL;
    e->status = status;
    e->msg = status != WK_OK && msg && msg[0] ? strdup(msg) : NULL;
}

/* Run the callbacks of a lane's settled queries, in submission order. A
 * callback may submit: entries are found by index again after each one. */
static bool flush_lane(wk__async_lane *l)
{
    bool ran = false;
    for (size_t i = 0; i < l->x.count && l->nfinal; i++) {
        wk__async_entry *e = &l->e[i];
        if (e->state != WK__FINAL)
            continue;
        e->state = WK__CALLED;
        l->nfinal--;
        wk_async_done_fn done = e->done;
        void *arg = e->arg;
        int status = e->status;
        char msg[WK__ERRMSG_MAX];
        wk__copy_text(msg, sizeof(msg), e->msg ? e->msg : "");
        free(e->msg);
        e->msg = NULL;
        ran = true;
        if (done)
            done(l->a, status, msg, arg);
    }
    return ran;
}

/* Every settled callback of every lane, and the parked waiters whose
 * turn came: what they submit may settle more (a refusal while closing). */
static void flush(wk_async *a)
{
    for (bool more = true; more;) {
        more = false;
        for (int i = 0; i < a->nlanes; i++)
            more |= flush_lane(&a->lane[i]);
        more |= wk__async_waits_fire(a);
    }
}

/* Let the completed front go, once it is most of what is kept (or all). */
static void compact(wk__async_lane *l)
{
    size_t n = 0;
    while (n < l->x.count && l->e[n].state == WK__CALLED)
        n++;
    if (n == 0 || (n < l->x.count && (n < 32 || 2 * n < l->x.count)))
        return;
    wk__engine_shift(&l->m, n);
    wk__kept_drop_front(&l->k, n);
    memmove(l->e, l->e + n, (l->k.count) * sizeof(*l->e));
    l->x.count = l->k.count;
}

/* The exchange is about to close the connection: keep why. */
static void conn_closing(void *arg)
{
    wk__async_lane *l = arg;
    wk_async *a = l->a;
    wk__copy_text(a->errmsg, sizeof(a->errmsg), l->m.why);
    a->db->errmsg[0] = '\0'; /* the newer failure is the handle's message */
    wk__async_fd_gone(l);
}

/* ---- the connection: where to, and what was made ------------------------- */

static void setup_begin(void *arg, wk__setup *s)
{
    wk__async_lane *l = arg;
    const char *host = NULL; /* the URL's target, or a cluster's map lane's pick */
    int port = wk__async_cluster_target(l, &host);
    wk__setup_begin(s, l->db->conn, host, port, host ? 0 : WK__SETUP_SELECT, 0);
}

/* The set-up ended: the connection is the lane's (a cluster node's: the
 * handle becomes a cluster handle), or the failure is the handle's. */
static int setup_done(void *arg, wk__setup *s)
{
    wk__async_lane *l = arg;
    wk_async *a = l->a;
    int rc = s->rc;
    if (rc || s->cluster)
        a->db->errmsg[0] = '\0'; /* the newer failure is the handle's message */
    if (rc)
        wk__copy_text(a->errmsg, sizeof(a->errmsg), s->msg);
    else if (s->cluster)
        rc = wk__async_cluster_found(l, s); /* core/async_cluster.c */
    if (rc) {
        wk__async_fd_gone(l);
        wk__copy_text(s->msg, sizeof(s->msg), a->errmsg);
        return rc;
    }
    if (!l->db->conn->cluster) /* else the map lane took it */
        wk__setup_take(s, &l->db->conn->link, NULL);
    l->db->conn->last_io_ms = wk_monotonic_ms();
    return WK_OK;
}

static void fd_gone(void *arg, uint16_t lane)
{
    if (lane == WK__NO_NODE)
        wk__async_fd_gone(arg);
    else
        wk__async_cluster_node_gone(((wk__async_lane *)arg)->a, lane);
}

/* Move a lane's connection and queries as far as they go now. */
static void advance(wk__async_lane *l, short ev)
{
    for (int guard = 0; guard < 8; guard++) {
        if (l->db->conn->cluster)
            wk__async_cluster_ready(l); /* the nodes' events */
        else
            wk__engine_ready(&l->m, 0, ev);
        ev = 0;
        wk__xwant w = wk__engine_step(&l->m);
        if (l->a->closing || !wk__async_cluster_want(l, w))
            return;
    }
}

void wk__async_lane_init(wk__async_lane *l, wk_async *a, wk_db *db)
{
    l->a = a;
    l->db = db;
    db->loop = a;
    l->reg_fd = -1;
    l->x = (wk__exchange){.db = db, .query = wk__kept_query, .ctx = &l->k};
    wk__engine_open(&l->m, &l->x, settled, conn_closing, l);
    l->m.setup_begin = setup_begin;
    l->m.setup_done = setup_done;
    l->m.fd_gone = fd_gone;
}

/* Complete what is queued (by the outcome rules) and close the lane's
 * connection; the callbacks run in the next flush(). */
static void lane_cancel(wk__async_lane *l)
{
    wk__engine_cancel(&l->m, WK_EIO, "handle closed"); /* and its set-ups */
    wk__async_fd_gone(l);
    wk__conn_drop(l->db->conn);
}

void wk__async_lane_free(wk__async_lane *l)
{
    for (size_t i = 0; i < l->x.count; i++)
        free(l->e[i].msg);
    free(l->e);
    wk__kept_free(&l->k);
    wk_db_close(l->db);
}

/* ---- the public calls --------------------------------------------------- */

int wk__async_lane_submit(wk__async_lane *l, wk_query *q, wk_async_done_fn done, void *arg)
{
    wk_async *a = l->a;
    if (!q)
        return WK_EINVAL;
    wk_db *db = l->db;
    db->errmsg[0] = '\0';
    if (!q->name)
        q->name = "query";
    if (a->closing) /* from a callback run by wk_async_close() */
        return wk__db_fail(db, WK_EIO, "%s: the handle is closing (not sent)", q->name);
    int rc = wk__db_admit(db, q);
    if (!rc && wk__grow_array(&l->e, &l->e_cap, l->k.count + 1, sizeof(*l->e)))
        rc = wk__db_fail(db, WK_ENOMEM, "%s: out of memory queuing", q->name);
    if (!rc)
        rc = wk__kept_add(&l->k, db, q);
    if (rc)
        return rc;
    l->e[l->x.count] = (wk__async_entry){.done = done, .arg = arg};
    /* A query already waiting to be staged: the loop was shown what it
     * needs (by the submission that queued it, or the turn's end). */
    bool shown = l->m.scan < l->x.count;
    l->x.slots = l->k.slots;
    l->x.count = l->k.count;
    if (a->in_process || shown)
        return WK_OK; /* the turn's end shows the loop what changed */
    wk__engine_dial(&l->m); /* when it has no connection */
    wk__async_update_watch(a);
    return WK_OK;
}

static int async_submit(wk_processor *self, wk_query *q)
{
    wk_async *a = (wk_async *)self;
    return wk__async_lane_submit(&a->lane[WK__LANE_MAIN], q, a->done, a->done_arg);
}

/* A handle whose db is made: its processor, its lane, connecting. */
/* Its main lane, connecting; a seed list is a cluster's: its map lane
 * dials the seeds. On failure the caller frees the lane. */
static int async_start(wk_async *a, char *err, size_t errlen)
{
    a->proc.process = async_submit;
    a->proc.db = a->db;
    a->proc.flags = WK_PROCESSOR_DEFERRED;
    a->seen_fd = -1;
    a->seen_due = -1;
    a->epfd = -1;
    a->nlanes = 1;
    wk__async_lane_init(&a->lane[WK__LANE_MAIN], a, a->db);
    int rc = a->db->conn->url.nseeds ? wk__async_cluster_open(a, err, errlen) : WK_OK;
    if (rc)
        return rc;
    if (!a->cl)
        wk__engine_dial(&a->lane[WK__LANE_MAIN].m);
    return WK_OK;
}

int wk_async_open(wk_async **out, const wk_db_options *opts, char *err, size_t errlen)
{
    if (!out)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "out is NULL");
    *out = NULL;
    wk_async *a = calloc(1, sizeof(*a));
    if (!a)
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "out of memory");
    int rc = wk__db_new(&a->db, opts, err, errlen);
    if (rc) {
        free(a);
        return rc;
    }
    rc = async_start(a, err, errlen);
    if (rc) {
        wk__async_lane_free(&a->lane[WK__LANE_MAIN]); /* and a->db */
        free(a);
        return rc;
    }
    *out = a;
    return WK_OK;
}

wk_async *wk__async_adopt(wk_db *db)
{
    wk_async *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->db = db;
    if (async_start(a, NULL, 0) != WK_OK) {
        a->lane[WK__LANE_MAIN].db = NULL; /* still the caller's */
        wk__async_lane_free(&a->lane[WK__LANE_MAIN]);
        free(a);
        return NULL;
    }
    return a;
}

void wk_async_close(wk_async *a)
{
    if (!a)
        return;
    /* What is still queued completes now, by the outcome rules; then the
     * parked waiters (their wait: WK_EIO). */
    for (int i = 0; i < a->nlanes; i++)
        lane_cancel(&a->lane[i]);
    a->in_process = true;
    a->closing = true;
    flush(a);
    wk__async_subs_close(a);
    wk__async_ports_close(a);
    wk__async_waits_close(a);
    flush(a);
    wk__async_cluster_close(a);
    for (int i = a->nlanes - 1; i >= 0; i--)
        wk__async_lane_free(&a->lane[i]);
    if (a->epfd >= 0)
        close(a->epfd);
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
    wk__async_update_watch(a);
}

void wk_async_process(wk_async *a, unsigned ready)
{
    if (!a || a->in_process)
        return;
    a->in_process = true;
    short ev[2] = {0, 0};
    wk__async_ready(a, ready, ev);
    for (int i = 0; i < a->nlanes; i++)
        advance(&a->lane[i], ev[i]);
    flush(a);
    wk__async_subs_run(a);
    wk__async_ports_run(a);
    /* Callbacks may have queued more: send it in this turn. */
    for (int i = 0; i < a->nlanes; i++)
        advance(&a->lane[i], 0);
    flush(a);
    a->in_process = false;
    for (int i = 0; i < a->nlanes; i++)
        compact(&a->lane[i]);
    wk__async_update_watch(a);
}

size_t wk_async_pending(const wk_async *a)
{
    /* The main lane's queries, the waits parked between attempts, and
     * the receives outstanding on the hidden handles (core/async_sub.c). */
    size_t n = a ? wk__async_parked(a) + wk__async_subs_pending(a) + wk__async_ports_pending(a) : 0;
    const wk__async_lane *l = a ? &a->lane[WK__LANE_MAIN] : NULL;
    for (size_t i = 0; l && i < l->x.count; i++)
        n += l->e[i].state != WK__CALLED;
    return n;
}

const wk_cap *wk_async_capability(const wk_async *a)
{
    return a ? a->db->cap : NULL;
}

const char *wk_async_errmsg(const wk_async *a)
{
    /* A refused call's detail (on the handle's processor, cleared when a
     * call is accepted), else the last connection failure. */
    if (!a)
        return "no handle";
    return a->db->errmsg[0] ? a->db->errmsg : a->errmsg;
}
