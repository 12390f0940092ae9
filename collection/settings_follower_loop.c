/*
 * collection/settings_follower_loop.c — the settings follower through an
 * event-loop handle (wk_settings_follower_start_async()). Same follower,
 * same mirror, same rules as the thread form (settings_follower.c, whose
 * judging, load and catch-up steps this file calls): only the waiting
 * differs. Nothing here blocks: the subscription is a loop subscriber
 * (core/async_subscriber.h: a hidden connection of the handle, in its
 * epoll set), the loads and checks are queries on the handle's own
 * connection, and every step runs from wk_async_process() — when the
 * subscription is confirmed or fails, when messages came, when a read
 * completes, or at the time asked for (the periodic check, the end of a
 * catch-up's wait, the end of a backoff).
 *
 * The steps, as the thread's loop:
 *   LOCATING     a cluster handle's: the head read through the handle
 *                (routed by its map, which the read brings up to date:
 *                a MOVED patches it, a lost node has it asked anew), then
 *                the node the map names for the settings' slot;
 *   SUBSCRIBING  a new subscriber, SUBSCRIBE on its way (on a cluster, a
 *                plain connection to that node);
 *   LOADING      confirmed: the map read in chunks while messages queue;
 *   CATCHING_UP  the chunks brought to the last one's version with the
 *                queued changes (waiting up to the command timeout for
 *                those not received yet), then installed;
 *   FOLLOWING    each message judged: applied, a reload, or a check;
 *                every check_ms a check;
 *   CHECKING     the version and epoch being read;
 *   BACKOFF      a failed sync waits, then subscribes anew;
 *   HALTED       halted, or the handle closed.
 * On a cluster, the follower stays with the slot's owner: when a check's
 * head read (a MOVED followed by the handle) leaves the map naming
 * another node for the slot — a failover, a slot moved — it subscribes
 * there and loads again, as after a lost subscription.
 * A load or check in flight when the follower halts is orphaned: its
 * completion frees it and reaches nobody.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/clock.h>
#include <wakuwaku/settings.h>

#include "collection/settings_follower_internal.h"
#include "core/async_internal.h"
#include "core/cluster.h"
#include "core/core_internal.h"
#include "core/async_subscriber.h"

enum step { LOCATING, SUBSCRIBING, LOADING, CATCHING_UP, FOLLOWING, CHECKING, BACKOFF, HALTED };

typedef struct wk__sf_loop wk__sf_loop;

/* A read of the follower's: a load's chunks, or a check's head. */
typedef struct sf_req {
    wk_processor proc; /* first member: submits with this request as arg */
    wk__sf_loop *owner; /* NULL: orphaned */
    bool inflight, check, periodic;
    bool locate;        /* LOCATING's head read: its reply only proves the route */
    bool role, primary; /* a check on a Sentinel URL asks ROLE first */
    wk__sf_load load;
    wk__settings_chunk_out out;
    wk__settings_head head;
} sf_req;

struct wk__sf_loop {
    wk_settings_follower *f;
    wk_async *a;       /* NULL once it closed */
    wk__loop_sub *sub; /* the subscription (kept while backing off: its timer) */
    enum step step;
    sf_req *req;            /* the load or check under way, or NULL */
    wk_async_done_fn done;  /* the start's completion, until it ran */
    void *done_arg;
    bool initial;           /* the first sync: its end is the start's completion */
    int attempts, backoff;  /* loads started over; the next pause */
    int64_t until;          /* CATCHING_UP, BACKOFF: the step's time */
    struct sf_wait *waits;  /* wk_settings_follower_wait_async()'s, in order */
    size_t nwaits, waits_cap;
    unsigned slot;          /* the settings' slot (the channel's hash tag) */
    char host[256];         /* the node subscribed on (a cluster handle), and its port */
    int port;
    int depth;  /* inside the follower's steps (callbacks run there) */
    bool freed; /* freed from a callback: done once the steps return */
};

/* A wait for a version (wk_settings_follower_wait_async()). */
typedef struct sf_wait {
    int64_t version, until; /* until: wk__boot_ms() (0: no limit) */
    wk_async_done_fn done;
    void *arg;
} sf_wait;

static void drain(wk__sf_loop *L);
static void load_start(wk__sf_loop *L);

/* Ask the subscriber's timer for the step's time and the first wait's;
 * the follower counts in wk_async_pending() while its start or a wait is
 * outstanding. */
static void rearm(wk__sf_loop *L)
{
    if (!L->sub)
        return;
    wk__loop_sub_busy(L->sub, L->done || L->nwaits);
    int64_t when = L->step == CATCHING_UP || L->step == BACKOFF ? L->until
                   : L->step == FOLLOWING && L->f->check_ms ? L->f->next_check_ms
                                                            : 0;
    for (size_t i = 0; i < L->nwaits; i++) {
        int64_t u = L->waits[i].until;
        if (u && (!when || u < when))
            when = u;
    }
    wk__loop_sub_wake_at(L->sub, when);
}

/* Run the waits whose version the mirror reached or whose time is up
 * (each removed before its callback, which may wait again). */
static void fire_waits(wk__sf_loop *L)
{
    for (size_t i = 0; i < L->nwaits;) {
        sf_wait w = L->waits[i];
        bool reached = L->f->mirror_version >= w.version;
        if (!reached && !(w.until && wk__boot_ms() >= w.until)) {
            i++;
            continue;
        }
        memmove(&L->waits[i], &L->waits[i + 1], (L->nwaits - i - 1) * sizeof(*L->waits));
        L->nwaits--;
        w.done(L->a, reached ? WK_OK : WK_ETIMEDOUT,
               reached ? "" : "settings follower: the version was not reached in time", w.arg);
        if (L->step == HALTED)
            return; /* halted from the callback: the waits were dropped */
    }
}

/* The follower's steps begin (callbacks of the user's may run inside). */
static void enter(wk__sf_loop *L)
{
    L->depth++;
}

/* They end: the waits that are due run, and a free asked for meanwhile
 * is done. */
static void leave(wk__sf_loop *L)
{
    if (L->depth == 1 && L->step != HALTED) {
        fire_waits(L);
        rearm(L);
    }
    if (--L->depth == 0 && L->freed)
        wk__sf_free(L->f);
}

/* ---- requests ----------------------------------------------------------- */

static void on_read(wk_async *a, int status, const char *msg, void *arg);

static int req_submit(wk_processor *self, wk_query *q)
{
    sf_req *r = (sf_req *)self;
    return wk__async_lane_submit(&r->owner->a->lane[WK__LANE_MAIN], q, on_read, r);
}

static sf_req *req_new(wk__sf_loop *L, bool check)
{
    sf_req *r = calloc(1, sizeof(*r));
    if (!r) {
        wk__sf_record_failure(L->f, WK_ENOMEM, "settings follower: out of memory");
        return NULL;
    }
    r->proc = (wk_processor){.process = req_submit, .db = L->a->db,
                             .flags = WK_PROCESSOR_DEFERRED};
    r->owner = L;
    r->check = check;
    L->req = r;
    return r;
}

static void req_free(sf_req *r)
{
    wk__sf_load_end(&r->load);
    free(r);
}

/* Let go of the request: orphaned when its completion is still due. */
static void drop_req(wk__sf_loop *L)
{
    sf_req *r = L->req;
    L->req = NULL;
    if (!r)
        return;
    if (r->inflight) {
        r->owner = NULL;
        r->load.f = NULL; /* its remaining entries are dropped */
    } else {
        req_free(r);
    }
}

/* ---- the sync ----------------------------------------------------------- */

/* The start's completion, once (last: it may halt or free the follower). */
static void finish_start(wk__sf_loop *L, wk_async *a, int status, const char *msg)
{
    wk_async_done_fn done = L->done;
    L->done = NULL;
    L->initial = false;
    rearm(L);
    if (done)
        done(a, status, msg, L->done_arg);
}

/* Stop following: the subscription closed, the request let go. */
static void stop(wk__sf_loop *L)
{
    wk__loop_sub_close(L->sub);
    L->sub = NULL;
    drop_req(L);
    wk__sf_queue_clear(L->f);
    L->nwaits = 0; /* their callbacks never run */
    L->step = HALTED;
    wk_settings_follower *f = L->f;
    pthread_mutex_lock(&f->mu);
    f->halted = true;
    f->stats.synced = false;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* The sync failed (the reason is recorded): the first one ends the start
 * (and the follower); later ones back off and subscribe again. */
static void sync_failed(wk__sf_loop *L)
{
    drop_req(L);
    wk__sf_queue_clear(L->f);
    if (L->initial || !L->sub) {
        char msg[sizeof(L->f->errmsg)];
        pthread_mutex_lock(&L->f->mu);
        int status = L->f->stats.last_status;
        memcpy(msg, L->f->errmsg, sizeof(msg));
        pthread_mutex_unlock(&L->f->mu);
        stop(L);
        finish_start(L, L->a, status ? status : WK_EIO, msg);
        return;
    }
    L->step = BACKOFF;
    L->until = wk__boot_ms() + L->backoff;
    L->backoff = wk__sf_backoff_next(L->f, L->backoff);
    rearm(L);
}

static void on_sub_run(void *arg);
static void on_sub_gone(void *arg);

static int on_sub_message(void *arg, const char *data, size_t len)
{
    wk__sf_loop *L = arg;
    return wk__sf_queue_push(L->f, data, len);
}

static const wk__loop_sub_fns sub_fns = {on_sub_message, on_sub_run, on_sub_gone};

/* A cluster handle (its subscriber follows the slot's owner). */
static bool on_cluster(const wk__sf_loop *L)
{
    return L->a->cl || L->a->db->conn->cluster;
}

/* Whether the map names another node for the slot than the one the
 * subscriber is on (a failover, the slot moved). */
static bool owner_changed(const wk__sf_loop *L)
{
    return on_cluster(L) && wk__sf_owner_moved(L->f, L->a->db, L->host, L->port);
}

/* A new subscriber (the old one closed), SUBSCRIBE on its way; on a
 * cluster, on the node the map names for the slot. */
static int subscribe(wk__sf_loop *L, char *err, size_t errlen)
{
    wk_settings_follower *f = L->f;
    const char *host = NULL;
    if (on_cluster(L)) {
        host = wk__sf_slot_owner(f, L->a->db, &L->port);
        if (!host)
            return wk__errbuf_set(err, errlen, WK_EIO,
                                  "settings follower: no node serves slot %u", L->slot);
        wk__copy_text(L->host, sizeof(L->host), host);
    }
    wk__loop_sub_close(L->sub);
    L->sub = NULL;
    wk__sf_queue_clear(f); /* the load covers whatever an old subscription left */
    int rc = wk__loop_sub_open_at(&L->sub, L->a, host ? L->host : NULL, L->port, f->chan,
                                  f->chan_len, f->keepalive_ms, &sub_fns, L, err, errlen);
    if (rc)
        return rc;
    wk__sf_subscribing(f);
    L->step = SUBSCRIBING;
    return WK_OK;
}

/* A cluster handle's first step of a sync: the head read through the
 * handle, whose completion subscribes where the map then names (the old
 * subscriber, if any, stays meanwhile as the follower's timer). */
static int locate(wk__sf_loop *L, char *err, size_t errlen)
{
    sf_req *r = req_new(L, true);
    if (!r)
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "settings follower: out of memory");
    r->locate = true;
    wk_settings_follower *f = L->f;
    int rc = wk__settings_read_head(&r->proc, &f->held.entity, &f->held.name, &r->head);
    if (rc) {
        drop_req(L);
        return wk__errbuf_set(err, errlen, rc, "settings follower: %s", wk_async_errmsg(L->a));
    }
    r->inflight = true;
    L->step = LOCATING;
    return WK_OK;
}

/* A sync from its first step: locate (a cluster), or subscribe. A
 * failure with no subscriber left stops the follower. */
static void resync(wk__sf_loop *L, bool locating)
{
    char err[256];
    int rc = locating ? locate(L, err, sizeof(err)) : subscribe(L, err, sizeof(err));
    if (rc) {
        wk__sf_record_failure(L->f, rc, err);
        sync_failed(L);
    }
}

static void resubscribe(wk__sf_loop *L)
{
    resync(L, on_cluster(L));
}

/* A load failed (recorded); *again: start it over, a few times. */
static void load_failed(wk__sf_loop *L, bool again)
{
    drop_req(L);
    if (again && ++L->attempts < WK__SF_LOAD_ATTEMPTS)
        load_start(L);
    else
        sync_failed(L);
}

/* Submit the request's read: the next chunk, or the head. */
static void req_send(wk__sf_loop *L)
{
    sf_req *r = L->req;
    wk_settings_follower *f = L->f;
    wk_query role;
    if (r->role)
        wk__role_query(&role, &r->primary);
    int rc = r->role    ? wk_process(&r->proc, &role)
             : r->check ? wk__settings_read_head(&r->proc, &f->held.entity, &f->held.name, &r->head)
                        : wk__settings_chunk_async(&r->proc, &f->held.entity, &f->held.name,
                                                   r->load.cursor, &r->out);
    if (!rc) {
        r->inflight = true;
        return;
    }
    wk__sf_record_failure(f, rc, L->a ? wk_async_errmsg(L->a) : "the handle closed");
    if (r->check)
        sync_failed(L);
    else
        load_failed(L, false);
}

static void load_start(wk__sf_loop *L)
{
    drop_req(L);
    sf_req *r = req_new(L, false);
    if (!r || wk__sf_load_begin(L->f, &r->load) != WK_OK) {
        sync_failed(L);
        return;
    }
    r->out = (wk__settings_chunk_out){&r->load.head, r->load.next, wk__sf_load_entry, &r->load};
    L->step = LOADING;
    req_send(L);
}

static void check_start(wk__sf_loop *L, bool periodic)
{
    sf_req *r = req_new(L, true);
    if (!r) {
        sync_failed(L);
        return;
    }
    r->periodic = periodic;
    /* On a Sentinel URL the node may have turned replica, perhaps of
     * nobody: the reads and the subscription look healthy while no change
     * of the new primary reaches them. Its reply drops the handle's
     * connection (WK__QUERY_ROLE_CHECK), and the follower syncs again. */
    r->role = periodic && L->a->db->conn->url.service;
    L->step = CHECKING;
    req_send(L);
}

/* Catch the load up with what is queued; install it when complete. */
static void catch_up(wk__sf_loop *L)
{
    wk__sf_load *l = &L->req->load;
    bool wait, again;
    int rc = wk__sf_catch_up(l, &wait, &again);
    if (!rc && wait && wk__boot_ms() >= L->until) {
        rc = wk__sf_missing(l);
        again = true;
    }
    if (rc) {
        load_failed(L, again);
        return;
    }
    if (wait) {
        rearm(L); /* or a message comes first */
        return;
    }
    wk__sf_load_install(l, L->initial);
    if (L->step != CATCHING_UP)
        return; /* halted from a change callback */
    drop_req(L);
    L->step = FOLLOWING;
    L->backoff = WK__SF_RETRY_MIN_MS;
    L->f->next_check_ms = wk__boot_ms() + L->f->check_ms;
    wk__loop_sub_kick(L->sub); /* what came after the load: next turn */
    if (L->initial) { /* as the thread form's start: what failed on the way is over */
        pthread_mutex_lock(&L->f->mu);
        L->f->stats.last_status = WK_OK;
        L->f->errmsg[0] = '\0';
        pthread_mutex_unlock(&L->f->mu);
        finish_start(L, L->a, WK_OK, "");
    }
}

static void read_done(wk__sf_loop *L, sf_req *r, int status, const char *msg);

/* A read completed (from the handle's wk_async_process() or close). */
static void on_read(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    sf_req *r = arg;
    wk__sf_loop *L = r->owner;
    r->inflight = false;
    if (!L) { /* orphaned */
        req_free(r);
        return;
    }
    enter(L);
    read_done(L, r, status, msg);
    leave(L);
}

static void read_done(wk__sf_loop *L, sf_req *r, int status, const char *msg)
{
    wk_settings_follower *f = L->f;
    if (r->locate && !status) { /* the map routes the slot: subscribe there */
        drop_req(L);
        resync(L, false);
        return;
    }
    if (r->role && (status == WK_OK || status == WK_EREDIS)) {
        r->role = false;
        if (status == WK_OK && !r->primary) {
            wk__sf_record_failure(f, WK_EIO, "settings follower: the node is no longer the primary");
            sync_failed(L);
        } else {
            req_send(L); /* the head; a refused ROLE (an ACL) proved the connection */
        }
        return;
    }
    if (status) {
        wk__sf_record_failure(f, status, msg);
        if (r->check)
            sync_failed(L);
        else
            load_failed(L, false);
        return;
    }
    if (r->check) {
        wk__sf_verdict v = wk__sf_judge_head(f, &r->head, r->periodic);
        drop_req(L);
        L->attempts = 0;
        if (owner_changed(L)) {
            resync(L, false); /* the slot's owner is another node: subscribe there, load */
        } else if (v == WK__SF_RELOAD) {
            load_start(L);
        } else {
            L->step = FOLLOWING;
            drain(L);
        }
        return;
    }
    bool done, again;
    if (wk__sf_load_chunk(&r->load, &done, &again) != WK_OK) {
        load_failed(L, again);
    } else if (!done) {
        req_send(L);
    } else {
        L->step = CATCHING_UP;
        L->until = wk__boot_ms() + f->command_timeout_ms;
        catch_up(L);
    }
}

/* ---- following ---------------------------------------------------------- */

/* Handle the queued messages by the rules, then the periodic check. */
static void drain(wk__sf_loop *L)
{
    wk_settings_follower *f = L->f;
    queued *q;
    while (L->step == FOLLOWING && (q = wk__sf_queue_pop(f))) {
        wk_settings_change c;
        wk__sf_verdict v = wk__sf_judge_message(f, q->data, q->len, &c);
        int rc = v == WK__SF_APPLY ? wk__sf_apply(f, &c) : WK_OK;
        free(q);
        L->attempts = 0;
        if (rc)
            sync_failed(L);
        else if (v == WK__SF_RELOAD)
            load_start(L);
        else if (v == WK__SF_CHECK)
            check_start(L, false);
    }
    if (L->step != FOLLOWING || !f->check_ms)
        return;
    if (wk__boot_ms() >= f->next_check_ms) {
        f->next_check_ms = wk__boot_ms() + f->check_ms;
        check_start(L, true);
        return;
    }
    rearm(L);
}

static void sub_step(wk__sf_loop *L);

/* The subscriber's run: confirmed, messages, a failure, or the time. */
static void on_sub_run(void *arg)
{
    wk__sf_loop *L = arg;
    enter(L);
    sub_step(L);
    leave(L);
}

static void sub_step(wk__sf_loop *L)
{
    const char *why;
    int failed = wk__loop_sub_failed(L->sub, &why);
    /* LOCATING: the old subscriber is only the timer, about to go. */
    if (failed && L->step != BACKOFF && L->step != HALTED && L->step != LOCATING) {
        wk__sf_record_failure(L->f, failed, why);
        sync_failed(L);
        return;
    }
    switch (L->step) {
    case SUBSCRIBING:
        if (wk__loop_sub_subscribed(L->sub)) {
            L->attempts = 0;
            load_start(L);
        }
        break;
    case CATCHING_UP:
        catch_up(L);
        break;
    case FOLLOWING:
        drain(L);
        break;
    case BACKOFF:
        wk__sf_queue_clear(L->f); /* a failed load's subscription: the next load covers it */
        if (wk__boot_ms() >= L->until)
            resubscribe(L);
        else
            rearm(L);
        break;
    default: /* LOCATING, LOADING, CHECKING: the read's completion moves on */
        break;
    }
}

/* The handle closes: the follower stops, readable; a start still under
 * way completes with WK_EIO. */
static void on_sub_gone(void *arg)
{
    wk__sf_loop *L = arg;
    static const char why[] = "settings follower: the event-loop handle closed";
    wk__sf_record_failure(L->f, WK_EIO, why);
    wk__loop_sub_close(L->sub); /* cut off already: freed */
    L->sub = NULL;
    enter(L);
    /* The waits end with WK_EIO (each may free the follower: see leave). */
    while (L->nwaits && !L->freed) {
        sf_wait w = L->waits[0];
        memmove(&L->waits[0], &L->waits[1], (L->nwaits - 1) * sizeof(*L->waits));
        L->nwaits--;
        w.done(L->a, WK_EIO, why, w.arg);
    }
    stop(L);
    wk_async *a = L->a;
    L->a = NULL;
    finish_start(L, a, WK_EIO, why);
    leave(L);
}

/* ---- the calls ---------------------------------------------------------- */

void wk__sf_loop_halt(wk_settings_follower *f)
{
    wk__sf_loop *L = f->loop;
    if (!L || L->step == HALTED)
        return;
    L->done = NULL; /* a start halted before its end: its callback never runs */
    stop(L);
}

bool wk__sf_loop_free_later(wk_settings_follower *f)
{
    wk__sf_loop *L = f->loop;
    if (!L || !L->depth)
        return false;
    L->freed = true;
    return true;
}

void wk__sf_loop_free(wk_settings_follower *f)
{
    wk__sf_loop_halt(f);
    if (f->loop)
        free(f->loop->waits);
    free(f->loop);
    f->loop = NULL;
}

int wk_settings_follower_wait_async(wk_settings_follower *f, int64_t version, int timeout_ms,
                                    wk_async_done_fn done, void *arg)
{
    wk__sf_loop *L = f ? f->loop : NULL;
    if (!L || !done)
        return WK_EINVAL; /* a thread follower: wk_settings_follower_wait() */
    if (L->step == HALTED)
        return WK_EIO;
    if (wk__grow_array(&L->waits, &L->waits_cap, L->nwaits + 1, sizeof(*L->waits)))
        return WK_ENOMEM;
    L->waits[L->nwaits++] = (sf_wait){
        .version = version,
        .until = timeout_ms < 0 ? 0 : wk__add_ms(wk__boot_ms(), timeout_ms),
        .done = done,
        .arg = arg};
    if (L->sub) /* else (locating for the start) judged once the read completed */
        wk__loop_sub_kick(L->sub); /* judged in the next turn, never inside this call */
    rearm(L);
    return WK_OK;
}

#define FAIL(status, ...) wk__errbuf_set(err, errlen, (status), "settings follower: " __VA_ARGS__)

int wk_settings_follower_start_async(wk_settings_follower **out, wk_processor *p,
                                     const wk_settings_follower_options *opts, char *err,
                                     size_t errlen)
{
    wk__errbuf_set(err, errlen, WK_OK, "%s", "");
    if (!out)
        return FAIL(WK_EINVAL, "out is NULL");
    *out = NULL;
    wk_async *a = p && p->db && (p->flags & WK_PROCESSOR_DEFERRED) ? p->db->loop : NULL;
    if (!a)
        return FAIL(WK_EINVAL, "not an event-loop handle's processor (wk_async_with())");
    const struct timeval *t = &a->db->conn->command_timeout;
    wk_settings_follower *f = NULL;
    int rc = wk__sf_new(&f, opts, (int)(t->tv_sec * 1000 + t->tv_usec / 1000), err, errlen);
    if (rc)
        return rc;
    const wk_access read = {opts->settings, WK_READ};
    wk__sf_loop *L = NULL;
    if (!wk_cap_allows(a->db->cap, &read))
        rc = FAIL(WK_EDENIED, "capability \"%s\" may not READ %s:%s", wk_cap_name(a->db->cap),
                  WK_KIND_SETTINGS, opts->settings->ns);
    else if (wk__settings_channel(a->db, &f->held.entity, &f->held.name, f->chan, WK_KEY_MAX,
                                  &f->chan_len) != WK_OK)
        rc = FAIL(WK_EINVAL, "invalid name");
    else if (sodium_init() < 0 || !(L = calloc(1, sizeof(*L))))
        rc = FAIL(WK_ENOMEM, "out of memory");
    if (!rc) {
        randombytes_buf(f->sipkey, sizeof(f->sipkey));
        *L = (wk__sf_loop){.f = f, .a = a, .done = a->done, .done_arg = a->done_arg,
                           .initial = true, .backoff = WK__SF_RETRY_MIN_MS,
                           .slot = wk__key_slot(f->chan, f->chan_len)};
        f->loop = L;
        /* A handle not connected yet may reach a cluster node: the head
         * read's route tells before anything subscribes. */
        rc = on_cluster(L) || !a->db->conn->link.ctx ? locate(L, err, errlen)
                                                     : subscribe(L, err, errlen);
        if (!rc)
            rearm(L); /* counted as pending until the start's callback */
    }
    if (rc) {
        wk__sf_free(f);
        return rc;
    }
    *out = f;
    return WK_OK;
}

#undef FAIL
