/*
 * collection/cron.c — the cron runtime: one scheduler thread deciding when
 * each job is due (at-least / after-finish / after-start), one thread per
 * run, shutdown that waits for running jobs; and the once-per-interval
 * wrapper (wk_lock_try a lease shorter than the interval, never release,
 * optionally under a lease keeper — and then cut back to its tick's end
 * when the run is over). Times are on the library's clock (core/clock.c).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <wakuwaku/cron.h>
#include <wakuwaku/lock.h>

#include "base/base.h"
#include "collection/op.h"

#define NAME_MAX_BYTES 127
#define NEVER INT64_MAX

/* ------------------------------------------------------------------------
 * State
 * ---------------------------------------------------------------------- */

typedef struct job {
    struct job *next;
    char *name;
    wk_cron_kind kind;
    int64_t interval_ms;
    wk_cron_fn fn;
    void *arg;
    /* Schedule, under the runtime's mutex. */
    int64_t next_at; /* wk__boot_ms() when the next run is due; 0: at once */
    int running;     /* runs in progress */
    uint64_t launched;
    /* wk_cron_add_once(): the lease, and how to connect. */
    bool once;
    bool keep_alive;
    wk__held lock;          /* the Lock entity and the lock's name, copied */
    wk_db_options db_opts;  /* a deep copy (wk__db_options_copy) */
    wk_db *idle_db; /* one connection kept between runs; under the mutex */
} job;

struct wk_cron_ctx {
    wk_cron *cron;
    job *job;
    uint64_t number;
    int64_t started_ms;
    wk_lease_keeper *lease;
};

typedef struct run {
    struct run *next;
    pthread_t thread;
    bool done; /* under the mutex: the job returned and was accounted for */
    wk_cron_ctx ctx;
} run;

struct wk_cron {
    wk_cron_options opts;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC (see wait_until); broadcast on every change */
    job *jobs;           /* registration order */
    run *runs;           /* launched, not yet joined */
    bool started, stopping, stopped;
    atomic_bool stop_flag; /* the jobs' view of `stopping`, lock-free */
    pthread_t thread;
    char errmsg[256];
};

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

const char *wk_log_level_name(wk_log_level level)
{
    static const char *const names[] = {[WK_LOG_DEBUG] = "debug",
                                        [WK_LOG_INFO] = "info",
                                        [WK_LOG_WARN] = "warn",
                                        [WK_LOG_ERROR] = "error"};
    return WK__ENUM_NAME(names, level);
}

static void vlog_msg(wk_cron *c, wk_log_level level, const char *prefix, const char *fmt,
                     va_list ap)
{
    if (!c->opts.log || level < c->opts.log_level)
        return;
    char msg[512];
    int n = prefix ? snprintf(msg, sizeof(msg), "cron job \"%s\": ", prefix) : 0;
    if (n < 0 || (size_t)n >= sizeof(msg))
        n = 0;
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    c->opts.log(c->opts.log_ctx, level, msg);
}

static void log_msg(wk_cron *c, wk_log_level level, const char *job_name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void log_msg(wk_cron *c, wk_log_level level, const char *job_name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog_msg(c, level, job_name, fmt, ap);
    va_end(ap);
}

static int fail(wk_cron *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(wk_cron *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wk__errbuf_vset(c->errmsg, sizeof(c->errmsg), status, fmt, ap);
    va_end(ap);
    return status;
}

/* Wait on the runtime's condition until `when` (wk__boot_ms(); NEVER: no
 * limit) or a broadcast. The mutex is held. The condition's clock is
 * CLOCK_MONOTONIC, so across a suspend this wakes late, never early;
 * callers re-read the clock. */
static void wait_until(wk_cron *c, int64_t when)
{
    if (when == NEVER) {
        pthread_cond_wait(&c->cond, &c->mu);
        return;
    }
    struct timespec ts;
    wk__cond_abstime(when, &ts);
    pthread_cond_timedwait(&c->cond, &c->mu, &ts);
}

static void job_free(job *j)
{
    if (!j)
        return;
    wk_db_close(j->idle_db);
    free(j->name);
    wk__held_free(&j->lock);
    wk__db_options_free(&j->db_opts);
    free(j);
}

/* ------------------------------------------------------------------------
 * Runs
 * ---------------------------------------------------------------------- */

/* A connection for a once-run: the job's idle one, or a new one. */
static int take_db(wk_cron_ctx *ctx, wk_db **db)
{
    wk_cron *c = ctx->cron;
    job *j = ctx->job;
    pthread_mutex_lock(&c->mu);
    *db = j->idle_db;
    j->idle_db = NULL;
    pthread_mutex_unlock(&c->mu);
    if (*db)
        return WK_OK;
    char err[256];
    int rc = wk_db_open(db, &j->db_opts, err, sizeof(err));
    if (rc != WK_OK)
        log_msg(c, WK_LOG_ERROR, j->name, "cannot connect: %s", err);
    return rc;
}

static void give_back_db(wk_cron_ctx *ctx, wk_db *db)
{
    wk_cron *c = ctx->cron;
    job *j = ctx->job;
    pthread_mutex_lock(&c->mu);
    if (!j->idle_db) {
        j->idle_db = db;
        db = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    wk_db_close(db); /* a second connection (overlapping runs) is not kept */
}

/* ------------------------------------------------------------------------
 * The lease of a once-run kept alive: where it would have ended
 * ---------------------------------------------------------------------- */

/*
 * With keep_alive the keeper extends the lease one TTL from each
 * extension, so when the run ends the lease would outlive its tick + TTL
 * and the next tick, an interval later, could find it held and skip. So:
 * right after taking the lease, read where it ends on the server's clock
 * (cron.lease_end), and when the run is over set the expiry back there
 * (cron.lease_cut: PEXPIREAT, which deletes the key if that moment has
 * passed). Both act only while the key holds our token. The server's
 * clock decides both ends, so no client clock is compared with it.
 */

/* KEYS[1] = the lock key; ARGV[1] = token. The lease's end (server ms
 * since the epoch), or -1 if the key does not hold the token with a TTL. */
static const wk_script lease_end_script = {
    "cron.lease_end",
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end\n"
    "local ttl = redis.call('PTTL', KEYS[1])\n"
    "if ttl < 0 then return -1 end\n"
    "local t = redis.call('TIME')\n"
    "return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl\n"};

/* KEYS[1] = the lock key; ARGV[1] = token, ARGV[2] = the end (server ms).
 * Returns 1 if the key held the token (now expiring then, or deleted if
 * that moment has passed), else 0. */
static const wk_script lease_cut_script = {
    "cron.lease_cut",
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "redis.call('PEXPIREAT', KEYS[1], ARGV[2])\n"
    "return 1\n"};

/* lease_end is a pure read (retry-safe); lease_cut writes. */
static const wk__op lease_end_op = {.name = "cron.lease_end", .kind = WK_KIND_LOCK,
                                    .mode = WK_READ, .flags = WK_QUERY_RETRY_SAFE,
                                    .script = &lease_end_script, .parse = wk__parse_i64},
                    lease_cut_op = {.name = "cron.lease_cut", .kind = WK_KIND_LOCK,
                                    .mode = WK_WRITE, .script = &lease_cut_script,
                                    .parse = wk__parse_bool_int};

/* Run one of the two scripts on the job's lock. `end` NULL: lease_end
 * (into *out_end); else lease_cut to *end (into *cut). */
static int lease_script(wk_db *db, const job *j, const wk_token *token, const int64_t *end,
                        int64_t *out_end, bool *cut)
{
    char at[24];
    const char *args[2] = {(const char *)token->bytes, at};
    size_t lens[2] = {WK_TOKEN_LEN, end ? wk__fmt_i64(at, *end) : 0};
    return wk__op_run(wk_db_processor(db), end ? &lease_cut_op : &lease_end_op, &j->lock.entity,
                      j->lock.name, args, lens, end ? 2 : 1, end ? (void *)cut : (void *)out_end);
}

/* The run is over: end the lease where it would have ended without the
 * keeper's extensions. A failure is logged; the lease then runs until one
 * TTL after the last extension. */
static void cut_lease(wk_cron_ctx *ctx, const wk_token *token, int64_t end)
{
    wk_cron *c = ctx->cron;
    job *j = ctx->job;
    wk_db *db;
    if (take_db(ctx, &db) != WK_OK) {
        log_msg(c, WK_LOG_WARN, j->name,
                "run %llu: cannot end the lease at its tick's end (no connection): it runs "
                "until %lld ms after its last extension, and the next tick may skip",
                (unsigned long long)ctx->number, (long long)j->lock.entity.ttl_ms);
        return;
    }
    bool cut = false;
    int rc = lease_script(db, j, token, &end, NULL, &cut);
    if (rc != WK_OK)
        log_msg(c, WK_LOG_WARN, j->name,
                "run %llu: cannot end the lease at its tick's end (%s): it runs until %lld ms "
                "after its last extension, and the next tick may skip",
                (unsigned long long)ctx->number, wk_db_errmsg(db), (long long)j->lock.entity.ttl_ms);
    give_back_db(ctx, db);
}

/* wk_cron_add_once(): take the lease (never wait), run, never release. */
static int run_once(wk_cron_ctx *ctx)
{
    wk_cron *c = ctx->cron;
    job *j = ctx->job;
    if (atomic_load(&c->stop_flag))
        return WK_OK; /* shutting down: do not take a lease we will not use */
    wk_db *db;
    int rc = take_db(ctx, &db);
    if (rc != WK_OK)
        return rc;
    wk_token token;
    bool acquired = false;
    rc = wk_lock_try(wk_db_processor(db), &j->lock.entity, j->lock.name, &token, &acquired);
    if (rc == WK_EUNKNOWN)
        /* Sent, reply lost: the lease may be ours. Not running is the safe
         * side; a lease taken runs out before the next tick (TTL <
         * interval), as every once-lease does. */
        log_msg(c, WK_LOG_ERROR, j->name,
                "run %llu skipped: lock.try's outcome is unknown (%s); if it took the lease, "
                "that runs out after %lld ms",
                (unsigned long long)ctx->number, wk_db_errmsg(db), (long long)j->lock.entity.ttl_ms);
    else if (rc != WK_OK)
        log_msg(c, WK_LOG_ERROR, j->name, "lock.try failed: %s", wk_db_errmsg(db));
    int64_t end = -1;
    if (rc == WK_OK && acquired && j->keep_alive) {
        rc = lease_script(db, j, &token, NULL, &end, NULL);
        if (rc != WK_OK)
            log_msg(c, WK_LOG_ERROR, j->name,
                    "run %llu skipped: cannot read where the lease ends, so it could not be "
                    "cut back after a kept-alive run (it runs out by itself): %s",
                    (unsigned long long)ctx->number, wk_db_errmsg(db));
    }
    give_back_db(ctx, db);
    if (rc != WK_OK)
        return rc;
    if (!acquired) {
        log_msg(c, WK_LOG_DEBUG, j->name,
                "run %llu skipped: the lease is held (the job ran less than a lease ago)",
                (unsigned long long)ctx->number);
        return WK_OK;
    }

    wk_lease_keeper *keeper = NULL;
    if (j->keep_alive) {
        if (end < 0) {
            log_msg(c, WK_LOG_WARN, j->name, "lease lost right after it was taken; run skipped");
            return WK_OK;
        }
        wk_lease_keeper_options ko = WK_LEASE_KEEPER_OPTIONS_INIT;
        ko.db = &j->db_opts;
        ko.kind = WK_LEASE_LOCK;
        ko.entity = &j->lock.entity;
        ko.name = j->lock.name;
        ko.token = token;
        ko.release = false; /* the lease must run out, not be released */
        char err[256];
        rc = wk_lease_keeper_start(&keeper, &ko, err, sizeof(err));
        if (rc != WK_OK) {
            log_msg(c, WK_LOG_ERROR, j->name, "cannot keep the lease alive, run skipped: %s",
                    err);
            cut_lease(ctx, &token, end); /* its first extension may have gone through */
            return rc;
        }
        if (wk_lease_keeper_lost(keeper)) {
            wk_lease_keeper_free(keeper);
            log_msg(c, WK_LOG_WARN, j->name, "lease lost right after it was taken; run skipped");
            return WK_OK;
        }
        ctx->lease = keeper;
    }

    int64_t t0 = wk__boot_ms();
    rc = j->fn(ctx, j->arg);
    int64_t took = wk__boot_ms() - t0;
    if (keeper) {
        ctx->lease = NULL;
        wk_lease_outcome out;
        wk_lease_keeper_halt(keeper, &out);
        wk_lease_keeper_free(keeper);
        if (out.lost)
            log_msg(c, WK_LOG_WARN, j->name, "the lease was lost during run %llu: %s",
                    (unsigned long long)ctx->number,
                    out.lost_status == WK_OK ? "another holder or the key was deleted"
                                             : wk_strerror(out.lost_status));
        /* Its extensions are over (halt joined the keeper's thread): end
         * the lease where it would have ended without them. */
        cut_lease(ctx, &token, end);
    } else if (took >= j->lock.entity.ttl_ms) {
        log_msg(c, WK_LOG_WARN, j->name,
                "run %llu took %lld ms, longer than the lease (%lld ms): another replica may "
                "have started the job meanwhile (use keep_alive)",
                (unsigned long long)ctx->number, (long long)took, (long long)j->lock.entity.ttl_ms);
    }
    return rc;
}

static void *run_main(void *arg)
{
    run *r = arg;
    wk_cron_ctx *ctx = &r->ctx;
    wk_cron *c = ctx->cron;
    job *j = ctx->job;
    log_msg(c, WK_LOG_DEBUG, j->name, "run %llu started", (unsigned long long)ctx->number);
    int rc = j->once ? run_once(ctx) : j->fn(ctx, j->arg);
    int64_t finished = wk__boot_ms();
    if (rc != WK_OK)
        log_msg(c, WK_LOG_ERROR, j->name, "run %llu failed: %s (%s)",
                (unsigned long long)ctx->number, wk_err_name(rc), wk_strerror(rc));
    else
        log_msg(c, WK_LOG_DEBUG, j->name, "run %llu finished after %lld ms",
                (unsigned long long)ctx->number, (long long)(finished - ctx->started_ms));
    pthread_mutex_lock(&c->mu);
    j->running--;
    if (j->kind == WK_CRON_AFTER_FINISH)
        j->next_at = wk__add_ms(finished, j->interval_ms); /* INT64_MAX: never again */
    r->done = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Scheduler (all under the mutex)
 * ---------------------------------------------------------------------- */

static void launch(wk_cron *c, job *j, int64_t now)
{
    j->launched++;
    /* The next start: an interval from this start (at-least waits in
     * addition for this run to end: see can_launch), or, for after-finish,
     * decided when this run ends. */
    j->next_at = j->kind == WK_CRON_AFTER_FINISH ? NEVER : wk__add_ms(now, j->interval_ms);
    run *r = calloc(1, sizeof(*r));
    if (r) {
        r->ctx = (wk_cron_ctx){.cron = c, .job = j, .number = j->launched, .started_ms = now};
        j->running++;
        if (pthread_create(&r->thread, NULL, run_main, r) == 0) {
            r->next = c->runs;
            c->runs = r;
            return;
        }
        j->running--;
        free(r);
    }
    /* Keep the schedule: try again an interval later. */
    j->next_at = wk__add_ms(now, j->interval_ms);
    log_msg(c, WK_LOG_ERROR, j->name, "run %llu not started: cannot create a thread",
            (unsigned long long)j->launched);
}

static bool can_launch(const job *j)
{
    return j->kind == WK_CRON_AFTER_START || j->running == 0;
}

/* Join the runs that are done (they no longer need the mutex). */
static void reap(wk_cron *c)
{
    for (run **pp = &c->runs; *pp;) {
        run *r = *pp;
        if (!r->done) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        pthread_join(r->thread, NULL);
        free(r);
    }
}

static void *scheduler(void *arg)
{
    wk_cron *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        reap(c);
        int64_t now = wk__boot_ms();
        int64_t wake = NEVER;
        for (job *j = c->jobs; j; j = j->next) {
            if (can_launch(j) && now >= j->next_at)
                launch(c, j, now);
            if (can_launch(j) && j->next_at < wake)
                wake = j->next_at;
        }
        wait_until(c, wake);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Public: the runtime
 * ---------------------------------------------------------------------- */

int wk_cron_new(wk_cron **out, const wk_cron_options *opts)
{
    static const wk_cron_options defaults = WK_CRON_OPTIONS_INIT;
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    wk_cron *c = calloc(1, sizeof(*c));
    if (!c)
        return WK_ENOMEM;
    c->opts = opts ? *opts : defaults;
    atomic_init(&c->stop_flag, false);
    if (wk__sync_init(&c->mu, &c->cond) != WK_OK) {
        free(c);
        return WK_ENOMEM;
    }
    *out = c;
    return WK_OK;
}

static int check_job(wk_cron *c, const wk_cron_job *spec)
{
    c->errmsg[0] = '\0';
    if (!spec || !spec->name || !spec->name[0] || strlen(spec->name) > NAME_MAX_BYTES)
        return fail(c, WK_EINVAL, "cron: a job needs a name of 1..%d bytes", NAME_MAX_BYTES);
    if (spec->kind != WK_CRON_AT_LEAST && spec->kind != WK_CRON_AFTER_FINISH &&
        spec->kind != WK_CRON_AFTER_START)
        return fail(c, WK_EINVAL, "cron: job \"%s\": unknown kind %d", spec->name,
                    (int)spec->kind);
    if (spec->interval_ms <= 0)
        return fail(c, WK_EINVAL, "cron: job \"%s\": the interval must be > 0 ms", spec->name);
    if (!spec->fn)
        return fail(c, WK_EINVAL, "cron: job \"%s\": no function", spec->name);
    return WK_OK;
}

static job *job_new(const wk_cron_job *spec)
{
    job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->name = strdup(spec->name);
    if (!j->name) {
        free(j);
        return NULL;
    }
    j->kind = spec->kind;
    j->interval_ms = spec->interval_ms;
    j->fn = spec->fn;
    j->arg = spec->arg;
    return j;
}

static int add(wk_cron *c, job *j)
{
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        pthread_mutex_unlock(&c->mu);
        job_free(j);
        return fail(c, WK_EINVAL, "cron: the runtime is stopped");
    }
    job **pp = &c->jobs;
    while (*pp)
        pp = &(*pp)->next;
    *pp = j;
    pthread_cond_broadcast(&c->cond); /* a running scheduler launches it */
    pthread_mutex_unlock(&c->mu);
    return WK_OK;
}

int wk_cron_add(wk_cron *c, const wk_cron_job *spec)
{
    if (!c)
        return WK_EINVAL;
    int rc = check_job(c, spec);
    if (rc != WK_OK)
        return rc;
    job *j = job_new(spec);
    if (!j)
        return fail(c, WK_ENOMEM, "cron: out of memory");
    return add(c, j);
}

/* The checks wk_cron_add_once() adds to check_job(). */
static int check_once(wk_cron *c, const wk_cron_job *spec, const wk_cron_once_options *once)
{
    if (!once || !once->db || !once->db->capability || !once->lock)
        return fail(c, WK_EINVAL, "cron: job \"%s\": once needs db options (with a capability) "
                                  "and a Lock entity",
                    spec->name);
    const wk_entity *e = once->lock;
    char why[WK_ENTITY_MSG_MAX];
    if (wk_entity_check_msg(e, why, sizeof(why)) != WK_OK)
        return fail(c, WK_EINVAL, "cron: job \"%s\": invalid Lock entity for the lease: %s",
                    spec->name, why);
    if (strcmp(e->kind, WK_KIND_LOCK) != 0)
        return fail(c, WK_EINVAL, "cron: job \"%s\": the lease needs a valid Lock entity",
                    spec->name);
    if (e->ttl_ms >= spec->interval_ms)
        return fail(c, WK_EINVAL,
                    "cron: job \"%s\": the lease (%lld ms, Lock:%s) must be shorter than the "
                    "interval (%lld ms)",
                    spec->name, (long long)e->ttl_ms, e->ns, (long long)spec->interval_ms);
    if (once->name.type == WK_NAME_BYTES && !once->name.bytes && once->name.len)
        return fail(c, WK_EINVAL, "cron: job \"%s\": lock name bytes are NULL", spec->name);
    if (once->keep_alive && e->ttl_ms < 4)
        return fail(c, WK_EINVAL,
                    "cron: job \"%s\": a lease of %lld ms is too short to keep alive (≥ 4 ms, "
                    "see lease_keeper.h)",
                    spec->name, (long long)e->ttl_ms);
    return WK_OK;
}

int wk_cron_add_once(wk_cron *c, const wk_cron_job *spec, const wk_cron_once_options *once)
{
    if (!c)
        return WK_EINVAL;
    int rc = check_job(c, spec);
    if (rc == WK_OK)
        rc = check_once(c, spec, once);
    if (rc != WK_OK)
        return rc;
    job *j = job_new(spec);
    if (!j)
        return fail(c, WK_ENOMEM, "cron: out of memory");
    j->once = true;
    j->keep_alive = once->keep_alive;
    wk_name name = once->name;
    if (name.type == WK_NAME_BYTES && !name.bytes)
        name = wk_name_str(j->name); /* default: the job's name */
    const wk_entity lock = {.kind = WK_KIND_LOCK, .ns = once->lock->ns,
                            .ttl_ms = once->lock->ttl_ms};
    rc = wk__held_init(&j->lock, &lock, WK_KIND_LOCK, &name);
    if (rc == WK_OK)
        rc = wk__db_options_copy(&j->db_opts, once->db);
    if (rc != WK_OK) {
        job_free(j);
        return fail(c, rc, "cron: job \"%s\": cannot copy the options", spec->name);
    }
    return add(c, j);
}

int wk_cron_start(wk_cron *c)
{
    if (!c)
        return WK_EINVAL;
    c->errmsg[0] = '\0';
    pthread_mutex_lock(&c->mu);
    int rc = WK_OK;
    if (c->started || c->stopping)
        rc = fail(c, WK_EINVAL, "cron: already %s", c->started ? "started" : "stopped");
    else if (pthread_create(&c->thread, NULL, scheduler, c) != 0)
        rc = fail(c, WK_ENOMEM, "cron: cannot create the scheduler thread");
    else
        c->started = true;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int wk_cron_stop(wk_cron *c)
{
    if (!c)
        return WK_OK;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&c->mu);
    bool own = c->started && pthread_equal(self, c->thread);
    for (run *r = c->runs; r && !own; r = r->next)
        own = pthread_equal(self, r->thread);
    if (own || c->stopped) {
        pthread_mutex_unlock(&c->mu);
        return own ? WK_EINVAL : WK_OK;
    }
    c->stopping = true;
    atomic_store(&c->stop_flag, true);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);

    if (c->started)
        pthread_join(c->thread, NULL); /* no run is launched after this */
    pthread_mutex_lock(&c->mu);
    run *runs = c->runs;
    c->runs = NULL;
    pthread_mutex_unlock(&c->mu);
    /* Wait for every running job (they see the stop flag). */
    while (runs) {
        run *r = runs;
        runs = r->next;
        pthread_join(r->thread, NULL);
        free(r);
    }
    pthread_mutex_lock(&c->mu);
    c->stopped = true;
    pthread_mutex_unlock(&c->mu);
    return WK_OK;
}

void wk_cron_free(wk_cron *c)
{
    if (!c)
        return;
    if (wk_cron_stop(c) != WK_OK)
        return; /* called from a job: freeing now would pull the floor away */
    while (c->jobs) {
        job *j = c->jobs;
        c->jobs = j->next;
        job_free(j);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cond);
    free(c);
}

const char *wk_cron_errmsg(const wk_cron *c)
{
    return c ? c->errmsg : "";
}

/* ------------------------------------------------------------------------
 * Public: for jobs
 * ---------------------------------------------------------------------- */

bool wk_cron_stopping(wk_cron_ctx *ctx)
{
    if (!ctx)
        return true;
    if (atomic_load(&ctx->cron->stop_flag))
        return true;
    return ctx->lease && wk_lease_keeper_lost(ctx->lease);
}

bool wk_cron_sleep(wk_cron_ctx *ctx, int64_t ms)
{
    if (!ctx)
        return false;
    wk_cron *c = ctx->cron;
    int64_t until = wk__add_ms(wk__boot_ms(), ms > 0 ? ms : 0); /* INT64_MAX: until shutdown */
    pthread_mutex_lock(&c->mu);
    while (!atomic_load(&c->stop_flag) && wk__boot_ms() < until)
        wait_until(c, until);
    bool stopped = atomic_load(&c->stop_flag);
    pthread_mutex_unlock(&c->mu);
    return !stopped;
}

const char *wk_cron_job_name(const wk_cron_ctx *ctx)
{
    return ctx ? ctx->job->name : "";
}

uint64_t wk_cron_run_number(const wk_cron_ctx *ctx)
{
    return ctx ? ctx->number : 0;
}

int64_t wk_cron_started_ms(const wk_cron_ctx *ctx)
{
    return ctx ? ctx->started_ms : 0;
}

wk_lease_keeper *wk_cron_lease(wk_cron_ctx *ctx)
{
    return ctx ? ctx->lease : NULL;
}

void wk_cron_log(wk_cron_ctx *ctx, wk_log_level level, const char *fmt, ...)
{
    if (!ctx || !fmt)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog_msg(ctx->cron, level, ctx->job->name, fmt, ap);
    va_end(ap);
}
