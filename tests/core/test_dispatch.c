/*
 * tests/core/test_dispatch.c — custom queries through the same dispatch,
 * hook wrappers (writes only, order, failures isolated), scripts and
 * NOSCRIPT recovery.
 */
#include <string.h>

#include "core/db_internal.h"
#include "redis_fixture.h"

/* ---- a custom entity and two custom queries on it */

static const wk_entity visits = WK_CUSTOM_ENTITY("Counter", "visits");

static int parse_integer(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) == WK_REPLY_NIL) {
        *(long long *)q->out = 0;
        return WK_OK;
    }
    size_t len;
    const char *s = wk_reply_str(r, &len);
    if (wk_reply_get_type(r) == WK_REPLY_INTEGER) {
        *(long long *)q->out = wk_reply_integer(r);
        return WK_OK;
    }
    if (wk_reply_get_type(r) == WK_REPLY_STRING && len < 20) {
        char buf[24];
        memcpy(buf, s, len);
        buf[len] = '\0';
        *(long long *)q->out = atoll(buf);
        return WK_OK;
    }
    return wk_diag_fail(d, WK_ECORRUPT, "not a counter");
}

static int counter_add(wk_processor *p, const char *page, long long by, long long *now)
{
    char key[WK_KEY_MAX], num[24];
    size_t key_len;
    wk_name name = wk_name_str(page);
    if (wk_key_build(key, sizeof(key), &key_len, &visits, &name, NULL))
        return WK_EINVAL;
    snprintf(num, sizeof(num), "%lld", by);
    const char *argv[] = {"INCRBY", key, num};
    size_t argvlen[] = {6, key_len, strlen(num)};
    wk_access access = {&visits, WK_WRITE};
    wk_query q = {.name = "counter.add",
                  .effect = {&access, 1},
                  .argc = 3,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_integer,
                  .out = now};
    return wk_process(p, &q);
}

static int counter_get(wk_processor *p, const char *page, long long *now)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    wk_name name = wk_name_str(page);
    if (wk_key_build(key, sizeof(key), &key_len, &visits, &name, NULL))
        return WK_EINVAL;
    const char *argv[] = {"GET", key};
    size_t argvlen[] = {3, key_len};
    wk_access access = {&visits, WK_READ};
    wk_query q = {.name = "counter.get",
                  .effect = {&access, 1},
                  .flags = WK_QUERY_RETRY_SAFE,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_integer,
                  .out = now};
    return wk_process(p, &q);
}

Test(dispatch, custom_query_goes_through_capabilities)
{
    wk_db *rw = wk_test_open(NULL);
    wk_db *ro = wk_test_open(wk_cap_read_only());
    const char *page = wk_test_ns("home");
    long long v = -1;
    cr_assert_eq(counter_add(wk_db_processor(rw), page, 5, &v), WK_OK, "%s", wk_db_errmsg(rw));
    cr_assert_eq(v, 5);
    cr_assert_eq(counter_add(wk_db_processor(ro), page, 1, &v), WK_EDENIED);
    cr_assert_str_eq(wk_db_errmsg(ro),
                     "capability \"read-only\" may not WRITE Counter:visits (counter.add)");
    cr_assert_eq(counter_get(wk_db_processor(ro), page, &v), WK_OK);
    cr_assert_eq(v, 5);
    wk_cap_entry rows[] = {{"Counter", "visits", WK_GRANT_NONE}};
    wk_cap *no_counters;
    cr_assert_eq(wk_cap_new(&no_counters, "no-counters", WK_GRANT_WRITE, rows, 1), WK_OK);
    wk_db *narrow;
    cr_assert_eq(wk_db_narrow(&narrow, rw, no_counters, NULL), WK_OK);
    cr_assert_eq(counter_get(wk_db_processor(narrow), page, &v), WK_EDENIED);
    wk_cap_free(no_counters);
    wk_db_close(narrow);
    wk_db_close(ro);
    wk_db_close(rw);
}

Test(dispatch, redis_error_reply_is_ewredis_with_key)
{
    wk_db *db = wk_test_open(NULL);
    const char *page = wk_test_ns("wrongtype");
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "HSET @@wakuwaku-entity:Counter:visits:%s f v", page));
    long long v;
    cr_assert_eq(counter_add(wk_db_processor(db), page, 1, &v), WK_EREDIS);
    cr_assert(strstr(wk_db_errmsg(db), "WRONGTYPE"), "%s", wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), page), "message names the key: %s", wk_db_errmsg(db));
    /* The handle stays usable. */
    cr_assert_eq(counter_add(wk_db_processor(db), wk_test_ns("fine"), 1, &v), WK_OK);
    /* Lock scripts on a key of the wrong type: a clear error, no crash. */
    wk_entity lock = WK_LOCK_ENTITY("visits-lock", 1000);
    freeReplyObject(wk_test_cmd(raw, "HSET @@wakuwaku-entity:Lock:visits-lock:%s f v", page));
    wk_token t;
    wk_token_random(&t);
    bool ok;
    cr_assert_eq(wk_lock_release(wk_db_processor(db), &lock, wk_name_str(page), &t, &ok),
                 WK_EREDIS);
    cr_assert(strstr(wk_db_errmsg(db), "WRONGTYPE"), "%s", wk_db_errmsg(db));
    redisFree(raw);
    wk_db_close(db);
}

/* ---- hooks */

typedef struct trace {
    char log[1024];
} trace;

static void note(trace *t, const char *what, const wk_query *q)
{
    size_t n = strlen(t->log);
    snprintf(t->log + n, sizeof(t->log) - n, "%s:%s;", what, q->name);
}

static int outer_before(void *ud, const wk_query *q, int st)
{
    (void)st;
    note(ud, "outer-before", q);
    return 0;
}
static int outer_after(void *ud, const wk_query *q, int st)
{
    (void)st;
    note(ud, "outer-after", q);
    return 0;
}
static int inner_before(void *ud, const wk_query *q, int st)
{
    (void)st;
    note(ud, "inner-before", q);
    return -42; /* fails: must not change the query's result */
}
static int inner_after(void *ud, const wk_query *q, int st)
{
    note(ud, st == WK_OK ? "inner-after-ok" : "inner-after-err", q);
    return -43;
}
static void on_error(void *ud, const wk_query *q, const char *hook, int rc)
{
    char what[64];
    snprintf(what, sizeof(what), "error(%s,%d)", hook, rc);
    note(ud, what, q);
}

Test(dispatch, hooks_see_writes_only_in_order_and_cannot_change_results)
{
    wk_db *db = wk_test_open(NULL);
    trace t = {{0}};
    wk_hooks inner, outer;
    wk_hooks_init(&inner, wk_db_processor(db));
    inner.before_write = inner_before;
    inner.after_write = inner_after;
    inner.on_error = on_error;
    inner.userdata = &t;
    wk_hooks_init(&outer, &inner.base);
    outer.before_write = outer_before;
    outer.after_write = outer_after;
    outer.userdata = &t;

    const char *page = wk_test_ns("hooked");
    long long v = 0;
    cr_assert_eq(counter_get(&outer.base, page, &v), WK_OK);
    cr_assert_str_eq(t.log, "", "hooks must not see reads");
    cr_assert_eq(counter_add(&outer.base, page, 2, &v), WK_OK, "hook failure changed the result");
    cr_assert_eq(v, 2, "the write ran although a before hook failed");
    cr_assert_str_eq(t.log,
                     "outer-before:counter.add;inner-before:counter.add;"
                     "error(before_write,-42):counter.add;inner-after-ok:counter.add;"
                     "error(after_write,-43):counter.add;outer-after:counter.add;");

    /* A failing query: after hooks see its status, which is returned unchanged. */
    t.log[0] = '\0';
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_hooks_init(&inner, wk_db_processor(ro));
    inner.after_write = inner_after;
    inner.userdata = &t;
    cr_assert_eq(counter_add(&inner.base, page, 1, &v), WK_EDENIED);
    cr_assert_str_eq(t.log, "inner-after-err:counter.add;");
    cr_assert_str_eq(wk_processor_errmsg(&inner.base),
                     "capability \"read-only\" may not WRITE Counter:visits (counter.add)");
    wk_db_close(ro);
    wk_db_close(db);
}

/* ---- scripts */

static const wk_script echo_script = {"test.echo", "return ARGV[1] .. KEYS[1]"};

static int parse_string(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    size_t len;
    const char *s = wk_reply_str(r, &len);
    if (wk_reply_get_type(r) != WK_REPLY_STRING || len >= 64)
        return wk_diag_fail(d, WK_EPROTO, "bad");
    memcpy(q->out, s, len);
    ((char *)q->out)[len] = '\0';
    return WK_OK;
}

static int run_echo(wk_db *db, char out[64])
{
    const char *argv[] = {"k", "v"};
    size_t argvlen[] = {1, 1};
    wk_query q = {.name = "test.echo",
                  .script = &echo_script,
                  .nkeys = 1,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_string,
                  .out = out};
    return wk_process(wk_db_processor(db), &q);
}

Test(dispatch, scripts_load_on_first_use_and_after_flush)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = wk_test_open_url(s.url, NULL);
    redisContext *raw = wk_test_raw(s.url);
    char out[64];
    cr_assert_eq(run_echo(db, out), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_str_eq(out, "vk");
    cr_assert_eq(wk_test_cmd_calls(raw, "eval"), 1, "first use loads by EVAL");
    cr_assert_eq(run_echo(db, out), WK_OK);
    cr_assert_eq(wk_test_cmd_calls(raw, "evalsha"), 2, "then EVALSHA (1 NOSCRIPT + 1 hit)");
    cr_assert_eq(wk_test_cmd_calls(raw, "eval"), 1);
    freeReplyObject(wk_test_cmd(raw, "SCRIPT FLUSH"));
    cr_assert_eq(run_echo(db, out), WK_OK, "recovers from SCRIPT FLUSH: %s", wk_db_errmsg(db));
    cr_assert_str_eq(out, "vk");
    cr_assert_eq(wk_test_cmd_calls(raw, "eval"), 2);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(dispatch, malformed_queries_are_einval)
{
    wk_db *db = wk_test_open(NULL);
    wk_query empty = {.name = "empty"};
    cr_assert_eq(wk_process(wk_db_processor(db), &empty), WK_EINVAL);
    cr_assert_eq(wk_process(NULL, &empty), WK_EINVAL);
    cr_assert_eq(wk_process(wk_db_processor(db), NULL), WK_EINVAL);
    const char *argv[] = {"k"};
    size_t argvlen[] = {1};
    wk_query bad_keys = {.name = "bad", .script = &echo_script, .nkeys = 3, .argc = 1,
                         .argv = argv, .argvlen = argvlen};
    cr_assert_eq(wk_process(wk_db_processor(db), &bad_keys), WK_EINVAL);
    wk_db_close(db);
}

/* The per-connection SHA-1 cache of scripts: once full, the slot reused is
 * the one filled longest ago, round-robin, and a cached script keeps its
 * slot (no need for a server: the cache is the connection's). */
Test(dispatch, script_cache_recycles_the_oldest_slot)
{
    enum { N = WK__SCRIPT_CACHE + 3 };
    static char sources[N][32];
    static wk_script scripts[N];
    for (int i = 0; i < N; i++) {
        snprintf(sources[i], sizeof(sources[i]), "return %d", i);
        scripts[i] = (wk_script){"cache.test", sources[i]};
    }
    wk__conn *conn = calloc(1, sizeof(*conn));
    cr_assert_not_null(conn);
    for (int i = 0; i < WK__SCRIPT_CACHE; i++)
        wk__script_sha(conn, &scripts[i]);
    cr_assert_eq(conn->nscripts, (size_t)WK__SCRIPT_CACHE);
    for (int i = 0; i < WK__SCRIPT_CACHE; i++)
        cr_assert_eq(conn->scripts[i].script, &scripts[i], "slot %d filled in order", i);

    /* A cached script is found where it is; nothing moves. */
    const char *sha5 = wk__script_sha(conn, &scripts[5]);
    cr_assert_eq(sha5, conn->scripts[5].sha);

    /* Three more: slots 0, 1, 2 (the oldest) are reused, in that order. */
    for (int i = WK__SCRIPT_CACHE; i < N; i++)
        wk__script_sha(conn, &scripts[i]);
    cr_assert_eq(conn->scripts[0].script, &scripts[WK__SCRIPT_CACHE]);
    cr_assert_eq(conn->scripts[1].script, &scripts[WK__SCRIPT_CACHE + 1]);
    cr_assert_eq(conn->scripts[2].script, &scripts[WK__SCRIPT_CACHE + 2]);
    cr_assert_eq(conn->scripts[3].script, &scripts[3], "the others stay");

    /* The SHA-1 of a recycled slot is the new script's. */
    char want[41];
    wk__sha1_hex(sources[WK__SCRIPT_CACHE], strlen(sources[WK__SCRIPT_CACHE]), want);
    cr_assert_str_eq(conn->scripts[0].sha, want);
    free(conn);
}
