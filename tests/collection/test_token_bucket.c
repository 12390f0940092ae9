/*
 * tests/collection/test_token_bucket.c — TokenBucket semantics against a
 * real redis-server: accuracy under contention across processes, retry
 * hints that hold, expiry of idle names, a peek that writes nothing,
 * precision at 100,000 tokens/s and at 1 token/hour, server clock jumps,
 * corrupted keys and invalid arguments; exactness (no admission creates
 * tokens: a seeded property test over capacities up to 10^15), the
 * parameters the exact arithmetic refuses, and a bucket shared with the
 * Rust crate.
 *
 * Long waits (an hour of refill) are simulated by moving the stored `ts`
 * back with a raw HSET, which is exactly what elapsed server time does.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collection/token_bucket_units.h" /* private: the units, for known answers */
#include "redis_fixture.h"

/* ---- helpers ---------------------------------------------------------- */

static void bucket_key(char *buf, size_t cap, const char *ns, const char *name)
{
    snprintf(buf, cap, "@@wakuwaku-entity:TokenBucket:%s:%s", ns, name);
}

/* The server's clock in ms. */
static int64_t server_ms(redisContext *raw)
{
    redisReply *r = wk_test_cmd(raw, "TIME");
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    int64_t ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* A hash field as a double; NAN when missing. */
static double field(redisContext *raw, const char *key, const char *name)
{
    redisReply *r = wk_test_cmd(raw, "HGET %s %s", key, name);
    double v = r->type == REDIS_REPLY_STRING ? strtod(r->str, NULL) : NAN;
    freeReplyObject(r);
    return v;
}

static long long integer_cmd(redisContext *raw, const char *fmt, const char *key)
{
    redisReply *r = wk_test_cmd(raw, fmt, key);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: %s", fmt,
                 r->type == REDIS_REPLY_ERROR ? r->str : "?");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static wk_token_bucket_outcome acquire(wk_db *db, const wk_entity *e, const char *name,
                                       uint64_t cost)
{
    wk_token_bucket_outcome o;
    int rc = wk_token_bucket_acquire(wk_db_processor(db), e, wk_name_str(name), cost, &o);
    cr_assert_eq(rc, WK_OK, "acquire: %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    return o;
}

static wk_token_bucket_state peek(wk_db *db, const wk_entity *e, const char *name)
{
    wk_token_bucket_state st;
    int rc = wk_token_bucket_peek(wk_db_processor(db), e, wk_name_str(name), &st);
    cr_assert_eq(rc, WK_OK, "peek: %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    return st;
}

/* ---- basics ----------------------------------------------------------- */

Test(token_bucket, starts_full_drains_and_denies_with_retry)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tb"), 5, 1, 10000); /* 1 per 10 s */
    for (int i = 4; i >= 0; i--) {
        wk_token_bucket_outcome o = acquire(db, &e, "a", 1);
        cr_assert(o.allowed, "token %d of a full bucket", 5 - i);
        cr_assert_eq(o.remaining, i);
        cr_assert_eq(o.retry_after_ms, 0);
        /* Refill may have added a few ms worth meanwhile. */
        cr_assert(o.full_after_ms > (5 - i) * 10000 - 500 && o.full_after_ms <= (5 - i) * 10000,
                  "full after %lld", (long long)o.full_after_ms);
    }
    wk_token_bucket_outcome o = acquire(db, &e, "a", 1);
    cr_assert_not(o.allowed, "empty bucket must deny");
    cr_assert_eq(o.remaining, 0);
    cr_assert(o.retry_after_ms > 9000 && o.retry_after_ms <= 10000, "retry %lld",
              (long long)o.retry_after_ms);
    cr_assert(o.full_after_ms > 49000 && o.full_after_ms <= 50000);
    /* Other names are independent. */
    o = acquire(db, &e, "b", 5);
    cr_assert(o.allowed);
    cr_assert_eq(o.remaining, 0);
    wk_db_close(db);
}

Test(token_bucket, key_layout_fields_and_expiry)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tblayout"), 10, 1, 1000);
    wk_token_bucket_outcome o;
    cr_assert_eq(wk_token_bucket_acquire(wk_db_processor(db), &e, wk_name_u64(42), 3, &o), WK_OK);
    cr_assert(o.allowed);
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "42");
    redisReply *r = wk_test_cmd(raw, "TYPE %s", key);
    cr_assert_str_eq(r->str, "hash");
    freeReplyObject(r);
    cr_assert_eq(integer_cmd(raw, "HLEN %s", key), 2, "exactly the fields tokens and ts");
    double tokens = field(raw, key, "tokens");
    cr_assert(tokens >= 7 && tokens < 7.1, "tokens %.17g", tokens);
    int64_t now = server_ms(raw);
    double ts = field(raw, key, "ts");
    cr_assert(ts <= (double)now && ts > (double)now - 1000, "ts %.17g vs server %lld", ts,
              (long long)now);
    cr_assert_eq(ts, floor(ts), "ts is whole ms");
    long long pttl = integer_cmd(raw, "PTTL %s", key);
    cr_assert(pttl > 2500 && pttl <= 3000, "PTTL %lld = time until full (3 tokens at 1/s)", pttl);
    redisFree(raw);
    wk_db_close(db);
}

Test(token_bucket, cost_over_capacity_is_denied_for_ever)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbnever"), 5, 1, 1000);
    wk_token_bucket_outcome o = acquire(db, &e, "x", 6);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.retry_after_ms, WK_TOKEN_BUCKET_NEVER);
    cr_assert_eq(o.remaining, 5);
    cr_assert_eq(o.full_after_ms, 0);
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "x");
    cr_assert_eq(integer_cmd(raw, "EXISTS %s", key), 0, "a denial writes nothing");
    /* Even on a drained bucket: never, not "later". */
    cr_assert(acquire(db, &e, "x", 5).allowed, "cost == capacity is allowed when full");
    o = acquire(db, &e, "x", 6);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.retry_after_ms, WK_TOKEN_BUCKET_NEVER);
    cr_assert(o.full_after_ms > 4000 && o.full_after_ms <= 5000);
    redisFree(raw);
    wk_db_close(db);
}

Test(token_bucket, fractional_parameters)
{
    wk_db *db = wk_test_open(NULL);
    /* 2.5 tokens when full, half a token per second. */
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbfrac"), 2.5, 0.5, 1000);
    wk_token_bucket_outcome o = acquire(db, &e, "f", 3);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.retry_after_ms, WK_TOKEN_BUCKET_NEVER);
    cr_assert_eq(o.remaining, 2);
    o = acquire(db, &e, "f", 2);
    cr_assert(o.allowed);
    cr_assert_eq(o.remaining, 0, "0.5 left is 0 whole tokens");
    cr_assert(o.full_after_ms > 3900 && o.full_after_ms <= 4000, "2 tokens at 0.5/s: %lld",
              (long long)o.full_after_ms);
    wk_token_bucket_state st = peek(db, &e, "f");
    cr_assert(st.tokens >= 0.5 && st.tokens < 0.6, "tokens %.17g", st.tokens);
    cr_assert_eq(st.available, 0);
    o = acquire(db, &e, "f", 1);
    cr_assert_not(o.allowed);
    cr_assert(o.retry_after_ms > 800 && o.retry_after_ms <= 1000, "0.5 missing at 0.5/s: %lld",
              (long long)o.retry_after_ms);
    wk_db_close(db);
}

/* ---- retry-after ------------------------------------------------------ */

Test(token_bucket, retry_after_is_honoured, .timeout = 600)
{
    wk_db *db = wk_test_open(NULL);
    /* One token per 300 ms, cost 2 (600 ms); rate 10/3 s is not a binary
     * fraction, so rounding is exercised. */
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbretry"), 4, 10, 3000);
    cr_assert(acquire(db, &e, "r", 4).allowed);
    for (int round = 0; round < 4; round++) {
        wk_token_bucket_outcome o = acquire(db, &e, "r", 2);
        cr_assert_not(o.allowed, "round %d: the bucket was drained", round);
        int64_t r1 = o.retry_after_ms;
        int64_t t0 = wk_test_now_ms();
        cr_assert(r1 > 0 && r1 <= 600, "round %d: retry %lld", round, (long long)r1);
        /* Waiting notably less (a third) fails, and the new hint counts
         * down by at least the time waited. */
        wk_test_sleep_ms((int)(r1 / 3));
        o = acquire(db, &e, "r", 2);
        int64_t waited = wk_test_now_ms() - t0;
        if (waited < r1 - 5) {
            cr_assert_not(o.allowed, "round %d: allowed after %lld of %lld ms", round,
                          (long long)waited, (long long)r1);
            cr_assert(o.retry_after_ms > 0 && o.retry_after_ms <= r1 - r1 / 3 + 1,
                      "round %d: second hint %lld after waiting %lld of %lld", round,
                      (long long)o.retry_after_ms, (long long)waited, (long long)r1);
            /* Wait exactly the new hint: must succeed. */
            wk_test_sleep_ms((int)o.retry_after_ms);
        }
        o = acquire(db, &e, "r", 2);
        cr_assert(o.allowed, "round %d: denied after waiting the hint (retry %lld)", round,
                  (long long)o.retry_after_ms);
    }
    /* Waiting exactly the first hint succeeds too. */
    for (int round = 0; round < 4; round++) {
        wk_token_bucket_outcome o = acquire(db, &e, "r", 2);
        if (o.allowed)
            continue; /* the machine stalled long enough to refill */
        wk_test_sleep_ms((int)o.retry_after_ms);
        o = acquire(db, &e, "r", 2);
        cr_assert(o.allowed, "exact wait, round %d: denied, retry %lld", round,
                  (long long)o.retry_after_ms);
    }
    wk_db_close(db);
}

/* ---- accuracy under contention ------------------------------------------ */

#define WORKERS 4
#define HAMMER_MS 3000
/* A full bucket loses what refills meanwhile: the capacity lasts 2 s at
 * the rate, so only a stall of every worker that long (seen with 50, a
 * quarter second, on a loaded machine) could take tokens out of the
 * lower bound. */
#define ACC_CAPACITY 400
#define ACC_RATE 200 /* per second */

typedef struct worker_report {
    int64_t allowed, denied, errors;
    int64_t first_start, first_end, last_start, last_end; /* monotonic ms */
} worker_report;

static worker_report hammer(const char *ns, int64_t deadline)
{
    worker_report rep = {0};
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_db *db;
    if (wk_db_open(&db, &o, NULL, 0) != WK_OK) {
        rep.errors = 1;
        return rep;
    }
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(ns, ACC_CAPACITY, ACC_RATE, 1000);
    for (bool first = true;; first = false) {
        int64_t start = wk_test_now_ms();
        if (start >= deadline)
            break;
        wk_token_bucket_outcome out;
        int rc = wk_token_bucket_acquire(wk_db_processor(db), &e, wk_name_str("hot"), 1, &out);
        int64_t end = wk_test_now_ms();
        if (rc != WK_OK) {
            rep.errors++;
            continue;
        }
        if (out.allowed)
            rep.allowed++;
        else
            rep.denied++;
        if (first) {
            rep.first_start = start;
            rep.first_end = end;
        }
        rep.last_start = start;
        rep.last_end = end;
    }
    wk_db_close(db);
    return rep;
}

Test(token_bucket, accuracy_under_contention, .timeout = 600)
{
    const char *ns = wk_test_ns("tbacc");
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    int64_t deadline = wk_test_now_ms() + HAMMER_MS;
    pid_t kids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) {
            close(fds[0]);
            worker_report rep = hammer(ns, deadline);
            _exit(write(fds[1], &rep, sizeof(rep)) == (ssize_t)sizeof(rep) ? 0 : 1);
        }
    }
    close(fds[1]);
    worker_report all[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        cr_assert_eq(read(fds[0], &all[i], sizeof(all[i])), (ssize_t)sizeof(all[i]));
    for (int i = 0; i < WORKERS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d: %d", i, status);
    }
    close(fds[0]);
    /* What the workers left in the bucket (plus the little refilled since
     * they stopped): tokens refilled in a stall just before the deadline
     * stay there, which is no fault of the limiter. */
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(ns, ACC_CAPACITY, ACC_RATE, 1000);
    double left = peek(db, &e, "hot").tokens;
    wk_db_close(db);
    int64_t allowed = 0, denied = 0, errors = 0;
    int64_t outer_from = INT64_MAX, outer_to = 0, inner_from = 0, inner_to = INT64_MAX;
    for (int i = 0; i < WORKERS; i++) {
        allowed += all[i].allowed;
        denied += all[i].denied;
        errors += all[i].errors;
        if (all[i].first_start < outer_from)
            outer_from = all[i].first_start;
        if (all[i].last_end > outer_to)
            outer_to = all[i].last_end;
        if (all[i].first_end > inner_from)
            inner_from = all[i].first_end;
        if (all[i].last_start < inner_to)
            inner_to = all[i].last_start;
    }
    cr_assert_eq(errors, 0);
    /* Every acquire ran on the server between outer_from and outer_to, so
     * no more than capacity + rate × that span can have been allowed; and
     * while all workers hammered (inner span) every token refilled was
     * taken or is still in the bucket — none lost to rounding. */
    double outer = (double)(outer_to - outer_from) / 1000.0;
    double inner = (double)(inner_to - inner_from) / 1000.0;
    double upper = ACC_CAPACITY + ACC_RATE * outer + 1;
    double lower = 0.95 * (ACC_CAPACITY + ACC_RATE * inner);
    fprintf(stderr,
            "token bucket accuracy: %lld allowed (+%.1f left), %lld denied in %.3f s "
            "(inner %.3f s); bounds [%.1f, %.1f]\n",
            (long long)allowed, left, (long long)denied, outer, inner, lower, upper);
    cr_assert(denied > allowed, "the workers must outpace the rate for the test to mean anything");
    cr_assert((double)allowed <= upper, "%lld allowed > %.1f", (long long)allowed, upper);
    cr_assert((double)allowed + left >= lower, "%lld allowed + %.1f left < %.1f",
              (long long)allowed, left, lower);
}

/* ---- expiry ----------------------------------------------------------- */

Test(token_bucket, idle_key_expires_when_full)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    /* Two tokens, one per 150 ms. */
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbexp"), 2, 2, 300);
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "idle");
    int64_t t_before = wk_test_now_ms();
    wk_token_bucket_outcome o = acquire(db, &e, "idle", 2);
    cr_assert(o.allowed);
    cr_assert(o.full_after_ms > 200 && o.full_after_ms <= 300);
    long long pttl = integer_cmd(raw, "PTTL %s", key);
    cr_assert(pttl > 0 && pttl <= o.full_after_ms, "PTTL %lld, full after %lld", pttl,
              (long long)o.full_after_ms);
    int64_t t0 = wk_test_now_ms();
    while (integer_cmd(raw, "EXISTS %s", key) == 1 && wk_test_now_ms() - t0 < 5000)
        wk_test_sleep_ms(20);
    int64_t gone_after = wk_test_now_ms() - t0;
    cr_assert_lt(gone_after, 5000, "the key of an idle, full bucket must expire");
    /* The key lives at least until the bucket is full again. */
    int64_t lived = wk_test_now_ms() - t_before;
    cr_assert_geq(lived, o.full_after_ms - 2, "gone %lld ms after the acquire, full after %lld",
                  (long long)lived, (long long)o.full_after_ms);
    wk_token_bucket_state st = peek(db, &e, "idle");
    cr_assert_eq(st.tokens, 2.0, "an expired key is a full bucket");
    cr_assert_eq(st.available, 2);
    cr_assert_eq(st.full_after_ms, 0);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- peek writes nothing ---------------------------------------------- */

/* A private server, so the write counters are ours alone; .fini stops it
 * even when an assertion fails. */
static wk_test_server private_server;

static void private_start(void)
{
    cr_assert_eq(wk_test_server_start(&private_server, NULL), 0, "redis-server did not start");
}

static void private_stop(void)
{
    wk_test_server_stop(&private_server);
}

Test(token_bucket, peek_writes_nothing_and_read_only_may_peek, .init = private_start,
     .fini = private_stop, .timeout = 600)
{
    const wk_test_server *server = &private_server;
    wk_db *rw = wk_test_open_url(server->url, NULL);
    wk_db *ro = wk_test_open_url(server->url, wk_cap_read_only());
    redisContext *raw = wk_test_raw(server->url);
    wk_entity e = WK_TOKEN_BUCKET_ENTITY("peek", 10, 1, 1000);
    char key[256];
    bucket_key(key, sizeof(key), "peek", "p");

    /* Never used: full, and peeking creates nothing. */
    long long d0 = wk_test_dirty(raw);
    wk_token_bucket_state st = peek(ro, &e, "p");
    cr_assert_eq(st.tokens, 10.0);
    cr_assert_eq(st.available, 10);
    cr_assert_eq(st.full_after_ms, 0);
    cr_assert_eq(integer_cmd(raw, "EXISTS %s", key), 0);
    cr_assert_eq(wk_test_dirty(raw), d0);

    cr_assert(acquire(rw, &e, "p", 3).allowed);
    cr_assert_gt(wk_test_dirty(raw), d0, "an allowed acquire writes (the counter works)");
    redisReply *before = wk_test_cmd(raw, "HGETALL %s", key);
    long long pttl_before = integer_cmd(raw, "PTTL %s", key);
    long long d1 = wk_test_dirty(raw);
    long long writes1 = wk_test_cmd_calls(raw, "hset") + wk_test_cmd_calls(raw, "pexpire") +
                        wk_test_cmd_calls(raw, "del");
    long long scripts1 = wk_test_cmd_calls(raw, "evalsha") + wk_test_cmd_calls(raw, "eval");
    wk_test_sleep_ms(30);
    for (int i = 0; i < 5; i++) {
        st = peek(ro, &e, "p");
        cr_assert(st.tokens > 7 && st.tokens < 8, "tokens %.17g", st.tokens);
        cr_assert_eq(st.available, 7);
        cr_assert(st.full_after_ms > 2000 && st.full_after_ms < 3000);
    }
    cr_assert_eq(wk_test_dirty(raw), d1, "peek changed the dataset");
    cr_assert_eq(wk_test_cmd_calls(raw, "hset") + wk_test_cmd_calls(raw, "pexpire") +
                     wk_test_cmd_calls(raw, "del"),
                 writes1, "peek ran a write command");
    cr_assert_eq(wk_test_cmd_calls(raw, "evalsha") + wk_test_cmd_calls(raw, "eval"), scripts1 + 5,
                 "the peeks ran as scripts (the check above is meaningful)");
    redisReply *after = wk_test_cmd(raw, "HGETALL %s", key);
    cr_assert_eq(after->elements, before->elements);
    for (size_t i = 0; i < after->elements; i++)
        cr_assert_str_eq(after->element[i]->str, before->element[i]->str);
    freeReplyObject(before);
    freeReplyObject(after);
    cr_assert_leq(integer_cmd(raw, "PTTL %s", key), pttl_before, "peek must not extend expiry");

    /* A denial writes nothing either: the stored state still holds. */
    wk_token_bucket_outcome denied = acquire(rw, &e, "p", 8);
    cr_assert_not(denied.allowed);
    cr_assert_eq(wk_test_dirty(raw), d1, "a denied acquire wrote");

    /* Even when the stored ts is in the future (the clock went back), peek
     * writes nothing — only acquire repairs ts. */
    freeReplyObject(wk_test_cmd(raw, "HSET %s ts %lld", key, (long long)server_ms(raw) + 60000));
    long long d2 = wk_test_dirty(raw);
    st = peek(ro, &e, "p");
    cr_assert_eq(st.available, 7);
    cr_assert_eq(wk_test_dirty(raw), d2);

    /* The read-only handle may not acquire or reset. */
    wk_token_bucket_outcome o;
    cr_assert_eq(wk_token_bucket_acquire(wk_db_processor(ro), &e, wk_name_str("p"), 1, &o),
                 WK_EDENIED);
    cr_assert_eq(wk_token_bucket_reset(wk_db_processor(ro), &e, wk_name_str("p"), NULL),
                 WK_EDENIED);
    cr_assert_eq(wk_test_dirty(raw), d2);

    redisFree(raw);
    wk_db_close(ro);
    wk_db_close(rw);
}

/* ---- precision at both ends --------------------------------------------- */

Test(token_bucket, high_rate_100k_per_second)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbfast"), 100000, 100000, 1000);
    int64_t t0 = wk_test_now_ms();
    wk_token_bucket_outcome o = acquire(db, &e, "f", 100000);
    cr_assert(o.allowed);
    cr_assert_lt(o.remaining, 100000);
    cr_assert_leq(o.full_after_ms, 1000);
    wk_test_sleep_ms(10);
    wk_token_bucket_state st = peek(db, &e, "f");
    int64_t t1 = wk_test_now_ms();
    /* 100 tokens per ms: at least 9 whole server ms passed (the server
     * clock is read in whole ms), at most t1 - t0 + 1. */
    double hi = 100.0 * (double)(t1 - t0 + 2);
    cr_assert(st.tokens >= 900 && st.tokens <= hi, "after 10 ms at 100k/s: %.17g tokens (≤ %.0f)",
              st.tokens, hi);
    cr_assert_eq(st.available, (int64_t)floor(st.tokens + 1e-6));
    cr_assert(st.full_after_ms > 0 && st.full_after_ms <= 1000);
    o = acquire(db, &e, "f", 900);
    cr_assert(o.allowed, "900 of the refilled tokens");
    /* Many small acquires: every one of 200 cost-1 acquires in a row is
     * served from the refill — no starvation from rounding. */
    int allowed = 0;
    for (int i = 0; i < 200; i++) {
        o = acquire(db, &e, "f", 1);
        allowed += o.allowed;
        if (!o.allowed)
            cr_assert(o.retry_after_ms == 1, "a missing token at 100/ms is 1 ms away, not %lld",
                      (long long)o.retry_after_ms);
    }
    cr_assert_gt(allowed, 0);
    /* The hint for a whole bucket is exact to the ms (unless the machine
     * stalled long enough for the bucket to fill on its own). */
    o = acquire(db, &e, "f", 100000);
    if (!o.allowed) {
        cr_assert(o.retry_after_ms >= 1 && o.retry_after_ms <= 1000, "retry %lld",
                  (long long)o.retry_after_ms);
        wk_test_sleep_ms((int)o.retry_after_ms);
        o = acquire(db, &e, "f", 100000);
        cr_assert(o.allowed, "a full bucket after the hint (retry %lld)",
                  (long long)o.retry_after_ms);
    }
    wk_db_close(db);
}

Test(token_bucket, low_rate_one_per_hour)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbslow"), 1, 1, 3600000);
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "s");
    wk_token_bucket_outcome o = acquire(db, &e, "s", 1);
    cr_assert(o.allowed);
    cr_assert_eq(o.remaining, 0);
    cr_assert(o.full_after_ms > 3599000 && o.full_after_ms <= 3600000);
    long long pttl = integer_cmd(raw, "PTTL %s", key);
    cr_assert(pttl > 3590000 && pttl <= 3600000, "PTTL %lld", pttl);
    o = acquire(db, &e, "s", 1);
    cr_assert_not(o.allowed);
    cr_assert(o.retry_after_ms > 3599000 && o.retry_after_ms <= 3600000, "retry %lld",
              (long long)o.retry_after_ms);
    /* 20 ms at 1/hour is 5.6e-6 tokens: kept, not rounded away. */
    wk_test_sleep_ms(20);
    wk_token_bucket_state st = peek(db, &e, "s");
    cr_assert(st.tokens > 4e-6 && st.tokens < 1e-3, "tokens %.17g", st.tokens);
    cr_assert_eq(st.available, 0);
    /* Simulate 59 min 59 s of refill: about one second left. */
    double ts = field(raw, key, "ts");
    freeReplyObject(wk_test_cmd(raw, "HSET %s ts %.0f", key, ts - 3599000));
    o = acquire(db, &e, "s", 1);
    cr_assert_not(o.allowed);
    cr_assert(o.retry_after_ms >= 1 && o.retry_after_ms <= 1000, "retry %lld",
              (long long)o.retry_after_ms);
    st = peek(db, &e, "s");
    cr_assert(st.tokens > 0.9997 && st.tokens < 1, "tokens %.17g", st.tokens);
    /* A fractional deficit: 0.3 tokens at ts0, so 0.7 missing = 2,520,000
     * ms. Moving ts back by exactly the hint makes the acquire succeed. */
    int64_t ts0 = server_ms(raw);
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 0.3 ts %lld", key, (long long)ts0));
    o = acquire(db, &e, "s", 1);
    cr_assert_not(o.allowed);
    cr_assert(o.retry_after_ms > 2519000 && o.retry_after_ms <= 2520000, "retry %lld",
              (long long)o.retry_after_ms);
    cr_assert_eq(field(raw, key, "ts"), (double)ts0, "a denial writes nothing");
    freeReplyObject(wk_test_cmd(raw, "HSET %s ts %lld", key, (long long)(ts0 - o.retry_after_ms)));
    o = acquire(db, &e, "s", 1);
    cr_assert(o.allowed, "allowed once the hinted time has passed");
    /* A full hour since the last acquire: the token is there. */
    ts = field(raw, key, "ts");
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 0", key));
    freeReplyObject(wk_test_cmd(raw, "HSET %s ts %.0f", key, ts - 3600000));
    o = acquire(db, &e, "s", 1);
    cr_assert(o.allowed, "one token after an hour");
    cr_assert_eq(o.remaining, 0);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- server clock jumps ------------------------------------------------- */

Test(token_bucket, clock_jumps)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbclock"), 3, 1, 200); /* 1 per 200 ms */
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "c");

    /* Backward: the stored ts is a minute ahead of the server. */
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 0 ts %lld", key,
                                (long long)server_ms(raw) + 60000));
    wk_token_bucket_outcome o = acquire(db, &e, "c", 1);
    cr_assert_not(o.allowed, "no refill from a clock that went back");
    cr_assert(o.retry_after_ms > 0 && o.retry_after_ms <= 200, "retry %lld",
              (long long)o.retry_after_ms);
    double ts = field(raw, key, "ts");
    cr_assert_leq(ts, (double)server_ms(raw), "acquire restarts refill from the server's now");
    cr_assert_gt(integer_cmd(raw, "PTTL %s", key), 0, "the repaired key still expires");
    wk_test_sleep_ms((int)o.retry_after_ms);
    o = acquire(db, &e, "c", 1);
    cr_assert(o.allowed, "refill resumed at the normal pace, not after the minute");

    /* Forward (a ts far in the past): never more than capacity. */
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 0 ts 0", key));
    o = acquire(db, &e, "c", 1);
    cr_assert(o.allowed);
    cr_assert_eq(o.remaining, 2, "refill is capped at capacity");
    redisFree(raw);
    wk_db_close(db);
}

/* Hints are rounded UP to whole ms. A ts ahead of the server clock makes
 * the elapsed time 0, so the numbers are exact and known in advance. */
Test(token_bucket, hints_round_up)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbceil"), 7, 7, 1000); /* 7 per s */
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "h");
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 0.25 ts %lld", key,
                                (long long)server_ms(raw) + 60000));
    wk_token_bucket_state st = peek(db, &e, "h");
    cr_assert_eq(st.tokens, 0.25, "tokens read back exactly: %.17g", st.tokens);
    cr_assert_eq(st.available, 0);
    cr_assert_eq(st.full_after_ms, 965, "6.75 tokens at 7/s = 964.29 ms → 965, not %lld",
                 (long long)st.full_after_ms);
    wk_token_bucket_outcome o = acquire(db, &e, "h", 1);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.retry_after_ms, 108, "0.75 tokens at 7/s = 107.14 ms → 108, not %lld",
                 (long long)o.retry_after_ms);
    cr_assert_eq(o.full_after_ms, 965);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- reset -------------------------------------------------------------- */

Test(token_bucket, reset_refills_and_reports_use)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbreset"), 2, 1, 60000);
    bool used = true;
    cr_assert_eq(wk_token_bucket_reset(p, &e, wk_name_str("z"), &used), WK_OK);
    cr_assert_not(used, "a fresh bucket was not used");
    cr_assert(acquire(db, &e, "z", 2).allowed);
    cr_assert_not(acquire(db, &e, "z", 1).allowed);
    cr_assert_eq(wk_token_bucket_reset(p, &e, wk_name_str("z"), &used), WK_OK);
    cr_assert(used);
    wk_token_bucket_state st = peek(db, &e, "z");
    cr_assert_eq(st.tokens, 2.0);
    cr_assert(acquire(db, &e, "z", 2).allowed, "full again after reset");
    cr_assert_eq(wk_token_bucket_reset(p, &e, wk_name_str("z"), NULL), WK_OK, "was_used optional");
    wk_db_close(db);
}

/* ---- batches ------------------------------------------------------------ */

Test(token_bucket, works_in_a_batch)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbbatch"), 3, 1, 60000);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *bp = wk_batch_processor(b);
    wk_token_bucket_outcome o[4];
    wk_token_bucket_state st;
    bool used = false;
    for (int i = 0; i < 4; i++)
        cr_assert_eq(wk_token_bucket_acquire(bp, &e, wk_name_str("q"), 1, &o[i]), WK_OK);
    cr_assert_eq(wk_token_bucket_peek(bp, &e, wk_name_str("q"), &st), WK_OK);
    cr_assert_eq(wk_token_bucket_reset(bp, &e, wk_name_str("q"), &used), WK_OK);
    cr_assert_not(o[0].allowed, "nothing is written before exec");
    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    for (int i = 0; i < 3; i++) {
        cr_assert(o[i].allowed, "acquire %d of 3", i);
        cr_assert_eq(o[i].remaining, 2 - i);
    }
    cr_assert_not(o[3].allowed);
    cr_assert(o[3].retry_after_ms > 59000 && o[3].retry_after_ms <= 60000);
    cr_assert(st.tokens >= 0 && st.tokens < 0.01, "peek after the drain: %.17g", st.tokens);
    cr_assert(used);
    cr_assert_eq(peek(db, &e, "q").available, 3, "reset in the batch refilled it");
    wk_batch_close(b);
    wk_db_close(db);
}

/* ---- corrupted keys ------------------------------------------------------ */

static void expect_corrupt(wk_db *db, const wk_entity *e, const char *name, const char *why)
{
    wk_token_bucket_outcome o = {.allowed = true};
    int rc = wk_token_bucket_acquire(wk_db_processor(db), e, wk_name_str(name), 1, &o);
    cr_assert_eq(rc, WK_ECORRUPT, "%s: acquire gave %s (%s)", why, wk_err_name(rc),
                 wk_db_errmsg(db));
    cr_assert_not(o.allowed);
    char key[256];
    bucket_key(key, sizeof(key), e->ns, name);
    cr_assert(strstr(wk_db_errmsg(db), key), "%s: message \"%s\" does not name the key", why,
              wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), why), "%s: message \"%s\"", why, wk_db_errmsg(db));
    wk_token_bucket_state st;
    rc = wk_token_bucket_peek(wk_db_processor(db), e, wk_name_str(name), &st);
    cr_assert_eq(rc, WK_ECORRUPT, "%s: peek gave %s", why, wk_err_name(rc));
}

Test(token_bucket, corrupted_keys_are_reported)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbbad"), 5, 1, 1000);
    char key[256];

    bucket_key(key, sizeof(key), e.ns, "string");
    freeReplyObject(wk_test_cmd(raw, "SET %s hello", key));
    expect_corrupt(db, &e, "string", "WRONGTYPE");
    redisReply *r = wk_test_cmd(raw, "GET %s", key);
    cr_assert_str_eq(r->str, "hello", "a corrupted key is left alone");
    freeReplyObject(r);

    bucket_key(key, sizeof(key), e.ns, "text");
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens abc ts 1", key));
    expect_corrupt(db, &e, "text", "tokens");

    bucket_key(key, sizeof(key), e.ns, "negative");
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens -1 ts 1", key));
    expect_corrupt(db, &e, "negative", "tokens");

    bucket_key(key, sizeof(key), e.ns, "nan");
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens nan ts 1", key));
    expect_corrupt(db, &e, "nan", "tokens");

    bucket_key(key, sizeof(key), e.ns, "nots");
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 1", key));
    expect_corrupt(db, &e, "nots", "ts");

    bucket_key(key, sizeof(key), e.ns, "badts");
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 1 ts soon", key));
    expect_corrupt(db, &e, "badts", "ts");

    bucket_key(key, sizeof(key), e.ns, "foreign");
    freeReplyObject(wk_test_cmd(raw, "HSET %s other 1", key));
    expect_corrupt(db, &e, "foreign", "without the fields");

    /* reset repairs it. */
    bool used = false;
    cr_assert_eq(wk_token_bucket_reset(wk_db_processor(db), &e, wk_name_str("string"), &used),
                 WK_OK);
    cr_assert(used);
    cr_assert(acquire(db, &e, "string", 1).allowed);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- invalid arguments ---------------------------------------------------- */

Test(token_bucket, invalid_arguments)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity good = WK_TOKEN_BUCKET_ENTITY("tbinval", 5, 1, 1000);
    wk_entity no_cap = WK_TOKEN_BUCKET_ENTITY("tbinval", 0, 1, 1000);
    wk_entity no_rate = WK_TOKEN_BUCKET_ENTITY("tbinval", 5, 0, 1000);
    wk_entity nan_rate = WK_TOKEN_BUCKET_ENTITY("tbinval", 5, NAN, 1000);
    wk_entity no_period = WK_TOKEN_BUCKET_ENTITY("tbinval", 5, 1, 0);
    wk_entity lock = WK_LOCK_ENTITY("tbinval", 1000);
    wk_token_bucket_outcome o = {.allowed = true};
    wk_token_bucket_state st;
    bool used;
    wk_name n = wk_name_str("a");

    cr_assert_eq(wk_token_bucket_acquire(p, &good, n, 0, &o), WK_EINVAL, "cost 0");
    cr_assert_not(o.allowed);
    cr_assert(strstr(wk_db_errmsg(db), "cost"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_token_bucket_acquire(p, &good, n, WK_TOKEN_BUCKET_COST_MAX + 1, &o),
                 WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(p, &good, n, 1, NULL), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(p, &no_cap, n, 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(p, &no_rate, n, 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(p, &nan_rate, n, 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(p, &no_period, n, 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(p, &lock, n, 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(p, NULL, n, 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(NULL, &good, n, 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire(p, &good, wk_name_str(NULL), 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_peek(p, &good, n, NULL), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_peek(p, &lock, n, &st), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_peek(p, &good, wk_name_str(NULL), &st), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_reset(p, &no_rate, n, &used), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_reset(NULL, &good, n, &used), WK_EINVAL);
    /* The largest cost is accepted (and denied: it exceeds the capacity). */
    cr_assert_eq(wk_token_bucket_acquire(p, &good, n, WK_TOKEN_BUCKET_COST_MAX, &o), WK_OK);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.retry_after_ms, WK_TOKEN_BUCKET_NEVER);
    wk_db_close(db);
}

/* ---- exactness: no admission creates tokens ------------------------------ */

/* Move the stored ts back by `ms` if the key exists: exactly what `ms` of
 * elapsed server time does. Returns whether the key existed. */
static bool rewind_ts(redisContext *raw, const char *key, long long ms)
{
    redisReply *r = wk_test_cmd(raw,
                                "EVAL %s 1 %s %lld",
                                "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
                                "redis.call('HINCRBY', KEYS[1], 'ts', -tonumber(ARGV[1]))\n"
                                "return 1",
                                key, ms);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "rewind: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "?");
    bool existed = r->integer == 1;
    freeReplyObject(r);
    return existed;
}

/* Issue 10, first example: a drained bucket of 10^13 tokens refilling at
 * 1 token/s must not hand out 1000 cost-1 admissions in a moment. */
Test(token_bucket, drained_large_bucket_creates_no_tokens)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbbig"), 1e13, 1, 1000);
    int64_t t0 = server_ms(raw);
    cr_assert(acquire(db, &e, "d", 10000000000000).allowed, "the whole bucket, when full");
    int allowed = 0;
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    for (int round = 0; round < 10; round++) {
        wk_token_bucket_outcome o[100];
        for (int i = 0; i < 100; i++)
            cr_assert_eq(wk_token_bucket_acquire(wk_batch_processor(b), &e, wk_name_str("d"), 1,
                                                 &o[i]),
                         WK_OK);
        cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
        for (int i = 0; i < 100; i++)
            allowed += o[i].allowed;
    }
    wk_batch_close(b);
    int64_t t1 = server_ms(raw);
    /* 1 token per 1000 ms of server time, plus the +1 of whole ms. */
    double bound = (double)(t1 - t0) / 1000.0 + 1;
    cr_assert((double)allowed <= bound, "%d of 1000 cost-1 acquires allowed in %lld ms (bound %.3f)",
              allowed, (long long)(t1 - t0), bound);
    redisFree(raw);
    wk_db_close(db);
}

/* Issue 10, second example: 3·10^12 tokens at 0.1 token/ms. The refill of
 * each simulated ms is fractional; an admission must not round it up. */
Test(token_bucket, fractional_refill_creates_no_tokens, .timeout = 600)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbfracbig"), 3e12, 1, 10);
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "f");
    int64_t t0 = server_ms(raw);
    cr_assert(acquire(db, &e, "f", 3000000000000).allowed);
    const int steps = 600;
    int allowed = 0;
    for (int i = 0; i < steps; i++) {
        cr_assert(rewind_ts(raw, key, 1), "step %d: the drained bucket's key is there", i);
        allowed += acquire(db, &e, "f", 1).allowed;
    }
    int64_t t1 = server_ms(raw);
    /* 0.1 token per ms, simulated (steps) and real (t1 - t0). */
    double bound = 0.1 * (double)(steps + (t1 - t0)) + 1;
    cr_assert((double)allowed <= bound, "%d allowed over %d simulated + %lld real ms (bound %.1f)",
              allowed, steps, (long long)(t1 - t0), bound);
    redisFree(raw);
    wk_db_close(db);
}

/* splitmix64: a small, seeded, reproducible stream. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * 0x1p-53;
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return n ? rng_next(s) % n : 0;
}

typedef struct tb_params {
    double capacity, rate;
    int64_t period_ms;
} tb_params;

/* Edge cases first: the ends of the accepted range, refill slower than a
 * token per hour or faster than the whole bucket per ms, periods with
 * factors of 3 and 7 (refill not a binary fraction), binary fractions. */
static const tb_params edge_params[] = {
    {1, 1, 3600000},
    {1, 1, 1},
    {2, 1, 3},
    {7, 7, 1000},
    {2.5, 0.5, 1000},
    {0.5, 2.5, 250},
    {1e13, 1, 1000},
    {3e12, 1, 10},
    {1e15, 1, 1000},
    {1e15, 7, 1000},
    {1e15, 1, 3},
    {1e15, 1e12, 1000},
    {1e15, 3, 86400000},
    {1e15, 1e15, 1},
    {1e15, 1e18, 7},
    {999999999999999, 999999999999997, 3},
    {1125899906842624, 1, 1},
    {1125899906842624, 1125899906842623, 3600000},
    {1125899906842623, 3, 7},
    {123456789012345.5, 0.25, 7},
};

static tb_params random_params(uint64_t *s)
{
    static const int64_t periods[] = {1, 2, 3, 7, 10, 60, 250, 1000, 3000, 60000, 3600000, 86400000};
    tb_params p;
    /* 1..10^15, a third of them from 10^12 up, where a relative rounding
     * error would be worth whole tokens. */
    double decades = rng_below(s, 3) == 0 ? 12 + rng_unit(s) * 3 : rng_unit(s) * 15;
    p.capacity = floor(pow(10, decades));
    if (p.capacity < 1)
        p.capacity = 1;
    if (rng_below(s, 8) == 0 && p.capacity < 0x1p49)
        p.capacity += 0.5; /* still n / 2^k with n ≤ 2^50 */
    if (rng_below(s, 4) == 0)
        p.period_ms = (int64_t)rng_below(s, 10000000) + 1;
    else
        p.period_ms = periods[rng_below(s, sizeof(periods) / sizeof(periods[0]))];
    /* Refill per ms from 10^-7 tokens to ten buckets. */
    double per_ms = pow(10, -7 + rng_unit(s) * (log10(p.capacity) + 8));
    p.rate = floor(per_ms * (double)p.period_ms);
    if (rng_below(s, 5) == 0)
        p.rate = floor(per_ms * (double)p.period_ms * 4) / 4; /* quarters */
    if (p.rate < 0.25)
        p.rate = 1;
    if (p.rate > 0x1p53)
        p.rate = 0x1p53;
    return p;
}

static uint64_t random_cost(uint64_t *s, double capacity)
{
    uint64_t whole = (uint64_t)floor(capacity);
    switch (rng_below(s, 10)) {
    case 0:
    case 1:
    case 2:
    case 3:
        return 1;
    case 4:
    case 5:
        return 1 + rng_below(s, 10);
    case 6:
        return 1 + rng_below(s, whole / 100 + 1);
    case 7:
        return 1 + rng_below(s, whole ? whole : 1);
    case 8:
        return whole ? whole : 1;
    default:
        return whole + 1; /* more than the bucket: denied for ever */
    }
}

/* Simulated time between two rounds: nothing, a ms or a few, about the
 * time of one token, or a share of the time to refill the bucket. */
static long long random_wait(uint64_t *s, const tb_params *p)
{
    double token_ms = (double)p->period_ms / p->rate;
    double d;
    switch (rng_below(s, 5)) {
    case 0:
        return 0;
    case 1:
        return 1 + (long long)rng_below(s, 5);
    case 2:
        d = ceil(token_ms * (double)(1 + rng_below(s, 3)));
        break;
    case 3:
        d = floor(token_ms * rng_unit(s) * 3);
        break;
    default:
        d = ceil(token_ms * p->capacity * rng_unit(s) / 4);
        break;
    }
    return d > 0x1p40 ? (long long)0x1p40 : (long long)d;
}

/*
 * The admission bound as a property: from a full bucket, whatever the
 * parameters and costs, the tokens handed out never exceed
 *   capacity + rate × elapsed / period (+1),
 * where elapsed counts the server time around the calls plus the simulated
 * time (ts moved back). Seeded: WK_TB_SEED=<seed> repeats a run,
 * WK_TB_CASES=<n> runs more random cases.
 */
Test(token_bucket, admission_bound_property, .timeout = 600)
{
    uint64_t seed = getenv("WK_TB_SEED") ? strtoull(getenv("WK_TB_SEED"), NULL, 0)
                                         : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    int ncases = getenv("WK_TB_CASES") ? atoi(getenv("WK_TB_CASES")) : 120;
    fprintf(stderr, "token bucket property: seed %llu (WK_TB_SEED=%llu repeats it), %d cases\n",
            (unsigned long long)seed, (unsigned long long)seed, ncases);
    uint64_t s = seed;
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    const char *ns = wk_test_ns("tbprop");
    size_t nedge = sizeof(edge_params) / sizeof(edge_params[0]);
    for (int c = 0; c < (int)nedge + ncases; c++) {
        tb_params p = c < (int)nedge ? edge_params[c] : random_params(&s);
        wk_entity e = WK_TOKEN_BUCKET_ENTITY(ns, p.capacity, p.rate, p.period_ms);
        char name[32], key[256];
        snprintf(name, sizeof(name), "case%d", c);
        bucket_key(key, sizeof(key), ns, name);
        long double given = 0, waited = 0;
        int64_t t0 = server_ms(raw);
        for (int round = 0; round < 4; round++) {
            if (round > 0) {
                long long w = random_wait(&s, &p);
                if (w > 0 && rewind_ts(raw, key, w))
                    waited += w;
            }
            enum { N = 32 };
            wk_token_bucket_outcome o[N];
            uint64_t cost[N];
            for (int i = 0; i < N; i++) {
                /* Drain first, often: the bound is tightest from empty. */
                cost[i] = round == 0 && i == 0 && rng_below(&s, 4) ? (uint64_t)floor(p.capacity)
                                                                    : random_cost(&s, p.capacity);
                if (cost[i] == 0)
                    cost[i] = 1;
                int rc = wk_token_bucket_acquire(wk_batch_processor(b), &e, wk_name_str(name),
                                                 cost[i], &o[i]);
                cr_assert_eq(rc, WK_OK, "case %d (seed %llu): capacity %.17g rate %.17g per %lld: %s",
                             c, (unsigned long long)seed, p.capacity, p.rate,
                             (long long)p.period_ms, wk_db_errmsg(db));
            }
            cr_assert_eq(wk_batch_exec(b), WK_OK, "case %d: %s", c, wk_db_errmsg(db));
            for (int i = 0; i < N; i++) {
                bool never = (double)cost[i] > p.capacity;
                if (o[i].allowed) {
                    cr_assert_not(never);
                    cr_assert_eq(o[i].retry_after_ms, 0);
                    given += cost[i];
                } else if (never) {
                    cr_assert_eq(o[i].retry_after_ms, WK_TOKEN_BUCKET_NEVER);
                } else {
                    cr_assert_geq(o[i].retry_after_ms, 1, "case %d: a denial hints a wait", c);
                }
                cr_assert(o[i].remaining >= 0 && (double)o[i].remaining <= p.capacity);
            }
        }
        int64_t t1 = server_ms(raw);
        long double bound = (long double)p.capacity +
                            (long double)p.rate * (waited + (long double)(t1 - t0)) /
                                (long double)p.period_ms +
                            1;
        cr_assert(given <= bound,
                  "case %d (seed %llu): capacity %.17g, rate %.17g per %lld ms: %.0Lf tokens "
                  "given in %lld ms + %.0Lf simulated, bound %.3Lf (over by %.3Lf)",
                  c, (unsigned long long)seed, p.capacity, p.rate, (long long)p.period_ms, given,
                  (long long)(t1 - t0), waited, bound, given - bound);
    }
    wk_batch_close(b);
    redisFree(raw);
    wk_db_close(db);
}

/* Parameters the exact arithmetic cannot represent are refused with a
 * message naming the parameter and its limit; nothing is sent. */
Test(token_bucket, unrepresentable_parameters_are_refused)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    static const struct {
        double capacity, rate;
        int64_t period_ms;
        const char *param, *limit;
    } bad[] = {
        {0.1, 1, 1000, "capacity", "2^50"},
        {1e16, 1, 1000, "capacity", "2^50"},
        {2251799813685248.0 /* 2^51 */, 1, 1000, "capacity", "2^50"},
        {1125899906842624.5, 1, 1000, "capacity", "2^50"}, /* 2^50 + 0.5 */
        {3.3, 1, 1000, "capacity", "2^50"},
        {10, 0.1, 1000, "rate", "2^53"},
        {10, 1.0 / 3.0, 1000, "rate", "2^53"},
        {10, 0x1p-60, 1, "rate", "2^53"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        wk_entity e = WK_TOKEN_BUCKET_ENTITY("tbexact", bad[i].capacity, bad[i].rate,
                                             bad[i].period_ms);
        wk_token_bucket_outcome o = {.allowed = true};
        int rc = wk_token_bucket_acquire(p, &e, wk_name_str("x"), 1, &o);
        cr_assert_eq(rc, WK_EINVAL, "capacity %.17g rate %.17g per %lld: %s", bad[i].capacity,
                     bad[i].rate, (long long)bad[i].period_ms, wk_err_name(rc));
        cr_assert_not(o.allowed);
        const char *msg = wk_db_errmsg(db);
        cr_assert(strstr(msg, bad[i].param) && strstr(msg, bad[i].limit),
                  "message \"%s\" must name %s and %s", msg, bad[i].param, bad[i].limit);
        wk_token_bucket_state st;
        cr_assert_eq(wk_token_bucket_peek(p, &e, wk_name_str("x"), &st), WK_EINVAL);
    }
    /* The ends of the accepted range work. */
    static const tb_params good[] = {
        {1125899906842624.0, 1, 1000}, /* 2^50 */
        {0x1p-50, 1, 1000},
        {0.75, 0.125, 3},
        {5, 1e300, 1}, /* refills the whole bucket every ms */
        {5, 1, INT64_C(9007199254740992)}, /* one token per 2^53 ms */
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbexactok"), good[i].capacity,
                                             good[i].rate, good[i].period_ms);
        wk_token_bucket_state st = peek(db, &e, "x");
        cr_assert_eq(st.tokens, good[i].capacity);
        wk_token_bucket_outcome o = acquire(db, &e, "x", 1);
        cr_assert_eq(o.allowed, good[i].capacity >= 1, "case %zu", i);
    }
    wk_db_close(db);
}

/* 10^15 tokens at 1 per 3 ms: capacity × 3 exceeds 2^50, so the refill
 * comes as 1 whole token every 3 ms counted from the stored ts. The hints
 * stay exact on those steps, and the stored state still means "tokens at
 * ts" to a reader that refills continuously (the Rust crate). */
Test(token_bucket, stepped_refill_keeps_hints_exact)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbstep"), 1e15, 1, 3);
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "s");
    cr_assert(acquire(db, &e, "s", 1000000000000000).allowed);
    /* Park ts a minute ahead: no refill, so the numbers are known. */
    freeReplyObject(wk_test_cmd(raw, "HSET %s ts %lld", key, (long long)server_ms(raw) + 60000));
    wk_token_bucket_outcome o = acquire(db, &e, "s", 1);
    cr_assert_not(o.allowed, "a drained bucket of 10^15 has no token to give");
    cr_assert_eq(o.retry_after_ms, 3, "one token is one step: %lld", (long long)o.retry_after_ms);
    freeReplyObject(wk_test_cmd(raw, "HSET %s ts %lld", key, (long long)server_ms(raw) + 60000));
    cr_assert_eq(acquire(db, &e, "s", 5).retry_after_ms, 15);
    /* 2 ms into a step: nothing yet (when the server's ms did not move on
     * meanwhile, which the check afterwards tells). */
    int64_t now = server_ms(raw);
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 0 ts %lld", key, (long long)now - 2));
    o = acquire(db, &e, "s", 1);
    if (server_ms(raw) == now)
        cr_assert_not(o.allowed, "2 ms of a 3 ms step give nothing yet");
    freeReplyObject(wk_test_cmd(raw, "HSET %s tokens 0 ts %lld", key, (long long)server_ms(raw) - 30));
    o = acquire(db, &e, "s", 10);
    cr_assert(o.allowed, "30 ms = 10 steps = 10 tokens");
    /* A continuous reader's view of the stored state: at least ours, less
     * than one step more. */
    wk_token_bucket_state st = peek(db, &e, "s");
    double tokens = field(raw, key, "tokens");
    double ts = field(raw, key, "ts");
    int64_t t = server_ms(raw);
    cr_assert_eq(tokens, floor(tokens), "whole tokens at a step boundary: %.17g", tokens);
    cr_assert_leq(ts, (double)t);
    double continuous = tokens + ((double)t - ts) / 3;
    cr_assert(continuous >= st.tokens && continuous < st.tokens + 1 + ((double)t - ts) / 3,
              "continuous %.17g vs stepped %.17g", continuous, st.tokens);
    redisFree(raw);
    wk_db_close(db);
}

/* What the Rust crate's acquire does, written for this test from its
 * documented behaviour: continuous refill in doubles, tokens and ts = now
 * always written back, expiry = time until full. ARGV: capacity, tokens
 * per period, period in µs, cost. Returns {allowed, retry_ms, floor}. */
static const char crate_acquire[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local cap, per, us, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),"
    " tonumber(ARGV[4])\n"
    "local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts')\n"
    "local tokens, ts = tonumber(s[1]), tonumber(s[2])\n"
    "if not tokens or not ts then tokens, ts = cap, now end\n"
    "tokens = math.min(cap, tokens + math.max(now - ts, 0) * 1000 * per / us)\n"
    "if cost > cap then return {0, -1, math.floor(tokens)} end\n"
    "local ok, retry = 0, 0\n"
    "if tokens >= cost then tokens = tokens - cost; ok = 1\n"
    "else retry = math.ceil((cost - tokens) * us / per / 1000) end\n"
    "redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)\n"
    "redis.call('PEXPIRE', KEYS[1], math.max(math.ceil((cap - tokens) * us / per / 1000), 1))\n"
    "return {ok, retry, math.floor(tokens)}\n";

static long long crate_call(redisContext *raw, const char *key, long long cost, long long *retry)
{
    /* capacity 10, 1 token per 100 ms */
    redisReply *r = wk_test_cmd(raw, "EVAL %s 1 %s 10 1 100000 %lld", crate_acquire, key, cost);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "%s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    long long ok = r->element[0]->integer;
    *retry = r->element[1]->integer;
    freeReplyObject(r);
    return ok;
}

/* A C and a Rust service sharing one bucket: each reads what the other
 * wrote, neither sees a corrupted key, and together they stay inside the
 * bucket's bound. */
Test(token_bucket, shares_a_bucket_with_the_rust_crate)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity e = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tbrust"), 10, 1, 100);
    char key[256];
    bucket_key(key, sizeof(key), e.ns, "shared");
    int64_t t0 = server_ms(raw);
    long long given = 0, retry;
    wk_token_bucket_outcome o = acquire(db, &e, "shared", 4);
    cr_assert(o.allowed);
    given += 4;
    cr_assert(crate_call(raw, key, 3, &retry), "the crate reads our 6 tokens");
    given += 3;
    /* The crate wrote a refilled, fractional count at its own now. */
    double rust_tokens = field(raw, key, "tokens");
    cr_assert(rust_tokens >= 3 && rust_tokens < 4, "crate left %.17g", rust_tokens);
    wk_token_bucket_state st = peek(db, &e, "shared");
    cr_assert(st.tokens >= 3 && st.tokens < 3.5, "we read the crate's %.17g as %.17g", rust_tokens,
              st.tokens);
    o = acquire(db, &e, "shared", 3);
    cr_assert(o.allowed);
    given += 3;
    o = acquire(db, &e, "shared", 2);
    cr_assert_not(o.allowed, "about 0.x tokens left");
    cr_assert(o.retry_after_ms > 100 && o.retry_after_ms <= 200, "retry %lld",
              (long long)o.retry_after_ms);
    cr_assert_not(crate_call(raw, key, 2, &retry), "the crate agrees");
    cr_assert(retry > 100 && retry <= 200, "the crate's retry %lld", retry);
    /* Take turns until both are refused, then check the bound. */
    for (int i = 0; i < 40; i++) {
        wk_test_sleep_ms(10);
        if (i % 2)
            given += crate_call(raw, key, 1, &retry);
        else
            given += acquire(db, &e, "shared", 1).allowed;
    }
    int64_t t1 = server_ms(raw);
    double bound = 10 + (double)(t1 - t0) / 100 + 1;
    cr_assert((double)given <= bound, "%lld given in %lld ms, bound %.2f", given,
              (long long)(t1 - t0), bound);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- the units of the exact arithmetic (known answers) -------------------- */

/* Worked by hand from the rule in collection/token_bucket_units.h. */
Test(token_bucket, exact_units_known_answers)
{
    static const struct {
        double capacity, rate;
        int64_t period_ms;
        uint64_t unit, cap, step_units, step_ms;
    } kat[] = {
        /* 1/3000 per ms: units of 1/3000 token, 1 per ms */
        {20, 1, 3000, 3000, 60000, 1, 1},
        /* 2.5 = 5/2, 0.5/1000 = 1/2000 per ms */
        {2.5, 0.5, 1000, 2000, 5000, 1, 1},
        /* 0.5 = 1/2, 2.5/250 = 1/100 per ms */
        {0.5, 2.5, 250, 100, 50, 1, 1},
        {7, 7, 1000, 1000, 7000, 7, 1},
        {1, 1, 3600000, 3600000, 3600000, 1, 1},
        /* 100 per ms: whole tokens */
        {100000, 100000, 1000, 1, 100000, 100, 1},
        /* 10^15 × 3 > 2^50: whole tokens, 1 every 3 ms */
        {1e15, 1, 3, 1, 1000000000000000, 1, 3},
        {1e15, 7, 1000, 1, 1000000000000000, 7, 1000},
        /* 2^50 tokens, (2^50 - 1) per hour = 375299968947541 per 1.2e6 ms */
        {1125899906842624.0, 1125899906842623.0, 3600000, 1, 1125899906842624,
         375299968947541, 1200000},
        /* two buckets per ms or more: full after every ms */
        {5, 1e300, 1, 1, 5, 5, 1},
        {0x1p-50, 1, 1000, UINT64_C(1) << 50, 1, 1, 1},
        /* 2^49 + 0.5 = (2^50 + 1) / 2 > 2^50 units: refused below */
    };
    for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
        wk__tb_units u;
        char why[300] = "";
        int rc = wk__tb_units_derive(kat[i].capacity, kat[i].rate, kat[i].period_ms, &u, why,
                                     sizeof(why));
        cr_assert_eq(rc, WK__TB_OK, "case %zu: %s", i, why);
        cr_assert(u.unit == kat[i].unit && u.cap == kat[i].cap &&
                      u.step_units == kat[i].step_units && u.step_ms == kat[i].step_ms,
                  "case %zu: got unit %llu cap %llu step %llu per %llu ms", i,
                  (unsigned long long)u.unit, (unsigned long long)u.cap,
                  (unsigned long long)u.step_units, (unsigned long long)u.step_ms);
        /* cap is capacity × unit exactly (the product is a whole number
         * ≤ 2^50, so the double multiplication is exact when it holds). */
        cr_assert_eq(kat[i].capacity * (double)u.unit, (double)u.cap, "case %zu", i);
    }
    wk__tb_units u;
    char why[300];
    cr_assert_eq(wk__tb_units_derive(562949953421312.5, 1, 1000, &u, why, sizeof(why)),
                 WK__TB_BAD_CAPACITY);
    cr_assert(strstr(why, "capacity 562949953421312.5"), "%s", why);
    cr_assert_eq(wk__tb_units_derive(10, 0.1, 1000, &u, why, sizeof(why)), WK__TB_BAD_RATE);
    cr_assert(strstr(why, "rate 0.1 per 1000 ms"), "%s", why);
}
