/*
 * tests/collection/test_fill_once.c — fill once across replicas against a
 * real redis-server: 8 processes missing the same name at once run the
 * fill function exactly once (counted in Redis) and all get the body;
 * hits skip the fill; a failing fill is reported and leaves nothing
 * locked; "being filled" without waiting; the wait deadline; a waiter
 * taking over from a filler that vanished; argument checks.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_fixture.h"

/* What a fill function gets: where to count its runs, how long to take,
 * what to produce or which status to fail with. */
typedef struct fill_arg {
    const char *counter; /* Redis key INCRed per run (NULL: none) */
    int delay_ms;
    const char *body;
    int fail_with;
    int runs; /* in this process */
} fill_arg;

static int fill_fn(void *varg, wk_body *out)
{
    fill_arg *a = varg;
    a->runs++;
    if (a->counter) {
        redisContext *raw = wk_test_raw(wk_test_url());
        freeReplyObject(wk_test_cmd(raw, "INCR %s", a->counter));
        redisFree(raw);
    }
    if (a->delay_ms)
        wk_test_sleep_ms(a->delay_ms);
    if (a->fail_with)
        return a->fail_with;
    if (!a->body)
        return WK_OK; /* empty body: data stays NULL */
    size_t n = strlen(a->body);
    out->data = malloc(n); /* no room for a NUL: the library adds it */
    memcpy(out->data, a->body, n);
    out->len = n;
    return WK_OK;
}

static long long counter_value(const char *key)
{
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "GET %s", key);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    redisFree(raw);
    return v;
}

static bool lock_key_exists(const char *ns, const char *name)
{
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:Lock:%s:%s", ns, name);
    bool exists = r->integer == 1;
    freeReplyObject(r);
    redisFree(raw);
    return exists;
}

/* ---- 8 replicas miss at once ---------------------------------------- */

#define REPLICAS 8
#define STAMPEDE_BODY "rendered once, served to all"

/* Exit codes of a replica: 10 + outcome when the body is right. */
static int replica(const char *ns, const char *counter, bool hashed, int gate)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_db *db;
    if (wk_db_open(&db, &o, NULL, 0) != WK_OK)
        return 2;
    wk_entity cache = WK_CACHE_ENTITY(ns, 30000);
    wk_entity hcache = WK_HASHED_CACHE_ENTITY(ns, 30000);
    wk_entity lock = WK_LOCK_ENTITY(ns, 10000);
    fill_arg arg = {.counter = counter, .delay_ms = 300, .body = STAMPEDE_BODY};
    wk_fill_options opts = WK_FILL_OPTIONS_INIT;
    opts.wait_ms = 20000;
    char go;
    if (read(gate, &go, 1) != 0) /* blocks until the parent closes the gate */
        return 3;
    wk_body body = WK_BODY_INIT;
    wk_fill_outcome outcome;
    uint8_t want[WK_HASH_LEN];
    int rc = hashed ? wk_hashed_cache_fill_once(wk_db_processor(db), &hcache, wk_name_str("page"),
                                                &lock, fill_fn, &arg, &opts, &body, &outcome)
                    : wk_cache_fill_once(wk_db_processor(db), &cache, wk_name_str("page"), &lock,
                                         fill_fn, &arg, &opts, &body, &outcome);
    if (rc != WK_OK)
        return 4;
    if (body.len != strlen(STAMPEDE_BODY) || memcmp(body.data, STAMPEDE_BODY, body.len) != 0)
        return 5;
    wk_blake3(STAMPEDE_BODY, strlen(STAMPEDE_BODY), want);
    if (!body.found || (hashed && memcmp(body.hash, want, WK_HASH_LEN) != 0))
        return 6;
    if ((outcome == WK_FILL_FILLED) != (arg.runs == 1) || arg.runs > 1)
        return 7;
    wk_body_free(&body);
    wk_db_close(db);
    return 10 + (int)outcome;
}

static void stampede(bool hashed)
{
    const char *ns = wk_test_ns(hashed ? "hstampede" : "stampede");
    char counter[128];
    snprintf(counter, sizeof(counter), "%s:fill-runs", ns);
    int gate[2];
    cr_assert_eq(pipe(gate), 0);
    pid_t kids[REPLICAS];
    for (int i = 0; i < REPLICAS; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) {
            close(gate[1]);
            _exit(replica(ns, counter, hashed, gate[0]));
        }
    }
    close(gate[0]);
    wk_test_sleep_ms(200); /* let every replica connect and block on the gate */
    close(gate[1]);        /* all start at once */
    int filled = 0, others = 0;
    for (int i = 0; i < REPLICAS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) >= 10,
                  "replica %d failed (status %d)", i, status);
        if (WEXITSTATUS(status) == 10 + WK_FILL_FILLED)
            filled++;
        else
            others++;
    }
    cr_assert_eq(counter_value(counter), 1, "the fill function ran exactly once across replicas");
    cr_assert_eq(filled, 1, "exactly one replica reports FILLED");
    cr_assert_eq(others, REPLICAS - 1);
    cr_assert_not(lock_key_exists(ns, "page"), "the filler released its lease");
}

Test(fill_once, eight_replicas_fill_a_cache_exactly_once, .timeout = 120)
{
    stampede(false);
}

Test(fill_once, eight_replicas_fill_a_hashed_cache_exactly_once, .timeout = 120)
{
    stampede(true);
}

/* ---- single-process behaviour ---------------------------------------- */

Test(fill_once, hit_skips_fill_and_filled_body_is_cached)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *ns = wk_test_ns("fhit");
    wk_entity cache = WK_CACHE_ENTITY(ns, 10000);
    wk_entity lock = WK_LOCK_ENTITY(ns, 5000);
    fill_arg arg = {.body = "computed"};
    wk_body b = WK_BODY_INIT;
    wk_fill_outcome outcome;
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, NULL, &b,
                                    &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_FILLED);
    cr_assert_eq(arg.runs, 1);
    cr_assert_eq(b.len, 8);
    cr_assert_str_eq((char *)b.data, "computed", "the library NUL-terminates the fill's bytes");
    wk_body_free(&b);
    cr_assert_not(lock_key_exists(ns, "a"));

    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, NULL, &b,
                                    &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_HIT);
    cr_assert_eq(arg.runs, 1, "a hit never runs the fill");
    cr_assert_str_eq((char *)b.data, "computed");
    wk_body_free(&b);

    /* An empty body from the fill function is stored and is a hit. */
    fill_arg empty = {.body = NULL};
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("e"), &lock, fill_fn, &empty, NULL, &b,
                                    &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_FILLED);
    cr_assert_eq(b.len, 0);
    cr_assert_not_null(b.data);
    wk_body_free(&b);
    cr_assert_eq(wk_cache_get(p, &cache, wk_name_str("e"), &b), WK_OK);
    cr_assert(b.found);
    wk_body_free(&b);

    /* A read-only handle gets hits, and is refused on a miss. */
    wk_db *ro = wk_test_open(wk_cap_read_only());
    cr_assert_eq(wk_cache_fill_once(wk_db_processor(ro), &cache, wk_name_str("a"), &lock, fill_fn,
                                    &arg, NULL, &b, &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_HIT);
    wk_body_free(&b);
    cr_assert_eq(wk_cache_fill_once(wk_db_processor(ro), &cache, wk_name_str("zz"), &lock,
                                    fill_fn, &arg, NULL, &b, &outcome),
                 WK_EDENIED);
    cr_assert_eq(arg.runs, 1);
    wk_db_close(ro);
    wk_db_close(db);
}

Test(fill_once, failing_fill_is_reported_and_leaves_nothing_locked)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *ns = wk_test_ns("ffail");
    wk_entity cache = WK_CACHE_ENTITY(ns, 10000);
    wk_entity lock = WK_LOCK_ENTITY(ns, 60000);
    fill_arg arg = {.body = "x", .fail_with = WK_EIO};
    wk_body b = WK_BODY_INIT;
    wk_fill_outcome outcome = WK_FILL_FILLED;
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, NULL, &b,
                                    &outcome),
                 WK_EIO, "the fill function's status is returned");
    cr_assert_null(b.data);
    cr_assert_eq(outcome, WK_FILL_BUSY, "no body");
    cr_assert(strstr(wk_db_errmsg(db), "fill"), "%s", wk_db_errmsg(db));
    cr_assert_not(lock_key_exists(ns, "a"), "the lease is released after a failed fill");
    cr_assert_eq(wk_cache_get(p, &cache, wk_name_str("a"), &b), WK_OK);
    cr_assert_not(b.found, "nothing cached");
    arg.fail_with = 0;
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, NULL, &b,
                                    &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_FILLED, "the next call fills at once");
    wk_body_free(&b);

    /* A put that fails (wrong kind of handle) also releases the lease. */
    wk_entity hcache = WK_HASHED_CACHE_ENTITY(ns, 10000);
    wk_cap_entry rows[] = {{WK_KIND_HASHED_CACHE, ns, WK_GRANT_READ}};
    wk_cap *cap;
    cr_assert_eq(wk_cap_new(&cap, "no-put", WK_GRANT_WRITE, rows, 1), WK_OK);
    wk_db *limited = wk_test_open(cap);
    wk_cap_free(cap);
    cr_assert_eq(wk_hashed_cache_fill_once(wk_db_processor(limited), &hcache, wk_name_str("h"),
                                           &lock, fill_fn, &arg, NULL, &b, &outcome),
                 WK_EDENIED);
    cr_assert_null(b.data);
    cr_assert_not(lock_key_exists(ns, "h"), "released after a refused put");
    wk_db_close(limited);
    wk_db_close(db);
}

Test(fill_once, busy_without_waiting_and_deadline_when_waiting)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *ns = wk_test_ns("fbusy");
    wk_entity cache = WK_CACHE_ENTITY(ns, 10000);
    wk_entity lock = WK_LOCK_ENTITY(ns, 30000);
    wk_token held;
    bool got;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("a"), &held, &got), WK_OK);
    cr_assert(got, "the test plays a replica that is filling");

    fill_arg arg = {.body = "mine"};
    wk_body b = WK_BODY_INIT;
    wk_fill_outcome outcome;
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, NULL, &b,
                                    &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_BUSY, "no wait: being filled elsewhere");
    cr_assert_null(b.data);
    cr_assert_eq(arg.runs, 0);

    wk_fill_options opts = WK_FILL_OPTIONS_INIT;
    opts.wait_ms = 400;
    int64_t start = wk_test_now_ms();
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, &opts, &b,
                                    &outcome),
                 WK_OK);
    int64_t took = wk_test_now_ms() - start;
    cr_assert_eq(outcome, WK_FILL_BUSY, "nobody filled before the deadline");
    cr_assert_eq(arg.runs, 0);
    cr_assert_geq(took, 400, "waited until the deadline (%lld ms)", (long long)took);
    cr_assert_lt(took, 10000, "and not far past it (%lld ms)", (long long)took);

    /* Another replica puts the body while we wait: WAITED. */
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        wk_test_sleep_ms(300);
        wk_db *other = wk_test_open(NULL);
        int rc = wk_cache_put(wk_db_processor(other), &cache, wk_name_str("a"), "theirs", 6);
        wk_db_close(other);
        _exit(rc == WK_OK ? 0 : 1);
    }
    opts.wait_ms = 20000;
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, &opts, &b,
                                    &outcome),
                 WK_OK);
    int status;
    waitpid(kid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert_eq(outcome, WK_FILL_WAITED);
    cr_assert_str_eq((char *)b.data, "theirs");
    cr_assert_eq(arg.runs, 0);
    wk_body_free(&b);
    wk_db_close(db);
}

Test(fill_once, waiter_takes_over_when_the_filler_vanishes)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *ns = wk_test_ns("ftakeover");
    wk_entity cache = WK_CACHE_ENTITY(ns, 10000);
    wk_entity crashed_lock = WK_LOCK_ENTITY(ns, 300);
    wk_entity lock = WK_LOCK_ENTITY(ns, 5000);
    wk_token t;
    bool got;
    /* A filler that took the lease and died: it runs out after 300 ms. */
    cr_assert_eq(wk_lock_try(p, &crashed_lock, wk_name_str("a"), &t, &got), WK_OK);
    cr_assert(got);
    fill_arg arg = {.body = "recovered"};
    wk_fill_options opts = WK_FILL_OPTIONS_INIT;
    opts.wait_ms = 20000;
    wk_body b = WK_BODY_INIT;
    wk_fill_outcome outcome;
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, &opts, &b,
                                    &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_FILLED, "the waiter filled once the dead lease ran out");
    cr_assert_eq(arg.runs, 1);
    cr_assert_str_eq((char *)b.data, "recovered");
    wk_body_free(&b);
    wk_db_close(db);
}

Test(fill_once, hashed_cache_fill_outputs_the_hash)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *ns = wk_test_ns("fhashed");
    wk_entity h = WK_HASHED_CACHE_ENTITY(ns, 10000);
    wk_entity lock = WK_LOCK_ENTITY(ns, 5000);
    fill_arg arg = {.body = "abc"};
    wk_body b = WK_BODY_INIT, stored = WK_BODY_INIT;
    uint8_t want[WK_HASH_LEN];
    wk_fill_outcome outcome;
    cr_assert_eq(wk_hashed_cache_fill_once(p, &h, wk_name_str("a"), &lock, fill_fn, &arg, NULL,
                                           &b, &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_FILLED);
    cr_assert(b.found);
    wk_blake3("abc", 3, want);
    cr_assert(memcmp(b.hash, want, 32) == 0);
    cr_assert_eq(wk_hashed_cache_hash(p, &h, wk_name_str("a"), &stored), WK_OK);
    cr_assert(stored.found);
    cr_assert(memcmp(stored.hash, want, 32) == 0);
    /* The same body is reused: the call frees what it held. */
    cr_assert_eq(wk_hashed_cache_fill_once(p, &h, wk_name_str("a"), &lock, fill_fn, &arg, NULL,
                                           &b, &outcome),
                 WK_OK);
    cr_assert_eq(outcome, WK_FILL_HIT);
    cr_assert(memcmp(b.hash, want, 32) == 0);
    cr_assert_str_eq((char *)b.data, "abc");
    cr_assert_eq(arg.runs, 1);
    wk_body_free(&b);

    /* fill once needs its outcomes at once: a batch is refused. */
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    cr_assert_eq(wk_hashed_cache_fill_once(wk_batch_processor(batch), &h, wk_name_str("a"), &lock,
                                           fill_fn, &arg, NULL, &b, &outcome),
                 WK_EINVAL);
    wk_batch_close(batch);
    wk_db_close(db);
}

Test(fill_once, invalid_arguments)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity cache = WK_CACHE_ENTITY("same", 1000);
    wk_entity lock = WK_LOCK_ENTITY("same", 1000);
    wk_entity other_lock = WK_LOCK_ENTITY("other", 1000);
    wk_entity hcache = WK_HASHED_CACHE_ENTITY("same", 1000);
    fill_arg arg = {.body = "x"};
    wk_body b = WK_BODY_INIT;
    wk_fill_outcome o;
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &other_lock, fill_fn, &arg, NULL,
                                    &b, &o),
                 WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "namespace"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &cache, fill_fn, &arg, NULL, &b,
                                    &o),
                 WK_EINVAL, "the lock must be a Lock");
    cr_assert_eq(wk_cache_fill_once(p, &hcache, wk_name_str("a"), &lock, fill_fn, &arg, NULL, &b,
                                    &o),
                 WK_EINVAL, "a HashedCache is not a Cache");
    cr_assert_eq(wk_hashed_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, NULL,
                                           &b, &o),
                 WK_EINVAL);
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, NULL, &arg, NULL, &b, &o),
                 WK_EINVAL);
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, NULL, NULL,
                                    &o),
                 WK_EINVAL);
    wk_fill_options bad = WK_FILL_OPTIONS_INIT;
    bad.poll_min_ms = 0;
    cr_assert_eq(wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, &bad, &b,
                                    &o),
                 WK_EINVAL);
    cr_assert_eq(wk_cache_fill_once(NULL, &cache, wk_name_str("a"), &lock, fill_fn, &arg, NULL,
                                    &b, &o),
                 WK_EINVAL);
    cr_assert_eq(arg.runs, 0);
    wk_db_close(db);
}

/* ---- huge waits: the deadline saturates instead of overflowing -------- */

Test(fill_once, huge_waits_saturate_and_still_wait_for_the_body)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *ns = wk_test_ns("fhuge");
    wk_entity cache = WK_CACHE_ENTITY(ns, 10000);
    wk_entity lock = WK_LOCK_ENTITY(ns, 30000);
    wk_token held;
    bool got;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("a"), &held, &got), WK_OK);
    cr_assert(got, "the test plays a replica that is filling");
    /* now + INT64_MAX overflowed (undefined behaviour: the ASan+UBSan build
     * halts; elsewhere the deadline wrapped into the past and the call
     * returned BUSY at once instead of waiting). */
    const int64_t waits[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX / 2 + 1, INT32_MAX};
    for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
        redisContext *raw = wk_test_raw(wk_test_url());
        freeReplyObject(wk_test_cmd(raw, "DEL @@wakuwaku-entity:Cache:%s:a", ns));
        redisFree(raw);
        pid_t kid = fork();
        cr_assert_geq(kid, 0);
        if (kid == 0) {
            /* No criterion assertion here: the kid must exit whatever
             * happens to its parent. */
            wk_test_sleep_ms(200);
            wk_db_options o = WK_DB_OPTIONS_INIT;
            o.url = wk_test_url();
            o.capability = wk_cap_read_write();
            wk_db *other;
            if (wk_db_open(&other, &o, NULL, 0) != WK_OK)
                _exit(2);
            int rc = wk_cache_put(wk_db_processor(other), &cache, wk_name_str("a"), "late", 4);
            wk_db_close(other);
            _exit(rc == WK_OK ? 0 : 1);
        }
        fill_arg arg = {.body = "mine"};
        wk_fill_options opts = WK_FILL_OPTIONS_INIT;
        opts.wait_ms = waits[i];
        wk_body b = WK_BODY_INIT;
        wk_fill_outcome outcome = WK_FILL_HIT;
        int rc = wk_cache_fill_once(p, &cache, wk_name_str("a"), &lock, fill_fn, &arg, &opts, &b,
                                    &outcome);
        int status;
        waitpid(kid, &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        cr_assert_eq(rc, WK_OK, "wait_ms %lld: %s", (long long)waits[i], wk_err_name(rc));
        cr_assert_eq(outcome, WK_FILL_WAITED, "wait_ms %lld: outcome %d (3 = BUSY at once)",
                     (long long)waits[i], (int)outcome);
        cr_assert_str_eq((char *)b.data, "late");
        cr_assert_eq(arg.runs, 0);
        wk_body_free(&b);
    }
    wk_db_close(db);
}

/* ---- the lease's acquire has an unknown outcome ---------------------- */

/* A processor that runs `drop`'s first query on the server and then
 * reports its reply lost (WK_EUNKNOWN) without running the parser, as the
 * handle does when the connection goes after a write was sent. */
typedef struct lossy {
    wk_processor base;
    wk_processor *inner;
    const char *drop;
    int dropped;
} lossy;

static int lossy_process(wk_processor *self, wk_query *q)
{
    lossy *l = (lossy *)self;
    if (l->dropped || strcmp(q->name, l->drop) != 0)
        return wk_process(l->inner, q);
    l->dropped++;
    bool ignored; /* lock.try's outcome: never reaches the caller */
    wk_query applied = *q;
    applied.out = &ignored;
    wk_process(l->inner, &applied);
    return WK_EUNKNOWN;
}

static lossy lossy_over(wk_processor *inner, const char *drop)
{
    return (lossy){.base = {.process = lossy_process, .db = inner->db, .flags = inner->flags},
                   .inner = inner,
                   .drop = drop};
}

Test(fill_once, unknown_outcome_of_the_lease_releases_it)
{
    wk_db *db = wk_test_open(NULL);
    const char *ns = wk_test_ns("funknown");
    wk_entity cache = WK_CACHE_ENTITY(ns, 10000);
    wk_entity hcache = WK_HASHED_CACHE_ENTITY(ns, 10000);
    wk_entity lock = WK_LOCK_ENTITY(ns, 30000);
    for (int hashed = 0; hashed < 2; hashed++) {
        lossy l = lossy_over(wk_db_processor(db), "lock.try");
        fill_arg arg = {.body = "x"};
        wk_body b = WK_BODY_INIT;
        wk_fill_outcome outcome;
        const char *name = hashed ? "h" : "c";
        int rc = hashed ? wk_hashed_cache_fill_once(&l.base, &hcache, wk_name_str(name), &lock,
                                                    fill_fn, &arg, NULL, &b, &outcome)
                        : wk_cache_fill_once(&l.base, &cache, wk_name_str(name), &lock, fill_fn,
                                             &arg, NULL, &b, &outcome);
        cr_assert_eq(l.dropped, 1, "lock.try was not sent");
        cr_assert_eq(rc, WK_EUNKNOWN, "got %s", wk_err_name(rc));
        cr_assert_eq(arg.runs, 0, "filled without knowing it held the lease");
        cr_assert_null(b.data);
        /* The SET NX went through: the lease was ours, under a token only
         * the call knew. Left behind, it would keep every replica from
         * filling for the lock's TTL (30 s). */
        cr_assert_not(lock_key_exists(ns, name), "the lease was left behind (hashed %d)", hashed);
        cr_assert(strstr(wk_db_errmsg(db), "lock.try") != NULL, "message: %s", wk_db_errmsg(db));
    }
    wk_db_close(db);
}
