/*
 * tests/core/test_async_settings.c — the settings follower through the
 * event-loop handle (wk_settings_follower_start_async(), wakuwaku/async.h
 * 10.): it subscribes on a hidden connection of the handle's epoll set,
 * loads through the handle, and keeps the guarantees of the thread form
 * (docs/GUARANTEES.md, Settings follower): changes made by another handle
 * arrive, on the loop, from wk_async_process(); a load under steady
 * writes completes and equals the map; a killed subscriber connection is
 * replaced and the mirror reloaded, nothing lost; a forged or undecodable
 * message is never applied; a reset is noticed by the periodic check;
 * halting or closing the handle in the middle of a load is safe. Each
 * test runs its own redis-server (CLIENT KILL and FLUSHDB touch nobody
 * else).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "support.h"

static const wk_entity e = WK_SETTINGS_ENTITY("asettings");

/* Inside wk_async_process() (the test's turn sets it around each one). */
static bool in_process;

typedef struct seen {
    int changes, off_loop;
    int64_t last_version, versions[32];
    int started, start_status;
    char start_msg[256];
} seen;

static void on_change(void *ctx, const wk_settings_change *c)
{
    seen *s = ctx;
    if (s->changes < 32)
        s->versions[s->changes] = c->version;
    s->changes++;
    s->last_version = c->version;
    if (!in_process)
        s->off_loop++;
}

static void on_started(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    seen *s = arg;
    s->started++;
    s->start_status = status;
    snprintf(s->start_msg, sizeof(s->start_msg), "%s", msg);
    if (!in_process)
        s->off_loop++;
}

static void turn(wk_async *a)
{
    in_process = true;
    wk_test_async_turn(a);
    in_process = false;
}

typedef struct env {
    wk_test_server srv;
    wk_async *a;
    wk_db *db;
    wk_processor *p;
    redisContext *raw;
} env;

static void env_open(env *x)
{
    cr_assert_eq(wk_test_server_start(&x->srv, NULL), 0);
    x->a = wk_test_open_async(x->srv.url, NULL, 2000);
    x->db = wk_test_open_url(x->srv.url, NULL);
    x->p = wk_db_processor(x->db);
    x->raw = wk_test_raw(x->srv.url);
}

static void env_close(env *x)
{
    redisFree(x->raw);
    wk_async_close(x->a);
    wk_db_close(x->db);
    wk_test_server_stop(&x->srv);
}

static wk_settings_follower_options loop_options(const char *name, seen *s)
{
    wk_settings_follower_options o = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    o.settings = &e;
    o.name = wk_name_str(name);
    o.on_change = on_change;
    o.ctx = s;
    o.retry_max_ms = 200;
    return o;
}

/* Start a loop follower and turn until its start's callback ran. */
static wk_settings_follower *follow_with(env *x, const wk_settings_follower_options *o, seen *s)
{
    wk_settings_follower *f = NULL;
    char err[256] = "";
    int rc = wk_settings_follower_start_async(&f, wk_async_with(x->a, on_started, s), o, err,
                                              sizeof(err));
    cr_assert_eq(rc, WK_OK, "start: %s: %s", wk_err_name(rc), err);
    cr_assert_not_null(f);
    cr_assert_eq(s->started, 0, "the callback never runs inside the call");
    cr_assert_geq(wk_async_pending(x->a), 1, "the start is pending until its callback");
    while (!s->started)
        turn(x->a);
    cr_assert_eq(wk_async_pending(x->a), 0, "nothing pending once started");
    cr_assert_eq(s->started, 1);
    cr_assert_eq(s->start_status, WK_OK, "first load: %s", s->start_msg);
    return f;
}

static wk_settings_follower *follow(env *x, const char *name, seen *s)
{
    wk_settings_follower_options o = loop_options(name, s);
    return follow_with(x, &o, s);
}

static void put(env *x, const char *name, const char *k, const char *v, int64_t *version)
{
    int rc = wk_settings_put(x->p, &e, wk_name_str(name), k, strlen(k), v, strlen(v), version);
    cr_assert_eq(rc, WK_OK, "put: %s", wk_db_errmsg(x->db));
}

static wk_settings_stats stats_of(wk_settings_follower *f)
{
    wk_settings_stats st;
    cr_assert_eq(wk_settings_follower_stats(f, &st, NULL, 0), WK_OK);
    return st;
}

/* Turn until the mirror equals the map read now through the blocking
 * handle (same version, same entries). */
static void converge(env *x, wk_settings_follower *f, const char *name, const char *what)
{
    wk_settings_map *m = NULL;
    cr_assert_eq(wk_settings_snapshot(x->p, &e, wk_name_str(name), &m), WK_OK);
    wk_settings_map *mine = NULL;
    for (;;) { /* the same version of the same epoch */
        cr_assert_eq(wk_settings_follower_snapshot(f, &mine), WK_OK);
        if (mine->version == m->version && strcmp(mine->epoch, m->epoch) == 0 &&
            stats_of(f).synced)
            break;
        wk_settings_map_free(mine);
        turn(x->a);
    }
    cr_assert_eq(mine->count, m->count, "%s: %zu entries, the map has %zu", what, mine->count,
                 m->count);
    cr_assert_str_eq(mine->epoch, m->epoch, "%s", what);
    for (size_t i = 0; i < m->count; i++) {
        const wk_settings_entry *a = &mine->entries[i], *b = &m->entries[i];
        cr_assert(a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0 &&
                      a->value_len == b->value_len && memcmp(a->value, b->value, a->value_len) == 0,
                  "%s: entry %zu differs", what, i);
    }
    wk_settings_map_free(mine);
    wk_settings_map_free(m);
}

static bool has(wk_settings_follower *f, const char *k, const char *want)
{
    char buf[64];
    size_t len = 0;
    bool found = false;
    cr_assert_eq(wk_settings_follower_get(f, k, strlen(k), buf, sizeof(buf), &len, &found), WK_OK);
    if (!want)
        return found;
    return found && len == strlen(want) && memcmp(buf, want, len) == 0;
}

Test(async_settings, start_checks_its_arguments, .timeout = 120)
{
    env x;
    env_open(&x);
    seen s = {0};
    wk_settings_follower_options o = loop_options("args", &s);
    wk_settings_follower *f = (wk_settings_follower *)&s;
    char err[256];
    /* A blocking handle's processor is not a loop's. */
    cr_assert_eq(wk_settings_follower_start_async(&f, x.p, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert_null(f);
    cr_assert_eq(wk_settings_follower_start_async(&f, NULL, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert_eq(wk_settings_follower_start_async(&f, wk_async_with(x.a, on_started, &s), NULL,
                                                  err, sizeof(err)),
                 WK_EINVAL);
    /* No READ grant: refused at once, nothing queued. */
    wk_cap_entry rows[] = {{WK_KIND_SETTINGS, e.ns, WK_GRANT_NONE}};
    wk_cap *cap;
    cr_assert_eq(wk_cap_new(&cap, "blind", WK_GRANT_WRITE, rows, 1), WK_OK);
    wk_async *blind = wk_test_open_async(x.srv.url, cap, 2000);
    cr_assert_eq(wk_settings_follower_start_async(&f, wk_async_with(blind, on_started, &s), &o,
                                                  err, sizeof(err)),
                 WK_EDENIED, "%s", err);
    cr_assert_null(f);
    cr_assert(strstr(err, "capability \"blind\" may not READ Settings:asettings"), "%s", err);
    cr_assert_eq(wk_async_pending(blind), 0);
    wk_async_close(blind);
    wk_cap_free(cap);
    cr_assert_eq(s.started, 0);
    env_close(&x);
}

Test(async_settings, a_first_sync_that_cannot_connect_ends_the_start_and_halts, .timeout = 120)
{
    wk_test_server srv;
    cr_assert_eq(wk_test_server_start(&srv, NULL), 0);
    char url[64];
    snprintf(url, sizeof(url), "%s", srv.url);
    wk_test_server_stop(&srv); /* nobody listens there now */
    wk_async *a = wk_test_open_async(url, NULL, 500);
    seen s = {0};
    wk_settings_follower_options o = loop_options("gone", &s);
    wk_settings_follower *f = NULL;
    char err[256];
    cr_assert_eq(wk_settings_follower_start_async(&f, wk_async_with(a, on_started, &s), &o, err,
                                                  sizeof(err)),
                 WK_OK, "connecting is the loop's: %s", err);
    while (!s.started)
        turn(a);
    cr_assert_eq(s.started, 1);
    cr_assert_eq(s.start_status, WK_EIO, "%s: %s", wk_err_name(s.start_status), s.start_msg);
    cr_assert_eq(s.off_loop, 0);
    wk_settings_stats st = stats_of(f);
    cr_assert_not(st.synced);
    cr_assert_eq(st.last_status, WK_EIO);
    for (int i = 0; i < 3; i++) /* halted: no retry */
        turn(a);
    cr_assert_eq(s.started, 1);
    wk_settings_follower_free(f);
    wk_async_close(a);
}

Test(async_settings, follows_puts_and_removes_of_another_handle_on_the_loop, .timeout = 120)
{
    env x;
    env_open(&x);
    int64_t v = 0;
    put(&x, "m", "before", "1", &v);
    seen s = {0};
    wk_settings_follower *f = follow(&x, "m", &s);
    cr_assert(has(f, "before", "1"), "the first load is complete when the callback runs");
    cr_assert_eq(wk_settings_follower_version(f), v);
    put(&x, "m", "k", "v1", NULL);
    put(&x, "m", "k", "v2", NULL);
    wk_settings_removal rm;
    cr_assert_eq(wk_settings_remove(x.p, &e, wk_name_str("m"), "before", 6, &rm), WK_OK);
    put(&x, "m", "other", "o", &v);
    while (wk_settings_follower_version(f) < v)
        turn(x.a);
    cr_assert(has(f, "k", "v2"));
    cr_assert(has(f, "other", "o"));
    cr_assert_not(has(f, "before", NULL));
    cr_assert_eq(s.changes, 4, "one callback a change");
    for (int i = 0; i < 4; i++)
        cr_assert_eq(s.versions[i], v - 3 + i, "change %d in version order", i);
    cr_assert_eq(s.last_version, v);
    cr_assert_eq(s.off_loop, 0, "callbacks run from wk_async_process()");
    wk_settings_stats st = stats_of(f);
    cr_assert_eq(st.applied, 4);
    cr_assert_eq(st.snapshots, 1);
    cr_assert(st.synced);
    /* The handle's own queries still run beside the follower. */
    converge(&x, f, "m", "after the changes");
    wk_settings_follower_free(f);
    env_close(&x);
}

/* ---- reads from another thread ------------------------------------------ */

typedef struct reader {
    wk_settings_follower *f;
    atomic_bool stop;
    int reads, bad;
    long last;
} reader;

/* Reads "k" while the loop applies changes: each value is whole and the
 * numbers it carries never go back. */
static void *read_steadily(void *arg)
{
    reader *r = arg;
    while (!atomic_load(&r->stop)) {
        char buf[32];
        size_t len = 0;
        bool found = false;
        if (wk_settings_follower_get(r->f, "k", 1, buf, sizeof(buf) - 1, &len, &found) != WK_OK)
            r->bad++;
        wk_settings_stats st;
        wk_settings_follower_stats(r->f, &st, NULL, 0);
        (void)wk_settings_follower_version(r->f);
        r->reads++;
        if (!found)
            continue;
        buf[len < sizeof(buf) - 1 ? len : sizeof(buf) - 1] = '\0';
        long n = strtol(buf + 1, NULL, 10);
        if (buf[0] != 'v' || n < r->last)
            r->bad++;
        r->last = n;
    }
    return NULL;
}

Test(async_settings, another_thread_reads_while_the_loop_applies, .timeout = 120)
{
    env x;
    env_open(&x);
    put(&x, "threads", "k", "v0", NULL);
    seen s = {0};
    wk_settings_follower *f = follow(&x, "threads", &s);
    reader r = {.f = f};
    atomic_init(&r.stop, false);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, read_steadily, &r), 0);
    int64_t v = 0;
    for (int i = 1; i <= 200; i++) {
        char val[16];
        snprintf(val, sizeof(val), "v%d", i);
        put(&x, "threads", "k", val, &v);
        if (i % 20 == 0)
            turn(x.a);
    }
    while (wk_settings_follower_version(f) < v)
        turn(x.a);
    atomic_store(&r.stop, true);
    pthread_join(t, NULL);
    cr_assert_eq(r.bad, 0, "%d reads went wrong of %d", r.bad, r.reads);
    cr_assert(has(f, "k", "v200"));
    wk_settings_follower_free(f);
    env_close(&x);
}

/* ---- a load under steady writes ---------------------------------------- */

static void fill(env *x, const char *name, int n)
{
    for (int i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof(k), "key-%d", i);
        put(x, name, k, "v", NULL);
    }
}


typedef struct writer {
    const char *url;
    atomic_bool stop;
    int64_t last;
    atomic_int n; /* read by the test while it writes */
} writer;

static void *write_steadily(void *arg)
{
    writer *w = arg;
    wk_db *db = wk_test_open_url(w->url, NULL);
    while (!atomic_load(&w->stop)) {
        char k[32], v[32];
        int n = atomic_fetch_add(&w->n, 1);
        snprintf(k, sizeof(k), "key-%d", n % 4000);
        snprintf(v, sizeof(v), "w%d", n);
        if (wk_settings_put(wk_db_processor(db), &e, wk_name_str("big"), k, strlen(k), v,
                            strlen(v), &w->last) != WK_OK)
            break;
        if (n % 7 == 0)
            wk_settings_remove(wk_db_processor(db), &e, wk_name_str("big"), k, strlen(k), NULL);
    }
    wk_db_close(db);
    return NULL;
}

Test(async_settings, a_load_under_steady_writes_completes_and_equals_the_map, .timeout = 120)
{
    env x;
    env_open(&x);
    fill(&x, "big", 5000); /* five chunks and more */
    writer w = {.url = x.srv.url};
    atomic_init(&w.stop, false);
    atomic_init(&w.n, 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, write_steadily, &w), 0);
    while (atomic_load(&w.n) < 50) /* the writes are on their way before the load starts */
        wk_test_sleep_ms(1);
    seen s = {0};
    wk_settings_follower *f = follow(&x, "big", &s);
    wk_settings_stats st = stats_of(f);
    for (int i = 0; i < 50; i++) /* following while the writes go on */
        turn(x.a);
    atomic_store(&w.stop, true);
    pthread_join(t, NULL);
    cr_assert_gt(atomic_load(&w.n), 50);
    converge(&x, f, "big", "after a load under writes");
    st = stats_of(f);
    cr_assert_eq(s.off_loop, 0);
    cr_assert_gt(st.applied + st.caught_up, 0, "changes were followed");
    wk_settings_follower_free(f);
    env_close(&x);
}

/* ---- a killed subscriber connection ------------------------------------ */

Test(async_settings, a_killed_subscriber_is_replaced_and_nothing_is_lost, .timeout = 120)
{
    env x;
    env_open(&x);
    put(&x, "kill", "a", "1", NULL);
    seen s = {0};
    wk_settings_follower_options o = loop_options("kill", &s);
    o.check_ms = 0; /* the lost socket alone must bring the reload */
    o.keepalive_ms = 0;
    wk_settings_follower *f = follow_with(&x, &o, &s);
    for (int round = 0; round < 5; round++) {
        redisReply *r = wk_test_cmd(x.raw, "CLIENT KILL TYPE pubsub");
        cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
        cr_assert_eq(r->integer, 1, "round %d: the follower's subscriber was killed", round);
        freeReplyObject(r);
        /* Changes while it is gone are published to nobody. */
        char k[16];
        snprintf(k, sizeof(k), "lost-%d", round);
        put(&x, "kill", k, "while-away", NULL);
        converge(&x, f, "kill", "after a killed subscriber");
        cr_assert(has(f, k, "while-away"), "round %d: the change made while away", round);
    }
    wk_settings_stats st = stats_of(f);
    cr_assert_geq(st.reconnects, 5, "a new subscriber each time (%llu)",
                  (unsigned long long)st.reconnects);
    cr_assert_geq(st.snapshots, 6, "a reload each time");
    put(&x, "kill", "after", "x", NULL);
    converge(&x, f, "kill", "following again");
    cr_assert_eq(s.off_loop, 0);
    wk_settings_follower_free(f);
    env_close(&x);
}

/* ---- forged, foreign and undecodable messages ---------------------------- */

static void publish(env *x, const char *name, const char *msg)
{
    char chan[256];
    int n = snprintf(chan, sizeof(chan), "@@wakuwaku-entity:Settings:{asettings:%s}:chan:0", name);
    cr_assert_lt(n, (int)sizeof(chan));
    redisReply *r = wk_test_cmd(x->raw, "PUBLISH %s %b", chan, msg, strlen(msg));
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
    cr_assert_eq(r->integer, 1, "the follower is the channel's subscriber");
    freeReplyObject(r);
}

Test(async_settings, forged_and_foreign_messages_are_never_applied, .timeout = 120)
{
    env x;
    env_open(&x);
    int64_t v = 0;
    put(&x, "forge", "a", "1", &v);
    seen s = {0};
    wk_settings_follower *f = follow(&x, "forge", &s);
    wk_settings_stats before = stats_of(f);

    /* Not decodable: reloaded (the map is the truth). */
    publish(&x, "forge", "garbage");
    while (stats_of(f).snapshots == before.snapshots)
        turn(x.a);
    cr_assert_eq(stats_of(f).gaps, before.gaps + 1);

    /* A made-up epoch with the next version: a check, never applied. */
    char next[24], forged[200];
    snprintf(next, sizeof(next), "%lld", (long long)(v + 1));
    snprintf(forged, sizeof(forged), "P32:%s,%zu:%s,6:forged,1:x,",
             "0123456789abcdef0123456789abcdef", strlen(next), next);
    wk_settings_change c;
    cr_assert_eq(wk_settings_change_decode(forged, strlen(forged), &c), WK_OK, "well formed");
    publish(&x, "forge", forged);
    while (stats_of(f).foreign == 0)
        turn(x.a);
    while (stats_of(f).checks == 0)
        turn(x.a);
    cr_assert_not(has(f, "forged", NULL), "a forged change reached the mirror");
    cr_assert_eq(stats_of(f).resets, 0, "the server's epoch is still the mirror's");

    /* A message of another epoch for real: FLUSHDB (no message), then a
     * put, which makes a new epoch: noticed at that message, reloaded. */
    freeReplyObject(wk_test_cmd(x.raw, "FLUSHDB"));
    put(&x, "forge", "b", "2", NULL);
    converge(&x, f, "forge", "after a new epoch");
    cr_assert_not(has(f, "a", NULL), "the reset removed a");
    cr_assert(has(f, "b", "2"));
    cr_assert_geq(stats_of(f).resets, 1);
    cr_assert_eq(s.off_loop, 0);
    wk_settings_follower_free(f);
    env_close(&x);
}

Test(async_settings, a_reset_alone_is_noticed_by_the_periodic_check, .timeout = 120)
{
    env x;
    env_open(&x);
    put(&x, "reset", "a", "1", NULL);
    put(&x, "reset", "b", "2", NULL);
    seen s = {0};
    wk_settings_follower_options o = loop_options("reset", &s);
    o.check_ms = 100;
    wk_settings_follower *f = follow_with(&x, &o, &s);
    cr_assert(has(f, "a", "1"));
    freeReplyObject(wk_test_cmd(x.raw, "FLUSHDB")); /* publishes nothing */
    while (stats_of(f).resets == 0)
        turn(x.a);
    converge(&x, f, "reset", "after FLUSHDB");
    cr_assert_not(has(f, "a", NULL));
    cr_assert_eq(wk_settings_follower_version(f), 0);
    cr_assert_eq(s.changes, 2, "each removal reported");
    wk_settings_follower_free(f);
    env_close(&x);
}

Test(async_settings, keepalive_pings_go_on_the_subscriber, .timeout = 120)
{
    env x;
    env_open(&x);
    seen s = {0};
    wk_settings_follower_options o = loop_options("idle", &s);
    o.keepalive_ms = 50;
    wk_settings_follower *f = follow_with(&x, &o, &s);
    long long before = wk_test_cmd_calls(x.raw, "ping");
    while (wk_test_cmd_calls(x.raw, "ping") < before + 3)
        turn(x.a);
    cr_assert(stats_of(f).synced);
    cr_assert_eq(stats_of(f).reconnects, 0, "answered PINGs keep the subscriber");
    wk_settings_follower_free(f);
    env_close(&x);
}

/* A stopped server answers no PING: the keep-alive notices it through the
 * loop (the subscriber fails with WK_ETIMEDOUT, nothing blocks), and once
 * the server runs again a new subscriber and a reload follow. */
Test(async_settings, keepalive_notices_a_stalled_server_and_resyncs, .timeout = 120)
{
    env x;
    env_open(&x);
    wk_async_close(x.a);
    x.a = wk_test_open_async(x.srv.url, NULL, 300);
    put(&x, "stall", "a", "1", NULL);
    seen s = {0};
    wk_settings_follower_options o = loop_options("stall", &s);
    o.keepalive_ms = 100;
    o.check_ms = 0; /* the PING alone must notice */
    wk_settings_follower *f = follow_with(&x, &o, &s);
    cr_assert_eq(kill(x.srv.pid, SIGSTOP), 0);
    wk_settings_stats st = stats_of(f);
    while (st.synced || st.last_status != WK_ETIMEDOUT) {
        turn(x.a);
        st = stats_of(f);
    }
    cr_assert_eq(kill(x.srv.pid, SIGCONT), 0);
    put(&x, "stall", "b", "2", NULL);
    converge(&x, f, "stall", "after the stall");
    cr_assert(has(f, "b", "2"));
    cr_assert_geq(stats_of(f).reconnects, 1);
    wk_settings_follower_free(f);
    env_close(&x);
}

/* ---- halting, freeing and closing in the middle of a load --------------- */

/* Start, then turn until a chunk is on its way (the subscription is
 * confirmed and the load began) but not the whole map. */
static wk_settings_follower *start_loading(env *x, const char *name, seen *s)
{
    wk_settings_follower_options o = loop_options(name, s);
    wk_settings_follower *f = NULL;
    char err[256];
    cr_assert_eq(wk_settings_follower_start_async(&f, wk_async_with(x->a, on_started, s), &o, err,
                                                  sizeof(err)),
                 WK_OK, "%s", err);
    long long scripts = wk_test_scripts_run(x->raw);
    while (wk_test_scripts_run(x->raw) == scripts)
        turn(x->a);
    cr_assert_eq(s->started, 0, "still loading");
    return f;
}

Test(async_settings, halt_or_free_while_loading_is_safe, .timeout = 120)
{
    env x;
    env_open(&x);
    fill(&x, "load", 4000);
    seen s = {0};
    wk_settings_follower *f = start_loading(&x, "load", &s);
    wk_settings_follower_halt(f);
    wk_test_async_drain(x.a); /* the chunk in flight completes into nothing */
    for (int i = 0; i < 5; i++)
        turn(x.a);
    cr_assert_eq(s.started, 0, "a halted follower's start callback never runs");
    cr_assert_not(stats_of(f).synced);
    bool found = true;
    cr_assert_eq(wk_settings_follower_get(f, "key-1", 5, NULL, 0, NULL, &found), WK_OK);
    cr_assert_not(found, "the mirror is still empty and readable");
    wk_settings_follower_free(f);

    seen s2 = {0};
    f = start_loading(&x, "load", &s2);
    wk_settings_follower_free(f); /* with a chunk in flight */
    wk_test_async_drain(x.a);
    cr_assert_eq(s2.started, 0);

    /* The handle still works. */
    seen s3 = {0};
    f = follow(&x, "load", &s3);
    cr_assert(has(f, "key-3999", "v"));
    wk_settings_follower_free(f);
    env_close(&x);
}

Test(async_settings, closing_the_handle_while_loading_ends_the_start, .timeout = 120)
{
    env x;
    env_open(&x);
    fill(&x, "close", 3000);
    seen s = {0};
    wk_settings_follower *f = start_loading(&x, "close", &s);
    wk_async_close(x.a);
    x.a = NULL;
    cr_assert_eq(s.started, 1, "the start's callback ran from wk_async_close()");
    cr_assert_eq(s.start_status, WK_EIO, "%s", s.start_msg);
    cr_assert_not(stats_of(f).synced);
    wk_settings_follower_halt(f);
    wk_settings_follower_free(f);
    env_close(&x);
}

Test(async_settings, closing_the_handle_after_the_load_leaves_a_readable_mirror, .timeout = 120)
{
    env x;
    env_open(&x);
    put(&x, "after", "a", "1", NULL);
    seen s = {0};
    wk_settings_follower *f = follow(&x, "after", &s);
    bool reached = false;
    /* _wait would block the loop: a loop follower refuses a waiting one. */
    cr_assert_eq(wk_settings_follower_wait(f, 99, 10, &reached), WK_EINVAL);
    cr_assert_eq(wk_settings_follower_wait(f, 1, 0, &reached), WK_OK);
    cr_assert(reached);
    wk_async_close(x.a);
    x.a = NULL;
    cr_assert_eq(s.started, 1);
    cr_assert(has(f, "a", "1"));
    cr_assert_not(stats_of(f).synced);
    wk_settings_follower_free(f);
    env_close(&x);
}

/* ---- waiting for a version through the loop ------------------------------ */

typedef struct rw {
    env *x;
    wk_settings_follower *f;
    seen *s;
    int64_t version;
    int put_calls, waits, status, changes_then, waited_inside;
    bool had_value;
} rw;

static void on_reached(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a, (void)msg;
    rw *r = arg;
    r->waits++;
    r->status = status;
    r->changes_then = r->s->changes;
    r->had_value = has(r->f, "mine", "written");
    if (!in_process)
        r->s->off_loop++;
}

static void on_put(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    rw *r = arg;
    r->put_calls++;
    cr_assert_eq(status, WK_OK, "%s", msg);
    /* Read your own write: wait for the version the put returned. */
    cr_assert_eq(wk_settings_follower_wait_async(r->f, r->version, 10000, on_reached, r), WK_OK);
    r->waited_inside = r->waits;
}

Test(async_settings, read_your_own_write_waits_through_the_loop, .timeout = 120)
{
    env x;
    env_open(&x);
    put(&x, "ryw", "a", "1", NULL);
    seen s = {0};
    wk_settings_follower *f = follow(&x, "ryw", &s);
    rw r = {.x = &x, .f = f, .s = &s};
    cr_assert_eq(wk_settings_put(wk_async_with(x.a, on_put, &r), &e, wk_name_str("ryw"), "mine", 4,
                                 "written", 7, &r.version),
                 WK_OK);
    while (!r.waits)
        turn(x.a);
    cr_assert_eq(r.waited_inside, 0, "never inside the call");
    cr_assert_eq(r.waits, 1);
    cr_assert_eq(r.status, WK_OK);
    cr_assert(r.had_value, "the mirror had the write when the wait ended");
    cr_assert_eq(r.changes_then, 1, "its change callback ran before");
    cr_assert_eq(s.off_loop, 0);

    /* A version already reached: at the next turn, not inside the call. */
    rw again = {.x = &x, .f = f, .s = &s};
    cr_assert_eq(wk_settings_follower_wait_async(f, r.version, 0, on_reached, &again), WK_OK);
    cr_assert_eq(again.waits, 0);
    while (!again.waits)
        turn(x.a);
    cr_assert_eq(again.status, WK_OK);

    /* A version nobody writes: the time runs out. */
    rw late = {.x = &x, .f = f, .s = &s};
    cr_assert_eq(wk_settings_follower_wait_async(f, r.version + 100, 50, on_reached, &late), WK_OK);
    cr_assert_eq(wk_async_pending(x.a), 1, "a wait is pending until its callback");
    while (!late.waits)
        turn(x.a);
    cr_assert_eq(late.waits, 1);
    cr_assert_eq(late.status, WK_ETIMEDOUT);
    cr_assert_eq(wk_async_pending(x.a), 0);

    /* Refusals: no callback, a thread follower, a halted one. */
    cr_assert_eq(wk_settings_follower_wait_async(f, 1, 0, NULL, NULL), WK_EINVAL);
    cr_assert_eq(wk_settings_follower_wait_async(NULL, 1, 0, on_reached, &late), WK_EINVAL);
    wk_db_options db = WK_DB_OPTIONS_INIT;
    db.url = x.srv.url;
    db.capability = wk_cap_read_write();
    wk_settings_follower_options o = loop_options("ryw", NULL);
    o.on_change = NULL;
    o.db = &db;
    wk_settings_follower *thread = NULL;
    char err[256];
    cr_assert_eq(wk_settings_follower_start(&thread, &o, err, sizeof(err)), WK_OK, "%s", err);
    cr_assert_eq(wk_settings_follower_wait_async(thread, 1, 0, on_reached, &late), WK_EINVAL);
    wk_settings_follower_free(thread);
    wk_settings_follower_halt(f);
    cr_assert_eq(wk_settings_follower_wait_async(f, 1, 0, on_reached, &late), WK_EIO);
    turn(x.a);
    cr_assert_eq(late.waits, 1, "refused: never called");
    wk_settings_follower_free(f);
    env_close(&x);
}

Test(async_settings, closing_the_handle_ends_a_pending_wait_with_eio, .timeout = 120)
{
    env x;
    env_open(&x);
    put(&x, "endwait", "a", "1", NULL);
    seen s = {0};
    wk_settings_follower *f = follow(&x, "endwait", &s);
    rw r = {.x = &x, .f = f, .s = &s};
    cr_assert_eq(wk_settings_follower_wait_async(f, 1000, -1, on_reached, &r), WK_OK);
    for (int i = 0; i < 3; i++)
        turn(x.a);
    cr_assert_eq(r.waits, 0);
    in_process = true; /* wk_async_close() runs it */
    wk_async_close(x.a);
    in_process = false;
    x.a = NULL;
    cr_assert_eq(r.waits, 1);
    cr_assert_eq(r.status, WK_EIO);
    wk_settings_follower_free(f);
    env_close(&x);
}

/* ---- freeing from the follower's own callbacks -------------------------- */

typedef struct self_free {
    wk_settings_follower *f;
    int calls;
} self_free;

static void free_on_change(void *ctx, const wk_settings_change *c)
{
    (void)c;
    self_free *sf = ctx;
    if (sf->calls++ == 0)
        wk_settings_follower_free(sf->f);
}

static void free_on_wait(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a, (void)status, (void)msg;
    self_free *sf = arg;
    sf->calls++;
    wk_settings_follower_free(sf->f);
}

Test(async_settings, freeing_from_its_change_or_wait_callback_is_safe, .timeout = 120)
{
    env x;
    env_open(&x);
    put(&x, "selffree", "a", "1", NULL);
    /* From the change callback, with more changes queued behind it. */
    self_free sf = {0};
    seen s = {0};
    wk_settings_follower_options o = loop_options("selffree", &s);
    o.on_change = free_on_change;
    o.ctx = &sf;
    sf.f = follow_with(&x, &o, &s);
    for (int i = 0; i < 5; i++)
        put(&x, "selffree", "k", "v", NULL);
    while (!sf.calls)
        turn(x.a);
    for (int i = 0; i < 10; i++)
        turn(x.a);
    cr_assert_eq(sf.calls, 1, "halted by the free: no callback after it");
    /* From a wait's callback. */
    self_free sw = {0};
    seen s2 = {0};
    sw.f = follow(&x, "selffree", &s2);
    cr_assert_eq(wk_settings_follower_wait_async(sw.f, 1, 0, free_on_wait, &sw), WK_OK);
    cr_assert_eq(wk_settings_follower_wait_async(sw.f, 1, 0, free_on_wait, &sw), WK_OK);
    while (!sw.calls)
        turn(x.a);
    for (int i = 0; i < 5; i++)
        turn(x.a);
    cr_assert_eq(sw.calls, 1, "the second wait was dropped with the follower");
    /* The handle still works. */
    seen s3 = {0};
    wk_settings_follower *f = follow(&x, "selffree", &s3);
    cr_assert(has(f, "k", "v"));
    wk_settings_follower_free(f);
    env_close(&x);
}
