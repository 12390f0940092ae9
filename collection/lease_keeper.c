/*
 * collection/lease_keeper.c — the lease keeper: a heartbeat thread with its
 * own wk_db that extends a Lock / RwLock token every period, and the
 * lost-lease rule of lease_keeper.h (a sticky atomic flag plus a
 * conservative `valid_until` that the poll checks against the clock — the
 * library's CLOCK_BOOTTIME clock, core/clock.c, so a suspend counts).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <wakuwaku/lease_keeper.h>
#include <wakuwaku/rwlock.h>

#include "core/core_internal.h"

/* Marks lost_status as not yet decided (status codes are ≤ 0). */
#define STATUS_UNSET 1

/* The loss rule's allowances for a TTL (lease_keeper.h): the clock drift
 * between us and the server, and the least time left for an extension's
 * reply between its send and valid_until. */
static int64_t drift_for(int64_t ttl)
{
    return ttl / 100 + 2;
}

static int64_t reply_allowance_for(int64_t ttl)
{
    int64_t r = ttl / 10;
    return r > 50 ? 50 : r < 1 ? 1 : r;
}

/* The longest period whose extensions the rule can confirm in time. */
static int64_t max_period_for(int64_t ttl)
{
    return ttl - drift_for(ttl) - reply_allowance_for(ttl);
}

struct wk_lease_keeper {
    /* Set up by start, read-only afterwards. */
    wk_db *db; /* used by the heartbeat thread, then by halt after join; NULL after halt */
    wk_lease_kind kind;
    wk__held held; /* the entity and name, copied */
    wk_token token;
    int64_t ttl_ms, period_ms, retry_ms, drift_ms;
    int64_t first_sent; /* when the extension made by start was sent */
    bool release;
    wk_lease_lost_fn on_lost;
    void *ctx;

    /* Shared with any thread, lock-free. */
    atomic_bool lost;
    atomic_int lost_status; /* STATUS_UNSET until decided */
    atomic_int last_error;  /* last connection error of an extension, WK_OK after a success */
    atomic_int_least64_t valid_until;
    atomic_uint_least64_t extensions;

    /* The heartbeat thread and its wake-up. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool stopping; /* under mu */
    bool has_thread;
    pthread_t thread;

    /* After halt: what it found, for later calls. */
    bool halted;
    int halt_status;
    wk_lease_outcome outcome;
};

/* Decide the loss once; the first caller's status wins. */
static void mark_lost(wk_lease_keeper *k, int status)
{
    int expected = STATUS_UNSET;
    atomic_compare_exchange_strong(&k->lost_status, &expected, status);
    atomic_store(&k->lost, true);
}

/* The status to report when the lease ran out of time rather than being
 * refused: the error that kept extensions from succeeding, if any. */
static int timeout_status(const wk_lease_keeper *k)
{
    int e = atomic_load(&k->last_error);
    return e != WK_OK ? e : WK_ETIMEDOUT;
}

bool wk_lease_keeper_lost(wk_lease_keeper *k)
{
    if (!k)
        return true;
    if (atomic_load(&k->lost))
        return true;
    if (wk__boot_ms() >= atomic_load(&k->valid_until)) {
        mark_lost(k, timeout_status(k));
        return true;
    }
    return false;
}

int wk_lease_keeper_status(const wk_lease_keeper *k)
{
    if (!k || !atomic_load(&k->lost))
        return WK_OK;
    int s = atomic_load(&k->lost_status);
    return s == STATUS_UNSET ? WK_OK : s;
}

int64_t wk_lease_keeper_valid_until(wk_lease_keeper *k)
{
    if (wk_lease_keeper_lost(k))
        return 0;
    return atomic_load(&k->valid_until);
}

/* The extend and the release of each kind of lease a keeper holds (by
 * wk_lease_kind). */
typedef int (*lease_fn)(wk_processor *p, const wk_entity *e, wk_name name, const wk_token *token,
                        bool *ok);
static const struct {
    lease_fn extend, release;
} lease_ops[] = {
    [WK_LEASE_LOCK] = {wk_lock_extend, wk_lock_release},
    [WK_LEASE_WRITE] = {wk_rwlock_extend_write, wk_rwlock_release_write},
    [WK_LEASE_READ] = {wk_rwlock_extend_read, wk_rwlock_release_read},
};

static int extend(wk_lease_keeper *k, bool *extended)
{
    return lease_ops[k->kind].extend(wk_db_processor(k->db), &k->held.entity, k->held.name,
                                     &k->token, extended);
}

static int release(wk_lease_keeper *k, bool *released)
{
    return lease_ops[k->kind].release(wk_db_processor(k->db), &k->held.entity, k->held.name,
                                      &k->token, released);
}

/* Wait on the keeper's condition until `when` (wk__boot_ms) or a signal.
 * Across a suspend it wakes late; lost() does not depend on this thread. */
static void wait_until(wk_lease_keeper *k, int64_t when)
{
    struct timespec ts;
    wk__cond_abstime(when, &ts);
    pthread_cond_timedwait(&k->cond, &k->mu, &ts);
}

static void *heartbeat(void *arg)
{
    wk_lease_keeper *k = arg;
    int64_t next = k->first_sent + k->period_ms;
    pthread_mutex_lock(&k->mu);
    while (!k->stopping && !wk_lease_keeper_lost(k)) {
        int64_t vu = atomic_load(&k->valid_until);
        int64_t wake = next < vu ? next : vu;
        if (wk__boot_ms() < wake) {
            wait_until(k, wake);
            continue; /* re-check stop, loss and the time */
        }
        /* Time to extend. The handle is this thread's alone; stop() only
         * touches it after joining us, so no lock is needed around it. */
        pthread_mutex_unlock(&k->mu);
        bool extended = false;
        int64_t sent = wk__boot_ms();
        int rc = extend(k, &extended);
        int64_t now = wk__boot_ms();
        pthread_mutex_lock(&k->mu);
        if (now >= vu) {
            /* The reply came after the lease could have run out: whatever
             * it says, "held" would have been a guess for a while. */
            if (rc != WK_OK && wk_is_connection_error(rc))
                atomic_store(&k->last_error, rc);
            mark_lost(k, rc == WK_OK && !extended ? WK_OK : timeout_status(k));
        } else if (rc == WK_OK && extended) {
            atomic_store(&k->valid_until, wk__add_ms(sent, k->ttl_ms - k->drift_ms));
            atomic_store(&k->last_error, WK_OK);
            atomic_fetch_add(&k->extensions, 1);
            next = sent + k->period_ms;
        } else if (rc == WK_OK) {
            mark_lost(k, WK_OK); /* the key is gone or holds another token */
        } else if (wk_is_connection_error(rc) || rc == WK_ENOTREPLICATED) {
            /* WK_EUNKNOWN: the extension may have restarted the TTL, or
             * not; WK_ENOTREPLICATED (lease_replicas): it did, on the
             * primary only. Either way valid_until stays at the last
             * confirmed one. */
            atomic_store(&k->last_error, rc);
            next = now + k->retry_ms; /* retry while the lease may still run */
        } else {
            mark_lost(k, rc); /* denied, Redis error, …: retrying will not help */
        }
    }
    pthread_mutex_unlock(&k->mu);
    if (atomic_load(&k->lost) && k->on_lost)
        k->on_lost(k->ctx, wk_lease_keeper_status(k));
    return NULL;
}

static void keeper_free(wk_lease_keeper *k)
{
    if (!k)
        return;
    wk_db_close(k->db);
    wk__held_free(&k->held);
    free(k);
}

/* The entity kind a lease kind needs, or NULL for an unknown one. */
static const char *kind_of(wk_lease_kind kind)
{
    return kind == WK_LEASE_LOCK                             ? WK_KIND_LOCK
           : kind == WK_LEASE_WRITE || kind == WK_LEASE_READ ? WK_KIND_RWLOCK
                                                             : NULL;
}

/* Check the options of start; on success *period is the period to use. */
static int check_options(const wk_lease_keeper_options *opts, int64_t *period, char *err,
                         size_t errlen)
{
    if (!opts || !opts->db || !opts->entity)
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "lease keeper: options, db and entity are required");
    const wk_entity *e = opts->entity;
    const char *kind = kind_of(opts->kind);
    if (!kind)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "lease keeper: unknown lease kind %d",
                              (int)opts->kind);
    char why[WK_ENTITY_MSG_MAX];
    if (wk_entity_check_msg(e, why, sizeof(why)) != WK_OK)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "lease keeper: invalid %s entity: %s", kind,
                              why);
    if (strcmp(e->kind, kind) != 0)
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "lease keeper: the entity must be a valid %s entity", kind);
    int64_t ttl = e->ttl_ms, limit = max_period_for(ttl);
    if (limit < 1)
        return wk__errbuf_set(
            err, errlen, WK_EINVAL,
            "lease keeper: ttl_ms %lld is too short to keep alive: an extension must be "
            "confirmed within ttl − drift (%lld ms) − %lld ms for its reply",
            (long long)ttl, (long long)drift_for(ttl), (long long)reply_allowance_for(ttl));
    if (opts->period_ms < 0)
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "lease keeper: period_ms %lld must be ≥ 0 (0: ttl_ms / 3)",
                              (long long)opts->period_ms);
    int64_t p = opts->period_ms ? opts->period_ms : ttl / 3;
    if (p < 1)
        p = 1;
    if (p > limit)
        return wk__errbuf_set(
            err, errlen, WK_EINVAL,
            "lease keeper: period_ms %lld must be ≤ %lld for ttl_ms %lld (ttl − drift %lld "
            "ms − %lld ms for the extension's reply: a later extension could not be "
            "confirmed before the lease may have run out)",
            (long long)p, (long long)limit, (long long)ttl, (long long)drift_for(ttl),
            (long long)reply_allowance_for(ttl));
    if (opts->name.type == WK_NAME_BYTES && !opts->name.bytes && opts->name.len)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "lease keeper: name bytes are NULL");
    *period = p;
    return WK_OK;
}

/* The keeper's own connection. One stuck command must not hold the
 * heartbeat up past a period, nor past the moment its reply would come
 * too late to count (an extension sent on time must be confirmed before
 * valid_until); but a command always gets 50 ms. */
static int open_db(wk_lease_keeper *k, const wk_db_options *opts, char *err, size_t errlen)
{
    wk_db_options o = *opts;
    int64_t budget = k->ttl_ms - k->drift_ms - k->period_ms; /* ≥ the reply allowance */
    int64_t cap64 = k->period_ms < budget ? k->period_ms : budget;
    int cap = cap64 > 50 ? (cap64 > 1000000 ? 1000000 : (int)cap64) : 50;
    if (o.command_timeout_ms > cap)
        o.command_timeout_ms = cap;
    if (o.connect_timeout_ms > cap)
        o.connect_timeout_ms = cap;
    return wk_db_open(&k->db, &o, err, errlen);
}

/* A keeper set up from checked options, not yet connected. */
static wk_lease_keeper *keeper_new(const wk_lease_keeper_options *opts, int64_t period)
{
    wk_lease_keeper *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    if (wk__held_init(&k->held, opts->entity, kind_of(opts->kind), &opts->name) != WK_OK) {
        free(k);
        return NULL;
    }
    /* Only the kind and the TTL matter to a lock's queries. */
    k->held.entity =
        (wk_entity){.kind = k->held.entity.kind, .ns = k->held.ns, .ttl_ms = opts->entity->ttl_ms};
    k->kind = opts->kind;
    k->token = opts->token;
    k->ttl_ms = opts->entity->ttl_ms;
    k->period_ms = period;
    k->retry_ms = period / 4 > 10 ? period / 4 : 10;
    k->drift_ms = drift_for(k->ttl_ms);
    k->release = opts->release;
    k->on_lost = opts->on_lost;
    k->ctx = opts->ctx;
    atomic_init(&k->lost, false);
    atomic_init(&k->lost_status, STATUS_UNSET);
    atomic_init(&k->last_error, WK_OK);
    atomic_init(&k->valid_until, 0);
    atomic_init(&k->extensions, 0);
    return k;
}

/* The first extension: proves the token still holds the lease and starts
 * the valid_until clock from a send time we know. *extended false: the
 * lease is gone (the keeper is marked lost). */
static int first_extension(wk_lease_keeper *k, bool *extended, char *err, size_t errlen)
{
    *extended = false;
    int64_t sent = wk__boot_ms();
    int rc = extend(k, extended);
    if (rc != WK_OK)
        return wk__errbuf_set(err, errlen, rc, "lease keeper: first extension failed: %s",
                              wk_db_errmsg(k->db));
    if (!*extended) {
        mark_lost(k, WK_OK);
        return WK_OK;
    }
    k->first_sent = sent;
    atomic_store(&k->valid_until, wk__add_ms(sent, k->ttl_ms - k->drift_ms));
    atomic_store(&k->extensions, 1);
    return WK_OK;
}

static int start_thread(wk_lease_keeper *k, char *err, size_t errlen)
{
    if (wk__sync_init(&k->mu, &k->cond) != WK_OK)
        return WK_ENOMEM;
    if (pthread_create(&k->thread, NULL, heartbeat, k) != 0) {
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cond);
        return wk__errbuf_set(err, errlen, WK_ENOMEM,
                              "lease keeper: cannot start the heartbeat thread");
    }
    k->has_thread = true;
    return WK_OK;
}

int wk_lease_keeper_start(wk_lease_keeper **out, const wk_lease_keeper_options *opts, char *err,
                          size_t errlen)
{
    wk__errbuf_set(err, errlen, WK_OK, "%s", "");
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    int64_t period;
    int rc = check_options(opts, &period, err, errlen);
    if (rc != WK_OK)
        return rc;
    wk_lease_keeper *k = keeper_new(opts, period);
    if (!k)
        return WK_ENOMEM;
    bool extended = false;
    rc = open_db(k, opts->db, err, errlen);
    if (rc == WK_OK)
        rc = first_extension(k, &extended, err, errlen);
    if (rc == WK_OK && extended)
        rc = start_thread(k, err, errlen);
    if (rc != WK_OK) {
        keeper_free(k);
        return rc;
    }
    *out = k;
    return WK_OK;
}

/* Stop the heartbeat, judge the lease, release it if asked, close the
 * connection; once (later calls return the first one's result). *own:
 * called from the keeper's own thread, nothing done. */
static int halt(wk_lease_keeper *k, bool *own)
{
    *own = false;
    if (k->halted)
        return k->halt_status;
    if (k->has_thread) {
        if (pthread_equal(pthread_self(), k->thread)) {
            *own = true;
            return WK_EINVAL;
        }
        pthread_mutex_lock(&k->mu);
        k->stopping = true;
        pthread_cond_signal(&k->cond);
        pthread_mutex_unlock(&k->mu);
        pthread_join(k->thread, NULL);
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cond);
        k->has_thread = false;
    }
    /* Judge the lease as of now, before a release ends it on purpose. */
    bool lost = wk_lease_keeper_lost(k);
    int rc = WK_OK;
    bool released = false;
    if (k->release)
        rc = release(k, &released);
    wk_db_close(k->db);
    k->db = NULL;
    k->outcome = (wk_lease_outcome){.lost = lost,
                                    .lost_status = wk_lease_keeper_status(k),
                                    .extensions = atomic_load(&k->extensions),
                                    .released = rc == WK_OK && released};
    k->halted = true;
    k->halt_status = rc;
    return rc;
}

int wk_lease_keeper_halt(wk_lease_keeper *k, wk_lease_outcome *outcome)
{
    if (outcome)
        memset(outcome, 0, sizeof(*outcome));
    if (!k)
        return WK_OK;
    bool own;
    int rc = halt(k, &own);
    if (outcome && !own)
        *outcome = k->outcome;
    return rc;
}

void wk_lease_keeper_free(wk_lease_keeper *k)
{
    if (!k)
        return;
    bool own;
    halt(k, &own);
    if (own)
        return; /* called from its on_lost: freeing now would pull the floor away */
    keeper_free(k);
}

int wk_lease_keeper_stop(wk_lease_keeper *k, wk_lease_outcome *outcome)
{
    /* The deprecated pair in one call (halt is idempotent). */
    int rc = wk_lease_keeper_halt(k, outcome);
    wk_lease_keeper_free(k);
    return rc;
}

int wk_lease_keeper_run(const wk_lease_keeper_options *opts, wk_lease_work_fn work, void *arg,
                        wk_lease_outcome *outcome, char *err, size_t errlen)
{
    if (!outcome || !work)
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "lease keeper: work and outcome are required");
    memset(outcome, 0, sizeof(*outcome));
    wk_lease_keeper *k;
    int rc = wk_lease_keeper_start(&k, opts, err, errlen);
    if (rc != WK_OK)
        return rc;
    bool ran = false;
    int work_status = WK_OK;
    if (!wk_lease_keeper_lost(k)) {
        ran = true;
        work_status = work(k, arg);
    }
    rc = wk_lease_keeper_halt(k, outcome);
    wk_lease_keeper_free(k);
    outcome->ran = ran;
    outcome->work_status = work_status;
    return rc;
}
