/*
 * tests/collection/test_token_bucket_all.c — wk_token_bucket_acquire_all:
 * several buckets taken all or nothing, against a real redis-server (and a
 * local Redis Cluster for the one-slot rule): which bucket refused and its
 * retry hint, a refusal that writes nothing, atomicity under contention
 * across processes, capabilities per bucket, batches, corrupted keys and
 * bad arguments.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_fixture.h"

/* The generated accessors of the golden schema (tests/codegen), for their
 * take constructors. */
#include "tests/codegen/golden/kinds/expected/kinds.c"

static wk_token_bucket_take take(const wk_entity *e, const char *name, uint64_t cost)
{
    wk_token_bucket_take t = {.bucket = e, .name = wk_name_str(name), .cost = cost};
    return t;
}

static wk_token_bucket_all_outcome all(wk_db *db, wk_token_bucket_take *t, size_t n)
{
    wk_token_bucket_all_outcome o;
    int rc = wk_token_bucket_acquire_all(wk_db_processor(db), t, n, &o);
    cr_assert_eq(rc, WK_OK, "acquire_all: %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    return o;
}

static int64_t available(wk_db *db, const wk_entity *e, const char *name)
{
    wk_token_bucket_state st;
    int rc = wk_token_bucket_peek(wk_db_processor(db), e, wk_name_str(name), &st);
    cr_assert_eq(rc, WK_OK, "peek: %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    return st.available;
}

Test(token_bucket_all, takes_from_every_bucket_or_from_none)
{
    wk_db *db = wk_test_open(NULL);
    const char *ns = wk_test_ns("tball");
    wk_entity user = WK_TOKEN_BUCKET_ENTITY(ns, 5, 1, 60000);
    wk_entity ip = WK_TOKEN_BUCKET_ENTITY(ns, 3, 1, 60000);
    wk_entity global = WK_TOKEN_BUCKET_ENTITY(ns, 100, 1, 1000);
    wk_token_bucket_take t[3] = {take(&user, "u42", 1), take(&ip, "10.0.0.1", 1),
                                 take(&global, "all", 1)};
    for (int i = 0; i < 3; i++) {
        wk_token_bucket_all_outcome o = all(db, t, 3);
        cr_assert(o.allowed, "call %d", i);
        cr_assert_eq(o.refused, 3);
        cr_assert_eq(o.retry_after_ms, 0);
        cr_assert(t[0].outcome.allowed && t[1].outcome.allowed && t[2].outcome.allowed);
        cr_assert_eq(t[0].outcome.remaining, 4 - i);
        cr_assert_eq(t[1].outcome.remaining, 2 - i);
        cr_assert_eq(t[2].outcome.remaining, 99 - i);
    }
    /* The IP bucket is empty: refused, and nothing taken from the others. */
    wk_token_bucket_all_outcome o = all(db, t, 3);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.refused, 1, "the IP bucket refused (got %zu)", o.refused);
    cr_assert(o.retry_after_ms > 59000 && o.retry_after_ms <= 60000, "retry %lld",
              (long long)o.retry_after_ms);
    cr_assert(t[0].outcome.allowed, "the user bucket held its cost");
    cr_assert_not(t[1].outcome.allowed);
    cr_assert_eq(t[1].outcome.retry_after_ms, o.retry_after_ms);
    cr_assert_eq(t[0].outcome.remaining, 2, "untouched: still 2");
    cr_assert_eq(available(db, &user, "u42"), 2);
    cr_assert(available(db, &global, "all") <= 97, "the global bucket was not refilled past");
    cr_assert_eq(available(db, &ip, "10.0.0.1"), 0);
    wk_db_close(db);
}

/* wk-codegen gives each TokenBucket entity a constructor of its take
 * (the kind's WK_TOKEN_BUCKET_PARTS row): typed names, the entity filled
 * in, and the array goes to wk_token_bucket_acquire_all as it is. */
Test(token_bucket_all, generated_takes_build_the_call)
{
    wk_db *db = wk_test_open(NULL);
    /* the golden namespaces are fixed: fresh names keep runs apart */
    const char *user = wk_test_ns("user"), *ip = wk_test_ns("ip");
    wk_token_bucket_take t[] = {kinds_login_take(user, 15), kinds_login_take(ip, 1),
                                kinds_export_take(42, 1)};
    cr_assert(t[0].bucket == &kinds_login_entity && t[2].bucket == &kinds_export_entity);
    cr_assert(t[0].name.type == WK_NAME_BYTES && t[0].name.len == strlen(user) &&
              memcmp(t[0].name.bytes, user, strlen(user)) == 0);
    cr_assert(t[2].name.type == WK_NAME_I64 && t[2].name.i64 == 42);
    cr_assert(t[0].cost == 15 && t[1].cost == 1 && t[2].cost == 1);
    /* export holds 0.5 tokens at most: a cost of 1 never fits */
    wk_token_bucket_all_outcome o = all(db, t, 3);
    cr_assert(!o.allowed && o.refused == 2, "refused %zu", o.refused);
    cr_assert_eq(o.retry_after_ms, WK_TOKEN_BUCKET_NEVER);
    o = all(db, t, 2);
    cr_assert(o.allowed);
    o = all(db, t, 2);
    cr_assert(!o.allowed && o.refused == 0, "a second 15 of 20 is refused");
    cr_assert_eq(available(db, &kinds_login_entity, ip), 19, "nothing taken on refusal");
    wk_db_close(db);
}

Test(token_bucket_all, the_retry_hint_is_the_longest_wait_and_never_wins)
{
    wk_db *db = wk_test_open(NULL);
    const char *ns = wk_test_ns("tballretry");
    wk_entity slow = WK_TOKEN_BUCKET_ENTITY(ns, 2, 1, 60000);
    wk_entity fast = WK_TOKEN_BUCKET_ENTITY(ns, 2, 1, 1000);
    wk_token_bucket_take t[2] = {take(&fast, "f", 2), take(&slow, "s", 2)};
    cr_assert(all(db, t, 2).allowed);
    wk_token_bucket_all_outcome o = all(db, t, 2);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.refused, 0, "the first short bucket is named");
    cr_assert(t[0].outcome.retry_after_ms > 1000 && t[0].outcome.retry_after_ms <= 2000);
    cr_assert(t[1].outcome.retry_after_ms > 119000 && t[1].outcome.retry_after_ms <= 120000);
    cr_assert_eq(o.retry_after_ms, t[1].outcome.retry_after_ms, "the longest wait");

    /* A cost over a capacity can never be had. */
    wk_token_bucket_take never[2] = {take(&slow, "n1", 1), take(&fast, "n2", 3)};
    o = all(db, never, 2);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.refused, 1);
    cr_assert_eq(o.retry_after_ms, WK_TOKEN_BUCKET_NEVER);
    cr_assert_eq(never[1].outcome.retry_after_ms, WK_TOKEN_BUCKET_NEVER);
    cr_assert_eq(available(db, &slow, "n1"), 2, "nothing taken");
    wk_db_close(db);
}

/* On a server of its own: the other tests of the suite write meanwhile. */
Test(token_bucket_all, a_refusal_writes_nothing, .init = wk_test_private_start,
     .fini = wk_test_private_stop)
{
    wk_db *db = wk_test_open_url(wk_test_private_url(), NULL);
    redisContext *raw = wk_test_raw(wk_test_private_url());
    const char *ns = wk_test_ns("tballdirty");
    wk_entity a = WK_TOKEN_BUCKET_ENTITY(ns, 10, 1, 1000);
    wk_entity b = WK_TOKEN_BUCKET_ENTITY(ns, 1, 1, 60000);
    wk_token_bucket_take t[2] = {take(&a, "a", 1), take(&b, "b", 1)};
    cr_assert(all(db, t, 2).allowed);
    long long d = wk_test_dirty(raw);
    for (int i = 0; i < 5; i++)
        cr_assert_not(all(db, t, 2).allowed);
    cr_assert_eq(wk_test_dirty(raw), d, "a refused call wrote");
    redisFree(raw);
    wk_db_close(db);
}

/* Four processes take {a, b} together while the buckets refill slowly:
 * an all-or-nothing take drains both by the same amount. Taking them one
 * after the other would drain `a` further whenever `b` refuses. */
Test(token_bucket_all, concurrent_callers_drain_every_bucket_alike, .timeout = 180)
{
    wk_entity a = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tballrace-a"), 400, 1, 3600000);
    wk_entity b = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("tballrace-b"), 150, 1, 3600000);
    int *granted = mmap(NULL, 4 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    cr_assert_neq(granted, MAP_FAILED);
    pid_t kids[4];
    for (int k = 0; k < 4; k++) {
        kids[k] = fork();
        cr_assert_geq(kids[k], 0);
        if (kids[k] == 0) {
            wk_db *db = wk_test_open_child();
            if (!db)
                _exit(3);
            int n = 0;
            for (int i = 0; i < 100; i++) {
                /* a costs 1, b costs 1 or 2: b runs out first. */
                wk_token_bucket_take t[2] = {take(&a, "x", 1), take(&b, "x", 1 + (i & 1))};
                wk_token_bucket_all_outcome o;
                if (wk_token_bucket_acquire_all(wk_db_processor(db), t, 2, &o) != WK_OK) {
                    fprintf(stderr, "child: %s\n", wk_db_errmsg(db));
                    _exit(2);
                }
                n += o.allowed;
            }
            granted[k] = n;
            wk_db_close(db);
            _exit(0);
        }
    }
    for (int k = 0; k < 4; k++) {
        int st;
        cr_assert_eq(waitpid(kids[k], &st, 0), kids[k]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d failed (%d)", k, st);
    }
    int total = granted[0] + granted[1] + granted[2] + granted[3];
    wk_db *db = wk_test_open(NULL);
    int64_t left_a = available(db, &a, "x"), left_b = available(db, &b, "x");
    cr_assert_eq(400 - left_a, total, "a drained by %lld for %d grants", (long long)(400 - left_a),
                 total);
    cr_assert_geq(left_b, 0);
    cr_assert_lt(left_b, 2, "b was drained (%lld left)", (long long)left_b);
    cr_assert(total >= 75 && total <= 150, "grants %d", total);
    munmap(granted, 4 * sizeof(int));
    wk_db_close(db);
}

Test(token_bucket_all, every_bucket_needs_write_access)
{
    const char *ns_a = wk_test_ns("tballcap-a"), *ns_b = wk_test_ns("tballcap-b");
    wk_entity a = WK_TOKEN_BUCKET_ENTITY(ns_a, 5, 1, 1000);
    wk_entity b = WK_TOKEN_BUCKET_ENTITY(ns_b, 5, 1, 1000);
    wk_token_bucket_take t[2] = {take(&a, "a", 1), take(&b, "b", 1)};
    wk_token_bucket_all_outcome o;

    wk_db *ro = wk_test_open(wk_cap_read_only());
    cr_assert_eq(wk_token_bucket_acquire_all(wk_db_processor(ro), t, 2, &o), WK_EDENIED);
    cr_assert_not(o.allowed);

    /* Granted WRITE on the first bucket only (READ on the second). */
    wk_cap_entry rows[] = {{WK_KIND_TOKEN_BUCKET, ns_a, WK_GRANT_WRITE},
                           {WK_KIND_TOKEN_BUCKET, ns_b, WK_GRANT_READ}};
    wk_cap *cap;
    cr_assert_eq(wk_cap_new(&cap, "only-a", WK_GRANT_NONE, rows, 2), WK_OK);
    wk_db *one = wk_test_open(cap);
    cr_assert_eq(wk_token_bucket_acquire_all(wk_db_processor(one), t, 2, &o), WK_EDENIED,
                 "%s", wk_db_errmsg(one));
    cr_assert(strstr(wk_db_errmsg(one), ns_b), "names the bucket: %s", wk_db_errmsg(one));
    cr_assert_not(o.allowed);
    /* The granted bucket alone is fine. */
    cr_assert_eq(wk_token_bucket_acquire_all(wk_db_processor(one), t, 1, &o), WK_OK);
    cr_assert(o.allowed);
    wk_db *rw = wk_test_open(NULL);
    cr_assert_eq(available(rw, &b, "b"), 5, "nothing was taken from b");
    wk_db_close(rw);
    wk_db_close(one);
    wk_cap_free(cap);
    wk_db_close(ro);
}

Test(token_bucket_all, works_in_a_batch)
{
    wk_db *db = wk_test_open(NULL);
    const char *ns = wk_test_ns("tballbatch");
    wk_entity a = WK_TOKEN_BUCKET_ENTITY(ns, 2, 1, 60000);
    wk_entity b = WK_TOKEN_BUCKET_ENTITY(ns, 5, 1, 60000);
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    wk_token_bucket_take t[3][2];
    wk_token_bucket_all_outcome o[3];
    for (int i = 0; i < 3; i++) {
        t[i][0] = take(&a, "a", 1);
        t[i][1] = take(&b, "b", 1);
        cr_assert_eq(wk_token_bucket_acquire_all(wk_batch_processor(batch), t[i], 2, &o[i]),
                     WK_OK);
    }
    cr_assert_not(o[0].allowed, "nothing before exec");
    cr_assert_eq(wk_batch_exec(batch), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(o[0].allowed && o[1].allowed);
    cr_assert_not(o[2].allowed);
    cr_assert_eq(o[2].refused, 0);
    cr_assert_eq(t[1][1].outcome.remaining, 3);
    cr_assert_eq(available(db, &b, "b"), 3, "the refused third took nothing");
    wk_batch_close(batch);
    wk_db_close(db);
}

Test(token_bucket_all, a_corrupted_bucket_takes_nothing_and_is_named)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    const char *ns = wk_test_ns("tballbad");
    wk_entity a = WK_TOKEN_BUCKET_ENTITY(ns, 5, 1, 1000);
    char key[256];
    snprintf(key, sizeof(key), "@@wakuwaku-entity:TokenBucket:%s:bad", ns);
    freeReplyObject(wk_test_cmd(raw, "SET %s hello", key));
    wk_token_bucket_take t[2] = {take(&a, "good", 1), take(&a, "bad", 1)};
    wk_token_bucket_all_outcome o = {.allowed = true};
    cr_assert_eq(wk_token_bucket_acquire_all(wk_db_processor(db), t, 2, &o), WK_ECORRUPT);
    cr_assert_not(o.allowed);
    cr_assert(strstr(wk_db_errmsg(db), key), "%s", wk_db_errmsg(db));
    cr_assert_eq(available(db, &a, "good"), 5);
    redisFree(raw);
    wk_db_close(db);
}

Test(token_bucket_all, bad_arguments_are_refused_before_sending)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity a = WK_TOKEN_BUCKET_ENTITY("tballinval", 5, 1, 1000);
    wk_entity odd = WK_TOKEN_BUCKET_ENTITY("tballinval", 0.1, 1, 1000);
    wk_entity lock = WK_LOCK_ENTITY("tballinval", 1000);
    wk_token_bucket_all_outcome o;
    wk_token_bucket_take t[WK_TOKEN_BUCKET_ALL_MAX + 1];
    for (int i = 0; i <= WK_TOKEN_BUCKET_ALL_MAX; i++) {
        t[i] = take(&a, "x", 1);
        t[i].name = wk_name_i64(i);
    }
    cr_assert_eq(wk_token_bucket_acquire_all(p, t, 0, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire_all(p, t, WK_TOKEN_BUCKET_ALL_MAX + 1, &o), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "8"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_token_bucket_acquire_all(p, NULL, 1, &o), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire_all(p, t, 1, NULL), WK_EINVAL);
    cr_assert_eq(wk_token_bucket_acquire_all(NULL, t, 1, &o), WK_EINVAL);
    /* The largest n is fine. */
    o.refused = 99;
    cr_assert_eq(wk_token_bucket_acquire_all(p, t, WK_TOKEN_BUCKET_ALL_MAX, &o), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(o.allowed);

    wk_token_bucket_take bad[2] = {take(&a, "ok", 1), take(&a, "zero", 0)};
    cr_assert_eq(wk_token_bucket_acquire_all(p, bad, 2, &o), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "take 1"), "%s", wk_db_errmsg(db));
    cr_assert_eq(o.refused, 2);
    bad[1] = take(&lock, "l", 1);
    cr_assert_eq(wk_token_bucket_acquire_all(p, bad, 2, &o), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "take 1"), "%s", wk_db_errmsg(db));
    bad[1] = take(&odd, "o", 1);
    cr_assert_eq(wk_token_bucket_acquire_all(p, bad, 2, &o), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "capacity"), "%s", wk_db_errmsg(db));
    bad[1] = take(&a, NULL, 1);
    cr_assert_eq(wk_token_bucket_acquire_all(p, bad, 2, &o), WK_EINVAL);
    bad[1] = take(&a, "ok", 1);
    cr_assert_eq(wk_token_bucket_acquire_all(p, bad, 2, &o), WK_EINVAL, "one bucket twice");
    cr_assert(strstr(wk_db_errmsg(db), "same bucket"), "%s", wk_db_errmsg(db));
    cr_assert_eq(available(db, &a, "ok"), 5, "nothing of it was sent");
    wk_db_close(db);
}

/* On a cluster: keys in one slot (a shared hash tag) go as one script;
 * keys in several slots are refused before sending, naming them. */
Test(token_bucket_all, a_cluster_needs_one_slot, .timeout = 180)
{
    wk_test_cluster c;
    cr_assert_eq(wk_test_cluster_start(&c), 0, "the cluster did not start");
    wk_db *db = wk_test_open_url(c.url, NULL);
    wk_entity a = WK_TOKEN_BUCKET_ENTITY("tballcl", 3, 1, 60000);
    wk_entity b = WK_TOKEN_BUCKET_ENTITY("tballcl", 1, 1, 60000);
    wk_token_bucket_take same[2] = {take(&a, "{t7}:user", 1), take(&b, "{t7}:all", 1)};
    wk_token_bucket_all_outcome o = all(db, same, 2);
    cr_assert(o.allowed);
    o = all(db, same, 2);
    cr_assert_not(o.allowed);
    cr_assert_eq(o.refused, 1);

    wk_token_bucket_take apart[2] = {take(&a, "user-1", 1), take(&b, "user-2", 1)};
    int rc = wk_token_bucket_acquire_all(wk_db_processor(db), apart, 2, &o);
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), "slot"), "%s", wk_db_errmsg(db));
    cr_assert_eq(available(db, &a, "user-1"), 3, "nothing taken");
    wk_db_close(db);
    wk_test_cluster_stop(&c);
}

static void on_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    (void)msg;
    *(int *)arg = status;
}

/* Through the event loop and a pool: the same answers, takes and outcome
 * filled when the reply is parsed. */
Test(token_bucket_all, works_through_the_event_loop_and_a_pool, .timeout = 180)
{
    const char *ns = wk_test_ns("tballloop");
    wk_entity a = WK_TOKEN_BUCKET_ENTITY(ns, 2, 1, 60000);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_async *loop;
    char err[256];
    cr_assert_eq(wk_async_open(&loop, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_token_bucket_take t[2] = {take(&a, "x", 1), take(&a, "y", 2)};
    wk_token_bucket_all_outcome out;
    int status = -1;
    cr_assert_eq(wk_token_bucket_acquire_all(wk_async_with(loop, on_done, &status), t, 2, &out),
                 WK_OK);
    wk_test_async_drain(loop);
    cr_assert_eq(status, WK_OK);
    cr_assert(out.allowed);
    cr_assert_eq(t[1].outcome.remaining, 0);
    wk_async_close(loop);

    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &o;
    po.size = 2;
    wk_pool *pool;
    cr_assert_eq(wk_pool_open(&pool, &po, NULL, 0), WK_OK);
    cr_assert_eq(wk_token_bucket_acquire_all(wk_pool_processor(pool), t, 2, &out), WK_OK, "%s",
                 wk_pool_errmsg(pool));
    cr_assert_not(out.allowed);
    cr_assert_eq(out.refused, 1, "y is empty");
    cr_assert(t[0].outcome.allowed);
    cr_assert_eq(t[0].outcome.remaining, 1, "x untouched");
    wk_pool_close(pool);
}
