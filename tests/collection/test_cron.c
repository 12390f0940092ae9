/*
 * tests/collection/test_cron.c — the cron runtime and the once-per-interval
 * helper against a real redis-server: spacing and overlap of each kind
 * (from recorded start/finish times, with tolerances), errors logged and
 * the schedule kept, shutdown waiting for running jobs, and 4 replica
 * processes running a job exactly once per interval.
 *
 * Capability table: the once-per-interval helper sends lock.try and
 * (keep_alive) lock.extend, whose rows are already in tests/capability,
 * and with keep_alive two internal scripts, cron.lease_end (READ) and
 * cron.lease_cut (WRITE), which no public call reaches; their refusal
 * goes with lock.try's (a read-only runtime is refused here too).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <wakuwaku/cron.h>
#include <wakuwaku/deadline.h>

#include "redis_fixture.h"

/* One timeout for the whole suite: criterion's runner leaks (LeakSanitizer)
 * when tests with different timeouts run side by side. */
TestSuite(cron, .timeout = 120);

/* Scheduling latency allowed on top of a rule's exact bound. The lower
 * bounds (never early, never overlapping) are checked exactly. */
#define TOL_MS 250

/* ---- a recorder job: start (the runtime's), entry, finish per run */

#define MAXR 64

typedef struct rec {
    pthread_mutex_t mu;
    int64_t S[MAXR], E[MAXR], F[MAXR];
    int finished;
    const int *durations;
    int ndur;
    int status;
    atomic_int running, max_running;
} rec;

static void rec_init(rec *r, const int *durations, int ndur, int status)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->durations = durations;
    r->ndur = ndur;
    r->status = status;
}

static int rec_job(wk_cron_ctx *ctx, void *arg)
{
    rec *r = arg;
    int64_t entered = wk_monotonic_ms();
    int cur = atomic_fetch_add(&r->running, 1) + 1;
    int max = atomic_load(&r->max_running);
    while (cur > max && !atomic_compare_exchange_weak(&r->max_running, &max, cur)) {
    }
    uint64_t i = wk_cron_run_number(ctx) - 1;
    if (i < MAXR) {
        pthread_mutex_lock(&r->mu);
        r->S[i] = wk_cron_started_ms(ctx);
        r->E[i] = entered;
        pthread_mutex_unlock(&r->mu);
    }
    wk_test_sleep_ms(r->durations[i % (uint64_t)r->ndur]);
    atomic_fetch_sub(&r->running, 1);
    if (i < MAXR) {
        pthread_mutex_lock(&r->mu);
        r->F[i] = wk_monotonic_ms();
        r->finished++;
        pthread_mutex_unlock(&r->mu);
    }
    return r->status;
}

/* Wait until `n` runs finished (or 30 s), then stop the runtime. */
static void run_until(wk_cron *c, rec *r, int n)
{
    int64_t t0 = wk_monotonic_ms();
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int f = r->finished;
        pthread_mutex_unlock(&r->mu);
        if (f >= n || wk_monotonic_ms() - t0 > 30000)
            break;
        wk_test_sleep_ms(10);
    }
    cr_assert_eq(wk_cron_stop(c), WK_OK);
    cr_assert_geq(r->finished, n, "only %d runs finished", r->finished);
}

/* ---- a log collector */

typedef struct logs {
    pthread_mutex_t mu;
    int n, errors, warnings;
    char lines[64][512];
} logs;

static void collect(void *ctx, wk_log_level level, const char *msg)
{
    logs *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (level == WK_LOG_ERROR)
        l->errors++;
    if (level == WK_LOG_WARN)
        l->warnings++;
    if (l->n < 64)
        snprintf(l->lines[l->n++], sizeof(l->lines[0]), "%s: %s", wk_log_level_name(level), msg);
    pthread_mutex_unlock(&l->mu);
}

static bool logged(logs *l, const char *needle)
{
    bool found = false;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->n && !found; i++)
        found = strstr(l->lines[i], needle) != NULL;
    pthread_mutex_unlock(&l->mu);
    return found;
}

static wk_cron *new_cron(logs *l)
{
    wk_cron_options o = WK_CRON_OPTIONS_INIT;
    if (l) {
        memset(l, 0, sizeof(*l));
        pthread_mutex_init(&l->mu, NULL);
        o.log = collect;
        o.log_ctx = l;
        o.log_level = WK_LOG_DEBUG;
    }
    wk_cron *c;
    cr_assert_eq(wk_cron_new(&c, &o), WK_OK);
    return c;
}

static void add_job(wk_cron *c, const char *name, wk_cron_kind kind, int64_t interval, rec *r)
{
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = name;
    j.kind = kind;
    j.interval_ms = interval;
    j.fn = rec_job;
    j.arg = r;
    cr_assert_eq(wk_cron_add(c, &j), WK_OK, "%s", wk_cron_errmsg(c));
}

/* ---- the kinds */

Test(cron, at_least_runs_start_an_interval_apart_and_never_overlap)
{
    const int I = 300;
    const int durations[] = {40, 650, 40, 40, 650, 40}; /* some runs outlast the interval */
    rec r;
    rec_init(&r, durations, 6, WK_OK);
    wk_cron *c = new_cron(NULL);
    add_job(c, "at-least", WK_CRON_AT_LEAST, I, &r);
    int64_t started = wk_monotonic_ms();
    cr_assert_eq(wk_cron_start(c), WK_OK);
    run_until(c, &r, 7);
    cr_assert_leq(r.S[0] - started, TOL_MS, "the first run starts at start-up");
    for (int i = 0; i < 7; i++) {
        cr_assert_geq(r.E[i], r.S[i]);
        cr_assert_leq(r.E[i] - r.S[i], TOL_MS);
    }
    for (int i = 1; i < 7; i++) {
        cr_assert_geq(r.S[i] - r.S[i - 1], I, "runs %d and %d started %lld ms apart", i - 1, i,
                      (long long)(r.S[i] - r.S[i - 1]));
        cr_assert_geq(r.E[i], r.F[i - 1], "run %d began before run %d finished", i, i - 1);
        int64_t due = r.S[i - 1] + I > r.F[i - 1] ? r.S[i - 1] + I : r.F[i - 1];
        cr_assert_leq(r.S[i] - due, TOL_MS, "run %d started %lld ms after it was due", i,
                      (long long)(r.S[i] - due));
    }
    cr_assert_eq(atomic_load(&r.max_running), 1);
    wk_cron_free(c);
}

Test(cron, after_finish_runs_start_an_interval_after_the_previous_finish)
{
    const int I = 300;
    const int durations[] = {40, 500};
    rec r;
    rec_init(&r, durations, 2, WK_OK);
    wk_cron *c = new_cron(NULL);
    add_job(c, "after-finish", WK_CRON_AFTER_FINISH, I, &r);
    int64_t started = wk_monotonic_ms();
    cr_assert_eq(wk_cron_start(c), WK_OK);
    run_until(c, &r, 6);
    cr_assert_leq(r.S[0] - started, TOL_MS);
    for (int i = 1; i < 6; i++) {
        int64_t gap = r.E[i] - r.F[i - 1];
        cr_assert_geq(r.S[i] - r.F[i - 1], I, "run %d started %lld ms after run %d finished", i,
                      (long long)(r.S[i] - r.F[i - 1]), i - 1);
        cr_assert_geq(gap, I);
        cr_assert_leq(r.S[i] - r.F[i - 1], I + TOL_MS, "run %d late: %lld ms after the finish",
                      i, (long long)(r.S[i] - r.F[i - 1]));
    }
    cr_assert_eq(atomic_load(&r.max_running), 1);
    wk_cron_free(c);
}

Test(cron, after_start_runs_every_interval_and_slow_runs_overlap)
{
    const int I = 300;
    const int durations[] = {700}; /* each run spans more than two intervals */
    rec r;
    rec_init(&r, durations, 1, WK_OK);
    wk_cron *c = new_cron(NULL);
    add_job(c, "after-start", WK_CRON_AFTER_START, I, &r);
    int64_t started = wk_monotonic_ms();
    cr_assert_eq(wk_cron_start(c), WK_OK);
    run_until(c, &r, 6);
    cr_assert_leq(r.S[0] - started, TOL_MS);
    for (int i = 1; i < 6; i++) {
        cr_assert_geq(r.S[i] - r.S[i - 1], I);
        cr_assert_leq(r.S[i] - r.S[i - 1], I + TOL_MS, "runs %d and %d started %lld ms apart",
                      i - 1, i, (long long)(r.S[i] - r.S[i - 1]));
        cr_assert_lt(r.E[i], r.F[i - 1], "run %d should overlap run %d", i, i - 1);
    }
    cr_assert_geq(atomic_load(&r.max_running), 2, "slow runs overlap");
    wk_cron_free(c);
}

Test(cron, several_jobs_and_a_job_added_while_running)
{
    const int d[] = {10};
    rec a, b;
    rec_init(&a, d, 1, WK_OK);
    rec_init(&b, d, 1, WK_OK);
    wk_cron *c = new_cron(NULL);
    add_job(c, "a", WK_CRON_AT_LEAST, 200, &a);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    cr_assert_eq(wk_cron_start(c), WK_EINVAL, "started twice");
    wk_test_sleep_ms(300);
    int64_t added = wk_monotonic_ms();
    add_job(c, "b", WK_CRON_AFTER_FINISH, 200, &b);
    run_until(c, &b, 3);
    cr_assert_leq(b.S[0] - added, TOL_MS, "a job added to a running runtime runs at once");
    cr_assert_geq(a.finished, 3);
    wk_cron_free(c);
}

/* ---- errors are logged, the schedule is kept */

Test(cron, a_failing_job_is_logged_and_keeps_its_schedule)
{
    const int I = 200;
    const int d[] = {10};
    rec r;
    rec_init(&r, d, 1, WK_EIO);
    logs l;
    wk_cron *c = new_cron(&l);
    add_job(c, "flaky", WK_CRON_AT_LEAST, I, &r);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    run_until(c, &r, 4);
    for (int i = 1; i < 4; i++) {
        cr_assert_geq(r.S[i] - r.S[i - 1], I);
        cr_assert_leq(r.S[i] - r.S[i - 1], I + TOL_MS, "the schedule slipped after an error");
    }
    cr_assert_geq(l.errors, 4, "%d errors logged", l.errors);
    cr_assert(logged(&l, "error: cron job \"flaky\": run 1 failed: WK_EIO"), "%s", l.lines[0]);
    wk_cron_free(c);
}

/* ---- shutdown */

typedef struct slow_job {
    atomic_bool entered, finished, saw_stop;
    atomic_llong finished_at;
    int sleep_ms;
    bool cooperative;
    atomic_int runs;
} slow_job;

static int slow_fn(wk_cron_ctx *ctx, void *arg)
{
    slow_job *s = arg;
    atomic_fetch_add(&s->runs, 1);
    atomic_store(&s->entered, true);
    if (s->cooperative) {
        if (!wk_cron_sleep(ctx, s->sleep_ms))
            atomic_store(&s->saw_stop, wk_cron_stopping(ctx));
    } else {
        wk_test_sleep_ms(s->sleep_ms); /* ignores the stop flag */
    }
    atomic_store(&s->finished_at, (long long)wk_monotonic_ms());
    atomic_store(&s->finished, true);
    return WK_OK;
}

Test(cron, shutdown_waits_for_a_running_job_and_starts_no_more)
{
    slow_job s = {.sleep_ms = 800};
    wk_cron *c = new_cron(NULL);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "slow";
    j.interval_ms = 100;
    j.fn = slow_fn;
    j.arg = &s;
    cr_assert_eq(wk_cron_add(c, &j), WK_OK);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    while (!atomic_load(&s.entered))
        wk_test_sleep_ms(5);
    wk_test_sleep_ms(100);
    cr_assert_eq(wk_cron_stop(c), WK_OK);
    int64_t returned = wk_monotonic_ms();
    cr_assert(atomic_load(&s.finished), "stop returned while the job still ran");
    cr_assert_leq(atomic_load(&s.finished_at), returned);
    int runs = atomic_load(&s.runs);
    cr_assert_eq(runs, 1);
    wk_test_sleep_ms(300);
    cr_assert_eq(atomic_load(&s.runs), runs, "a run started after shutdown");
    cr_assert_eq(wk_cron_stop(c), WK_OK, "stopping twice is harmless");
    cr_assert_eq(wk_cron_add(c, &j), WK_EINVAL, "no job can be added after stop");
    cr_assert_eq(wk_cron_start(c), WK_EINVAL);
    wk_cron_free(c);
}

Test(cron, jobs_see_the_stop_flag_and_wake_from_cron_sleep)
{
    slow_job s = {.sleep_ms = 30000, .cooperative = true};
    wk_cron *c = new_cron(NULL);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "sleeper";
    j.interval_ms = 100;
    j.fn = slow_fn;
    j.arg = &s;
    cr_assert_eq(wk_cron_add(c, &j), WK_OK);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    while (!atomic_load(&s.entered))
        wk_test_sleep_ms(5);
    int64_t t0 = wk_monotonic_ms();
    cr_assert_eq(wk_cron_stop(c), WK_OK);
    cr_assert(atomic_load(&s.finished));
    cr_assert(atomic_load(&s.saw_stop), "wk_cron_stopping() was false after shutdown");
    cr_assert_lt(wk_monotonic_ms() - t0, 15000, "the 30 s sleep was not cut short");
    wk_cron_free(c);
}

typedef struct self_stop {
    wk_cron *cron;
    atomic_int rc;
    atomic_bool done;
} self_stop;

static int self_stop_fn(wk_cron_ctx *ctx, void *arg)
{
    self_stop *s = arg;
    (void)ctx;
    atomic_store(&s->rc, wk_cron_stop(s->cron));
    atomic_store(&s->done, true);
    return WK_OK;
}

Test(cron, stop_from_a_job_is_refused)
{
    self_stop s = {.rc = 1};
    wk_cron *c = new_cron(NULL);
    s.cron = c;
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "self";
    j.interval_ms = 10000;
    j.fn = self_stop_fn;
    j.arg = &s;
    cr_assert_eq(wk_cron_add(c, &j), WK_OK);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    while (!atomic_load(&s.done))
        wk_test_sleep_ms(5);
    cr_assert_eq(atomic_load(&s.rc), WK_EINVAL);
    wk_cron_free(c);
}

Test(cron, invalid_jobs)
{
    wk_cron *c = new_cron(NULL);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.fn = slow_fn;
    j.interval_ms = 100;
    cr_assert_eq(wk_cron_add(c, &j), WK_EINVAL, "no name");
    j.name = "x";
    j.interval_ms = 0;
    cr_assert_eq(wk_cron_add(c, &j), WK_EINVAL);
    cr_assert(strstr(wk_cron_errmsg(c), "interval") != NULL, "%s", wk_cron_errmsg(c));
    j.interval_ms = 100;
    j.kind = (wk_cron_kind)7;
    cr_assert_eq(wk_cron_add(c, &j), WK_EINVAL);
    j.kind = WK_CRON_AT_LEAST;
    j.fn = NULL;
    cr_assert_eq(wk_cron_add(c, &j), WK_EINVAL);
    cr_assert_eq(wk_cron_add(c, NULL), WK_EINVAL);
    cr_assert_eq(wk_cron_add(NULL, &j), WK_EINVAL);
    cr_assert_eq(wk_cron_new(NULL, NULL), WK_EINVAL);
    wk_cron_free(c);
    wk_cron_free(NULL);
    cr_assert_eq(wk_cron_stop(NULL), WK_OK);
    wk_cron *never_started = new_cron(NULL);
    wk_cron_free(never_started);
}

/* ---- once per interval across replicas */

static wk_db_options shared_db(const wk_cap *cap)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = cap ? cap : wk_cap_read_write();
    return o;
}

Test(cron, once_refuses_a_lease_not_shorter_than_the_interval)
{
    wk_cron *c = new_cron(NULL);
    wk_db_options dbo = shared_db(NULL);
    wk_entity equal = WK_LOCK_ENTITY("cronrefuse", 1000);
    wk_entity longer = WK_LOCK_ENTITY("cronrefuse", 1500);
    wk_entity shorter = WK_LOCK_ENTITY("cronrefuse", 999);
    wk_entity cache = WK_CACHE_ENTITY("cronrefuse", 500);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "report";
    j.interval_ms = 1000;
    j.fn = slow_fn;
    wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
    once.db = &dbo;
    once.lock = &equal;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_EINVAL);
    cr_assert(strstr(wk_cron_errmsg(c), "shorter than the interval") != NULL, "%s",
              wk_cron_errmsg(c));
    once.lock = &longer;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_EINVAL);
    once.lock = &cache;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_EINVAL, "not a Lock entity");
    once.lock = NULL;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_EINVAL);
    once.lock = &shorter;
    once.db = NULL;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_EINVAL);
    cr_assert_eq(wk_cron_add_once(c, &j, NULL), WK_EINVAL);
    once.db = &dbo;
    wk_entity tiny = WK_LOCK_ENTITY("cronrefuse", 3);
    once.lock = &tiny;
    once.keep_alive = true; /* no lease keeper can keep 3 ms */
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_EINVAL);
    cr_assert(strstr(wk_cron_errmsg(c), "too short to keep alive") != NULL, "%s",
              wk_cron_errmsg(c));
    once.lock = &shorter;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_OK, "%s", wk_cron_errmsg(c));
    cr_assert_str_eq(wk_cron_errmsg(c), "");
    wk_cron_free(c); /* never started: nothing ran */
}

static int quick_fn(wk_cron_ctx *ctx, void *arg)
{
    (void)ctx;
    atomic_fetch_add((atomic_int *)arg, 1);
    return WK_OK;
}

Test(cron, once_does_not_release_its_lease)
{
    const char *ns = wk_test_ns("cronkeep");
    wk_db_options dbo = shared_db(NULL);
    wk_entity lease = WK_LOCK_ENTITY(ns, 1500);
    atomic_int runs = 0;
    wk_cron *c = new_cron(NULL);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "nightly";
    j.interval_ms = 5000;
    j.fn = quick_fn;
    j.arg = &runs;
    wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
    once.db = &dbo;
    once.lock = &lease;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_OK);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    while (atomic_load(&runs) == 0)
        wk_test_sleep_ms(5);
    wk_test_sleep_ms(50);
    wk_db *db = wk_test_open(NULL);
    wk_lock_state st;
    /* The default lock name is the job's name. */
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lease, wk_name_str("nightly"), &st), WK_OK);
    cr_assert(st.held, "the lease was released after the run");
    cr_assert(st.ttl_ms > 0 && st.ttl_ms <= 1500, "ttl %lld", (long long)st.ttl_ms);
    wk_cron_free(c);
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lease, wk_name_str("nightly"), &st), WK_OK);
    cr_assert(st.held, "shutdown does not release it either");
    wk_db_close(db);
}

Test(cron, once_with_a_read_only_capability_logs_the_refusal)
{
    wk_db_options dbo = shared_db(wk_cap_read_only());
    wk_entity lease = WK_LOCK_ENTITY(wk_test_ns("cronro"), 100);
    atomic_int runs = 0;
    logs l;
    wk_cron *c = new_cron(&l);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "ro";
    j.interval_ms = 150;
    j.fn = quick_fn;
    j.arg = &runs;
    wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
    once.db = &dbo;
    once.lock = &lease;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_OK);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    int64_t t0 = wk_monotonic_ms();
    while (wk_monotonic_ms() - t0 < 10000) {
        pthread_mutex_lock(&l.mu);
        int errors = l.errors;
        pthread_mutex_unlock(&l.mu);
        if (errors >= 4) /* two runs: the lock.try message and the run's */
            break;
        wk_test_sleep_ms(10);
    }
    wk_cron_free(c);
    cr_assert_eq(atomic_load(&runs), 0, "the job ran without its lease");
    cr_assert(logged(&l, "may not WRITE"));
    cr_assert(logged(&l, "run 2 failed: WK_EDENIED"), "the schedule went on after a refusal");
}

/* Two runtimes in one process are two replicas (separate connections). A
 * run of 1.5 s with a lease of 300 ms: with keep_alive the replicas never
 * overlap; without it they do, and the helper warns. */

typedef struct overlap {
    atomic_int running, max_running, runs;
} overlap;

static int overlap_fn(wk_cron_ctx *ctx, void *arg)
{
    overlap *o = arg;
    int cur = atomic_fetch_add(&o->running, 1) + 1;
    int max = atomic_load(&o->max_running);
    while (cur > max && !atomic_compare_exchange_weak(&o->max_running, &max, cur)) {
    }
    atomic_fetch_add(&o->runs, 1);
    for (int i = 0; i < 150 && !wk_cron_stopping(ctx); i++)
        wk_test_sleep_ms(10);
    atomic_fetch_sub(&o->running, 1);
    return WK_OK;
}

static void two_replicas(bool keep_alive, overlap *o, logs *l)
{
    const char *ns = wk_test_ns("cronlong");
    wk_db_options dbo = shared_db(NULL);
    /* 600 ms: shorter than the 1.5 s run and the interval, and long enough
     * that the keeper's heartbeats (every 200 ms) survive a busy CI
     * machine (with 300 ms, one late heartbeat was once reported lost). */
    wk_entity lease = WK_LOCK_ENTITY(ns, 600);
    wk_cron *a = new_cron(l), *b = new_cron(NULL);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "long";
    j.interval_ms = 1000;
    j.fn = overlap_fn;
    j.arg = o;
    wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
    once.db = &dbo;
    once.lock = &lease;
    once.keep_alive = keep_alive;
    cr_assert_eq(wk_cron_add_once(a, &j, &once), WK_OK);
    cr_assert_eq(wk_cron_add_once(b, &j, &once), WK_OK);
    cr_assert_eq(wk_cron_start(a), WK_OK);
    wk_test_sleep_ms(100); /* a wins the first run */
    cr_assert_eq(wk_cron_start(b), WK_OK);
    wk_test_sleep_ms(4200);
    wk_cron_free(a);
    wk_cron_free(b);
}

Test(cron, once_with_keep_alive_never_overlaps_across_replicas)
{
    overlap o = {0};
    logs l;
    two_replicas(true, &o, &l);
    cr_assert_geq(atomic_load(&o.runs), 2);
    cr_assert_eq(atomic_load(&o.max_running), 1, "replicas ran the job at the same time");
    cr_assert_eq(l.warnings, 0, "%s", l.lines[0]);
}

Test(cron, once_without_keep_alive_a_long_run_is_warned_about)
{
    overlap o = {0};
    logs l;
    two_replicas(false, &o, &l);
    /* The lease ran out while a's first run went on, so b started too. */
    cr_assert_geq(atomic_load(&o.max_running), 2);
    cr_assert(logged(&l, "longer than the lease"));
}

/* ---- keep_alive must not push the lease into the next tick */

static int count_logged(logs *l, const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->n; i++)
        n += strstr(l->lines[i], needle) != NULL;
    pthread_mutex_unlock(&l->mu);
    return n;
}

static int sleep_350_fn(wk_cron_ctx *ctx, void *arg)
{
    (void)ctx;
    atomic_fetch_add((atomic_int *)arg, 1);
    wk_test_sleep_ms(350);
    return WK_OK;
}

Test(cron, once_keep_alive_runs_every_tick_when_runs_end_within_the_lease)
{
    /* Interval 1000, lease 800, runs of 350 ms under keep_alive. The
     * keeper extended the lease (one TTL from each extension) and nothing
     * shortened it, so it outlived the run into the next tick, which found
     * it held and skipped: 4 runs in 7 ticks. After a run the lease must
     * end where it would have ended without extensions (the run's tick +
     * the lease, 800 ms), before the next tick. */
    const char *ns = wk_test_ns("cronevery");
    wk_db_options dbo = shared_db(NULL);
    wk_entity lease = WK_LOCK_ENTITY(ns, 800);
    atomic_int runs = 0;
    logs l;
    wk_cron *c = new_cron(&l);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "every";
    j.interval_ms = 1000;
    j.fn = sleep_350_fn;
    j.arg = &runs;
    wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
    once.db = &dbo;
    once.lock = &lease;
    once.keep_alive = true;
    cr_assert_eq(wk_cron_add_once(c, &j, &once), WK_OK, "%s", wk_cron_errmsg(c));
    cr_assert_eq(wk_cron_start(c), WK_OK);
    wk_test_sleep_ms(6 * 1000 + 600); /* ticks at 0, 1, …, 6 s */
    wk_cron_free(c);
    int n = atomic_load(&runs);
    int skipped = count_logged(&l, "skipped: the lease is held");
    cr_log_info("%d runs, %d skipped ticks", n, skipped);
    cr_assert_geq(n + skipped, 7, "only %d ticks", n + skipped);
    cr_assert_geq(n, 6, "%d runs in %d ticks: the kept-alive lease outlived its runs", n,
                  n + skipped);
    cr_assert_leq(skipped, 1, "%d ticks skipped", skipped);
    cr_assert_eq(l.warnings, 0, "%s", l.lines[0]);
}

typedef struct long_then_short {
    pthread_mutex_t mu;
    int n;
    int64_t start[32], end[32];
    atomic_int running, max_running;
    atomic_bool told_lost;
} long_then_short;

static int long_then_short_fn(wk_cron_ctx *ctx, void *arg)
{
    long_then_short *s = arg;
    int cur = atomic_fetch_add(&s->running, 1) + 1;
    int max = atomic_load(&s->max_running);
    while (cur > max && !atomic_compare_exchange_weak(&s->max_running, &max, cur)) {
    }
    pthread_mutex_lock(&s->mu);
    int i = s->n < 32 ? s->n++ : 31;
    s->start[i] = wk_monotonic_ms();
    pthread_mutex_unlock(&s->mu);
    /* The first run lasts 2.3 s: past two ticks and far past its lease. */
    int64_t until = wk_monotonic_ms() + (i == 0 ? 2300 : 50);
    while (wk_monotonic_ms() < until) {
        if (wk_cron_stopping(ctx)) {
            atomic_store(&s->told_lost, wk_lease_keeper_lost(wk_cron_lease(ctx)));
            break;
        }
        wk_test_sleep_ms(10);
    }
    pthread_mutex_lock(&s->mu);
    s->end[i] = wk_monotonic_ms();
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_sub(&s->running, 1);
    return WK_OK;
}

Test(cron, once_keep_alive_long_run_keeps_others_out_and_frees_the_lease_at_its_end)
{
    /* Two replicas, interval 1000, lease 800, keep_alive. Replica a's first
     * run lasts 2.3 s: b's ticks at 0.1, 1.1 and 2.1 s find the lease kept
     * alive and skip. When the run ends its tick + lease is long past, so
     * the lease must end with it: a's tick, due since 1 s, then takes it
     * at once. (Before, the last extension kept it ≥ 530 ms past the run,
     * so that tick skipped and the next run came ~0.8 s later.) */
    const char *ns = wk_test_ns("cronlongka");
    wk_db_options dbo = shared_db(NULL);
    wk_entity lease = WK_LOCK_ENTITY(ns, 800);
    long_then_short s;
    memset(&s, 0, sizeof(s));
    pthread_mutex_init(&s.mu, NULL);
    logs la;
    wk_cron *a = new_cron(&la), *b = new_cron(NULL);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "longka";
    j.interval_ms = 1000;
    j.fn = long_then_short_fn;
    j.arg = &s;
    wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
    once.db = &dbo;
    once.lock = &lease;
    once.keep_alive = true;
    cr_assert_eq(wk_cron_add_once(a, &j, &once), WK_OK);
    cr_assert_eq(wk_cron_add_once(b, &j, &once), WK_OK);
    cr_assert_eq(wk_cron_start(a), WK_OK);
    wk_test_sleep_ms(100); /* a wins the first run */
    cr_assert_eq(wk_cron_start(b), WK_OK);
    wk_test_sleep_ms(3800);
    wk_cron_free(a);
    wk_cron_free(b);
    cr_assert_eq(atomic_load(&s.max_running), 1, "replicas ran the job at the same time");
    cr_assert_not(atomic_load(&s.told_lost), "the long run lost its lease");
    cr_assert_geq(s.n, 2, "%d runs", s.n);
    cr_assert_geq(s.end[0] - s.start[0], 2300, "the long run was cut short");
    int64_t gap = s.start[1] - s.end[0];
    cr_assert_geq(gap, 0);
    cr_assert_leq(gap, 400, "the next run began %lld ms after the long run ended: its lease "
                            "outlived it", (long long)gap);
    cr_assert_eq(la.warnings, 0, "%s", la.lines[0]);
}

/* ---- intervals and sleeps far away saturate instead of overflowing */

Test(cron, a_huge_interval_runs_once_and_waits)
{
    atomic_int runs = 0;
    wk_cron *c = new_cron(NULL);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "huge";
    j.interval_ms = INT64_MAX;
    j.fn = quick_fn;
    j.arg = &runs;
    cr_assert_eq(wk_cron_add(c, &j), WK_OK);
    j.name = "huge-after-start";
    j.kind = WK_CRON_AFTER_START;
    cr_assert_eq(wk_cron_add(c, &j), WK_OK);
    j.name = "huge-after-finish";
    j.kind = WK_CRON_AFTER_FINISH;
    cr_assert_eq(wk_cron_add(c, &j), WK_OK);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    /* The start-up run, then nothing: now + INT64_MAX overflowed (UB) into
     * the past, and the job ran again at once, over and over. */
    wk_test_sleep_ms(500);
    wk_cron_free(c);
    cr_assert_eq(atomic_load(&runs), 3, "%d runs of 3 jobs", atomic_load(&runs));
}

typedef struct long_sleep {
    atomic_bool entered, returned, result;
} long_sleep;

static int long_sleep_fn(wk_cron_ctx *ctx, void *arg)
{
    long_sleep *s = arg;
    atomic_store(&s->entered, true);
    atomic_store(&s->result, wk_cron_sleep(ctx, INT64_MAX));
    atomic_store(&s->returned, true);
    return WK_OK;
}

Test(cron, a_huge_sleep_waits_until_shutdown)
{
    long_sleep s = {0};
    wk_cron *c = new_cron(NULL);
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "sleeps";
    j.interval_ms = 100000;
    j.fn = long_sleep_fn;
    j.arg = &s;
    cr_assert_eq(wk_cron_add(c, &j), WK_OK);
    cr_assert_eq(wk_cron_start(c), WK_OK);
    while (!atomic_load(&s.entered))
        wk_test_sleep_ms(5);
    wk_test_sleep_ms(300);
    cr_assert_not(atomic_load(&s.returned), "wk_cron_sleep(INT64_MAX) returned at once");
    cr_assert_eq(wk_cron_stop(c), WK_OK);
    cr_assert(atomic_load(&s.returned));
    cr_assert_not(atomic_load(&s.result), "woken by shutdown: false");
    wk_cron_free(c);
}

/* ---- 4 replica processes, once per interval */

#define REPLICAS 4
#define INTERVAL_MS 1000
#define LEASE_MS 800
#define TICKS 6 /* ticks at 0, 1, …, 5 intervals; stopped at 5.5 */

typedef struct replica_arg {
    const char *ns;
    int64_t t0;
    int id;
} replica_arg;

/* Count the run in Redis under the interval it belongs to. */
static int replica_job(wk_cron_ctx *ctx, void *arg)
{
    replica_arg *a = arg;
    (void)ctx;
    long k = lround((double)(wk_monotonic_ms() - a->t0) / INTERVAL_MS);
    wk_url u;
    if (wk_url_parse(&u, getenv("WK_TEST_REDIS_URL"), NULL, 0) != WK_OK)
        return WK_EINVAL;
    redisContext *raw = redisConnect(u.host, u.port);
    wk_url_free(&u);
    if (!raw || raw->err)
        return WK_EIO;
    freeReplyObject(redisCommand(raw, "INCR %s:runs:%ld", a->ns, k));
    freeReplyObject(redisCommand(raw, "RPUSH %s:who %d:%ld", a->ns, a->id, k));
    redisFree(raw);
    wk_test_sleep_ms(50);
    return WK_OK;
}

static int replica(const char *ns, int64_t t0, int id)
{
    replica_arg a = {.ns = ns, .t0 = t0, .id = id};
    wk_db_options dbo = WK_DB_OPTIONS_INIT;
    dbo.url = getenv("WK_TEST_REDIS_URL");
    dbo.capability = wk_cap_read_write();
    wk_entity lease = WK_LOCK_ENTITY(ns, LEASE_MS);
    wk_cron *c;
    if (wk_cron_new(&c, NULL) != WK_OK)
        return 2;
    wk_cron_job j = WK_CRON_JOB_INIT;
    j.name = "report";
    j.interval_ms = INTERVAL_MS;
    j.fn = replica_job;
    j.arg = &a;
    wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
    once.db = &dbo;
    once.lock = &lease;
    if (wk_cron_add_once(c, &j, &once) != WK_OK)
        return 3;
    while (wk_monotonic_ms() < t0)
        wk_test_sleep_ms(1);
    if (wk_cron_start(c) != WK_OK)
        return 4;
    while (wk_monotonic_ms() < t0 + (TICKS - 1) * INTERVAL_MS + INTERVAL_MS / 2)
        wk_test_sleep_ms(10);
    wk_cron_free(c);
    return 0;
}

Test(cron, four_replica_processes_run_the_job_once_per_interval)
{
    const char *ns = wk_test_ns("cron4");
    /* All replicas start their runtime at t0 (CLOCK_MONOTONIC is shared by
     * the processes), as replicas deployed together would. */
    int64_t t0 = wk_monotonic_ms() + 500;
    pid_t kids[REPLICAS];
    for (int i = 0; i < REPLICAS; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0)
            _exit(replica(ns, t0, i));
    }
    for (int i = 0; i < REPLICAS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "replica %d failed (%d)", i,
                  status);
    }
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *who = wk_test_cmd(raw, "LRANGE %s:who 0 -1", ns);
    char runs[512] = "";
    for (size_t i = 0; i < who->elements; i++) {
        strncat(runs, who->element[i]->str, sizeof(runs) - strlen(runs) - 2);
        strcat(runs, " ");
    }
    cr_log_info("replica:interval of each run: %s", runs);
    cr_assert_eq(who->elements, TICKS, "%zu runs in %d intervals (replica:interval: %s)",
                 who->elements, TICKS, runs);
    freeReplyObject(who);
    for (int k = 0; k < TICKS; k++) {
        redisReply *r = wk_test_cmd(raw, "GET %s:runs:%d", ns, k);
        cr_assert_eq(r->type, REDIS_REPLY_STRING, "interval %d: no run (%s)", k, runs);
        cr_assert_str_eq(r->str, "1", "interval %d: %s runs (%s)", k, r->str, runs);
        freeReplyObject(r);
    }
    redisFree(raw);
}
