/*
 * tests/capability/test_capability.c — every built-in query against the
 * capabilities: read-only refuses each WRITE and allows each READ, a
 * refusal sends nothing (counted by the server), per-entity grants, and
 * narrowing never widens.
 *
 * When you add a built-in query, add a row to its kind's file in
 * tests/kinds/ (see tests/kinds/kinds.h); a new kind's file is picked up
 * without an edit here.
 */
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "support.h"

#include "entity/kind.h"
#include "tests/kinds/kinds.h"

/* Every test gets a private server, so the command counters are ours. */
static wk_test_server server;

static void start(void)
{
    cr_assert_eq(wk_test_server_start(&server, NULL), 0, "redis-server did not start");
}

static void stop(void)
{
    wk_test_server_stop(&server);
}

TestSuite(capability, .init = start, .fini = stop, .timeout = 60);

/* Runs the built-in query `name` of the registry on namespace `ns`. */
static int run(const char *name, wk_processor *p, const char *ns)
{
    for (size_t i = 0; i < wk_test_nqueries(); i++) {
        if (strcmp(wk_test_query_at(i)->name, name) == 0)
            return wk_test_query_at(i)->run(p, ns);
    }
    cr_assert_fail("no query %s in the registry", name);
    return WK_EINVAL;
}

/* Every kind the runtime registers (entity/kind.h) has query rows in
 * tests/kinds/, and every row names a registered kind. */
Test(capability, every_kind_has_query_rows)
{
    for (const wk__kind *const *k = wk__kinds; *k; k++) {
        size_t rows = 0;
        for (size_t i = 0; i < wk_test_nqueries(); i++)
            rows += strcmp(wk_test_query_at(i)->kind, (*k)->name) == 0;
        cr_assert_gt(rows, 0, "kind %s has no rows in tests/kinds/", (*k)->name);
    }
    for (size_t i = 0; i < wk_test_nqueries(); i++)
        cr_assert_not_null(wk__kind_find(wk_test_query_at(i)->kind), "%s: unknown kind %s",
                           wk_test_query_at(i)->name, wk_test_query_at(i)->kind);
}

/* Every built-in query through `p`, whose capability is read-only: each
 * WRITE refused with the capability named and nothing sent, each READ
 * sent. */
static void expect_read_only(wk_processor *p)
{
    redisContext *raw = wk_test_raw(server.url);
    for (size_t i = 0; i < wk_test_nqueries(); i++) {
        const wk_test_query *q = wk_test_query_at(i);
        long long before = wk_test_total_calls(raw);
        int rc = q->run(p, "guarded");
        long long after = wk_test_total_calls(raw);
        if (q->effect == WK_WRITE) {
            cr_assert_eq(rc, WK_EDENIED, "%s: read-only must refuse a WRITE (got %s)", q->name,
                         wk_err_name(rc));
            cr_assert_eq(after, before, "%s: a refused query reached Redis", q->name);
            char want[128];
            snprintf(want, sizeof(want), "capability \"read-only\" may not WRITE %s:guarded",
                     q->kind);
            cr_assert(strstr(wk_processor_errmsg(p), want), "%s: message \"%s\" lacks \"%s\"",
                      q->name, wk_processor_errmsg(p), want);
        } else {
            cr_assert_eq(rc, WK_OK, "%s: read-only must allow a READ (got %s: %s)", q->name,
                         wk_err_name(rc), wk_processor_errmsg(p));
            cr_assert_gt(after, before, "%s: an allowed query reached Redis", q->name);
        }
    }
    redisFree(raw);
}

Test(capability, read_only_refuses_every_write_and_sends_nothing)
{
    wk_db *db = wk_test_open_url(server.url, wk_cap_read_only());
    expect_read_only(wk_db_processor(db));
    wk_db_close(db);
}

/* A pool's shared processor checks exactly as a handle (wakuwaku/pool.h). */
Test(capability, read_only_pool_refuses_every_write_and_sends_nothing)
{
    wk_pool *pool = wk_test_open_pool(server.url, wk_cap_read_only(), 2, 2000, NULL);
    expect_read_only(wk_pool_processor(pool));
    wk_pool_close(pool);
}

Test(capability, read_write_allows_everything)
{
    wk_db *db = wk_test_open_url(server.url, wk_cap_read_write());
    for (size_t i = 0; i < wk_test_nqueries(); i++) {
        int rc = wk_test_query_at(i)->run(wk_db_processor(db), "open");
        cr_assert_eq(rc, WK_OK, "%s: %s: %s", wk_test_query_at(i)->name, wk_err_name(rc),
                     wk_db_errmsg(db));
    }
    wk_db_close(db);
}

Test(capability, none_grant_refuses_reads_too)
{
    wk_cap *cap;
    cr_assert_eq(wk_cap_new(&cap, "nothing", WK_GRANT_NONE, NULL, 0), WK_OK);
    wk_db *db = wk_test_open_url(server.url, cap);
    wk_cap_free(cap);
    redisContext *raw = wk_test_raw(server.url);
    long long before = wk_test_total_calls(raw);
    for (size_t i = 0; i < wk_test_nqueries(); i++) {
        int rc = wk_test_query_at(i)->run(wk_db_processor(db), "x");
        cr_assert_eq(rc, WK_EDENIED, "%s", wk_test_query_at(i)->name);
    }
    cr_assert_eq(wk_test_total_calls(raw), before);
    redisFree(raw);
    wk_db_close(db);
}

Test(capability, per_entity_grants)
{
    wk_cap_entry rows[] = {{WK_KIND_LOCK, "invoice", WK_GRANT_WRITE},
                           {WK_KIND_RWLOCK, "catalog", WK_GRANT_READ}};
    wk_cap *billing;
    cr_assert_eq(wk_cap_new(&billing, "billing", WK_GRANT_NONE, rows, 2), WK_OK);
    wk_db *db = wk_test_open_url(server.url, billing);
    wk_cap_free(billing);
    wk_processor *p = wk_db_processor(db);
    cr_assert_eq(run("lock.try", p, "invoice"), WK_OK);
    cr_assert_eq(run("lock.try", p, "catalog"), WK_EDENIED);
    cr_assert_str_eq(wk_db_errmsg(db),
                     "capability \"billing\" may not WRITE Lock:catalog (lock.try)");
    cr_assert_eq(run("rwlock.inspect", p, "catalog"), WK_OK);
    cr_assert_eq(run("rwlock.try_read", p, "catalog"), WK_EDENIED);
    cr_assert_eq(run("rwlock.inspect", p, "invoice"), WK_EDENIED,
                 "RwLock:invoice is not Lock:invoice");
    wk_db_close(db);
}

Test(capability, narrowing_never_widens)
{
    wk_db *ro = wk_test_open_url(server.url, wk_cap_read_only());
    wk_db *view = NULL;
    cr_assert_eq(wk_db_narrow(&view, ro, wk_cap_read_write(), "module"), WK_OK);
    cr_assert_eq(run("lock.try", wk_db_processor(view), "invoice"), WK_EDENIED);
    cr_assert_eq(run("lock.inspect", wk_db_processor(view), "invoice"), WK_OK);

    wk_db *rw = wk_test_open_url(server.url, wk_cap_read_write());
    wk_cap_entry rows[] = {{WK_KIND_LOCK, "invoice", WK_GRANT_WRITE}};
    wk_cap *only_invoice;
    cr_assert_eq(wk_cap_new(&only_invoice, "invoice-only", WK_GRANT_NONE, rows, 1), WK_OK);
    wk_db *billing = NULL;
    cr_assert_eq(wk_db_narrow(&billing, rw, only_invoice, NULL), WK_OK);
    cr_assert_eq(run("lock.try", wk_db_processor(billing), "invoice"), WK_OK);
    cr_assert_eq(run("lock.try", wk_db_processor(billing), "catalog"), WK_EDENIED);
    cr_assert_eq(run("lock.inspect", wk_db_processor(billing), "catalog"), WK_EDENIED);
    /* Narrowing the narrowed handle back to read-write stays narrow. */
    wk_db *again = NULL;
    cr_assert_eq(wk_db_narrow(&again, billing, wk_cap_read_write(), "again"), WK_OK);
    cr_assert_eq(run("lock.try", wk_db_processor(again), "catalog"), WK_EDENIED);
    cr_assert_eq(run("lock.try", wk_db_processor(again), "invoice"), WK_OK);
    /* The narrowed handle outlives its parent (shared connection). */
    wk_db_close(rw);
    cr_assert_eq(run("lock.inspect", wk_db_processor(again), "invoice"), WK_OK);
    wk_cap_free(only_invoice);
    wk_db_close(again);
    wk_db_close(billing);
    wk_db_close(view);
    wk_db_close(ro);
}

Test(capability, table_rules)
{
    wk_cap *c;
    cr_assert_eq(wk_cap_new(&c, "", WK_GRANT_READ, NULL, 0), WK_EINVAL);
    cr_assert_null(c);
    wk_cap_entry bad[] = {{WK_KIND_LOCK, "", WK_GRANT_READ}};
    cr_assert_eq(wk_cap_new(&c, "x", WK_GRANT_READ, bad, 1), WK_EINVAL);
    wk_cap_entry bad_grant[] = {{WK_KIND_LOCK, "a", (wk_grant)7}};
    cr_assert_eq(wk_cap_new(&c, "x", WK_GRANT_READ, bad_grant, 1), WK_EINVAL);
    wk_cap_entry rows[] = {{WK_KIND_LOCK, "a", WK_GRANT_NONE}, {WK_KIND_LOCK, "a", WK_GRANT_WRITE}};
    cr_assert_eq(wk_cap_new(&c, "x", WK_GRANT_READ, rows, 2), WK_OK);
    cr_assert_eq(wk_cap_grant_of(c, WK_KIND_LOCK, "a"), WK_GRANT_WRITE, "later row wins");
    cr_assert_eq(wk_cap_grant_of(c, WK_KIND_LOCK, "b"), WK_GRANT_READ, "default");
    wk_cap *i;
    cr_assert_eq(wk_cap_intersect(&i, c, wk_cap_read_only(), "both"), WK_OK);
    cr_assert_eq(wk_cap_grant_of(i, WK_KIND_LOCK, "a"), WK_GRANT_READ);
    cr_assert_eq(wk_cap_grant_of(i, WK_KIND_CACHE, "z"), WK_GRANT_READ);
    cr_assert_str_eq(wk_cap_name(i), "both");
    wk_cap_free(i);
    wk_cap_free(c);
    wk_cap_free((wk_cap *)wk_cap_read_only()); /* harmless no-op */
    cr_assert_str_eq(wk_cap_name(wk_cap_read_only()), "read-only");
    wk_entity e = WK_LOCK_ENTITY("a", 1);
    wk_access acc[] = {{&e, WK_READ}, {&e, WK_WRITE}};
    wk_effect eff = {acc, 2};
    size_t denied = 99;
    cr_assert(wk_effect_is_write(&eff));
    cr_assert_not(wk_cap_covers(wk_cap_read_only(), &eff, &denied));
    cr_assert_eq(denied, 1);
    cr_assert(wk_cap_covers(wk_cap_read_write(), &eff, NULL));
}
