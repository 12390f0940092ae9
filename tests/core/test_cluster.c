/*
 * tests/core/test_cluster.c — handles against a real Redis Cluster
 * (tests/support/cluster_topology.c: three primaries, three replicas,
 * started ONCE for the suite by the runner and shared by its tests).
 *
 * What it proves: a seed list or any one node's URL finds the cluster;
 * every built-in query of every kind runs against it; a batch fans out to
 * every primary with a status per query; a slot migration under load from
 * forked processes (locks, a limiter, caches) breaks no invariant and
 * really goes through ASK; every lease kind is released, taken (RwLock
 * and FencedLock in single-key steps, acknowledged or given back) and
 * waited for while its slot migrates; a primary failover (CLUSTER
 * FAILOVER, then SIGKILL) under the same load fails calls only with
 * connection errors, after which they succeed again; settings followers,
 * acknowledged leases, helpers and generated code work with a cluster
 * URL; a custom script whose keys span slots is refused before anything
 * is sent.
 *
 * The tests of one run share the topology: those that move slots, fail a
 * node over or count a node's commands hold an exclusive lock on it (a
 * file lock in its directory), the others a shared one.
 */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <fcntl.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include "support.h"
#include "tests/kinds/kinds.h"
#include "collection/settings_internal.h"
#include "core/core_internal.h" /* wk__key_slot: to choose namespaces */
#include "collection/wake.h"         /* the wait queue's keys */
#include "core/async_internal.h" /* the loop handle's redirection counters, its parked waits */

/* ------------------------------------------------------------------------
 * The suite's topology
 * ---------------------------------------------------------------------- */

#define ENV_DIR "WK_TEST_CLUSTER_DIR"

static wk_test_cluster fixture;

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    if (getenv(ENV_DIR))
        return;
    if (wk_test_cluster_start(&fixture) != 0) {
        fprintf(stderr, "cannot start a Redis Cluster for the tests\n");
        exit(1);
    }
    setenv(ENV_DIR, fixture.dir, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    wk_test_cluster_stop(&fixture);
}

/* This test process's view of the topology, and its hold on the lock. */
static wk_test_cluster C;
static int lock_fd = -1;

static void attach(int how)
{
    const char *dir = getenv(ENV_DIR);
    cr_assert(dir, "no cluster");
    char path[128];
    snprintf(path, sizeof(path), "%s/suite.lock", dir);
    lock_fd = open(path, O_RDWR | O_CREAT, 0600);
    cr_assert(lock_fd >= 0);
    cr_assert_eq(flock(lock_fd, how), 0); /* released when the test's process ends */
    cr_assert_eq(wk_test_cluster_attach(&C, dir), 0);
    /* Whatever the test before did, the map is settled before this one. */
    cr_assert_eq(wk_test_cluster_wait_settled(&C, 30000), 0, "the cluster did not settle: %s",
                 wk_test_cluster_unsettled());
}

static void shared(void)
{
    attach(LOCK_SH);
}

static void exclusive(void)
{
    attach(LOCK_EX);
}

static wk_db *open_opts(const wk_db_options *o)
{
    wk_db *db = NULL;
    char err[512];
    int rc = wk_db_open(&db, o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open %s: %s: %s", o->url, wk_err_name(rc), err);
    return db;
}

/* The options of a read-write handle on the suite's cluster. */
static wk_db_options cluster_options(void)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = C.url;
    o.capability = wk_cap_read_write();
    return o;
}

static wk_db *open_cluster(void)
{
    wk_db_options o = cluster_options();
    return open_opts(&o);
}

/* The key of (entity, name) and the port of the primary serving it. */
static int item_port(const wk_entity *e, wk_name name, const char *suffix, char *key, size_t *klen)
{
    cr_assert_eq(wk_key_build(key, WK_KEY_MAX + 1, klen, e, &name, suffix), WK_OK);
    int port = wk_test_cluster_key_port(&C, key, *klen);
    cr_assert(port > 0);
    return port;
}

/* A raw reply of a node, asserted. */
static redisReply *raw_at(int port, const char *fmt, ...)
{
    redisContext *r = wk_test_cluster_raw(&C, port);
    cr_assert(r, "raw connection to %d", port);
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(r, fmt, ap);
    va_end(ap);
    cr_assert(rep, "%s on %d: %s", fmt, port, r->errstr);
    redisFree(r);
    return rep;
}

/* ------------------------------------------------------------------------
 * Opening
 * ---------------------------------------------------------------------- */

static void async_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    *(int *)arg = status;
    cr_assert(status == WK_OK, "%s", msg);
}

Test(cluster, opens_from_a_seed_list_or_any_node, .init = shared, .timeout = 120)
{
    wk_db *db = open_cluster();
    cr_assert_eq(wk_db_cluster_primaries(db), 3);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("open"), 30000);
    wk_token token;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &token, &got), WK_OK,
                 "%s", wk_db_errmsg(db));
    cr_assert(got);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int port = item_port(&lock, wk_name_str("a"), NULL, key, &klen);
    redisReply *r = raw_at(port, "STRLEN %b", key, klen);
    cr_assert_eq(r->integer, WK_TOKEN_LEN, "the write is on the primary of its slot");
    freeReplyObject(r);
    wk_db_close(db);

    /* One node's URL is enough, a replica's too. */
    for (int i = 0; i < WK_TEST_CLUSTER_NODES; i++) {
        cr_assert(C.pid[i] > 0, "node %d is up", i);
        char url[64];
        snprintf(url, sizeof(url), "redis://127.0.0.1:%d", C.port[i]);
        wk_db_options o = WK_DB_OPTIONS_INIT;
        o.url = url;
        o.capability = wk_cap_read_write();
        db = open_opts(&o);
        cr_assert_eq(wk_db_cluster_primaries(db), 3, "through %s", url);
        wk_lock_state st;
        cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("a"), &st), WK_OK,
                     "%s: %s", url, wk_db_errmsg(db));
        cr_assert(st.held, "through %s", url);
        wk_db_close(db);
    }

    /* A standalone server is no cluster. */
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    db = wk_test_open_url(s.url, NULL);
    cr_assert_eq(wk_db_cluster_primaries(db), 0);
    wk_db_close(db);
    wk_test_server_stop(&s);

    /* The near cache opens on one: a shard (subscriber) per primary
     * (near_cache_* below). */
    db = open_cluster();
    wk_entity nce = WK_CACHE_ENTITY(wk_test_ns("near"), 60000);
    const wk_entity *served[] = {&nce};
    wk_near_cache_options no = WK_NEAR_CACHE_OPTIONS_INIT;
    no.entities = served;
    no.nentities = 1;
    wk_near_cache *nc = NULL;
    char nerr[256];
    cr_assert_eq(wk_near_cache_open(&nc, db, &no, nerr, sizeof(nerr)), WK_OK, "%s", nerr);
    wk_near_stats nst;
    cr_assert_eq(wk_near_cache_stats(nc, &nst), WK_OK);
    cr_assert_eq(nst.subscriber_connects, 3);
    wk_near_cache_close(nc);
    wk_db_close(db);

    /* The event-loop handle opens from the seed list as well (its
     * routing: the loop_* tests below). */
    wk_db_options a = WK_DB_OPTIONS_INIT;
    a.url = C.url;
    a.capability = wk_cap_read_write();
    wk_async *as = NULL;
    char err[256];
    cr_assert_eq(wk_async_open(&as, &a, err, sizeof(err)), WK_OK, "%s", err);
    int status = 12345;
    cr_assert_eq(
        wk_lock_try(wk_async_with(as, async_done, &status), &lock, wk_name_str("z"), &token, &got),
        WK_OK);
    wk_test_async_drain(as);
    cr_assert_eq(status, WK_OK, "%s", wk_err_name(status));
    cr_assert(got);
    wk_async_close(as);
}

/* ------------------------------------------------------------------------
 * Every built-in query (tests/kinds/ registry)
 * ---------------------------------------------------------------------- */

/* A namespace for `kind` whose items (name "n": single-key and hash-tagged
 * layouts both) live on the primary at `port`, by the slot map `ports`. */
static void ns_on(char *ns, size_t len, const char *tag, const char *kind, int port,
                  const int *ports)
{
    /* The namespaces tried vary in length, not only in digits: CRC16 is
     * linear, so for keys of one length the plain key's slot is the tagged
     * key's slot XOR a constant of the kind and length, and for some slot
     * ranges (which failovers reshuffle between primaries) no namespace of
     * that length puts both on one primary — 'no namespace for
     * StreamBuffer' in CI, now and then. */
    for (int i = 0; i < 10000; i++) {
        snprintf(ns, len, "%s-%s-%d%.*s", tag, kind, i, i % 16, "pppppppppppppppp");
        char plain[160], tagged[160];
        int pl = snprintf(plain, sizeof(plain), "@@wakuwaku-entity:%s:%s:n", kind, ns);
        int tl = snprintf(tagged, sizeof(tagged), "%s:n", ns);
        if (ports[wk__key_slot(plain, (size_t)pl)] == port &&
            ports[wk__key_slot(tagged, (size_t)tl)] == port)
            return;
    }
    cr_assert_fail("no namespace for %s on %d", kind, port);
}

/* The primaries and a slot table that agree: every slot owned, by one of
 * the three (a node that has just rejoined may answer with a partial map
 * for a moment — seen once under ASan in CI). */
static void primaries_and_table(int prim[3], int ports[16384])
{
    for (int attempt = 0;; attempt++) {
        bool whole =
            wk_test_cluster_primaries(&C, prim) == 3 && wk_test_cluster_slot_table(&C, ports) == 0;
        int owned[3] = {0, 0, 0};
        for (int s = 0; whole && s < 16384; s++) {
            whole = ports[s] == prim[0] || ports[s] == prim[1] || ports[s] == prim[2];
            for (int k = 0; k < 3; k++)
                owned[k] += ports[s] == prim[k];
        }
        /* A table read during a failover may still give a new primary's
         * slots to its old one: each of the three owns some. */
        if (whole && owned[0] && owned[1] && owned[2])
            return;
        cr_assert_lt(attempt, 200, "no slot table that agrees with the primaries in 20 s");
        wk_test_sleep_ms(100);
    }
}

Test(cluster, every_builtin_query_on_every_kind, .init = shared, .timeout = 120)
{
    wk_db *db = open_cluster();
    int prim[3];
    static int ports[16384];
    primaries_and_table(prim, ports);
    char tag[32];
    snprintf(tag, sizeof(tag), "every%d", (int)getpid());
    /* Every row, once with items on each primary (the rows of a kind build
     * on each other, as in the capability test: one namespace per kind). */
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < wk_test_nqueries(); i++) {
            const wk_test_query *q = wk_test_query_at(i);
            char ns[96];
            ns_on(ns, sizeof(ns), tag, q->kind, prim[k], ports);
            int rc = q->run(wk_db_processor(db), ns);
            cr_assert_eq(rc, WK_OK, "%s on %d: %s: %s", q->name, prim[k], wk_err_name(rc),
                         wk_db_errmsg(db));
        }
    }
    wk_db_close(db);
    /* What the rows left behind is on the primary of its slot. */
    for (int k = 0; k < 3; k++) {
        redisReply *r = raw_at(prim[k], "KEYS *%s-*", tag);
        for (size_t i = 0; i < r->elements; i++)
            cr_assert_eq(wk_test_cluster_key_port(&C, r->element[i]->str, r->element[i]->len),
                         prim[k], "%s is on the primary of its slot", r->element[i]->str);
        freeReplyObject(r);
    }
}

/* ------------------------------------------------------------------------
 * A batch fans out
 * ---------------------------------------------------------------------- */

/* Queries over every primary: `locks` lock tries (lock 0 held already:
 * not acquired, WK_OK) and 3 cache gets (0 has a body; 1 holds a hash:
 * WK_ECORRUPT for that query alone; 2 is missing), and the SETs and GETs
 * each primary must run for them (fan_check, after they ran). */
typedef struct fan {
    wk_entity lock, cache;
    int prim[3];
    long long want_set[3], want_get[3], set_before[3], get_before[3];
} fan;

static void fan_prepare(fan *f, wk_db *db, const char *tag, int locks)
{
    char cache_tag[32];
    snprintf(cache_tag, sizeof(cache_tag), "%sc", tag);
    *f = (fan){.lock = WK_LOCK_ENTITY(wk_test_ns(tag), 30000),
               .cache = WK_CACHE_ENTITY(wk_test_ns(cache_tag), 30000)};
    cr_assert_eq(wk_test_cluster_primaries(&C, f->prim), 3);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    for (int i = 0; i < locks; i++) {
        int port = item_port(&f->lock, wk_name_u64((uint64_t)i), NULL, key, &klen);
        for (int k = 0; k < 3; k++) {
            f->want_set[k] += f->prim[k] == port;
            /* lock 0 is held: its try's script reads the holder (GET) to
             * look for a handoff nobody took up */
            f->want_get[k] += i == 0 && f->prim[k] == port;
        }
    }
    wk_token held;
    bool got0 = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &f->lock, wk_name_u64(0), &held, &got0), WK_OK);
    cr_assert(got0);
    cr_assert_eq(wk_cache_put(wk_db_processor(db), &f->cache, wk_name_u64(0), "body", 4), WK_OK);
    int wrong = item_port(&f->cache, wk_name_u64(1), NULL, key, &klen);
    freeReplyObject(raw_at(wrong, "HSET %b f v", key, klen));
    for (int c = 0; c < 3; c++) {
        int port = item_port(&f->cache, wk_name_u64((uint64_t)c), NULL, key, &klen);
        for (int k = 0; k < 3; k++)
            f->want_get[k] += f->prim[k] == port;
    }
    for (int k = 0; k < 3; k++) {
        f->set_before[k] = wk_test_cluster_calls(&C, f->prim[k], "set");
        f->get_before[k] = wk_test_cluster_calls(&C, f->prim[k], "get");
    }
}

static void fan_check(const fan *f)
{
    for (int k = 0; k < 3; k++) {
        long long sets = wk_test_cluster_calls(&C, f->prim[k], "set") - f->set_before[k];
        long long gets = wk_test_cluster_calls(&C, f->prim[k], "get") - f->get_before[k];
        cr_assert_gt(f->want_set[k], 0, "names spread over every primary");
        cr_assert_eq(sets, f->want_set[k], "primary %d ran the SETs of its slots: %lld, not %lld",
                     f->prim[k], sets, f->want_set[k]);
        cr_assert_eq(gets, f->want_get[k], "primary %d: %lld GETs, not %lld", f->prim[k], gets,
                     f->want_get[k]);
    }
}

Test(cluster, batch_of_64_reaches_every_primary_with_a_status_per_query, .init = exclusive,
     .timeout = 120)
{
    wk_db *db = open_cluster();
    enum { LOCKS = 60 };
    fan f;
    fan_prepare(&f, db, "batch", LOCKS);
    wk_entity lock = f.lock, cache = f.cache;
    char key[WK_KEY_MAX + 1];
    size_t klen;

    wk_batch *b = NULL;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    wk_token tokens[LOCKS];
    bool got[LOCKS];
    wk_body bodies[3] = {{0}};
    for (int i = 0; i < LOCKS; i++)
        cr_assert_eq(wk_lock_try(p, &lock, wk_name_u64((uint64_t)i), &tokens[i], &got[i]), WK_OK);
    for (int c = 0; c < 3; c++)
        cr_assert_eq(wk_cache_get(p, &cache, wk_name_u64((uint64_t)c), &bodies[c]), WK_OK);
    /* 64th: a lock try on a name of its own. */
    wk_token last;
    bool got_last = false;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("last"), &last, &got_last), WK_OK);
    cr_assert_eq(wk_batch_count(b), 64);
    int rc = wk_batch_exec(b);
    cr_assert_eq(rc, WK_ECORRUPT, "the first failure is the batch's status: %s (%s)",
                 wk_err_name(rc), wk_db_errmsg(db));
    for (int i = 0; i < LOCKS; i++) {
        cr_assert_eq(wk_batch_status(b, (size_t)i), WK_OK, "lock %d: %s", i,
                     wk_err_name(wk_batch_status(b, (size_t)i)));
        cr_assert_eq(got[i], i != 0, "lock %d acquired iff not held before", i);
    }
    cr_assert_eq(wk_batch_status(b, LOCKS + 0), WK_OK);
    cr_assert(bodies[0].found && bodies[0].len == 4 && memcmp(bodies[0].data, "body", 4) == 0);
    cr_assert_eq(wk_batch_status(b, LOCKS + 1), WK_ECORRUPT, "another type: that query alone");
    cr_assert_eq(wk_batch_status(b, LOCKS + 2), WK_OK);
    cr_assert_not(bodies[2].found);
    cr_assert_eq(wk_batch_status(b, 63), WK_OK);
    cr_assert(got_last);
    int port_last = item_port(&lock, wk_name_str("last"), NULL, key, &klen);
    for (int k = 0; k < 3; k++)
        f.want_set[k] += f.prim[k] == port_last;
    fan_check(&f);
    for (int c = 0; c < 3; c++)
        wk_body_free(&bodies[c]);

    /* The releases, batched too: every one was still held. */
    bool released[LOCKS];
    for (int i = 1; i < LOCKS; i++)
        wk_lock_release(p, &lock, wk_name_u64((uint64_t)i), &tokens[i], &released[i]);
    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    for (int i = 1; i < LOCKS; i++)
        cr_assert(released[i], "lock %d", i);
    wk_batch_close(b);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Load from forked processes: locks, a limiter, caches
 * ---------------------------------------------------------------------- */

#define WORKERS 4
#define LOAD_LOCKS 6
#define LOAD_BUCKETS 2
#define BUCKET_CAP 20
#define BUCKET_RATE 10 /* per second */

/* Shared by the parent and the workers (MAP_SHARED before fork). */
typedef struct load {
    char ns[3][64];          /* lock, bucket, cache namespaces */
    atomic_bool stop, check; /* check: invariants hold (no data loss) */
    atomic_int holders[LOAD_LOCKS];
    atomic_long allowed[LOAD_BUCKETS];           /* while `check` */
    atomic_long calls[WORKERS], streak[WORKERS]; /* streak: OKs in a row */
    atomic_long ok, failed, unknown_reads, other;
    atomic_long failed_single; /* one-key queries and lock releases: never fail */
    atomic_long unknown_multi; /* TRYAGAIN means "did not run": never WK_EUNKNOWN */
    atomic_int violations;
    char violation[256];
    char other_msg[256];
} load;

static wk_entity load_lock(const load *l)
{
    return (wk_entity)WK_LOCK_ENTITY(l->ns[0], 3000);
}
static wk_entity load_bucket(const load *l)
{
    return (wk_entity)WK_TOKEN_BUCKET_ENTITY(l->ns[1], BUCKET_CAP, BUCKET_RATE, 1000);
}
static wk_entity load_cache(const load *l)
{
    return (wk_entity)WK_CACHE_ENTITY(l->ns[2], 30000);
}

static void violated(load *l, const char *what)
{
    if (atomic_fetch_add(&l->violations, 1) == 0)
        snprintf(l->violation, sizeof(l->violation), "%s", what);
}

/* Count one call. `write`: the query writes (a lost reply is then
 * WK_EUNKNOWN; a read never is). `multi`: it names several keys of one
 * slot (a release names the wake keys too), which a slot in migration
 * answers TRYAGAIN while some of them are missing. */
static void count(load *l, int w, int rc, bool write, bool multi, wk_db *db)
{
    atomic_fetch_add(&l->calls[w], 1);
    if (rc == WK_OK) {
        atomic_fetch_add(&l->ok, 1);
        atomic_fetch_add(&l->streak[w], 1);
        return;
    }
    atomic_store(&l->streak[w], 0);
    atomic_fetch_add(&l->failed, 1);
    if (!multi)
        atomic_fetch_add(&l->failed_single, 1);
    else if (rc == WK_EUNKNOWN && atomic_load(&l->check))
        atomic_fetch_add(&l->unknown_multi, 1);
    if (rc == WK_EUNKNOWN && !write)
        atomic_fetch_add(&l->unknown_reads, 1);
    if (!wk_is_connection_error(rc) && atomic_fetch_add(&l->other, 1) == 0)
        snprintf(l->other_msg, sizeof(l->other_msg), "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
}

static int worker(load *l, int w)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = C.url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 1000;
    o.connect_timeout_ms = 1000;
    wk_db *db = NULL;
    if (wk_db_open(&db, &o, NULL, 0) != WK_OK)
        return 2;
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = load_lock(l), bucket = load_bucket(l), cache = load_cache(l);
    char name[16];
    snprintf(name, sizeof(name), "w%d", w);
    uint64_t seq = 0;
    for (unsigned i = (unsigned)w; !atomic_load(&l->stop); i++) {
        /* A lock cycle: nobody else holds the name between try and release. */
        unsigned n = i % LOAD_LOCKS;
        wk_token t;
        bool got = false, released = false;
        int rc = wk_lock_try(p, &lock, wk_name_u64(n), &t, &got);
        count(l, w, rc, true, false, db);
        if (rc == WK_OK && got) {
            if (atomic_fetch_add(&l->holders[n], 1) != 0 && atomic_load(&l->check))
                violated(l, "two holders of one lock name");
            atomic_fetch_sub(&l->holders[n], 1);
            rc = wk_lock_release(p, &lock, wk_name_u64(n), &t, &released);
            /* Its wake keys split by a migration: the single-key form. */
            count(l, w, rc, true, false, db);
            if (rc == WK_OK && !released && atomic_load(&l->check))
                violated(l, "a held lock was not released (lease lost)");
        }
        /* The limiter: what it admits is counted against its bound. */
        wk_token_bucket_outcome out;
        unsigned b = i % LOAD_BUCKETS;
        rc = wk_token_bucket_acquire(p, &bucket, wk_name_u64(b), 1, &out);
        count(l, w, rc, true, false, db);
        if (rc == WK_OK && out.allowed && atomic_load(&l->check))
            atomic_fetch_add(&l->allowed[b], 1);
        /* A cache of this worker's own: a read sees the last write. */
        char body[32];
        int len = snprintf(body, sizeof(body), "%d:%llu", w, (unsigned long long)++seq);
        rc = wk_cache_put(p, &cache, wk_name_str(name), body, (size_t)len);
        count(l, w, rc, true, false, db);
        if (rc == WK_OK) {
            wk_body got_body = {0};
            rc = wk_cache_get(p, &cache, wk_name_str(name), &got_body);
            count(l, w, rc, false, false, db);
            if (rc == WK_OK && atomic_load(&l->check) &&
                (!got_body.found || got_body.len != (size_t)len ||
                 memcmp(got_body.data, body, (size_t)len) != 0))
                violated(l, "a cache read did not see the value just written");
            wk_body_free(&got_body);
        }
    }
    wk_db_close(db);
    return 0;
}

static load *load_start(pid_t kids[WORKERS], const char *tag)
{
    load *l = mmap(NULL, sizeof(load), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(l != MAP_FAILED);
    memset(l, 0, sizeof(*l));
    snprintf(l->ns[0], sizeof(l->ns[0]), "%sl-%d", tag, (int)getpid());
    snprintf(l->ns[1], sizeof(l->ns[1]), "%sb-%d", tag, (int)getpid());
    snprintf(l->ns[2], sizeof(l->ns[2]), "%sc-%d", tag, (int)getpid());
    atomic_store(&l->check, true);
    for (int w = 0; w < WORKERS; w++) {
        pid_t parent = getpid();
        kids[w] = fork();
        cr_assert(kids[w] >= 0);
        if (kids[w] == 0) {
            /* A worker dies with its test and does not keep its lock. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(lock_fd);
            _exit(getppid() == parent ? worker(l, w) : 2);
        }
    }
    return l;
}

/* Until every worker made `more` calls beyond now (bounded by the suite's
 * timeout). */
static void load_run(load *l, long more)
{
    long until[WORKERS];
    for (int w = 0; w < WORKERS; w++)
        until[w] = atomic_load(&l->calls[w]) + more;
    for (int w = 0; w < WORKERS; w++)
        while (atomic_load(&l->calls[w]) < until[w])
            wk_test_sleep_ms(5);
}

/* Until every worker has `n` successful calls in a row. */
static void load_until_streak(load *l, long n)
{
    for (int w = 0; w < WORKERS; w++)
        while (atomic_load(&l->streak[w]) < n)
            wk_test_sleep_ms(5);
}

static void load_stop(load *l, pid_t kids[WORKERS])
{
    atomic_store(&l->stop, true);
    for (int w = 0; w < WORKERS; w++) {
        int status;
        cr_assert_eq(waitpid(kids[w], &status, 0), kids[w]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d ended badly", w);
    }
}

/* The limiter's bound over `seconds` of checked load: capacity + refill,
 * plus one for the refill's rounding. */
static void assert_limiter_bound(const load *l, double seconds)
{
    for (int b = 0; b < LOAD_BUCKETS; b++) {
        long allowed = atomic_load(&l->allowed[b]);
        double bound = BUCKET_CAP + BUCKET_RATE * seconds + 1;
        cr_assert_leq((double)allowed, bound, "bucket %d admitted %ld > %.1f in %.1f s", b, allowed,
                      bound, seconds);
    }
}

/* The slots of every key the load uses. */
static int load_slots(const load *l, int *slots, int max)
{
    wk_entity lock = load_lock(l), bucket = load_bucket(l), cache = load_cache(l);
    wk_name names[LOAD_LOCKS + LOAD_BUCKETS + WORKERS];
    const wk_entity *ents[LOAD_LOCKS + LOAD_BUCKETS + WORKERS];
    char wname[WORKERS][16];
    int n = 0;
    for (int i = 0; i < LOAD_LOCKS; i++, n++) {
        names[n] = wk_name_u64((uint64_t)i);
        ents[n] = &lock;
    }
    for (int i = 0; i < LOAD_BUCKETS; i++, n++) {
        names[n] = wk_name_u64((uint64_t)i);
        ents[n] = &bucket;
    }
    for (int w = 0; w < WORKERS; w++, n++) {
        snprintf(wname[w], sizeof(wname[w]), "w%d", w);
        names[n] = wk_name_str(wname[w]);
        ents[n] = &cache;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        char key[WK_KEY_MAX + 1];
        size_t klen;
        cr_assert_eq(wk_key_build(key, sizeof(key), &klen, ents[i], &names[i], NULL), WK_OK);
        int slot = wk_test_cluster_keyslot(&C, key, klen);
        bool seen = false;
        for (int j = 0; j < k; j++)
            seen |= slots[j] == slot;
        if (!seen && k < max)
            slots[k++] = slot;
    }
    return k;
}

/* ------------------------------------------------------------------------
 * Slot migration under load
 * ---------------------------------------------------------------------- */

Test(cluster, slot_migration_under_load_breaks_no_invariant_and_goes_through_ask, .init = exclusive,
     .timeout = 120)
{
    pid_t kids[WORKERS];
    int64_t t0 = wk_test_now_ms();
    load *l = load_start(kids, "mig");
    load_until_streak(l, 20);
    int slots[32], prim[3];
    int nslots = load_slots(l, slots, 32);
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    wk_test_migration m[32];
    long long asking_before[3];
    for (int k = 0; k < 3; k++)
        asking_before[k] = wk_test_cluster_calls(&C, prim[k], "asking");
    /* Every slot in use moves to the next primary. */
    for (int i = 0; i < nslots; i++) {
        int from = wk_test_cluster_slot_port(&C, slots[i]), to = -1;
        for (int k = 0; k < 3; k++)
            if (prim[k] == from)
                to = prim[(k + 1) % 3];
        cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m[i], slots[i], to), 0, "slot %d",
                     slots[i]);
    }
    /* The ASK window: keys not moved yet are served by the source, new
     * ones (a released lock, say) by the target after ASKING. */
    load_run(l, 200);
    /* Keys move one at a time, with traffic in between. */
    for (bool more = true; more;) {
        more = false;
        for (int i = 0; i < nslots; i++) {
            int moved = wk_test_cluster_migrate_keys(&C, &m[i], 1);
            cr_assert_geq(moved, 0, "MIGRATE of slot %d failed", m[i].slot);
            more |= moved > 0;
        }
        load_run(l, 10);
    }
    load_run(l, 200); /* every key on its target: ASK for all of them */
    for (int i = 0; i < nslots; i++)
        cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m[i]), 0, "slot %d", m[i].slot);
    load_until_streak(l, 50); /* MOVED: the handles learn the new owners */
    load_stop(l, kids);
    double seconds = (double)(wk_test_now_ms() - t0) / 1000.0;

    cr_assert_eq(atomic_load(&l->violations), 0, "%d violations, first: %s",
                 atomic_load(&l->violations), l->violation);
    cr_assert_eq(atomic_load(&l->failed_single), 0,
                 "ASK, MOVED and TRYAGAIN never fail a one-key query or a lock release: %ld "
                 "failed, first: %s",
                 atomic_load(&l->failed_single), l->other_msg);
    cr_assert_eq(atomic_load(&l->unknown_multi), 0, "TRYAGAIN did not run: not WK_EUNKNOWN");
    cr_assert_eq(atomic_load(&l->other), 0, "only \"did not run\" failures: %s", l->other_msg);
    assert_limiter_bound(l, seconds);
    long long asked = 0;
    for (int k = 0; k < 3; k++)
        asked += wk_test_cluster_calls(&C, prim[k], "asking") - asking_before[k];
    cr_assert_gt(asked, 0, "the importing nodes were asked (ASK followed)");
    for (int i = 0; i < nslots; i++)
        cr_assert_eq(wk_test_cluster_slot_port(&C, m[i].slot), m[i].to, "slot %d moved", m[i].slot);
    cr_assert_eq(wk_test_cluster_wait_settled(&C, 30000), 0, "%s", wk_test_cluster_unsettled());
    cr_log_info("migration of %d slots under load: %ld calls ok, %ld releases failed "
                "(TRYAGAIN), ASKING %lld",
                nslots, atomic_load(&l->ok), atomic_load(&l->failed), asked);
    munmap(l, sizeof(*l));
}

/* ------------------------------------------------------------------------
 * Primary failover under load
 * ---------------------------------------------------------------------- */

/* A waiting acquire on a thread of its own. */
typedef struct waiter {
    const wk_entity *lock;
    char name[16];
    int rc;
    bool got;
    char msg[512];
} waiter;

static void *wait_for_lock(void *arg)
{
    waiter *w = arg;
    wk_db *db = open_cluster();
    wk_token t;
    w->rc = wk_lock_acquire(wk_db_processor(db), w->lock, wk_name_str(w->name),
                            wk_monotonic_ms() + 60000, NULL, &t, &w->got);
    snprintf(w->msg, sizeof(w->msg), "%s", wk_db_errmsg(db));
    wk_db_close(db);
    return NULL;
}

/* The clients blocked on the node at `port` (INFO clients). */
static long blocked_clients(int port)
{
    redisReply *r = raw_at(port, "INFO clients");
    const char *at = strstr(r->str, "blocked_clients:");
    long n = at ? atol(at + strlen("blocked_clients:")) : -1;
    freeReplyObject(r);
    return n;
}

Test(cluster, failover_under_load_fails_only_with_connection_errors_then_recovers,
     .init = exclusive, .timeout = 120)
{
    pid_t kids[WORKERS];
    int64_t t0 = wk_test_now_ms();
    load *l = load_start(kids, "fo");
    load_until_streak(l, 20);
    /* The shard of lock 0 carries part of the load. */
    wk_entity lock = load_lock(l);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int primary = item_port(&lock, wk_name_u64(0), NULL, key, &klen);
    int replica = wk_test_cluster_replica_of(&C, primary);
    cr_assert(replica > 0);
    /* And a waiting acquire parks on that primary (BLPOP on a wake list),
     * behind a holder. */
    wk_entity wlock = WK_LOCK_ENTITY(wk_test_ns("fow"), 30000);
    waiter wt = {.lock = &wlock};
    for (int i = 0;; i++) {
        snprintf(wt.name, sizeof(wt.name), "h%d", i);
        if (item_port(&wlock, wk_name_str(wt.name), NULL, key, &klen) == primary)
            break;
    }
    wk_db *holder = open_cluster();
    wk_token held;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(holder), &wlock, wk_name_str(wt.name), &held, &got),
                 WK_OK);
    cr_assert(got);
    pthread_t wth;
    cr_assert_eq(pthread_create(&wth, NULL, wait_for_lock, &wt), 0);
    while (blocked_clients(primary) < 1)
        wk_test_sleep_ms(10);

    /* 1. A manual failover: the replica catches up before it takes over,
     * so nothing is lost and the invariants hold throughout. */
    cr_assert_eq(wk_test_cluster_failover(&C, replica, 30000), 0, "CLUSTER FAILOVER");
    /* The waiter's BLPOP was cut off by the switch (UNBLOCKED: it did not
     * run). The acquire either waits on the new primary and gets the lock
     * when it is released, or fails like any call cut off by a failover:
     * with a connection error, never a Redis error. */
    bool released = false;
    cr_assert_eq(
        wk_lock_release(wk_db_processor(holder), &wlock, wk_name_str(wt.name), &held, &released),
        WK_OK, "%s", wk_db_errmsg(holder));
    cr_assert(released);
    pthread_join(wth, NULL);
    wk_db_close(holder);
    cr_assert(wt.rc == WK_OK ? wt.got : wk_is_connection_error(wt.rc),
              "a waiting acquire across a failover: %s (%s)", wk_err_name(wt.rc), wt.msg);
    cr_log_info("waiting acquire across the failover: %s %s", wk_err_name(wt.rc), wt.msg);
    load_until_streak(l, 50);
    double checked = (double)(wk_test_now_ms() - t0) / 1000.0;
    atomic_store(&l->check, false);
    assert_limiter_bound(l, checked);
    cr_assert_eq(atomic_load(&l->violations), 0, "manual failover: %s", l->violation);
    long failed_manual = atomic_load(&l->failed);

    /* 2. SIGKILL of the new primary: its replica (the old primary) is
     * promoted after the node timeout. Asynchronous replication may lose
     * the last writes, so only the outcomes are checked now. */
    int promoted = wk_test_cluster_kill_primary(&C, replica, 30000);
    cr_assert_eq(promoted, primary, "the old primary, now its replica, was promoted");
    load_until_streak(l, 50);
    load_stop(l, kids);
    /* The killed node comes back as a replica: the topology is whole again
     * (before anything is asserted, for the tests after this one). */
    int restarted = wk_test_cluster_restart(&C, replica, 30000);
    cr_assert_eq(atomic_load(&l->other), 0, "only connection errors: %ld others, first: %s",
                 atomic_load(&l->other), l->other_msg);
    cr_assert_eq(atomic_load(&l->unknown_reads), 0, "a read is never WK_EUNKNOWN");
    cr_log_info("failover under load: %ld ok, %ld failed (%ld in the manual failover)",
                atomic_load(&l->ok), atomic_load(&l->failed), failed_manual);
    munmap(l, sizeof(*l));
    cr_assert_eq(restarted, 0, "the killed node rejoined");
    cr_assert_eq(wk_test_cluster_replica_of(&C, primary), replica, "as the replica");
}

/* ------------------------------------------------------------------------
 * Settings and a follower across nodes
 * ---------------------------------------------------------------------- */

/* The node whose Pub/Sub has a subscriber on `chan`, -1 if none. */
static int subscriber_node(const char *chan, size_t len)
{
    for (int i = 0; i < WK_TEST_CLUSTER_NODES; i++) {
        if (C.pid[i] <= 0)
            continue;
        redisReply *r = raw_at(C.port[i], "PUBSUB NUMSUB %b", chan, len);
        bool here = r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer > 0;
        freeReplyObject(r);
        if (here)
            return C.port[i];
    }
    return -1;
}

/* ------------------------------------------------------------------------
 * The near cache: one tracking shard per primary
 * ---------------------------------------------------------------------- */

/* Names of `e` whose keys land on each of the three primaries: name[k]
 * on ports[k]. */
static void names_on_every_primary(const wk_entity *e, char name[3][16], int ports[3])
{
    int prim[3];
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    bool have[3] = {false, false, false};
    for (int i = 0, got = 0; got < 3; i++) {
        cr_assert_lt(i, 1000, "no name for every primary");
        char n[16], key[WK_KEY_MAX + 1];
        size_t klen;
        snprintf(n, sizeof(n), "n%d", i);
        int port = item_port(e, wk_name_str(n), NULL, key, &klen);
        for (int k = 0; k < 3; k++) {
            if (prim[k] == port && !have[k]) {
                have[k] = true;
                memcpy(name[k], n, sizeof(n));
                ports[k] = port;
                got++;
            }
        }
    }
}

static wk_near_cache *near_open(wk_db *db, const wk_entity *e, wk_near_mode mode)
{
    wk_near_cache_options o = WK_NEAR_CACHE_OPTIONS_INIT;
    const wk_entity *es[1] = {e};
    o.entities = es;
    o.nentities = 1;
    o.mode = mode;
    o.staleness_ms = 1000;
    wk_near_cache *nc = NULL;
    char err[512];
    int rc = wk_near_cache_open(&nc, db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "near_cache_open: %s: %s", wk_err_name(rc), err);
    return nc;
}

/* The near cache's body of `name`, asserted equal to want. */
static void near_expect(wk_near_cache *nc, const wk_entity *e, const char *name, const char *want)
{
    wk_body b = WK_BODY_INIT;
    int rc = wk_near_cache_get(nc, e, wk_name_str(name), &b);
    cr_assert_eq(rc, WK_OK, "get %s: %s: %s", name, wk_err_name(rc), wk_near_cache_errmsg());
    cr_assert(b.found && b.len == strlen(want) && memcmp(b.data, want, b.len) == 0,
              "%s: got \"%.*s\", want \"%s\"", name, (int)b.len, b.found ? (char *)b.data : "",
              want);
    wk_body_free(&b);
}

static wk_near_state near_state(wk_near_cache *nc, const wk_entity *e, const char *name)
{
    wk_near_state st;
    cr_assert_eq(wk_near_cache_peek(nc, e, wk_name_str(name), &st), WK_OK);
    return st;
}

/* Until `name`'s entry is served from memory again (a get now and then
 * re-reads it); false after 10 s. */
static bool near_verified_again(wk_near_cache *nc, const wk_entity *e, const char *name,
                                const char *want)
{
    for (int i = 0; i < 200; i++) {
        near_expect(nc, e, name, want);
        if (near_state(nc, e, name) == WK_NEAR_VERIFIED)
            return true;
        wk_test_sleep_ms(50);
    }
    return false;
}

/* Until the write of `name` on another handle is heard (its entry is no
 * longer served from memory); false after 5 s, five times the bound. */
static bool near_heard(wk_near_cache *nc, const wk_entity *e, const char *name)
{
    for (int i = 0; i < 500; i++) {
        if (near_state(nc, e, name) != WK_NEAR_VERIFIED)
            return true;
        wk_test_sleep_ms(10);
    }
    return false;
}

/* A near cache over a Cache entity of namespace `ns` whose names are on
 * every primary, each holding "v1", read and served from memory. */
typedef struct near_fixture {
    wk_db *db, *writer;
    wk_processor *w;
    wk_entity e;
    char name[3][16];
    int ports[3];
    wk_near_cache *nc;
} near_fixture;

static void near_start(near_fixture *f, const char *ns, wk_near_mode mode)
{
    f->db = open_cluster();
    f->writer = open_cluster();
    f->w = wk_db_processor(f->writer);
    f->e = (wk_entity)WK_CACHE_ENTITY(wk_test_ns(ns), 60000);
    names_on_every_primary(&f->e, f->name, f->ports);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(wk_cache_put(f->w, &f->e, wk_name_str(f->name[k]), "v1", 2), WK_OK, "%s",
                     wk_db_errmsg(f->writer));
    f->nc = near_open(f->db, &f->e, mode);
    for (int k = 0; k < 3; k++)
        cr_assert(near_verified_again(f->nc, &f->e, f->name[k], "v1"),
                  "mode %d: %s on :%d never served from memory", mode, f->name[k], f->ports[k]);
}

static void near_stop(near_fixture *f)
{
    wk_near_cache_close(f->nc);
    wk_db_close(f->writer);
    wk_db_close(f->db);
}

/* A write of `body` to name k through the writer is heard, then read. */
static void near_write_heard(near_fixture *f, int k, const char *body, const char *what)
{
    cr_assert_eq(wk_cache_put(f->w, &f->e, wk_name_str(f->name[k]), body, strlen(body)), WK_OK,
                 "%s", wk_db_errmsg(f->writer));
    cr_assert(near_heard(f->nc, &f->e, f->name[k]), "%s (:%d)", what, f->ports[k]);
    near_expect(f->nc, &f->e, f->name[k], body);
}

/* Entries read from every primary are served from memory, and a write on
 * any primary is heard within the bound (both modes): each primary's
 * invalidations reach the near cache. */
Test(cluster, near_cache_hears_every_primary, .init = shared, .timeout = 120)
{
    for (int mode = WK_NEAR_DEFAULT; mode <= WK_NEAR_BCAST; mode++) {
        near_fixture f;
        near_start(&f, "near", (wk_near_mode)mode);
        for (int k = 0; k < 3; k++)
            near_expect(f.nc, &f.e, f.name[k], "v1");
        wk_near_stats st;
        cr_assert_eq(wk_near_cache_stats(f.nc, &st), WK_OK);
        cr_assert(st.verified && st.hits >= 3, "hits %llu", (unsigned long long)st.hits);
        cr_assert_eq(st.subscriber_connects, 3, "one subscriber per primary");
        for (int k = 0; k < 3; k++)
            near_write_heard(&f, k, "v2", "a write on a primary is heard");
        near_stop(&f);
    }
}

/* One primary's subscriber connection dies: every entry turns unverified
 * (no invalidation may be lost meanwhile), the subscriber comes back, and
 * entries are served from memory again — and still hear writes.
 * Exclusive: CLIENT KILL TYPE pubsub cuts every subscriber of the node. */
Test(cluster, near_cache_recovers_a_lost_subscriber, .init = exclusive, .timeout = 120)
{
    near_fixture f;
    near_start(&f, "nearsub", WK_NEAR_DEFAULT);
    freeReplyObject(raw_at(f.ports[1], "CLIENT KILL TYPE pubsub"));
    bool lost = false;
    for (int i = 0; i < 500 && !lost; i++) {
        lost = near_state(f.nc, &f.e, f.name[0]) != WK_NEAR_VERIFIED;
        wk_test_sleep_ms(10);
    }
    cr_assert(lost, "an entry read from another primary turned unverified too");
    wk_near_stats st;
    for (int i = 0; i < 500; i++) {
        cr_assert_eq(wk_near_cache_stats(f.nc, &st), WK_OK);
        if (st.subscriber_connects >= 4)
            break;
        wk_test_sleep_ms(10);
    }
    cr_assert_geq(st.subscriber_connects, 4, "the lost subscriber came back");
    for (int k = 0; k < 3; k++)
        cr_assert(near_verified_again(f.nc, &f.e, f.name[k], "v1"), "%s served from memory again",
                  f.name[k]);
    near_write_heard(&f, 1, "v2", "a write on the node that lost its subscriber is heard");
    near_stop(&f);
}

/* An entry's slot moves to another primary (MIGRATE): the near cache
 * never serves the old body once the new owner has a newer one, follows
 * the new map, and serves from memory again — and hears the new owner. */
Test(cluster, near_cache_follows_a_slot_migration, .init = exclusive, .timeout = 120)
{
    near_fixture f;
    near_start(&f, "nearmig", WK_NEAR_DEFAULT);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    item_port(&f.e, wk_name_str(f.name[0]), NULL, key, &klen);
    int slot = wk_test_cluster_keyslot(&C, key, klen);
    wk_test_migration m, back;
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m, slot, f.ports[1]), 0);
    while (wk_test_cluster_migrate_keys(&C, &m, 10) > 0) {
    }
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);
    /* The writer learns the new owner (MOVED) and writes there. */
    near_write_heard(&f, 0, "v2", "the moved entry is not served from memory");
    cr_assert(near_verified_again(f.nc, &f.e, f.name[0], "v2"), "served from its new node");
    near_write_heard(&f, 0, "v3", "the new owner's invalidation is heard");
    /* The other primaries' entries are served from memory again too. */
    cr_assert(near_verified_again(f.nc, &f.e, f.name[2], "v1"));
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &back, slot, f.ports[0]), 0);
    while (wk_test_cluster_migrate_keys(&C, &back, 10) > 0) {
    }
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &back), 0);
    near_stop(&f);
}

/* A primary fails over to its replica (CLUSTER FAILOVER) while the near
 * cache only serves from memory: the old primary's ROLE says replica at
 * the next heartbeat, so the near cache asks for the map, subscribes on
 * the new primaries with no get to show it a MOVED, and hears its writes. */
Test(cluster, near_cache_follows_a_failover, .init = exclusive, .timeout = 120)
{
    near_fixture f;
    near_start(&f, "nearfo", WK_NEAR_DEFAULT);
    int replica = wk_test_cluster_replica_of(&C, f.ports[0]);
    cr_assert(replica > 0);
    cr_assert_eq(wk_test_cluster_failover(&C, replica, 30000), 0, "CLUSTER FAILOVER");
    wk_near_stats st;
    for (int i = 0; i < 400; i++) {
        cr_assert_eq(wk_near_cache_stats(f.nc, &st), WK_OK);
        if (st.subscriber_connects >= 6)
            break;
        wk_test_sleep_ms(25);
    }
    cr_assert_geq(st.subscriber_connects, 6, "subscribers on the new primaries, with no get (%llu)",
                  (unsigned long long)st.subscriber_connects);
    cr_assert(near_verified_again(f.nc, &f.e, f.name[0], "v1"), "served from the new primary");
    near_write_heard(&f, 0, "v2", "the new primary's invalidation is heard");
    /* Left failed over, as the other failover tests leave it: the next
     * test takes the primaries as it finds them. */
    cr_assert_eq(wk_test_cluster_wait_settled(&C, 30000), 0, "%s", wk_test_cluster_unsettled());
    near_stop(&f);
}

/* ------------------------------------------------------------------------
 * Acknowledged leases
 * ---------------------------------------------------------------------- */

Test(cluster, acknowledged_lease_waits_for_the_replica_of_its_own_shard, .init = exclusive,
     .timeout = 120)
{
    wk_db_options o = cluster_options();
    o.lease_replicas = 1;
    o.lease_ack_timeout_ms = 2000; /* long: a loaded machine acks late */
    wk_db *db = open_opts(&o);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("ack"), 60000);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    /* A: acknowledged, so its shard's replica has it. */
    wk_token a;
    bool got = false;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("A"), &a, &got), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got);
    int pa = item_port(&lock, wk_name_str("A"), NULL, key, &klen);
    int ra = wk_test_cluster_replica_of(&C, pa);
    redisContext *r = wk_test_cluster_raw(&C, ra);
    cr_assert(r);
    freeReplyObject(redisCommand(r, "READONLY"));
    redisReply *rep = redisCommand(r, "STRLEN %b", key, klen);
    cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == WK_TOKEN_LEN,
              "the replica has the acknowledged lease");
    freeReplyObject(rep);
    redisFree(r);

    /* A name on a shard whose replica is cut off, and one on another. */
    char bname[16], cname[16];
    int pb = -1, pc = -1;
    for (int i = 0; pb < 0 || pc < 0; i++) {
        cr_assert_lt(i, 1000);
        char n[16];
        snprintf(n, sizeof(n), "n%d", i);
        int port = item_port(&lock, wk_name_str(n), NULL, key, &klen);
        if (port == pa && pb < 0) {
            pb = port;
            memcpy(bname, n, sizeof(n));
        } else if (port != pa && pc < 0) {
            pc = port;
            memcpy(cname, n, sizeof(n));
        }
    }
    int ki = -1;
    for (int i = 0; i < WK_TEST_CLUSTER_NODES; i++)
        if (C.port[i] == ra)
            ki = i;
    cr_assert(ki >= 0 && C.pid[ki] > 0);
    kill(C.pid[ki], SIGSTOP);
    freeReplyObject(raw_at(pb, "CLIENT KILL TYPE replica"));
    wk_token b, c;
    int rc = wk_lock_try(p, &lock, wk_name_str(bname), &b, &got);
    int rc_c = wk_lock_try(p, &lock, wk_name_str(cname), &c, &got);
    bool got_c = got;
    kill(C.pid[ki], SIGCONT);
    cr_assert_eq(rc, WK_ENOTREPLICATED, "%s (%s)", wk_err_name(rc), wk_db_errmsg(db));
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str(bname), &st), WK_OK);
    cr_assert_not(st.held, "the unacknowledged lease was given back");
    cr_assert_eq(rc_c, WK_OK, "another shard's replica acknowledges: %s (%s)", wk_err_name(rc_c),
                 wk_db_errmsg(db));
    cr_assert(got_c);
    bool released = false;
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("A"), &a, &released), WK_OK);
    cr_assert(released);
    wk_db_close(db);
    cr_assert_eq(wk_test_cluster_wait_settled(&C, 30000), 0, "the replica is back in sync: %s",
                 wk_test_cluster_unsettled());
}

/* ------------------------------------------------------------------------
 * Custom scripts must keep to one slot
 * ---------------------------------------------------------------------- */

static const wk_entity pairs = WK_CUSTOM_ENTITY("Pair", "pairs");
static const wk_script pair_script = {"test.pair", "return redis.call('MSET', KEYS[1], ARGV[1], "
                                                   "KEYS[2], ARGV[1])"};

static int pair_set(wk_processor *p, const char *k1, const char *k2)
{
    const char *argv[] = {k1, k2, "v"};
    size_t lens[] = {strlen(k1), strlen(k2), 1};
    wk_access access = {&pairs, WK_WRITE};
    wk_query q = {.name = "pair.set",
                  .effect = {&access, 1},
                  .script = &pair_script,
                  .nkeys = 2,
                  .argc = 3,
                  .argv = argv,
                  .argvlen = lens};
    return wk_process(p, &q);
}

Test(cluster, custom_script_across_slots_is_refused_naming_the_keys, .init = shared, .timeout = 120)
{
    wk_db *db = open_cluster();
    char k1[64], k2[64];
    snprintf(k1, sizeof(k1), "pair-a-%d", (int)getpid());
    /* A second key in another slot. */
    int s1 = wk_test_cluster_keyslot(&C, k1, strlen(k1));
    for (int i = 0;; i++) {
        snprintf(k2, sizeof(k2), "pair-b-%d-%d", (int)getpid(), i);
        if (wk_test_cluster_keyslot(&C, k2, strlen(k2)) != s1)
            break;
    }
    int rc = pair_set(wk_db_processor(db), k1, k2);
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), k1) && strstr(wk_db_errmsg(db), k2),
              "the message names the keys: %s", wk_db_errmsg(db));

    /* Hash-tagged into one slot, the same script runs. */
    char t1[64], t2[64];
    snprintf(t1, sizeof(t1), "{pair-%d}a", (int)getpid());
    snprintf(t2, sizeof(t2), "{pair-%d}b", (int)getpid());
    cr_assert_eq(pair_set(wk_db_processor(db), t1, t2), WK_OK, "%s", wk_db_errmsg(db));
    redisReply *r = raw_at(wk_test_cluster_key_port(&C, t2, strlen(t2)), "GET %s", t2);
    cr_assert(r->type == REDIS_REPLY_STRING && strcmp(r->str, "v") == 0);
    freeReplyObject(r);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Helpers, a pool and generated code with a cluster URL
 * ---------------------------------------------------------------------- */

typedef struct holder {
    const wk_entity *lock;
} holder;

static void *hold_then_release(void *arg)
{
    holder *h = arg;
    wk_db *db = open_cluster();
    wk_token t;
    bool got = false, released = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), h->lock, wk_name_str("w"), &t, &got), WK_OK);
    cr_assert(got);
    wk_test_sleep_ms(300);
    wk_lock_release(wk_db_processor(db), h->lock, wk_name_str("w"), &t, &released);
    wk_db_close(db);
    return NULL;
}

static int count_run(wk_cron_ctx *ctx, void *arg)
{
    (void)ctx;
    atomic_fetch_add((atomic_int *)arg, 1);
    return WK_OK;
}

Test(cluster, lease_keeper_waiting_acquire_cron_and_pool_with_a_cluster_url, .init = shared,
     .timeout = 120)
{
    wk_db *db = open_cluster();
    wk_processor *p = wk_db_processor(db);
    /* A waiting acquire wakes on the release (a blocking handle on the
     * item's node). */
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("wait"), 30000);
    holder h = {&lock};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, hold_then_release, &h), 0);
    wk_test_sleep_ms(100);
    wk_token t;
    bool got = false;
    int rc = wk_lock_acquire(p, &lock, wk_name_str("w"), wk_monotonic_ms() + 20000, NULL, &t, &got);
    pthread_join(th, NULL);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got, "acquired after the release");

    /* A lease keeper extends a short lease for several of its TTLs. */
    wk_entity shortl = WK_LOCK_ENTITY(wk_test_ns("keep"), 600);
    cr_assert_eq(wk_lock_try(p, &shortl, wk_name_str("k"), &t, &got), WK_OK);
    cr_assert(got);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = C.url;
    o.capability = wk_cap_read_write();
    wk_lease_keeper_options ko = WK_LEASE_KEEPER_OPTIONS_INIT;
    ko.db = &o;
    ko.entity = &shortl;
    ko.name = wk_name_str("k");
    ko.token = t;
    ko.release = true;
    wk_lease_keeper *k = NULL;
    char err[256];
    cr_assert_eq(wk_lease_keeper_start(&k, &ko, err, sizeof(err)), WK_OK, "%s", err);
    wk_test_sleep_ms(1500);
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &shortl, wk_name_str("k"), &st), WK_OK);
    cr_assert(st.held, "kept past its TTL");
    wk_lease_outcome out;
    cr_assert_eq(wk_lease_keeper_halt(k, &out), WK_OK);
    cr_assert_not(out.lost);
    cr_assert_geq(out.extensions, 3);
    cr_assert(out.released);
    wk_lease_keeper_free(k);

    /* A cron job run once per interval across replicas: two runtimes
     * take its lease through the cluster, and it runs. */
    wk_entity lease = WK_LOCK_ENTITY(wk_test_ns("cron"), 300);
    atomic_int runs = 0;
    wk_cron *crons[2];
    for (int i = 0; i < 2; i++) {
        wk_cron_options co = WK_CRON_OPTIONS_INIT;
        cr_assert_eq(wk_cron_new(&crons[i], &co), WK_OK);
        wk_cron_job j = WK_CRON_JOB_INIT;
        j.name = "tick";
        j.interval_ms = 400;
        j.fn = count_run;
        j.arg = &runs;
        wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
        once.db = &o;
        once.lock = &lease;
        cr_assert_eq(wk_cron_add_once(crons[i], &j, &once), WK_OK, "%s", wk_cron_errmsg(crons[i]));
        cr_assert_eq(wk_cron_start(crons[i]), WK_OK);
    }
    while (atomic_load(&runs) < 3)
        wk_test_sleep_ms(10);
    for (int i = 0; i < 2; i++)
        wk_cron_free(crons[i]);

    /* A pool's handles route too. */
    wk_pool *pool = wk_test_open_pool(C.url, NULL, 2, 5000, NULL);
    wk_entity pl = WK_LOCK_ENTITY(wk_test_ns("pool"), 30000);
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(wk_lock_try(wk_pool_processor(pool), &pl, wk_name_u64((uint64_t)i), &t, &got),
                     WK_OK, "%s", wk_processor_errmsg(wk_pool_processor(pool)));
        cr_assert(got);
    }
    wk_pool_close(pool);
    wk_db_close(db);
}

/* The golden output of tests/codegen/golden/caps/schema.json (test_codegen
 * checks it is what wk-codegen writes). */
#include "tests/codegen/golden/caps/expected/shop.c"

static int count_write(void *userdata, const wk_query *query, int status)
{
    (void)query;
    (void)status;
    ++*(int *)userdata;
    return WK_OK;
}

Test(cluster, generated_accessors_and_a_hook_with_a_cluster_url, .init = shared, .timeout = 120)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = C.url;
    shop_worker w;
    char err[256];
    cr_assert_eq(shop_worker_open(&w, &o, err, sizeof(err)), WK_OK, "%s", err);
    int writes = 0;
    wk_hooks hooks;
    wk_hooks_init(&hooks, w.p);
    hooks.after_write = count_write;
    hooks.userdata = &writes;
    w.p = &hooks.base;
    /* Invoices on every primary. */
    int prim[3], seen[3] = {0};
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (uint64_t i = 0; i < 48; i++) {
        uint64_t invoice = (uint64_t)getpid() * 1000 + i;
        wk_token t;
        bool got = false, released = false;
        cr_assert_eq(shop_worker_invoice_try(&w, invoice, &t, &got), WK_OK, "%s",
                     wk_db_errmsg(w.db));
        cr_assert(got);
        wk_lock_state st;
        cr_assert_eq(shop_worker_invoice_inspect(&w, invoice, &st), WK_OK);
        cr_assert(st.held);
        cr_assert_eq(shop_worker_invoice_release(&w, invoice, &t, &released), WK_OK);
        cr_assert(released);
        char key[WK_KEY_MAX + 1];
        size_t klen;
        int port = item_port(&shop_invoice_entity, wk_name_u64(invoice), NULL, key, &klen);
        for (int k = 0; k < 3; k++)
            seen[k] += prim[k] == port;
    }
    cr_assert_eq(writes, 96, "the hook saw every write (try and release), no read");
    cr_assert(seen[0] && seen[1] && seen[2], "the invoices spread over the primaries");
    /* The read-only replica handle reads through the cluster too. */
    shop_replica rep;
    cr_assert_eq(shop_replica_open(&rep, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_token_bucket_state bs;
    cr_assert_eq(shop_replica_login_peek(&rep, "10.0.0.1", &bs), WK_OK, "%s", wk_db_errmsg(rep.db));
    shop_replica_close(&rep);
    shop_worker_close(&w);
}

/* ------------------------------------------------------------------------
 * Per-node commands: pinned handles and `wk list`
 * ---------------------------------------------------------------------- */

/* The tcp_port field of an INFO server reply. */
static int parse_tcp_port(const wk_query *q, const wk_reply *reply, wk_diag *diag)
{
    const char *s = wk_reply_str(reply, NULL);
    const char *at = s ? strstr(s, "tcp_port:") : NULL;
    if (!at)
        return wk_diag_fail(diag, WK_EPROTO, "no tcp_port in INFO server");
    *(long long *)q->out = atoll(at + 9);
    return WK_OK;
}

Test(cluster, wk_list_and_pinned_handles_see_every_primary, .init = shared, .timeout = 120)
{
    wk_db *db = open_cluster();
    /* The billing schema's profile entity; names far from other tests'. */
    wk_entity profile = WK_HASHED_CACHE_ENTITY("profile", 300000);
    enum { N = 30 };
    bool on_port[65536] = {false};
    for (int i = 0; i < N; i++) {
        wk_name n = wk_name_u64(7700000 + (uint64_t)i);
        cr_assert_eq(wk_hashed_cache_put(wk_db_processor(db), &profile, n, "{}", 2, NULL), WK_OK,
                     "%s", wk_db_errmsg(db));
        char key[WK_KEY_MAX + 1];
        size_t klen;
        on_port[item_port(&profile, n, NULL, key, &klen)] = true;
    }
    int ports[3], spread = 0;
    cr_assert_eq(wk_test_cluster_primaries(&C, ports), 3);
    for (int i = 0; i < 3; i++)
        spread += on_port[ports[i]];
    cr_assert_eq(spread, 3, "the names live on every primary");

    /* A pinned handle runs its keyless commands on its own primary: the
     * three report the three primaries' ports (INFO server). */
    bool answered[3] = {false};
    for (size_t i = 0; i < wk_db_cluster_primaries(db); i++) {
        wk_db *node;
        cr_assert_eq(wk_db_cluster_primary(&node, db, i), WK_OK, "%s", wk_db_errmsg(db));
        const char *argv[2] = {"INFO", "server"};
        size_t lens[2] = {4, 6};
        long long port = 0;
        wk_query q = {.name = "info",
                      .argc = 2,
                      .argv = argv,
                      .argvlen = lens,
                      .parse = parse_tcp_port,
                      .out = &port};
        cr_assert_eq(wk_process(wk_db_processor(node), &q), WK_OK, "%s", wk_db_errmsg(node));
        for (int k = 0; k < 3; k++)
            if (port == ports[k]) {
                cr_assert_not(answered[k], "two pinned handles on %lld", port);
                answered[k] = true;
            }
        wk_db_close(node);
    }
    for (int k = 0; k < 3; k++)
        cr_assert(answered[k], "primary %d answered a pinned handle", ports[k]);
    wk_db *none;
    cr_assert_eq(wk_db_cluster_primary(&none, db, 3), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "3 primaries"), "%s", wk_db_errmsg(db));

    /* `wk list` scans every primary: all N names, once each. */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' --url '%s' --schema '%s' profile list", WK_CLI_PATH, C.url,
             WK_BILLING_SCHEMA);
    FILE *out = popen(cmd, "r");
    cr_assert(out);
    int seen[N] = {0};
    char line[128];
    while (fgets(line, sizeof(line), out)) {
        long long v = atoll(line);
        if (v >= 7700000 && v < 7700000 + N)
            seen[v - 7700000]++;
    }
    cr_assert_eq(pclose(out), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(seen[i], 1, "name %d listed %d times", 7700000 + i, seen[i]);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Leases through a slot migration
 * ---------------------------------------------------------------------- */

/* One lease kind as take / give of a token; `rival` is what exclusivity
 * is checked with (another holder that must not get in). */
typedef struct lease_kind {
    const char *what;
    wk_entity e;
    const char *suffix; /* of its first key (the one a script routes by) */
    int (*take)(wk_processor *, const wk_entity *, wk_name, wk_token *, bool *);
    int (*give)(wk_processor *, const wk_entity *, wk_name, const wk_token *, bool *);
    int (*rival)(wk_processor *, const wk_entity *, wk_name, wk_token *, bool *);
} lease_kind;

static int fenced_take(wk_processor *p, const wk_entity *e, wk_name n, wk_token *t, bool *got)
{
    wk_fenced_lease l;
    int rc = wk_fenced_lock_try(p, e, n, &l);
    *t = l.token;
    *got = rc == WK_OK && l.acquired;
    return rc;
}

/* The waiting acquires of every lease kind, as one signature. */
typedef int (*wait_fn)(wk_processor *, const wk_entity *, wk_name, int64_t, wk_token *, bool *);

static int lock_wait(wk_processor *p, const wk_entity *e, wk_name n, int64_t deadline, wk_token *t,
                     bool *got)
{
    return wk_lock_acquire(p, e, n, deadline, NULL, t, got);
}

static int permit_wait(wk_processor *p, const wk_entity *e, wk_name n, int64_t deadline,
                       wk_token *t, bool *got)
{
    return wk_semaphore_acquire(p, e, n, deadline, t, got);
}

static int write_wait(wk_processor *p, const wk_entity *e, wk_name n, int64_t deadline, wk_token *t,
                      bool *got)
{
    return wk_rwlock_acquire_write(p, e, n, deadline, NULL, t, got);
}

static int read_wait(wk_processor *p, const wk_entity *e, wk_name n, int64_t deadline, wk_token *t,
                     bool *got)
{
    return wk_rwlock_acquire_read(p, e, n, deadline, NULL, t, got);
}

static int fenced_wait(wk_processor *p, const wk_entity *e, wk_name n, int64_t deadline,
                       wk_token *t, bool *got)
{
    wk_fenced_lease l;
    int rc = wk_fenced_lock_acquire(p, e, n, deadline, &l);
    *t = l.token;
    *got = rc == WK_OK && l.acquired;
    if (*got && l.fence < 1)
        return WK_ECORRUPT; /* a lease handed out without its fence */
    return rc;
}

/* A waiting acquire parked behind a holder that `hold` takes and `give`
 * releases (an RwLock's writer waits behind a reader, its reader behind
 * a writer). */
typedef struct wait_kind {
    const char *what;
    wk_entity e;
    const char *name;
    int (*hold)(wk_processor *, const wk_entity *, wk_name, wk_token *, bool *);
    int (*give)(wk_processor *, const wk_entity *, wk_name, const wk_token *, bool *);
    wait_fn wait;
} wait_kind;

typedef struct parked {
    const wait_kind *k;
    int rc;
    bool got;
    char msg[512];
} parked;

static void *park(void *arg)
{
    parked *w = arg;
    wk_db *db = open_cluster();
    wk_token t;
    w->rc = w->k->wait(wk_db_processor(db), &w->k->e, wk_name_str(w->k->name),
                       wk_monotonic_ms() + 60000, &t, &w->got);
    snprintf(w->msg, sizeof(w->msg), "%s", wk_db_errmsg(db));
    wk_db_close(db);
    return NULL;
}

/* The clients blocked on the three primaries. */
static long blocked_on_primaries(void)
{
    int prim[3];
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    long n = 0;
    for (int i = 0; i < 3; i++)
        n += blocked_clients(prim[i]);
    return n;
}

/* Hold the item, park a waiter on it (blocked on its wake-up list), and
 * release it while its slot migrates: the release (single-key form) wakes
 * nobody, and the waiter gets it when the lease it waited for would have
 * run out. */
static void waiter_gets_it(wk_db *db, const wait_kind *k)
{
    wk_token held;
    bool got = false, released = false;
    wk_name name = wk_name_str(k->name);
    int rc = k->hold(wk_db_processor(db), &k->e, name, &held, &got);
    cr_assert_eq(rc, WK_OK, "%s: hold: %s: %s", k->what, wk_err_name(rc), wk_db_errmsg(db));
    cr_assert(got, "%s: hold", k->what);
    long before = blocked_on_primaries();
    parked w = {.k = k};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, park, &w), 0);
    int64_t until = wk_test_now_ms() + 10000;
    while (blocked_on_primaries() <= before && wk_test_now_ms() < until)
        wk_test_sleep_ms(20);
    rc = k->give(wk_db_processor(db), &k->e, name, &held, &released);
    cr_assert_eq(rc, WK_OK, "%s: release: %s", k->what, wk_db_errmsg(db));
    cr_assert(released, "%s: it was held", k->what);
    int64_t t_release = wk_test_now_ms();
    pthread_join(th, NULL);
    cr_assert_eq(w.rc, WK_OK, "the %s waiter: %s: %s", k->what, wk_err_name(w.rc), w.msg);
    cr_assert(w.got, "the %s waiter gets it", k->what);
    cr_assert_lt(wk_test_now_ms() - t_release, k->e.ttl_ms + 3000,
                 "%s: at the latest at its lease-expiry wake (a loaded machine)", k->what);
}

/* The rival handle (a map from before the migration) cannot get in. */
static void shut_out(const lease_kind *k, wk_db *rival, wk_name name, const char *when)
{
    wk_token other;
    bool got = true;
    int rc = k->rival(wk_db_processor(rival), &k->e, name, &other, &got);
    cr_assert_eq(rc, WK_OK, "%s: rival: %s: %s", k->what, wk_err_name(rc), wk_db_errmsg(rival));
    cr_assert_not(got, "%s: %s, so the rival is shut out", k->what, when);
}

/* Release and re-take one held lease within 1 s on `db` while its slot
 * migrates, the rival shut out before and after. */
static void cycle_while_migrating(const lease_kind *k, wk_db *db, wk_db *rival, wk_name name,
                                  wk_token *t)
{
    bool got, released = false;
    shut_out(k, rival, name, "held");
    int64_t t0 = wk_test_now_ms();
    int rc = k->give(wk_db_processor(db), &k->e, name, t, &released);
    cr_assert_eq(rc, WK_OK, "%s: release while migrating: %s: %s", k->what, wk_err_name(rc),
                 wk_db_errmsg(db));
    cr_assert(released, "%s: it was held", k->what);
    got = false;
    rc = k->take(wk_db_processor(db), &k->e, name, t, &got);
    cr_assert_eq(rc, WK_OK, "%s: re-take while migrating: %s: %s", k->what, wk_err_name(rc),
                 wk_db_errmsg(db));
    cr_assert(got, "%s: free after the release, so taken again", k->what);
    int64_t took = wk_test_now_ms() - t0;
    cr_assert_lt(took, 1000, "%s: release and re-take took %lld ms", k->what, (long long)took);
    shut_out(k, rival, name, "held again");
}

/* Whether `key` of (e, name) is on the node at `port` (asked after
 * ASKING: an importing node answers for the slot's keys only then). */
static bool key_on(const wk_entity *e, const char *name, const char *suffix, int port)
{
    char key[WK_KEY_MAX + 1];
    size_t klen;
    item_port(e, wk_name_str(name), suffix, key, &klen);
    redisContext *c = wk_test_cluster_raw(&C, port);
    cr_assert(c, "raw connection to %d", port);
    redisAppendCommand(c, "ASKING");
    redisAppendCommand(c, "EXISTS %b", key, klen);
    redisReply *asking = NULL, *r = NULL;
    cr_assert_eq(redisGetReply(c, (void **)&asking), REDIS_OK);
    cr_assert_eq(redisGetReply(c, (void **)&r), REDIS_OK);
    /* A migrating source sends a key it does not have to the target. */
    bool ask = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) == 0;
    cr_assert(ask || r->type == REDIS_REPLY_INTEGER, "EXISTS on %d: %s", port,
              r->type == REDIS_REPLY_ERROR ? r->str : "?");
    bool there = !ask && r->integer == 1;
    freeReplyObject(asking);
    freeReplyObject(r);
    redisFree(c);
    return there;
}

Test(cluster, every_lease_kind_is_released_and_taken_again_while_its_slot_migrates,
     .init = exclusive, .timeout = 120)
{
    const char *ns = wk_test_ns("mig");
    const lease_kind kinds[] = {
        {"Lock", WK_LOCK_ENTITY(ns, 30000), NULL, wk_lock_try, wk_lock_release, wk_lock_try},
        {"fair Lock", WK_LOCK_FAIR_ENTITY(ns, 30000), NULL, wk_lock_try, wk_lock_release,
         wk_lock_try},
        {"RwLock write", WK_RWLOCK_ENTITY(ns, 30000), ":w", wk_rwlock_try_write,
         wk_rwlock_release_write, wk_rwlock_try_read},
        {"RwLock read", WK_RWLOCK_ENTITY(ns, 30000), ":w", wk_rwlock_try_read,
         wk_rwlock_release_read, wk_rwlock_try_write},
        {"FencedLock", WK_FENCED_LOCK_ENTITY(ns, 30000), ":lease", fenced_take,
         wk_fenced_lock_release, fenced_take},
        {"Semaphore", WK_SEMAPHORE_ENTITY(ns, 1, 30000), ":permits", wk_semaphore_try,
         wk_semaphore_release, wk_semaphore_try},
    };
    enum { KINDS = sizeof(kinds) / sizeof(kinds[0]) };
    const lease_kind *rw = &kinds[2], *sem = &kinds[5];
    /* Two items per kind sharing a slot (the brace in the name): one of
     * the slot's keys moves, the other stays on the source. The RwLock
     * kinds get names of their own. */
    static const char *const names[KINDS][2] = {{"{m}l1", "{m}l2"}, {"{m}f1", "{m}f2"},
                                                {"{m}w1", "{m}w2"}, {"{m}r1", "{m}r2"},
                                                {"{m}x1", "{m}x2"}, {"{m}s1", "{m}s2"}};
    /* Items whose leases all ran out while their key stays (a permit, a
     * reader beside a held writer): a take on the migrating source must
     * not touch the key again once its pruning emptied it. */
    static const char *const stale[2] = {"{m}e1", "{m}e2"};
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = C.url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 3000; /* a TRYAGAIN that waits it out shows as > 1 s */
    wk_db *db = open_opts(&o), *rival = open_opts(&o);
    wk_token tokens[KINDS][2], stale_permit[2], stale_writer[2];
    for (int k = 0; k < KINDS; k++)
        for (int i = 0; i < 2; i++) {
            bool got = false;
            cr_assert_eq(kinds[k].take(wk_db_processor(db), &kinds[k].e, wk_name_str(names[k][i]),
                                       &tokens[k][i], &got),
                         WK_OK, "%s %s: %s", kinds[k].what, names[k][i], wk_db_errmsg(db));
            cr_assert(got, "%s %s", kinds[k].what, names[k][i]);
        }
    for (int i = 0; i < 2; i++) {
        bool got = false, wgot = false;
        cr_assert_eq(wk_semaphore_try(wk_db_processor(db), &sem->e, wk_name_str(stale[i]),
                                      &stale_permit[i], &got),
                     WK_OK, "%s", wk_db_errmsg(db));
        cr_assert_eq(wk_rwlock_try_write(wk_db_processor(db), &rw->e, wk_name_str(stale[i]),
                                         &stale_writer[i], &wgot),
                     WK_OK, "%s", wk_db_errmsg(db));
        cr_assert(got && wgot);
        /* A reader whose lease ended long ago, in a set that lives on. */
        char key[WK_KEY_MAX + 1];
        size_t klen;
        int port = item_port(&rw->e, wk_name_str(stale[i]), ":r", key, &klen);
        freeReplyObject(raw_at(port, "ZADD %b 1 gone", key, klen));
        freeReplyObject(raw_at(port, "PEXPIRE %b 60000", key, klen));
    }

    /* Begin moving every slot these items are in to the next primary, and
     * move one key of each (the ASK window, keys split over two nodes). */
    int prim[3];
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    wk_test_migration m[KINDS];
    int nslots = 0;
    for (int k = 0; k < KINDS; k++) {
        char key[WK_KEY_MAX + 1];
        size_t klen;
        item_port(&kinds[k].e, wk_name_str(names[k][0]), kinds[k].suffix, key, &klen);
        int slot = wk_test_cluster_keyslot(&C, key, klen), seen = 0;
        for (int i = 0; i < nslots; i++)
            seen |= m[i].slot == slot;
        if (seen)
            continue;
        int from = wk_test_cluster_slot_port(&C, slot), to = -1;
        for (int p = 0; p < 3; p++)
            if (prim[p] == from)
                to = prim[(p + 1) % 3];
        cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m[nslots], slot, to), 0, "slot %d", slot);
        cr_assert_eq(wk_test_cluster_migrate_keys(&C, &m[nslots], 1), 1, "slot %d", slot);
        nslots++;
    }
    for (int k = 0; k < KINDS; k++)
        for (int i = 0; i < 2; i++)
            cycle_while_migrating(&kinds[k], db, rival, wk_name_str(names[k][i]), &tokens[k][i]);

    /* The stale items still whole on the source (one key of the slot
     * moved): the permit's lease ends there, then a take prunes it and
     * takes the place; a writer's try past the ended reader is refused,
     * not failed. */
    int on_source = 0;
    for (int i = 0; i < 2; i++) {
        char key[WK_KEY_MAX + 1];
        size_t klen;
        int source = item_port(&sem->e, wk_name_str(stale[i]), ":permits", key, &klen);
        if (!key_on(&sem->e, stale[i], ":permits", source) ||
            !key_on(&rw->e, stale[i], ":w", source) || !key_on(&rw->e, stale[i], ":r", source))
            continue;
        on_source++;
        freeReplyObject(raw_at(source, "ZADD %b XX 1 %b", key, klen, stale_permit[i].bytes,
                               (size_t)WK_TOKEN_LEN));
        wk_token t;
        bool got = false;
        int rc = wk_semaphore_try(wk_db_processor(db), &sem->e, wk_name_str(stale[i]), &t, &got);
        cr_assert_eq(rc, WK_OK, "Semaphore %s, its one permit ended: %s: %s", stale[i],
                     wk_err_name(rc), wk_db_errmsg(db));
        cr_assert(got, "Semaphore %s: the ended permit's place is taken", stale[i]);
        got = true;
        rc = wk_rwlock_try_write(wk_db_processor(rival), &rw->e, wk_name_str(stale[i]), &t, &got);
        cr_assert_eq(rc, WK_OK, "RwLock %s, its writer held and its reader ended: %s: %s",
                     stale[i], wk_err_name(rc), wk_db_errmsg(rival));
        cr_assert_not(got, "RwLock %s: its writer holds it", stale[i]);
    }
    cr_assert_gt(on_source, 0, "a stale item stayed whole on the source");

    /* A waiter parked while the slot migrates gets it by its lease-expiry
     * wake: every waiting acquire. */
    const wait_kind waits[] = {
        {"Lock", WK_LOCK_ENTITY(ns, 1500), "{m}q", wk_lock_try, wk_lock_release, lock_wait},
        {"Semaphore", WK_SEMAPHORE_ENTITY(ns, 1, 1500), "{m}sq", wk_semaphore_try,
         wk_semaphore_release, permit_wait},
        {"RwLock writer", WK_RWLOCK_ENTITY(ns, 1500), "{m}wq", wk_rwlock_try_read,
         wk_rwlock_release_read, write_wait},
        {"RwLock reader", WK_RWLOCK_ENTITY(ns, 1500), "{m}rq", wk_rwlock_try_write,
         wk_rwlock_release_write, read_wait},
        {"FencedLock", WK_FENCED_LOCK_ENTITY(ns, 1500), "{m}xq", fenced_take,
         wk_fenced_lock_release, fenced_wait},
    };
    for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++)
        waiter_gets_it(db, &waits[i]);

    /* Through a batch a take has no steps: it waits out TRYAGAIN and
     * fails as not run, nothing left held. */
    wk_batch *b = NULL;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_token bt;
    bool bgot = true;
    cr_assert_eq(wk_rwlock_try_write(wk_batch_processor(b), &rw->e, wk_name_str("{m}b"), &bt, &bgot),
                 WK_OK);
    int brc = wk_batch_exec(b);
    cr_assert_eq(brc, WK_ETIMEDOUT, "a batch's split take: %s: %s", wk_err_name(brc),
                 wk_db_errmsg(db));
    cr_assert_not(bgot);
    wk_batch_close(b);

    /* Then the rest of the keys move and the slots are the targets'. */
    for (int i = 0; i < nslots; i++) {
        int moved;
        while ((moved = wk_test_cluster_migrate_keys(&C, &m[i], 16)) > 0)
            ;
        cr_assert_eq(moved, 0, "MIGRATE of slot %d failed", m[i].slot);
        cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m[i]), 0, "slot %d", m[i].slot);
    }
    for (int k = 0; k < KINDS; k++)
        for (int i = 0; i < 2; i++) {
            bool released = false;
            shut_out(&kinds[k], rival, wk_name_str(names[k][i]), "held after the migration");
            int rc = kinds[k].give(wk_db_processor(rival), &kinds[k].e, wk_name_str(names[k][i]),
                                   &tokens[k][i], &released);
            cr_assert_eq(rc, WK_OK, "%s %s: %s", kinds[k].what, names[k][i], wk_db_errmsg(rival));
            cr_assert(released, "%s %s: still held after the migration", kinds[k].what,
                      names[k][i]);
        }
    wk_db_close(rival);
    wk_db_close(db);
}

/* The test process's index of the node at `port`. */
static int node_at(int port)
{
    for (int i = 0; i < WK_TEST_CLUSTER_NODES; i++)
        if (C.port[i] == port && C.pid[i] > 0)
            return i;
    cr_assert_fail("no node at %d", port);
    return -1;
}

/* Cut the replica of the primary at `port` off (SIGSTOP, its link killed). */
static int cut_replica(int port)
{
    int i = node_at(wk_test_cluster_replica_of(&C, port));
    kill(C.pid[i], SIGSTOP);
    freeReplyObject(raw_at(port, "CLIENT KILL TYPE replica"));
    return i;
}

Test(cluster, a_take_split_by_a_migration_is_acknowledged_or_given_back, .init = exclusive,
     .timeout = 120)
{
    const char *ns = wk_test_ns("mack");
    wk_entity rw = WK_RWLOCK_ENTITY(ns, 30000), fenced = WK_FENCED_LOCK_ENTITY(ns, 30000);
    wk_db_options o = cluster_options();
    o.lease_replicas = 1;
    o.lease_ack_timeout_ms = 500;
    wk_db *db = open_opts(&o);
    wk_processor *p = wk_db_processor(db);
    /* The fence counter of "{k}x" exists on the source; the rest is free. */
    wk_fenced_lease l;
    bool released = false, got = true;
    cr_assert_eq(wk_fenced_lock_try(p, &fenced, wk_name_str("{k}x"), &l), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(l.acquired && l.fence == 1);
    cr_assert_eq(wk_fenced_lock_release(p, &fenced, wk_name_str("{k}x"), &l.token, &released),
                 WK_OK);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int from = item_port(&fenced, wk_name_str("{k}x"), ":fence", key, &klen);
    int slot = wk_test_cluster_keyslot(&C, key, klen), prim[3], to = -1;
    cr_assert_eq(item_port(&rw, wk_name_str("{k}w"), ":w", key, &klen), from, "one slot");
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int i = 0; i < 3; i++)
        if (prim[i] == from)
            to = prim[(i + 1) % 3];
    wk_test_migration m;
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m, slot, to), 0);

    /* The marks are written on the target (their keys are new), whose
     * replica is cut off: not acknowledged, and given back. */
    int cut = cut_replica(to);
    wk_token t;
    int rc_w = wk_rwlock_try_write(p, &rw, wk_name_str("{k}w"), &t, &got);
    bool got_w = got;
    int rc_r = wk_rwlock_try_read(p, &rw, wk_name_str("{k}r"), &t, &got);
    bool got_r = got;
    int rc_x = wk_fenced_lock_try(p, &fenced, wk_name_str("{k}x"), &l);
    kill(C.pid[cut], SIGCONT);
    cr_assert_eq(rc_w, WK_ENOTREPLICATED, "writer: %s", wk_err_name(rc_w));
    cr_assert_eq(rc_r, WK_ENOTREPLICATED, "reader: %s", wk_err_name(rc_r));
    cr_assert_eq(rc_x, WK_ENOTREPLICATED, "FencedLock: %s", wk_err_name(rc_x));
    cr_assert_not(got_w || got_r || l.acquired);
    for (int n = 0; n < 2; n++) {
        int port = n ? to : from;
        cr_assert_not(key_on(&rw, "{k}w", ":w", port), "the writer's mark was given back");
        cr_assert_not(key_on(&rw, "{k}r", ":r", port), "the reader's mark was given back");
        cr_assert_not(key_on(&fenced, "{k}x", ":lease", port), "the lease was given back");
    }
    cr_assert_eq(wk_test_cluster_wait_settled(&C, 30000), 0, "%s", wk_test_cluster_unsettled());

    /* The lease is marked on the target, acknowledged there; its fence is
     * drawn on the source, whose replica is cut off: given back too. */
    cut = cut_replica(from);
    rc_x = wk_fenced_lock_try(p, &fenced, wk_name_str("{k}x"), &l);
    kill(C.pid[cut], SIGCONT);
    cr_assert_eq(rc_x, WK_ENOTREPLICATED, "the draw: %s: %s", wk_err_name(rc_x), wk_db_errmsg(db));
    cr_assert_not(l.acquired);
    cr_assert_not(key_on(&fenced, "{k}x", ":lease", to), "the lease was given back");
    cr_assert_eq(wk_test_cluster_wait_settled(&C, 30000), 0, "%s", wk_test_cluster_unsettled());

    /* Every replica back: each take is acknowledged, the fence past the
     * one spent unacknowledged. */
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("{k}w"), &t, &got), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(got);
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("{k}r"), &t, &got), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(got);
    cr_assert_eq(wk_fenced_lock_try(p, &fenced, wk_name_str("{k}x"), &l), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(l.acquired);
    cr_assert_eq(l.fence, 3, "fence 2 was drawn unacknowledged, never handed out");
    cr_assert(key_on(&fenced, "{k}x", ":lease", to), "the lease was taken on the target");

    int moved;
    while ((moved = wk_test_cluster_migrate_keys(&C, &m, 16)) > 0)
        ;
    cr_assert_eq(moved, 0);
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);
    wk_db_close(db);
}

/* A migration of the slot of (e, name) to the next primary begins. */
static void migrate_begin_of(const wk_entity *e, const char *name, const char *suffix,
                             wk_test_migration *m)
{
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int from = item_port(e, wk_name_str(name), suffix, key, &klen), prim[3], to = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int i = 0; i < 3; i++)
        if (prim[i] == from)
            to = prim[(i + 1) % 3];
    int slot = wk_test_cluster_keyslot(&C, key, klen);
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, m, slot, to), 0, "slot %d", slot);
}

Test(cluster, a_release_with_waiters_queued_succeeds_when_the_slot_starts_migrating,
     .init = exclusive, .timeout = 120)
{
    const char *ns = wk_test_ns("wmig");
    /* Every waiting kind, its waiter queued (queue and registrations on
     * the source) before the migration begins; no key moves, so every
     * release runs its full form on the source, where the wake-up lists
     * do not exist. */
    const wait_kind waits[] = {
        {"Lock", WK_LOCK_ENTITY(ns, 2000), "{z}l", wk_lock_try, wk_lock_release, lock_wait},
        {"Semaphore", WK_SEMAPHORE_ENTITY(ns, 1, 2000), "{z}s", wk_semaphore_try,
         wk_semaphore_release, permit_wait},
        {"RwLock writer", WK_RWLOCK_ENTITY(ns, 2000), "{z}w", wk_rwlock_try_read,
         wk_rwlock_release_read, write_wait},
        {"RwLock reader", WK_RWLOCK_ENTITY(ns, 2000), "{z}r", wk_rwlock_try_write,
         wk_rwlock_release_write, read_wait},
        {"FencedLock", WK_FENCED_LOCK_ENTITY(ns, 2000), "{z}x", fenced_take,
         wk_fenced_lock_release, fenced_wait},
    };
    enum { N = sizeof(waits) / sizeof(waits[0]) };
    wk_db *db = open_cluster();
    wk_token held[N];
    parked w[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        bool got = false;
        cr_assert_eq(waits[i].hold(wk_db_processor(db), &waits[i].e, wk_name_str(waits[i].name),
                                   &held[i], &got),
                     WK_OK, "%s: %s", waits[i].what, wk_db_errmsg(db));
        cr_assert(got);
        long before = blocked_on_primaries();
        w[i] = (parked){.k = &waits[i]};
        cr_assert_eq(pthread_create(&th[i], NULL, park, &w[i]), 0);
        int64_t until = wk_test_now_ms() + 10000;
        while (blocked_on_primaries() <= before && wk_test_now_ms() < until)
            wk_test_sleep_ms(20);
        cr_assert_gt(blocked_on_primaries(), before, "%s: the waiter is parked", waits[i].what);
    }
    /* The Lock's slot ("z") and the others' ("<ns>:{z"). */
    wk_test_migration m[2];
    migrate_begin_of(&waits[0].e, waits[0].name, NULL, &m[0]);
    migrate_begin_of(&waits[1].e, waits[1].name, ":permits", &m[1]);
    int64_t t_release[N];
    for (int i = 0; i < N; i++) {
        bool released = false;
        int rc = waits[i].give(wk_db_processor(db), &waits[i].e, wk_name_str(waits[i].name),
                               &held[i], &released);
        t_release[i] = wk_test_now_ms();
        cr_assert_eq(rc, WK_OK, "%s: release with a waiter queued: %s: %s", waits[i].what,
                     wk_err_name(rc), wk_db_errmsg(db));
        cr_assert(released, "%s: it was held", waits[i].what);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(w[i].rc, WK_OK, "the %s waiter: %s: %s", waits[i].what, wk_err_name(w[i].rc),
                     w[i].msg);
        cr_assert(w[i].got, "the %s waiter gets it", waits[i].what);
        cr_assert_lt(wk_test_now_ms() - t_release[i], waits[i].e.ttl_ms + 3000,
                     "%s: at the latest at its lease-expiry wake", waits[i].what);
    }
    for (int i = 0; i < 2; i++) {
        int moved;
        while ((moved = wk_test_cluster_migrate_keys(&C, &m[i], 16)) > 0)
            ;
        cr_assert_eq(moved, 0);
        cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m[i]), 0);
    }
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Through the event-loop handle (wakuwaku/async.h): the same routing,
 * redirections and outcome rules as the blocking handles above.
 * ---------------------------------------------------------------------- */

typedef struct outcome {
    bool done;
    int status;
    char msg[512];
} outcome;

static void on_outcome(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    outcome *o = arg;
    cr_assert_not(o->done, "one callback per query");
    o->done = true;
    o->status = status;
    snprintf(o->msg, sizeof(o->msg), "%s", msg);
}

static wk_async *open_loop_timeout(const char *url, const char *client_name, int timeout_ms)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.client_name = client_name;
    o.command_timeout_ms = timeout_ms;
    wk_async *a = NULL;
    char err[512];
    int rc = wk_async_open(&a, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "wk_async_open %s: %s: %s", url, wk_err_name(rc), err);
    return a;
}

static wk_async *open_loop(const char *url, const char *client_name)
{
    return open_loop_timeout(url, client_name, 5000);
}

/* The near cache through a cluster's event-loop handle (whose descriptor
 * is an epoll set from the start; the near cache's eventfd joins it):
 * entries of every primary are served, a write on any primary is heard
 * and the loop get reads the new body (the loop reader's read routed by
 * the near cache's cluster data handle). */
Test(cluster, near_cache_through_a_cluster_loop_handle, .init = shared, .timeout = 120)
{
    near_fixture f;
    near_start(&f, "nearloop", WK_NEAR_DEFAULT);
    wk_async *a = open_loop(C.url, "near-loop");
    wk_body b = WK_BODY_INIT;
    wk_test_done d = {0};
    for (int round = 0; round < 2; round++) {
        const char *want = round ? "v2" : "v1";
        for (int k = 0; k < 3; k++) {
            if (round) {
                cr_assert_eq(wk_cache_put(f.w, &f.e, wk_name_str(f.name[k]), "v2", 2), WK_OK);
                cr_assert(near_heard(f.nc, &f.e, f.name[k]), "a write on :%d heard", f.ports[k]);
            }
            int rc = wk_test_near_get_loop(a, f.nc, &f.e, f.name[k], &b, &d);
            cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), d.msg);
            cr_assert(b.found && b.len == 2 && memcmp(b.data, want, 2) == 0, "%s on :%d",
                      f.name[k], f.ports[k]);
        }
    }
    cr_assert_eq(wk_async_pending(a), 0);
    wk_body_free(&b);
    wk_async_close(a);
    near_stop(&f);
}

static wk_processor *via(wk_async *a, outcome *o)
{
    *o = (outcome){0};
    return wk_async_with(a, on_outcome, o);
}

/* One query through the loop, run to its callback: its status. */
#define LOOP_RUN(a, o, call)                                                                       \
    do {                                                                                           \
        wk_processor *p_ = via((a), (o));                                                          \
        int rc_ = (call);                                                                          \
        cr_assert_eq(rc_, WK_OK, "queued: %s: %s", wk_err_name(rc_), wk_async_errmsg(a));          \
        wk_test_async_drain(a);                                                                    \
        cr_assert((o)->done);                                                                      \
        (void)p_;                                                                                  \
    } while (0)

static uint64_t loop_moved(wk_async *a)
{
    return atomic_load(&wk__counters(a->db->conn)->moved);
}

static uint64_t loop_asked(wk_async *a)
{
    return atomic_load(&wk__counters(a->db->conn)->asked);
}

Test(cluster, loop_routes_by_slot_from_a_seed_list_or_any_node, .init = shared, .timeout = 120)
{
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lroute"), 30000);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    /* The seed list, then each node's URL (replicas too). */
    for (int u = -1; u < WK_TEST_CLUSTER_NODES; u++) {
        char url[160];
        if (u < 0)
            snprintf(url, sizeof(url), "%s", C.url);
        else
            snprintf(url, sizeof(url), "redis://127.0.0.1:%d", C.port[u]);
        wk_async *a = open_loop(url, NULL);
        enum { N = 12 };
        outcome o[N];
        wk_token t[N];
        bool got[N];
        for (int i = 0; i < N; i++) {
            wk_name name = wk_name_u64((uint64_t)((u + 1) * 100 + i));
            cr_assert_eq(wk_lock_try(via(a, &o[i]), &lock, name, &t[i], &got[i]), WK_OK, "%s",
                         wk_async_errmsg(a));
        }
        cr_assert_eq(wk_async_pending(a), N);
        wk_test_async_drain(a);
        for (int i = 0; i < N; i++) {
            cr_assert(o[i].done && o[i].status == WK_OK, "%s, lock %d: %s", url, i, o[i].msg);
            cr_assert(got[i]);
            wk_name name = wk_name_u64((uint64_t)((u + 1) * 100 + i));
            int port = item_port(&lock, name, NULL, key, &klen);
            redisReply *r = raw_at(port, "STRLEN %b", key, klen);
            cr_assert_eq(r->integer, WK_TOKEN_LEN, "%s: lock %d is on the primary of its slot", url,
                         i);
            freeReplyObject(r);
        }
        cr_assert_eq(loop_moved(a), 0, "%s: routed by the map, not by redirections", url);
        wk_async_close(a);
    }
}

Test(cluster, loop_fans_64_queries_in_flight_over_every_primary, .init = exclusive, .timeout = 120)
{
    wk_db *db = open_cluster();
    wk_async *a = open_loop(C.url, NULL);
    enum { LOCKS = 61 };
    fan f;
    fan_prepare(&f, db, "lfan", LOCKS);
    wk_entity lock = f.lock, cache = f.cache;
    /* 64 queries submitted before the loop turns once: in flight together. */
    static outcome o[64];
    wk_token tokens[LOCKS];
    bool got[LOCKS];
    wk_body bodies[3] = {{0}};
    for (int i = 0; i < LOCKS; i++)
        cr_assert_eq(
            wk_lock_try(via(a, &o[i]), &lock, wk_name_u64((uint64_t)i), &tokens[i], &got[i]),
            WK_OK);
    for (int c = 0; c < 3; c++)
        cr_assert_eq(
            wk_cache_get(via(a, &o[LOCKS + c]), &cache, wk_name_u64((uint64_t)c), &bodies[c]),
            WK_OK);
    cr_assert_eq(wk_async_pending(a), 64);
    for (int i = 0; i < 64; i++)
        cr_assert_not(o[i].done, "never from inside the submitting call");
    wk_test_async_drain(a);
    for (int i = 0; i < LOCKS; i++) {
        cr_assert(o[i].done && o[i].status == WK_OK, "lock %d: %s", i, o[i].msg);
        cr_assert_eq(got[i], i != 0, "lock %d acquired iff not held before", i);
    }
    cr_assert_eq(o[LOCKS].status, WK_OK, "%s", o[LOCKS].msg);
    cr_assert(bodies[0].found && bodies[0].len == 4 && memcmp(bodies[0].data, "body", 4) == 0);
    cr_assert_eq(o[LOCKS + 1].status, WK_ECORRUPT, "another type: that query alone (%s)",
                 wk_err_name(o[LOCKS + 1].status));
    cr_assert_eq(o[LOCKS + 2].status, WK_OK);
    cr_assert_not(bodies[2].found);
    fan_check(&f);
    for (int c = 0; c < 3; c++)
        wk_body_free(&bodies[c]);
    /* The releases, all in flight too: every one was still held. */
    bool released[LOCKS];
    for (int i = 1; i < LOCKS; i++)
        cr_assert_eq(wk_lock_release(via(a, &o[i]), &lock, wk_name_u64((uint64_t)i), &tokens[i],
                                     &released[i]),
                     WK_OK);
    wk_test_async_drain(a);
    for (int i = 1; i < LOCKS; i++)
        cr_assert(o[i].status == WK_OK && released[i], "lock %d: %s", i, o[i].msg);
    wk_async_close(a);
    wk_db_close(db);
}

/* A name of `e` whose key is in `slot` (its key's slot computed here). */
static wk_name name_in_slot(const wk_entity *e, int slot, uint64_t from, uint64_t *n)
{
    char key[WK_KEY_MAX + 1];
    size_t klen;
    for (uint64_t i = from;; i++) {
        wk_name name = wk_name_u64(i);
        cr_assert_eq(wk_key_build(key, sizeof(key), &klen, e, &name, NULL), WK_OK);
        if ((int)wk__key_slot(key, klen) == slot) {
            *n = i;
            return name;
        }
    }
}

Test(cluster, loop_follows_ask_during_a_migration_and_moved_after_it, .init = exclusive,
     .timeout = 120)
{
    wk_async *a = open_loop(C.url, NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lmig"), 60000);
    outcome o;
    wk_token tx, ty, tz;
    bool got = false;
    /* X is held before the migration: its key moves with the slot. */
    uint64_t nx, ny, nz;
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int from = item_port(&lock, wk_name_u64(7), NULL, key, &klen);
    int slot = (int)wk__key_slot(key, klen);
    wk_name x = name_in_slot(&lock, slot, 7, &nx);
    wk_name y = name_in_slot(&lock, slot, nx + 1, &ny);
    wk_name z = name_in_slot(&lock, slot, ny + 1, &nz);
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, x, &tx, &got));
    cr_assert(o.status == WK_OK && got, "%s", o.msg);
    int prim[3], to = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int k = 0; k < 3; k++)
        if (prim[k] == from)
            to = prim[(k + 1) % 3];
    long long asking_before = wk_test_cluster_calls(&C, to, "asking");
    uint64_t asked_before = loop_asked(a), moved_before = loop_moved(a);

    /* The ASK window: X is still on the source, Y is new and goes to the
     * target after ASKING. */
    wk_test_migration m;
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m, slot, to), 0);
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, x, &tz, &got));
    cr_assert(o.status == WK_OK && !got, "X is held (on the source): %s", o.msg);
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, y, &ty, &got));
    cr_assert(o.status == WK_OK && got, "Y taken on the importing node: %s", o.msg);
    cr_assert_gt(wk_test_cluster_calls(&C, to, "asking"), asking_before, "ASKING was sent");
    cr_assert_gt(loop_asked(a), asked_before, "an ASK was followed");
    cr_assert_eq(loop_moved(a), moved_before, "no MOVED during the window");

    /* Every key moves; the slot is the target's: MOVED, followed. */
    while (wk_test_cluster_migrate_keys(&C, &m, 10) > 0)
        ;
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, z, &tz, &got));
    cr_assert(o.status == WK_OK && got, "Z after the migration: %s", o.msg);
    cr_assert_gt(loop_moved(a), moved_before, "a MOVED was followed");
    bool released = false;
    LOOP_RUN(a, &o, wk_lock_release(p_, &lock, x, &tx, &released));
    cr_assert(o.status == WK_OK && released, "X released on its new node: %s", o.msg);
    LOOP_RUN(a, &o, wk_lock_release(p_, &lock, y, &ty, &released));
    cr_assert(o.status == WK_OK && released, "%s", o.msg);
    LOOP_RUN(a, &o, wk_lock_release(p_, &lock, z, &tz, &released));
    cr_assert(o.status == WK_OK && released, "%s", o.msg);
    /* Every key is on the target, and the loop's map says so: no MOVED. */
    uint64_t moved = loop_moved(a);
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, x, &tx, &got));
    cr_assert(o.status == WK_OK && got, "%s", o.msg);
    cr_assert_eq(loop_moved(a), moved, "the map was refreshed");
    int port = item_port(&lock, x, NULL, key, &klen);
    cr_assert_eq(port, to);
    redisReply *r = raw_at(to, "STRLEN %b", key, klen);
    cr_assert_eq(r->integer, WK_TOKEN_LEN);
    freeReplyObject(r);
    wk_async_close(a);
}

/* How many clients named `name` the node at `port` has whose CLIENT LIST
 * line also holds `also` (NULL: any); *id: the last one's id (-1: none). */
static int clients_at(int port, const char *name, const char *also, long long *id)
{
    redisReply *r = raw_at(port, "CLIENT LIST");
    char want[96];
    snprintf(want, sizeof(want), " name=%s ", name);
    int n = 0;
    *id = -1;
    for (const char *line = r->str; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *at = strstr(line, want), *more = also ? strstr(line, also) : line;
        if (at && at < line + len && more && more < line + len && strncmp(line, "id=", 3) == 0) {
            *id = atoll(line + 3);
            n++;
        }
        line = end ? end + 1 : NULL;
    }
    freeReplyObject(r);
    return n;
}

/* The id of the client named `name` on the node at `port` whose CLIENT
 * LIST line also holds `also` (NULL: any), or -1. */
static long long client_id_with(int port, const char *name, const char *also)
{
    long long id;
    clients_at(port, name, also, &id);
    return id;
}

static long long client_id_named(int port, const char *name)
{
    return client_id_with(port, name, NULL);
}

typedef struct failover_arg {
    int replica, rc;
    bool kill; /* SIGKILL the primary `replica` instead: rc is the promoted port */
    atomic_bool over;
} failover_arg;

static void *run_failover(void *arg)
{
    failover_arg *f = arg;
    f->rc = f->kill ? wk_test_cluster_kill_primary(&C, f->replica, 30000)
                    : wk_test_cluster_failover(&C, f->replica, 30000);
    atomic_store(&f->over, true);
    return NULL;
}

/* Lock cycles through the loop, BURST tries in flight then their
 * releases, until the failover thread is over; every outcome is WK_OK or
 * a connection error (a release, a write, may be WK_EUNKNOWN). Returns
 * how many failed. */
static long cycles_until_over(wk_async *a, const wk_entity *lock, failover_arg *f,
                              uint64_t base)
{
    enum { BURST = 16 };
    static outcome b[BURST], rel[BURST];
    static wk_token bt[BURST];
    static bool bg[BURST], br[BURST];
    long ok = 0, failed = 0;
    for (uint64_t round = 0; !atomic_load(&f->over); round++) {
        for (int i = 0; i < BURST; i++)
            cr_assert_eq(wk_lock_try(via(a, &b[i]), lock, wk_name_u64(base + round * BURST + i),
                                     &bt[i], &bg[i]),
                         WK_OK);
        wk_test_async_drain(a);
        for (int i = 0; i < BURST; i++) {
            cr_assert(b[i].status == WK_OK || wk_is_connection_error(b[i].status),
                      "only connection errors: %s: %s", wk_err_name(b[i].status), b[i].msg);
            rel[i] = (outcome){.done = true};
            if (b[i].status == WK_OK && bg[i])
                cr_assert_eq(wk_lock_release(via(a, &rel[i]), lock,
                                             wk_name_u64(base + round * BURST + i), &bt[i], &br[i]),
                             WK_OK);
        }
        wk_test_async_drain(a);
        for (int i = 0; i < BURST; i++) {
            cr_assert(rel[i].status == WK_OK || wk_is_connection_error(rel[i].status),
                      "only connection errors: %s: %s", wk_err_name(rel[i].status), rel[i].msg);
            ok += b[i].status == WK_OK;
            failed += b[i].status != WK_OK;
        }
    }
    cr_log_info("loop lock cycles across the failover: %ld ok, %ld failed", ok, failed);
    return failed;
}

Test(cluster, loop_failover_keeps_the_outcome_rules, .init = exclusive, .timeout = 120)
{
    char name[64];
    snprintf(name, sizeof(name), "wk-loop-fo-%d", (int)getpid());
    wk_async *a = open_loop(C.url, name);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lfo"), 60000);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int primary = item_port(&lock, wk_name_u64(0), NULL, key, &klen);
    outcome o, w, r;
    wk_token t0, t1;
    bool got = false, got1 = false;
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, wk_name_u64(0), &t0, &got));
    cr_assert(o.status == WK_OK && got, "%s", o.msg);

    /* 1. A write sent without a reply is WK_EUNKNOWN; a read with it is
     * sent again on a new connection. */
    uint64_t n1;
    wk_name one = name_in_slot(&lock, (int)wk__key_slot(key, klen), 1, &n1);
    freeReplyObject(raw_at(primary, "CLIENT PAUSE 20000 WRITE"));
    cr_assert_eq(wk_lock_try(via(a, &w), &lock, one, &t1, &got1), WK_OK);
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(via(a, &r), &lock, wk_name_u64(0), &st), WK_OK);
    for (int i = 0; i < 5; i++)
        wk_test_async_turn(a); /* written; the write is held by the pause */
    cr_assert_not(w.done);
    long long id = client_id_named(primary, name);
    cr_assert_gt(id, 0, "the loop's connection to %d", primary);
    freeReplyObject(raw_at(primary, "CLIENT KILL ID %lld", id));
    while (!w.done)
        wk_test_async_turn(a);
    freeReplyObject(raw_at(primary, "CLIENT UNPAUSE"));
    wk_test_async_drain(a);
    cr_assert_eq(w.status, WK_EUNKNOWN, "%s: %s", wk_err_name(w.status), w.msg);
    cr_assert(strstr(w.msg, "may or may not"), "%s", w.msg);
    cr_assert(r.done && r.status == WK_OK && st.held, "the read went again: %s", r.msg);

    /* 2. CLUSTER FAILOVER with writes in flight: each completes, OK or
     * with a connection error (never a Redis error: MOVED, UNBLOCKED and
     * READONLY are followed), and the new primary takes them after. */
    int replica = wk_test_cluster_replica_of(&C, primary);
    cr_assert_gt(replica, 0);
    failover_arg f = {.replica = replica};
    atomic_init(&f.over, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_failover, &f), 0);
    cycles_until_over(a, &lock, &f, 1000);
    pthread_join(th, NULL);
    cr_assert_eq(f.rc, 0, "CLUSTER FAILOVER");
    /* The old primary is a replica now: the handle finds the new one. */
    uint64_t n2;
    wk_name two = name_in_slot(&lock, (int)wk__key_slot(key, klen), n1 + 1, &n2);
    wk_token t2;
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, two, &t2, &got));
    cr_assert(o.status == WK_OK && got, "after the failover: %s", o.msg);
    cr_assert_eq(item_port(&lock, two, NULL, key, &klen), replica, "the new primary has it");
    redisReply *s = raw_at(replica, "STRLEN %b", key, klen);
    cr_assert_eq(s->integer, WK_TOKEN_LEN);
    freeReplyObject(s);

    /* 3. SIGKILL of the new primary under the same cycles: until its
     * replica (the old primary) is promoted its slots' queries fail, each
     * with a connection error; then 50 cycles in a row succeed there. */
    failover_arg k = {.replica = replica, .kill = true};
    atomic_init(&k.over, false);
    cr_assert_eq(pthread_create(&th, NULL, run_failover, &k), 0);
    long failed = cycles_until_over(a, &lock, &k, 1000000);
    pthread_join(th, NULL);
    int restarted = wk_test_cluster_restart(&C, replica, 30000); /* whole again, for what follows */
    cr_assert_eq(k.rc, primary, "the old primary was promoted");
    cr_assert_eq(restarted, 0, "the killed node rejoined");
    cr_assert_gt(failed, 0, "the kill was seen through the loop");
    int streak = 0;
    for (uint64_t n = n2 + 1; streak < 50; n++) {
        wk_name nm = name_in_slot(&lock, (int)wk__key_slot(key, klen), n, &n);
        wk_token tk;
        bool released = false;
        LOOP_RUN(a, &o, wk_lock_try(p_, &lock, nm, &tk, &got));
        if (o.status == WK_OK && got)
            LOOP_RUN(a, &o, wk_lock_release(p_, &lock, nm, &tk, &released));
        cr_assert(o.status == WK_OK || wk_is_connection_error(o.status), "%s", o.msg);
        streak = o.status == WK_OK ? streak + 1 : 0;
    }
    wk_async_close(a);
}

Test(cluster, loop_hash_tags_multi_key_and_refusals, .init = shared, .timeout = 120)
{
    wk_async *a = open_loop(C.url, NULL);
    outcome o;
    char k1[64], k2[64];
    snprintf(k1, sizeof(k1), "lpair-a-%d", (int)getpid());
    int s1 = wk_test_cluster_keyslot(&C, k1, strlen(k1));
    for (int i = 0;; i++) {
        snprintf(k2, sizeof(k2), "lpair-b-%d-%d", (int)getpid(), i);
        if (wk_test_cluster_keyslot(&C, k2, strlen(k2)) != s1)
            break;
    }
    /* Keys in two slots: refused at the call, nothing queued. */
    int rc = pair_set(via(a, &o), k1, k2);
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), wk_async_errmsg(a));
    cr_assert(strstr(wk_async_errmsg(a), k1) && strstr(wk_async_errmsg(a), k2), "%s",
              wk_async_errmsg(a));
    cr_assert_eq(wk_async_pending(a), 0);
    /* Hash-tagged into one slot: it runs, on the primary of that slot. */
    char t1[64], t2[64];
    snprintf(t1, sizeof(t1), "{lpair-%d}a", (int)getpid());
    snprintf(t2, sizeof(t2), "{lpair-%d}b", (int)getpid());
    LOOP_RUN(a, &o, pair_set(p_, t1, t2));
    cr_assert_eq(o.status, WK_OK, "%s", o.msg);
    redisReply *r = raw_at(wk_test_cluster_key_port(&C, t2, strlen(t2)), "GET %s", t2);
    cr_assert(r->type == REDIS_REPLY_STRING && strcmp(r->str, "v") == 0);
    freeReplyObject(r);
    wk_async_close(a);
}

Test(cluster, loop_tryagain_pauses_and_fails_as_not_run_at_the_command_timeout, .init = exclusive,
     .timeout = 120)
{
    wk_async *a = open_loop_timeout(C.url, NULL, 600);
    outcome o, side;
    char t1[64], t2[64];
    snprintf(t1, sizeof(t1), "{ltry-%d}a", (int)getpid());
    snprintf(t2, sizeof(t2), "{ltry-%d}b", (int)getpid());
    int slot = wk_test_cluster_keyslot(&C, t1, strlen(t1));
    int from = wk_test_cluster_slot_port(&C, slot), prim[3], to = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int k = 0; k < 3; k++)
        if (prim[k] == from)
            to = prim[(k + 1) % 3];
    freeReplyObject(raw_at(from, "SET %s old", t1));
    /* Migrating, with t1 still on the source and t2 on neither: the
     * two-key script is answered TRYAGAIN (it did not run) until the
     * command timeout, while another query of the handle completes. */
    wk_test_migration m;
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m, slot, to), 0);
    int64_t t0 = wk_test_now_ms();
    cr_assert_eq(pair_set(via(a, &o), t1, t2), WK_OK);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("ltry"), 30000);
    wk_token t;
    bool got = false;
    cr_assert_eq(wk_lock_try(via(a, &side), &lock, wk_name_str("side"), &t, &got), WK_OK);
    wk_test_async_drain(a);
    int64_t took = wk_test_now_ms() - t0;
    cr_assert(side.done && side.status == WK_OK && got, "%s", side.msg);
    cr_assert_eq(o.status, WK_ETIMEDOUT, "%s: %s", wk_err_name(o.status), o.msg);
    cr_assert(strstr(o.msg, "TRYAGAIN"), "%s", o.msg);
    cr_assert_geq(took, 300, "re-sent after pauses, not given up at once (%lld ms)",
                  (long long)took);
    redisReply *r = raw_at(from, "GET %s", t1);
    cr_assert(r->type == REDIS_REPLY_STRING && strcmp(r->str, "old") == 0, "it did not run");
    freeReplyObject(r);
    /* The migration over, the same script runs on the new owner. */
    while (wk_test_cluster_migrate_keys(&C, &m, 10) > 0)
        ;
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);
    LOOP_RUN(a, &o, pair_set(p_, t1, t2));
    cr_assert_eq(o.status, WK_OK, "%s", o.msg);
    r = raw_at(to, "GET %s", t2);
    cr_assert(r->type == REDIS_REPLY_STRING && strcmp(r->str, "v") == 0);
    freeReplyObject(r);
    wk_async_close(a);
}

Test(cluster, loop_a_node_that_refuses_connections_fails_only_its_queries_as_not_sent,
     .init = exclusive, .timeout = 120)
{
    wk_async *a = open_loop(C.url, NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lrefuse"), 30000);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int on = item_port(&lock, wk_name_u64(0), NULL, key, &klen);
    uint64_t other = 1;
    while (item_port(&lock, wk_name_u64(other), NULL, key, &klen) == on)
        other++;
    /* The primary of name 0 takes no new connection (the handle has none
     * to it yet); this raw connection gives it back. */
    redisContext *admin = wk_test_cluster_raw(&C, on);
    cr_assert(admin);
    redisReply *r = redisCommand(admin, "CONFIG SET maxclients 1");
    cr_assert(r && r->type == REDIS_REPLY_STATUS, "%s", r ? r->str : admin->errstr);
    freeReplyObject(r);
    outcome o0, o1;
    wk_token t0, t1;
    bool got0 = false, got1 = false;
    cr_assert_eq(wk_lock_try(via(a, &o0), &lock, wk_name_u64(0), &t0, &got0), WK_OK);
    cr_assert_eq(wk_lock_try(via(a, &o1), &lock, wk_name_u64(other), &t1, &got1), WK_OK);
    wk_test_async_drain(a);
    r = redisCommand(admin, "CONFIG SET maxclients 10000");
    cr_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(admin);
    cr_assert_neq(o0.status, WK_OK, "its node refused the connection");
    cr_assert_neq(o0.status, WK_EUNKNOWN, "%s", o0.msg);
    cr_assert(strstr(o0.msg, "not sent"), "%s: %s", wk_err_name(o0.status), o0.msg);
    cr_assert(o1.status == WK_OK && got1, "another node's query is not held up: %s", o1.msg);
    cr_log_info("refused node: %s %s", wk_err_name(o0.status), o0.msg);
    /* The node takes connections again: the next query connects. */
    outcome o;
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, wk_name_u64(0), &t0, &got0));
    cr_assert(o.status == WK_OK && got0, "%s", o.msg);
    wk_async_close(a);
}

Test(cluster, loop_asks_the_map_of_a_known_primary_when_its_seed_is_gone, .init = exclusive,
     .timeout = 120)
{
    /* The URL names one replica; the handle learns the map from it. */
    int prim[3], seed = -1, seed_index = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int i = 0; i < WK_TEST_CLUSTER_NODES && seed < 0; i++)
        if (C.port[i] != prim[0] && C.port[i] != prim[1] && C.port[i] != prim[2]) {
            seed = C.port[i];
            seed_index = i;
        }
    cr_assert_gt(seed, 0);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", seed);
    wk_async *a = open_loop(url, NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lgone"), 60000);
    outcome o;
    wk_token t;
    bool got = false;
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, wk_name_u64(0), &t, &got));
    cr_assert(o.status == WK_OK && got, "%s", o.msg);
    /* The seed goes away for good; two slots move. */
    cr_assert_eq(kill(C.pid[seed_index], SIGKILL), 0); /* the keeper reaps it */
    C.pid[seed_index] = 0;
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int from = item_port(&lock, wk_name_u64(1), NULL, key, &klen), to = -1;
    int s1 = (int)wk__key_slot(key, klen);
    for (int k = 0; k < 3; k++)
        if (prim[k] == from)
            to = prim[(k + 1) % 3];
    wk_name second = wk_name_u64(2);
    for (uint64_t n2 = 2;; n2++) {
        second = wk_name_u64(n2);
        if (item_port(&lock, second, NULL, key, &klen) == from &&
            (int)wk__key_slot(key, klen) != s1)
            break;
    }
    int s2 = (int)wk__key_slot(key, klen);
    wk_test_migration m1, m2;
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m1, s1, to), 0);
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m1), 0);
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m2, s2, to), 0);
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m2), 0);
    /* The first slot's query meets MOVED: the map is asked anew, of a
     * primary the map knows (the seed is dead), so the second slot's
     * query goes straight to its new owner. */
    uint64_t moved = loop_moved(a);
    wk_test_sleep_ms(150); /* the map is asked anew at most every 100 ms */
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, wk_name_u64(1), &t, &got));
    cr_assert(o.status == WK_OK && got, "%s", o.msg);
    cr_assert_eq(loop_moved(a), moved + 1);
    for (int64_t until = wk_test_now_ms() + 500; wk_test_now_ms() < until;)
        wk_test_async_turn(a); /* the map's connection and its CLUSTER SLOTS */
    LOOP_RUN(a, &o, wk_lock_try(p_, &lock, second, &t, &got));
    int restarted = wk_test_cluster_restart(&C, seed, 30000);
    cr_assert(o.status == WK_OK && got, "%s", o.msg);
    cr_assert_eq(loop_moved(a), moved + 1, "the map came from a known primary");
    cr_assert_eq(restarted, 0, "the seed rejoined");
    wk_async_close(a);
}

/* ---- receivers through the loop on a cluster ----------------------------- */

/* A receive through the loop, run to its callback. */
static void loop_recv_turn(wk_async *a, const outcome *o, const char *what, int i, int k)
{
    for (int64_t until = wk_test_now_ms() + 10000; !o->done && wk_test_now_ms() < until;)
        wk_test_async_turn(a);
    cr_assert(o->done, "%s %d, receive %d: no callback within 10 s", what, i, k);
}

/* Pipes and StreamBuffers on names spread over every primary, followed
 * through one event-loop handle on the seed list while a blocking cluster
 * handle writes them: each receiver's own connection goes to the primary
 * of its item's slot, every message comes once and in order, then END. */
Test(cluster, loop_receivers_follow_pipes_and_stream_buffers_on_every_primary, .init = shared,
     .timeout = 120)
{
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("lrxp"), 30000);
    wk_entity sb = WK_STREAM_BUFFER_ENTITY(wk_test_ns("lrxs"), 30000);
    wk_db *db = open_cluster();
    wk_processor *bp = wk_db_processor(db);
    wk_async *a = open_loop(C.url, NULL);
    enum { N = 6, MSGS = 3 };
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int ports[WK_TEST_CLUSTER_NODES] = {0}, nports = 0;
    wk_pipe_receiver *rx[N];
    wk_stream_buffer_subscription *sub[N];
    outcome o;
    for (int i = 0; i < N; i++) {
        wk_name name = wk_name_u64((uint64_t)i);
        int port = item_port(&pipe, name, NULL, key, &klen);
        bool seen = false;
        for (int j = 0; j < nports; j++)
            seen |= ports[j] == port;
        if (!seen)
            ports[nports++] = port;
        LOOP_RUN(a, &o, wk_pipe_receive(p_, &pipe, name, &rx[i]));
        cr_assert_eq(o.status, WK_OK, "pipe %d: %s", i, o.msg);
        LOOP_RUN(a, &o, wk_stream_buffer_subscribe(p_, &sb, name, 0, &sub[i]));
        cr_assert_eq(o.status, WK_OK, "stream buffer %d: %s", i, o.msg);
    }
    cr_assert_geq(nports, 2, "the names cover more than one primary");
    for (int i = 0; i < N; i++)
        for (int k = 0; k < MSGS; k++) {
            char body[32];
            int len = snprintf(body, sizeof(body), "m%d.%d", i, k);
            wk_name name = wk_name_u64((uint64_t)i);
            cr_assert_eq(wk_pipe_send(bp, &pipe, name, body, (size_t)len), WK_OK, "%s",
                         wk_db_errmsg(db));
            cr_assert_eq(wk_stream_buffer_append(bp, &sb, name, body, (size_t)len, NULL), WK_OK,
                         "%s", wk_db_errmsg(db));
        }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(wk_pipe_finish(bp, &pipe, wk_name_u64((uint64_t)i)), WK_OK);
        cr_assert_eq(wk_stream_buffer_finish(bp, &sb, wk_name_u64((uint64_t)i), NULL), WK_OK);
    }
    for (int i = 0; i < N; i++) {
        for (int k = 0; k <= MSGS; k++) {
            char body[32];
            int len = snprintf(body, sizeof(body), "m%d.%d", i, k);
            wk_pipe_message m = {0};
            o = (outcome){0};
            cr_assert_eq(wk_pipe_recv_async(rx[i], &m, on_outcome, &o), WK_OK, "%s",
                         wk_pipe_receiver_errmsg(rx[i]));
            loop_recv_turn(a, &o, "pipe", i, k);
            cr_assert_eq(o.status, WK_OK, "pipe %d, receive %d: %s", i, k, o.msg);
            if (k == MSGS) {
                cr_assert_eq(m.got, WK_PIPE_END, "pipe %d ends after its messages", i);
            } else {
                cr_assert_eq(m.got, WK_PIPE_MESSAGE, "pipe %d, receive %d", i, k);
                cr_assert(m.len == (size_t)len && memcmp(m.body, body, m.len) == 0,
                          "pipe %d: message %d once and in order", i, k);
            }
            wk_stream_buffer_item it = {0};
            o = (outcome){0};
            cr_assert_eq(wk_stream_buffer_recv_async(sub[i], &it, on_outcome, &o), WK_OK, "%s",
                         wk_stream_buffer_subscription_errmsg(sub[i]));
            loop_recv_turn(a, &o, "stream buffer", i, k);
            cr_assert_eq(o.status, WK_OK, "stream buffer %d, read %d: %s", i, k, o.msg);
            if (k == MSGS) {
                cr_assert_eq(it.got, WK_STREAM_BUFFER_END, "buffer %d ends after its bodies", i);
            } else {
                cr_assert_eq(it.got, WK_STREAM_BUFFER_BODY, "buffer %d, read %d", i, k);
                cr_assert_eq(it.index, (uint64_t)k);
                cr_assert(it.len == (size_t)len && memcmp(it.body, body, it.len) == 0,
                          "buffer %d: body %d once and in order", i, k);
            }
        }
        wk_pipe_receiver_close(rx[i]);
        wk_stream_buffer_subscription_close(sub[i]);
    }
    cr_assert_eq(wk_async_pending(a), 0);
    wk_async_close(a);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Waiting acquires through the event loop (core/async_wait_cluster.c)
 * ---------------------------------------------------------------------- */

typedef wk_test_waitreq lwait; /* a loop waiter's outcome: wk_test_on_wait saw it */

static void loop_wait(wk_async *a, const wk_entity *e, wk_name name, lwait *r, int64_t deadline)
{
    int rc = wk_lock_acquire(wk_async_with(a, wk_test_on_wait, r), e, name, deadline, NULL, &r->token,
                             &r->acquired);
    cr_assert_eq(rc, WK_OK, "queued: %s: %s", wk_err_name(rc), wk_async_errmsg(a));
}

/* Members of the wait queue of item (e, name), on its primary. */
static long long loop_queued(const wk_entity *e, wk_name name)
{
    char key[WK_KEY_MAX + 1];
    size_t klen;
    cr_assert_eq(wk_key_build(key, sizeof(key), &klen, e, &name, NULL), WK_OK);
    wk__wake_keys k;
    cr_assert_eq(wk__wake_keys_build(&k, key, klen), WK_OK);
    redisReply *r = raw_at(wk_test_cluster_key_port(&C, k.q, k.q_len), "ZCARD %b", k.q, k.q_len);
    long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* Turn the loop until n waits sleep between attempts (their attempt
 * answered: not acquired) and none has completed. */
static void loop_turn_until_parked(wk_async *a, size_t n, const lwait *r, int count)
{
    while (wk__async_parked(a) < n)
        wk_test_async_turn(a);
    for (int i = 0; i < count; i++)
        cr_assert_eq(r[i].calls, 0, "%d still waiting: %s (%s)", i, wk_err_name(r[i].status),
                     r[i].msg);
}

/* The id of the client named `name` blocked (its BLPOP) on the node at
 * `port`, or -1. */
static long long blocked_pop_named(int port, const char *name)
{
    return client_id_with(port, name, " flags=b ");
}

/* The connections of the clients named `name` on every node (whose
 * CLIENT LIST line also holds `also`, when not NULL). */
static int clients_named(const char *name, const char *also)
{
    int n = 0;
    long long id;
    for (int i = 0; i < WK_TEST_CLUSTER_NODES; i++)
        n += clients_at(C.port[i], name, also, &id);
    return n;
}

/* Turn until the loop's BLPOP (client `name`) is blocked on `port`. */
static long long loop_turn_until_blocked(wk_async *a, int port, const char *name)
{
    long long id;
    while ((id = blocked_pop_named(port, name)) < 0)
        wk_test_async_turn(a);
    return id;
}

/* A blocking handle holds (e, name): its token. */
static wk_token hold(wk_db *db, const wk_entity *e, wk_name name)
{
    wk_token t;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), e, name, &t, &got), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(got);
    return t;
}

static void let_go(wk_db *db, const wk_entity *e, wk_name name, wk_token *t)
{
    bool rel = false;
    cr_assert_eq(wk_lock_release(wk_db_processor(db), e, name, t, &rel), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(rel);
}

/* Turn until r's callback ran. */
static void loop_turn_until_called(wk_async *a, const lwait *r)
{
    while (!r->calls)
        wk_test_async_turn(a);
}

/* What most cases start with: a blocking handle, a loop handle (named
 * `cname`, or not), a Lock entity of their own. */
typedef struct lscene {
    wk_db *db;
    wk_async *a;
    wk_entity lock;
} lscene;

static void lscene_open(lscene *s, const char *prefix, const char *cname)
{
    s->db = open_cluster();
    s->a = open_loop(C.url, cname);
    s->lock = (wk_entity)WK_LOCK_ENTITY(wk_test_ns(prefix), 60000);
}

static void lscene_close(lscene *s)
{
    wk_async_close(s->a); /* NULL once closed by the case */
    wk_db_close(s->db);
}

/* The first name of e from *n on whose primary is `port` (*n: past it). */
static wk_name name_on(const wk_entity *e, int port, uint64_t *n)
{
    char key[WK_KEY_MAX + 1];
    size_t klen;
    while (item_port(e, wk_name_u64(*n), NULL, key, &klen) != port)
        (*n)++;
    return wk_name_u64((*n)++);
}

Test(cluster, loop_waiter_is_woken_by_a_release_from_a_blocking_or_another_loop_handle,
     .init = shared, .timeout = 120)
{
    lscene s;
    lscene_open(&s, "lwoken", NULL);
    wk_async *b = open_loop(C.url, NULL);
    /* One name on each primary: each node's slot in turn. */
    int prim[3];
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    uint64_t n = 0;
    for (int k = 0; k < 3; k++) {
        wk_name name = name_on(&s.lock, prim[k], &n);
        /* Released by a blocking handle. */
        wk_token held = hold(s.db, &s.lock, name);
        lwait r = {0};
        int64_t deadline = wk_monotonic_ms() + 15000;
        loop_wait(s.a, &s.lock, name, &r, deadline);
        loop_turn_until_parked(s.a, 1, &r, 1);
        cr_assert_eq(loop_queued(&s.lock, name), 1);
        let_go(s.db, &s.lock, name, &held);
        loop_turn_until_called(s.a, &r);
        cr_assert_eq(r.status, WK_OK, "%d: %s", prim[k], r.msg);
        cr_assert(r.acquired, "%d: woken and acquired", prim[k]);
        cr_assert_lt(r.at, deadline, "%d: woken by the release, not at its deadline", prim[k]);
        cr_assert_eq(loop_queued(&s.lock, name), 0, "it left the queue");
        /* Held through loop b now: released through it. */
        outcome o;
        bool got = false, released = false;
        LOOP_RUN(s.a, &o, wk_lock_release(p_, &s.lock, name, &r.token, &released));
        cr_assert(o.status == WK_OK && released, "%s", o.msg);
        wk_token tb;
        LOOP_RUN(b, &o, wk_lock_try(p_, &s.lock, name, &tb, &got));
        cr_assert(o.status == WK_OK && got, "%s", o.msg);
        lwait w = {0};
        deadline = wk_monotonic_ms() + 15000;
        loop_wait(s.a, &s.lock, name, &w, deadline);
        loop_turn_until_parked(s.a, 1, &w, 1);
        LOOP_RUN(b, &o, wk_lock_release(p_, &s.lock, name, &tb, &released));
        cr_assert(o.status == WK_OK && released, "%s", o.msg);
        loop_turn_until_called(s.a, &w);
        cr_assert(w.status == WK_OK && w.acquired, "%d: %s", prim[k], w.msg);
        cr_assert_lt(w.at, deadline, "%d: woken by loop b's release", prim[k]);
        LOOP_RUN(s.a, &o, wk_lock_release(p_, &s.lock, name, &w.token, &released));
        cr_assert(o.status == WK_OK && released, "%s", o.msg);
    }
    wk_async_close(b);
    lscene_close(&s);
}

Test(cluster, loop_waiters_in_several_slots_and_nodes_wait_at_once, .init = shared,
     .timeout = 120)
{
    char cname[64];
    snprintf(cname, sizeof(cname), "wk-lslots-%d", (int)getpid());
    lscene s;
    lscene_open(&s, "lslots", cname);
    /* Four names: one per primary, and a second slot on the first one;
     * then a fifth in the first name's slot, waited for later. */
    enum { N = 4 };
    int prim[3];
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    wk_name names[N + 1];
    wk_token held[N + 1];
    char key[WK_KEY_MAX + 1];
    size_t klen;
    uint64_t n = 0;
    for (int k = 0; k < 3; k++)
        names[k] = name_on(&s.lock, prim[k], &n);
    int port0 = item_port(&s.lock, names[0], NULL, key, &klen);
    int slot0 = (int)wk__key_slot(key, klen);
    do
        names[3] = name_on(&s.lock, port0, &n);
    while ((item_port(&s.lock, names[3], NULL, key, &klen), (int)wk__key_slot(key, klen)) == slot0);
    names[N] = name_in_slot(&s.lock, slot0, n, &n);
    lwait r[N + 1];
    int64_t deadline = wk_monotonic_ms() + 15000;
    for (int k = 0; k <= N; k++) {
        held[k] = hold(s.db, &s.lock, names[k]);
        r[k] = (lwait){0};
        if (k < N)
            loop_wait(s.a, &s.lock, names[k], &r[k], deadline);
    }
    loop_turn_until_parked(s.a, N, r, N);
    /* The fifth parks while its slot's BLPOP is blocked without its list:
     * the BLPOP is issued again with it (else it would sleep to its end). */
    loop_turn_until_blocked(s.a, port0, cname);
    loop_wait(s.a, &s.lock, names[N], &r[N], deadline);
    loop_turn_until_parked(s.a, N + 1, r, N + 1);
    /* One waits connection per slot in use, and nothing else: the map
     * lane, a connection per primary, and 4 slots' BLPOPs. */
    while (clients_named(cname, " flags=b ") < N)
        wk_test_async_turn(s.a);
    cr_assert_eq(clients_named(cname, NULL), 1 + 3 + N, "%d connections",
                 clients_named(cname, NULL));
    /* Released one at a time, last first: each wakes its waiter alone. */
    for (int k = N; k >= 0; k--) {
        let_go(s.db, &s.lock, names[k], &held[k]);
        loop_turn_until_called(s.a, &r[k]);
        cr_assert(r[k].status == WK_OK && r[k].acquired, "%d: %s", k, r[k].msg);
        cr_assert_lt(r[k].at, deadline, "%d: woken by its release", k);
        for (int j = 0; j < k; j++)
            cr_assert_eq(r[j].calls, 0, "%d still waits while %d is woken", j, k);
    }
    lscene_close(&s);
}

typedef struct blocking_waiter {
    wk_db *db;
    const wk_entity *e;
    wk_name name;
    int *seq;
    int order, status;
    bool acquired;
} blocking_waiter;

static void *blocking_wait(void *arg)
{
    blocking_waiter *b = arg;
    wk_token t;
    b->status = wk_lock_acquire(wk_db_processor(b->db), b->e, b->name,
                                wk_monotonic_ms() + 15000, NULL, &t, &b->acquired);
    if (b->status != WK_OK || !b->acquired)
        return NULL;
    b->order = __atomic_fetch_add(b->seq, 1, __ATOMIC_SEQ_CST);
    bool rel = false;
    b->status = wk_lock_release(wk_db_processor(b->db), b->e, b->name, &t, &rel);
    return NULL;
}

Test(cluster, loop_fair_lock_goes_first_come_first_served_across_loop_and_blocking_waiters,
     .init = shared, .timeout = 120)
{
    wk_db *db = open_cluster(), *other = open_cluster();
    wk_async *a = open_loop(C.url, NULL);
    wk_entity fair = WK_LOCK_FAIR_ENTITY(wk_test_ns("lfifo"), 30000);
    wk_name name = wk_name_str("x");
    wk_token held = hold(db, &fair, name);
    int seq = 0;
    /* A loop waiter, then a blocking one, then a loop waiter again. */
    lwait r[2] = {{.seq = &seq, .release_e = &fair, .release_name = "x"},
                  {.seq = &seq, .release_e = &fair, .release_name = "x"}};
    loop_wait(a, &fair, name, &r[0], wk_monotonic_ms() + 15000);
    while (loop_queued(&fair, name) < 1)
        wk_test_async_turn(a);
    blocking_waiter b = {.db = other, .e = &fair, .name = name, .seq = &seq, .order = -1};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, blocking_wait, &b), 0);
    while (loop_queued(&fair, name) < 2)
        wk_test_async_turn(a);
    loop_wait(a, &fair, name, &r[1], wk_monotonic_ms() + 15000);
    while (loop_queued(&fair, name) < 3)
        wk_test_async_turn(a);
    loop_turn_until_parked(a, 2, r, 2);
    /* A try by anyone else does not barge in ahead of them. */
    let_go(db, &fair, name, &held);
    wk_token t;
    bool barged = true;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &fair, name, &t, &barged), WK_OK);
    cr_assert_not(barged);
    while (!r[1].calls)
        wk_test_async_turn(a);
    wk_test_async_drain(a); /* the releases of the callbacks */
    pthread_join(th, NULL);
    cr_assert(r[0].status == WK_OK && r[0].acquired && r[0].released, "%s", r[0].msg);
    cr_assert(b.status == WK_OK && b.acquired, "blocking: %s", wk_err_name(b.status));
    cr_assert(r[1].status == WK_OK && r[1].acquired && r[1].released, "%s", r[1].msg);
    cr_assert_eq(r[0].order, 0, "the first loop waiter first");
    cr_assert_eq(b.order, 1, "the blocking waiter second");
    cr_assert_eq(r[1].order, 2, "the second loop waiter last");
    wk_async_close(a);
    wk_db_close(other);
    wk_db_close(db);
}

Test(cluster, waits_that_time_out_keep_their_blocking_connection, .init = exclusive,
     .timeout = 120)
{
    /* As on one server (deadline::waits_that_time_out_keep_their_blocking_
     * connection): a BLPOP unanswered at the deadline is abandoned on its
     * node's connection, which stays. Before, each timed-out wait opened a
     * new connection to the node. */
    wk_db *db = open_cluster();
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("keepw"), 30000);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int port = item_port(&lock, wk_name_str("x"), NULL, key, &klen);
    wk_token held;
    bool got = false;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &held, &got), WK_OK);
    cr_assert(got);
    /* The first wait opens the blocking handle (and may learn the map). */
    wk_test_time_out_waits(p, &lock, "x", 1);
    redisContext *raw = wk_test_cluster_raw(&C, port);
    cr_assert(raw);
    long long before = wk_test_info(raw, "stats", "total_connections_received");
    wk_test_time_out_waits(p, &lock, "x", 8);
    long long opened = wk_test_info(raw, "stats", "total_connections_received") - before;
    redisFree(raw);
    cr_assert_eq(opened, 0, "8 timed-out waits opened %lld connections to %d", opened, port);
    bool released = false;
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("x"), &held, &released), WK_OK);
    cr_assert(released);
    wk_db_close(db);
}

Test(cluster, loop_the_deadline_ends_a_wait_and_it_leaves_the_queue, .init = shared,
     .timeout = 120)
{
    lscene s;
    lscene_open(&s, "ldeadline", NULL);
    wk_name name = wk_name_str("x");
    wk_token held = hold(s.db, &s.lock, name);
    lwait r = {0};
    int64_t deadline = wk_monotonic_ms() + 400;
    loop_wait(s.a, &s.lock, name, &r, deadline);
    wk_test_async_drain(s.a);
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_OK, "not acquired is an outcome: %s", r.msg);
    cr_assert_not(r.acquired);
    cr_assert_geq(r.at, deadline, "not before the deadline");
    cr_assert_eq(loop_queued(&s.lock, name), 0, "the waiter left the queue");
    let_go(s.db, &s.lock, name, &held);
    lscene_close(&s);
}

/* Queued on the server, each may be handed its lock until its place
 * lapses: WK_EUNKNOWN with its token (issue 36, finding 5). */
Test(cluster, loop_closing_completes_waits_pending_on_several_nodes_as_unknown, .init = shared,
     .timeout = 120)
{
    lscene s;
    lscene_open(&s, "lclosing", NULL);
    int prim[3];
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    lwait r[3];
    wk_name names[3];
    wk_token held[3];
    uint64_t n = 0;
    for (int k = 0; k < 3; k++) {
        names[k] = name_on(&s.lock, prim[k], &n);
        held[k] = hold(s.db, &s.lock, names[k]);
        r[k] = (lwait){0};
        loop_wait(s.a, &s.lock, names[k], &r[k], wk_monotonic_ms() + 15000);
    }
    loop_turn_until_parked(s.a, 3, r, 3);
    wk_async_close(s.a);
    s.a = NULL;
    for (int k = 0; k < 3; k++)
        cr_assert(r[k].calls == 1 && r[k].status == WK_EUNKNOWN && !r[k].acquired,
                  "%d: called once, with WK_EUNKNOWN: %d, %s (%s)", k, r[k].calls,
                  wk_err_name(r[k].status), r[k].msg);
    for (int k = 0; k < 3; k++)
        let_go(s.db, &s.lock, names[k], &held[k]);
    lscene_close(&s);
}

/* RwLock (a reader waits for a writer, a writer for that reader) and
 * Semaphore waits through the loop, each woken by a blocking handle's
 * release (names 0, 1, 2: more than one slot). */
Test(cluster, loop_rwlock_and_semaphore_waits_are_woken_by_releases, .init = shared,
     .timeout = 120)
{
    lscene s;
    lscene_open(&s, "lkinds", NULL);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("lkinds-rw"), 30000);
    wk_entity sem = WK_SEMAPHORE_ENTITY(wk_test_ns("lkinds-sem"), 1, 30000);
    wk_processor *p = wk_db_processor(s.db);
    int64_t deadline = wk_monotonic_ms() + 15000;
    for (uint64_t n = 0; n < 3; n++) {
        wk_name name = wk_name_u64(n);
        wk_token w, held;
        bool got = false, rel = false, ran = false;
        cr_assert_eq(wk_rwlock_try_write(p, &rw, name, &w, &got), WK_OK);
        cr_assert(got);
        lwait rd = {0}, wr = {0}, sm = {0};
        cr_assert_eq(wk_rwlock_acquire_read(wk_async_with(s.a, wk_test_on_wait, &rd), &rw, name,
                                            deadline, NULL, &rd.token, &rd.acquired),
                     WK_OK, "%s", wk_async_errmsg(s.a));
        loop_turn_until_parked(s.a, 1, &rd, 1);
        cr_assert_eq(wk_rwlock_release_write(p, &rw, name, &w, &rel), WK_OK);
        loop_turn_until_called(s.a, &rd);
        cr_assert(rd.status == WK_OK && rd.acquired && rd.at < deadline, "reader: %s", rd.msg);
        cr_assert_eq(wk_rwlock_acquire_write(wk_async_with(s.a, wk_test_on_wait, &wr), &rw, name,
                                             deadline, NULL, &wr.token, &wr.acquired),
                     WK_OK);
        loop_turn_until_parked(s.a, 1, &wr, 1);
        cr_assert_eq(wk_rwlock_release_read(p, &rw, name, &rd.token, &ran), WK_OK);
        loop_turn_until_called(s.a, &wr);
        cr_assert(wr.status == WK_OK && wr.acquired && wr.at < deadline, "writer: %s", wr.msg);

        cr_assert_eq(wk_semaphore_try(p, &sem, name, &held, &got), WK_OK);
        cr_assert(got);
        cr_assert_eq(wk_semaphore_acquire(wk_async_with(s.a, wk_test_on_wait, &sm), &sem, name,
                                          deadline, &sm.token, &sm.acquired),
                     WK_OK);
        loop_turn_until_parked(s.a, 1, &sm, 1);
        cr_assert_eq(wk_semaphore_release(p, &sem, name, &held, &ran), WK_OK);
        loop_turn_until_called(s.a, &sm);
        cr_assert(sm.status == WK_OK && sm.acquired && sm.at < deadline, "semaphore: %s",
                  sm.msg);
        wk_test_async_drain(s.a);
    }
    lscene_close(&s);
}

static void on_opened(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    outcome *o = arg;
    o->done = true;
    o->status = status;
    snprintf(o->msg, sizeof(o->msg), "%s", msg);
}

/* A receiver through a cluster loop handle waits on a hidden handle of
 * its own, which routes by a copy of the handle's map: the messages sent
 * by a blocking handle reach it (its queries once never ran: its map
 * connection was given the map too). */
Test(cluster, loop_a_pipe_is_followed_through_the_loop, .init = shared, .timeout = 120)
{
    lscene s;
    lscene_open(&s, "lpipe", NULL);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("lpipe"), 30000);
    wk_name name = wk_name_str("x");
    outcome opened = {0};
    wk_test_follower f = {0};
    cr_assert_eq(wk_pipe_receive(wk_async_with(s.a, on_opened, &opened), &pipe, name, &f.r),
                 WK_OK, "%s", wk_async_errmsg(s.a));
    while (!opened.done)
        wk_test_async_turn(s.a);
    cr_assert_eq(opened.status, WK_OK, "%s", opened.msg);
    cr_assert_eq(wk_pipe_recv_async(f.r, &f.m, wk_test_follow_pipe, &f), WK_OK);
    cr_assert_eq(wk_pipe_send(wk_db_processor(s.db), &pipe, name, "one", 3), WK_OK);
    cr_assert_eq(wk_pipe_send(wk_db_processor(s.db), &pipe, name, "two", 3), WK_OK);
    while (f.n < 6 && !f.ended)
        wk_test_async_turn(s.a);
    cr_assert(f.n == 6 && memcmp(f.got, "onetwo", 6) == 0, "%.*s (%s)", (int)f.n, f.got,
              wk_err_name(f.status));
    lscene_close(&s);
    wk_pipe_receiver_close(f.r);
}

/* The release hands the lock over: the popped notice completes the loop
 * waiter with no attempt after it (scripts counted on the lock's node:
 * exclusive), and a FencedLock's fence comes in it. */
Test(cluster, loop_a_handed_over_lock_completes_the_waiter_with_no_attempt, .init = exclusive,
     .timeout = 120)
{
    wk_db *db = open_cluster();
    wk_async *a = open_loop(C.url, NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lhanded"), 30000);
    wk_entity fenced = WK_FENCED_LOCK_ENTITY(wk_test_ns("lhanded-f"), 30000);
    wk_name name = wk_name_str("x");
    char key[WK_KEY_MAX + 1];
    size_t klen;
    int port = item_port(&lock, name, NULL, key, &klen);
    wk_token held = hold(db, &lock, name);
    let_go(db, &lock, name, &held); /* the node has the release's script: no NOSCRIPT */
    held = hold(db, &lock, name);
    lwait r = {0};
    loop_wait(a, &lock, name, &r, wk_monotonic_ms() + 15000);
    loop_turn_until_parked(a, 1, &r, 1);
    long long before = wk_test_cluster_calls(&C, port, "evalsha") +
                       wk_test_cluster_calls(&C, port, "eval");
    let_go(db, &lock, name, &held);
    loop_turn_until_called(a, &r);
    long long scripts = wk_test_cluster_calls(&C, port, "evalsha") +
                        wk_test_cluster_calls(&C, port, "eval") - before;
    cr_assert(r.status == WK_OK && r.acquired, "%s", r.msg);
    cr_assert_eq(scripts, 1, "the release alone: %lld scripts", scripts);
    wk_lease_state st;
    cr_assert_eq(wk_lock_owned(wk_db_processor(db), &lock, name, &r.token, &st), WK_OK);
    cr_assert(st.owned, "the loop's token holds the lock");

    wk_fenced_lease fh = {0};
    bool rel = false;
    cr_assert_eq(wk_fenced_lock_try(wk_db_processor(db), &fenced, name, &fh), WK_OK);
    cr_assert(fh.acquired);
    lwait f = {0};
    cr_assert_eq(wk_fenced_lock_acquire(wk_async_with(a, wk_test_on_wait, &f), &fenced, name,
                                        wk_monotonic_ms() + 15000, &f.lease),
                 WK_OK, "%s", wk_async_errmsg(a));
    loop_turn_until_parked(a, 1, &f, 1);
    cr_assert_eq(wk_fenced_lock_release(wk_db_processor(db), &fenced, name, &fh.token, &rel),
                 WK_OK);
    loop_turn_until_called(a, &f);
    cr_assert(f.status == WK_OK && f.lease.acquired, "%s", f.msg);
    cr_assert_eq(f.lease.fence, fh.fence + 1, "the fence handed over: %lld after %lld",
                 (long long)f.lease.fence, (long long)fh.fence);
    wk_async_close(a);
    wk_db_close(db);
}

/* A loop waiter of item "x", held by a blocking handle, whose BLPOP is
 * blocked on the item's primary: the loop handle is named, so that its
 * BLPOP is found in CLIENT LIST. */
typedef struct parked_scene {
    char cname[64];
    lscene sc;
    wk_name name;
    int port, slot; /* the item's primary and slot */
    wk_token held;
    lwait r;
    int64_t deadline;
    long long pop_id; /* the BLPOP's client */
} parked_scene;

/* The scene, item "x" (its primary and slot) not held yet. */
static void parked_scene_open(parked_scene *s, const char *prefix)
{
    snprintf(s->cname, sizeof(s->cname), "wk-%s-%d", prefix, (int)getpid());
    lscene_open(&s->sc, prefix, s->cname);
    s->name = wk_name_str("x");
    char key[WK_KEY_MAX + 1];
    size_t klen;
    s->port = item_port(&s->sc.lock, s->name, NULL, key, &klen);
    s->slot = (int)wk__key_slot(key, klen);
}

static void parked_open(parked_scene *s, const char *prefix, int wait_ms)
{
    parked_scene_open(s, prefix);
    s->held = hold(s->sc.db, &s->sc.lock, s->name);
    s->r = (lwait){0};
    s->deadline = wk_monotonic_ms() + wait_ms;
    loop_wait(s->sc.a, &s->sc.lock, s->name, &s->r, s->deadline);
    loop_turn_until_parked(s->sc.a, 1, &s->r, 1);
    s->pop_id = loop_turn_until_blocked(s->sc.a, s->port, s->cname);
}

/* Once its BLPOP blocks on `port` again, the waiter still waits; the
 * release wakes it, before its deadline. */
static void parked_release_wakes(parked_scene *s, int port)
{
    loop_turn_until_blocked(s->sc.a, port, s->cname);
    cr_assert_eq(s->r.calls, 0, "still waiting: %s", s->r.msg);
    cr_assert_eq(loop_queued(&s->sc.lock, s->name), 1, "still queued");
    let_go(s->sc.db, &s->sc.lock, s->name, &s->held);
    loop_turn_until_called(s->sc.a, &s->r);
    cr_assert(s->r.status == WK_OK && s->r.acquired, "%s: %s", wk_err_name(s->r.status),
              s->r.msg);
    cr_assert_lt(s->r.at, s->deadline, "woken by the release");
    lscene_close(&s->sc);
}

/* The waits connection is cut while it blocks: the waiter attempts again,
 * parks again on a new connection, and the release wakes it. */
Test(cluster, loop_a_lost_waits_connection_makes_the_waiter_attempt_again, .init = shared,
     .timeout = 120)
{
    static parked_scene s;
    parked_open(&s, "llost", 15000);
    freeReplyObject(raw_at(s.port, "CLIENT KILL ID %lld", s.pop_id));
    long long again;
    while ((again = blocked_pop_named(s.port, s.cname)) < 0 || again == s.pop_id)
        wk_test_async_turn(s.sc.a);
    parked_release_wakes(&s, s.port);
}

/* The slot of a parked waiter moves to another primary: its BLPOP is
 * answered MOVED, follows the map, and the release on the new owner
 * wakes it. */
Test(cluster, loop_a_waiter_follows_its_slot_to_another_node, .init = exclusive, .timeout = 120)
{
    static parked_scene s;
    parked_open(&s, "lmoved", 20000);
    int prim[3], to = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int k = 0; k < 3; k++)
        if (prim[k] == s.port)
            to = prim[(k + 1) % 3];
    wk_test_migration m;
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m, s.slot, to), 0);
    while (wk_test_cluster_migrate_keys(&C, &m, 10) > 0)
        ;
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);
    parked_release_wakes(&s, to);
}

/* A failover of the primary a waiter blocks on: the BLPOP cut off
 * (UNBLOCKED, or its connection) goes to the new primary, and the
 * release there wakes the waiter. Leaves the cluster failed over. */
Test(cluster, loop_a_waiter_follows_a_failover, .init = exclusive, .timeout = 120)
{
    static parked_scene s;
    parked_open(&s, "lfailover", 30000);
    int replica = wk_test_cluster_replica_of(&C, s.port);
    cr_assert_gt(replica, 0);
    failover_arg f = {.replica = replica};
    atomic_init(&f.over, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_failover, &f), 0);
    while (!atomic_load(&f.over))
        wk_test_async_turn(s.sc.a);
    pthread_join(th, NULL);
    cr_assert_eq(f.rc, 0, "CLUSTER FAILOVER");
    parked_release_wakes(&s, replica);
}

/* ------------------------------------------------------------------------
 * The settings follower through the loop
 * ---------------------------------------------------------------------- */

typedef struct loop_follower {
    wk_async *a; /* NULL: a thread follower (wk_settings_follower_start) */
    wk_db *db; /* a blocking cluster handle: the writer */
    wk_entity settings;
    char name[16], chan[WK_KEY_MAX + 1];
    size_t chan_len;
    int slot, port; /* the settings' slot and its primary when started */
    wk_settings_follower *f;
} loop_follower;

/* A follower of (ns, "cfg") — through a loop handle, or with `thread`
 * the thread form — on the seed list (or, `elsewhere`, on the URL of a
 * primary that does not own the settings' slot), started: the start
 * returned, or its callback ran, OK. */
static void follower_start(loop_follower *L, bool thread, bool elsewhere, const char *ns,
                           int check_ms)
{
    L->db = open_cluster();
    L->settings = (wk_entity)WK_SETTINGS_ENTITY(wk_test_ns(ns));
    snprintf(L->name, sizeof(L->name), "cfg");
    wk_name n = wk_name_str(L->name);
    cr_assert_eq(wk__settings_channel(L->db, &L->settings, &n, L->chan, sizeof(L->chan),
                                      &L->chan_len),
                 WK_OK);
    L->slot = wk_test_cluster_keyslot(&C, L->chan, L->chan_len);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    L->port = item_port(&L->settings, n, ":map", key, &klen);
    cr_assert_eq(wk_test_cluster_keyslot(&C, key, klen), L->slot, "the channel shares the slot");
    char url[160];
    snprintf(url, sizeof(url), "%s", C.url);
    int prim[3];
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int k = 0; k < 3 && elsewhere; k++)
        if (prim[k] != L->port)
            snprintf(url, sizeof(url), "redis://127.0.0.1:%d", prim[k]);
    wk_settings_follower_options so = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    so.settings = &L->settings;
    so.name = n;
    so.retry_max_ms = 200;
    so.check_ms = check_ms;
    if (thread) {
        wk_db_options o = cluster_options();
        o.url = url;
        so.db = &o;
        char err[256] = "";
        int rc = wk_settings_follower_start(&L->f, &so, err, sizeof(err));
        cr_assert_eq(rc, WK_OK, "start on a cluster URL: %s: %s", wk_err_name(rc), err);
        return;
    }
    L->a = open_loop(url, "lsf");
    outcome o;
    char err[256] = "";
    int rc = wk_settings_follower_start_async(&L->f, via(L->a, &o), &so, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "start through a cluster loop handle: %s: %s", wk_err_name(rc), err);
    cr_assert_not(o.done, "never inside the call");
    int64_t until = wk_test_now_ms() + 20000;
    while (!o.done && wk_test_now_ms() < until)
        wk_test_async_turn(L->a);
    cr_assert(o.done, "the start's callback ran");
    cr_assert_eq(o.status, WK_OK, "first sync: %s", o.msg);
}

static void loop_follower_stop(loop_follower *L)
{
    wk_settings_follower_free(L->f);
    if (L->a)
        wk_async_close(L->a);
    wk_db_close(L->db);
}

/* Let the follower go on: turn the loop, or give its thread a moment. */
static void follower_turn(loop_follower *L)
{
    if (L->a)
        wk_test_async_turn(L->a);
    else
        wk_test_sleep_ms(10);
}

/* A put through the blocking handle; again after a connection error (a
 * node just killed: its map is asked anew). */
static int64_t loop_follower_put(loop_follower *L, const char *k, const char *v)
{
    int64_t version = 0;
    int rc = WK_EIO;
    for (int i = 0; i < 50 && rc != WK_OK; i++) {
        rc = wk_settings_put(wk_db_processor(L->db), &L->settings, wk_name_str(L->name), k,
                             strlen(k), v, strlen(v), &version);
        cr_assert(rc == WK_OK || wk_is_connection_error(rc), "put: %s: %s", wk_err_name(rc),
                  wk_db_errmsg(L->db));
        if (rc)
            wk_test_sleep_ms(100);
    }
    cr_assert_eq(rc, WK_OK, "put: %s", wk_db_errmsg(L->db));
    return version;
}

/* Turn the loop until the mirror reached `version` (20 s at most). */
static bool loop_follower_reaches(loop_follower *L, int64_t version)
{
    bool reached = false;
    int64_t until = wk_test_now_ms() + 20000;
    while (wk_test_now_ms() < until) {
        cr_assert_eq(wk_settings_follower_wait(L->f, version, 0, &reached), WK_OK);
        if (reached)
            return true;
        follower_turn(L);
    }
    return false;
}

/* Turn the loop until the follower's subscriber is on `port` alone (20 s
 * at most); the node it is on. */
static int loop_follower_subscribed_at(loop_follower *L, int port)
{
    int at = -1;
    int64_t until = wk_test_now_ms() + 20000;
    while (wk_test_now_ms() < until) {
        at = subscriber_node(L->chan, L->chan_len);
        if (at == port)
            break;
        follower_turn(L);
    }
    return at;
}

static bool loop_follower_has(loop_follower *L, const char *k, const char *want)
{
    char buf[32];
    size_t vlen = 0;
    bool found = false;
    cr_assert_eq(wk_settings_follower_get(L->f, k, strlen(k), buf, sizeof(buf), &vlen, &found),
                 WK_OK);
    return found && vlen == strlen(want) && memcmp(buf, want, vlen) == 0;
}

/* Each case below runs twice: through the event loop
 * (cluster::loop_settings_follower_NAME, namespace "l" NS) and as the
 * thread form (cluster::settings_follower_NAME, namespace "t" NS). */
#define FOLLOWER_TESTS(name, init_fn, body, ns)                                                     \
    Test(cluster, loop_settings_follower_##name, .init = init_fn, .timeout = 120)                 \
    {                                                                                              \
        body(false, "l" ns);                                                                       \
    }                                                                                              \
    Test(cluster, settings_follower_##name, .init = init_fn, .timeout = 120)                      \
    {                                                                                              \
        body(true, "t" ns);                                                                        \
    }

/* Exclusive: it kills every Pub/Sub connection of a node. The follower
 * (the loop's or the thread's) on a cluster subscribes on the primary of
 * its settings' slot (a plain connection there), gets every put, and
 * after its subscriber is killed subscribes there again, reloads and gets
 * what came meanwhile. */
static void follower_subscribes_and_resumes(bool thread, const char *ns)
{
    static loop_follower L;
    follower_start(&L, thread, false, ns, 5000);
    cr_assert_eq(loop_follower_subscribed_at(&L, L.port), L.port,
                 "subscribed on the primary of slot %d", L.slot);
    int64_t version = 0;
    for (int i = 0; i < 3; i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%d", i);
        version = loop_follower_put(&L, k, "v");
    }
    cr_assert(loop_follower_reaches(&L, version), "the puts reached the mirror");
    wk_settings_stats st;
    cr_assert_eq(wk_settings_follower_stats(L.f, &st, NULL, 0), WK_OK);
    cr_assert_eq(st.reconnects, 0);
    freeReplyObject(raw_at(L.port, "CLIENT KILL TYPE pubsub"));
    version = loop_follower_put(&L, "k9", "after");
    cr_assert(loop_follower_reaches(&L, version), "caught up after losing its subscriber");
    cr_assert(loop_follower_has(&L, "k9", "after"));
    cr_assert_eq(loop_follower_subscribed_at(&L, L.port), L.port, "subscribed there again");
    cr_assert_eq(wk_settings_follower_stats(L.f, &st, NULL, 0), WK_OK);
    cr_assert_geq(st.reconnects, 1);
    version = loop_follower_put(&L, "k10", "next");
    cr_assert(loop_follower_reaches(&L, version), "a put after the resume");
    cr_assert(loop_follower_has(&L, "k10", "next"));
    loop_follower_stop(&L);
}

FOLLOWER_TESTS(subscribes_on_its_slots_primary_and_resumes, exclusive,
               follower_subscribes_and_resumes, "sfsub")

/* The slot's owner is now `port`: a put right after reaches the mirror,
 * the follower ends up subscribed there, and a put after that arrives
 * too. Stops the follower. */
static void loop_follower_moved_to(loop_follower *L, int port)
{
    int64_t version = loop_follower_put(L, "moved", "1");
    cr_assert(loop_follower_reaches(L, version), "a put right after the owner changed");
    cr_assert_eq(loop_follower_subscribed_at(L, port), port, "subscribed on the new owner %d",
                 port);
    version = loop_follower_put(L, "moved", "2");
    cr_assert(loop_follower_reaches(L, version), "a put on the new owner");
    cr_assert(loop_follower_has(L, "moved", "2"));
    loop_follower_stop(L);
}

/* Started through a handle on one node's URL (not the slot's owner, not
 * known as a cluster node when the start is called): its first read's
 * route makes the handle a cluster handle, and the follower subscribes on
 * the owner of its slot. */
static void follower_from_another_url(bool thread, const char *ns)
{
    static loop_follower L;
    follower_start(&L, thread, true, ns, 5000);
    cr_assert_eq(loop_follower_subscribed_at(&L, L.port), L.port, "on the slot's owner");
    int64_t version = loop_follower_put(&L, "k", "v");
    cr_assert(loop_follower_reaches(&L, version));
    cr_assert(loop_follower_has(&L, "k", "v"));
    loop_follower_stop(&L);
}

FOLLOWER_TESTS(from_another_nodes_url_subscribes_on_the_owner, shared,
               follower_from_another_url, "sfurl")

/* Started on one node's URL (a primary that does not own the settings'
 * slot), which is then killed for good: the follower's subscriber is lost
 * (killed on the owner) and comes back where the map says, not at the
 * URL's dead node; a put reaches the mirror. Before, a thread follower
 * subscribed at its URL's node, and once that node was gone it could not
 * subscribe again: no change reached it any more. */
static void follower_outlives_the_node_of_its_url(bool thread, const char *ns)
{
    static loop_follower L;
    follower_start(&L, thread, true, ns, 5000);
    cr_assert_eq(loop_follower_subscribed_at(&L, L.port), L.port, "on the slot's owner");
    int prim[3], url_port = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int k = 0; k < 3; k++) /* the node follower_start named (the last other) */
        if (prim[k] != L.port)
            url_port = prim[k];
    int promoted = wk_test_cluster_kill_primary(&C, url_port, 30000);
    freeReplyObject(raw_at(L.port, "CLIENT KILL TYPE pubsub"));
    int64_t version = loop_follower_put(&L, "k", "after");
    /* (Judged after the node is back, so that a failure leaves the
     * cluster whole for the tests after.) */
    bool reached = loop_follower_reaches(&L, version);
    bool has = loop_follower_has(&L, "k", "after");
    int at = loop_follower_subscribed_at(&L, L.port);
    loop_follower_stop(&L);
    cr_assert_eq(wk_test_cluster_restart(&C, url_port, 30000), 0, "the killed node rejoined");
    cr_assert_gt(promoted, 0, "its replica was promoted");
    cr_assert(reached && has, "a put after its URL's node died reached the mirror");
    cr_assert_eq(at, L.port, "on the slot's owner again");
}

FOLLOWER_TESTS(outlives_the_node_of_its_url, exclusive,
               follower_outlives_the_node_of_its_url, "sfgone")

/* The settings' slot moves to another primary: the periodic check's head
 * read is answered MOVED (followed, the map patched), the follower sees a
 * new owner and subscribes there; no put is lost on the way. */
static void follower_moves_with_its_slot(bool thread, const char *ns)
{
    static loop_follower L;
    follower_start(&L, thread, false, ns, 200);
    cr_assert_eq(loop_follower_subscribed_at(&L, L.port), L.port);
    int prim[3], to = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int k = 0; k < 3; k++)
        if (prim[k] == L.port)
            to = prim[(k + 1) % 3];
    cr_assert_gt(to, 0);
    wk_test_migration m;
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m, L.slot, to), 0);
    while (wk_test_cluster_migrate_keys(&C, &m, 10) > 0)
        ;
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);
    loop_follower_moved_to(&L, to);
}

FOLLOWER_TESTS(moves_with_its_slot, exclusive, follower_moves_with_its_slot, "sfmove")

/* A CLUSTER FAILOVER of the settings' primary: the old primary, now a
 * replica, still relays the messages, but the periodic check's head read
 * (MOVED to the new primary) shows the new owner, and the follower
 * subscribes there. Leaves the cluster failed over. */
static void follower_follows_a_failover(bool thread, const char *ns)
{
    static loop_follower L;
    follower_start(&L, thread, false, ns, 200);
    cr_assert_eq(loop_follower_subscribed_at(&L, L.port), L.port);
    int replica = wk_test_cluster_replica_of(&C, L.port);
    cr_assert_gt(replica, 0);
    cr_assert_eq(wk_test_cluster_failover(&C, replica, 30000), 0, "CLUSTER FAILOVER");
    loop_follower_moved_to(&L, replica);
}

FOLLOWER_TESTS(follows_a_failover, exclusive, follower_follows_a_failover, "sffo")

/* A held lock whose slot starts migrating to the next primary (the ASK
 * window open, no key moved), and a loop waiter parked in that window
 * (its attempts there queue nobody; its BLPOP, several keys on neither
 * node, is answered TRYAGAIN). Its deadline (40 s) ends its one sleep
 * (the lease has 60 s left): only a prompt attempt again gets it sooner. */
static void parked_in_a_window(parked_scene *s, const char *prefix, wk_test_migration *m)
{
    parked_scene_open(s, prefix);
    int prim[3], to = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int k = 0; k < 3; k++)
        if (prim[k] == s->port)
            to = prim[(k + 1) % 3];
    s->held = hold(s->sc.db, &s->sc.lock, s->name);
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, m, s->slot, to), 0);
    s->r = (lwait){0};
    s->deadline = wk_monotonic_ms() + 40000;
    loop_wait(s->sc.a, &s->sc.lock, s->name, &s->r, s->deadline);
    loop_turn_until_parked(s->sc.a, 1, &s->r, 1);
    int64_t t0 = wk_monotonic_ms();
    while (wk_monotonic_ms() < t0 + 1000) /* its BLPOPs go in the window */
        wk_test_async_turn(s->sc.a);
    cr_assert_eq(s->r.calls, 0, "still waiting: %s", s->r.msg);
}

/* The window closes (the slot moved): the waiter's next attempt queues
 * it, its BLPOP blocks on the new owner, and the release there wakes it
 * before its deadline. Before, the BLPOP went on being sent until it
 * blocked on the new owner, the waiter not queued: no release reached it. */
Test(cluster, loop_a_wait_issued_in_a_migration_window_is_woken_by_the_release_after_it,
     .init = exclusive, .timeout = 120)
{
    static parked_scene s;
    wk_test_migration m;
    parked_in_a_window(&s, "ltryw", &m);
    while (wk_test_cluster_migrate_keys(&C, &m, 10) > 0)
        ;
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);
    parked_release_wakes(&s, m.to);
}

/* A release in the window (its single-key form: it wakes nobody): the
 * waiter's next attempt, a short pause after its BLPOP's TRYAGAIN, takes
 * the lock — before its deadline, not at the end of its sleep. */
Test(cluster, loop_a_release_in_a_migration_window_reaches_the_waiter_by_its_next_attempt,
     .init = exclusive, .timeout = 120)
{
    static parked_scene s;
    wk_test_migration m;
    parked_in_a_window(&s, "ltryr", &m);
    let_go(s.sc.db, &s.sc.lock, s.name, &s.held);
    loop_turn_until_called(s.sc.a, &s.r);
    cr_assert(s.r.status == WK_OK && s.r.acquired, "%s: %s", wk_err_name(s.r.status), s.r.msg);
    cr_assert_lt(s.r.at, s.deadline, "taken by an attempt, not at the end of its sleep");
    while (wk_test_cluster_migrate_keys(&C, &m, 10) > 0)
        ;
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);
    lscene_close(&s.sc);
}

/* The settings' primary is killed (SIGKILL): the subscriber is lost, the
 * follower backs off and locates the slot again through the handle (the
 * head read fails until the map names the promoted replica), subscribes
 * there and loads: a put after the promotion reaches the mirror. The
 * killed node comes back as a replica afterwards. */
static void follower_follows_a_killed_primary(bool thread, const char *ns)
{
    static loop_follower L;
    follower_start(&L, thread, false, ns, 200);
    cr_assert_eq(loop_follower_subscribed_at(&L, L.port), L.port);
    int replica = wk_test_cluster_replica_of(&C, L.port);
    cr_assert_gt(replica, 0);
    int promoted = wk_test_cluster_kill_primary(&C, L.port, 30000);
    loop_follower_moved_to(&L, replica);
    int restarted = wk_test_cluster_restart(&C, L.port, 30000);
    cr_assert_eq(promoted, replica, "its replica was promoted");
    cr_assert_eq(restarted, 0, "the killed node rejoined");
}

FOLLOWER_TESTS(follows_a_killed_primary_to_its_replica, exclusive,
               follower_follows_a_killed_primary, "sfkill")

/* Stop the node on `port` (SIGSTOP) for `ms` from a forked child, which
 * lets it go on (SIGCONT) whatever the test does meanwhile — well inside
 * the cluster's node timeout (1500 ms), so no failover starts. The
 * child's pid, to reap. */
static pid_t stall_node_for(int port, int ms)
{
    int i = node_at(port);
    cr_assert(i >= 0 && C.pid[i] > 0, "node %d", port);
    pid_t kid = fork();
    cr_assert(kid >= 0);
    if (kid == 0) {
        kill(C.pid[i], SIGSTOP);
        usleep((useconds_t)ms * 1000);
        kill(C.pid[i], SIGCONT);
        _exit(0);
    }
    /* Stopped once the child's kill went: wait for it to show. */
    char path[64], state = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)C.pid[i]);
    for (int k = 0; k < 1000 && state != 'T' && state != 't'; k++) {
        FILE *f = fopen(path, "r");
        cr_assert(f);
        cr_assert_eq(fscanf(f, "%*d %*s %c", &state), 1);
        fclose(f);
        if (state != 'T' && state != 't')
            usleep(1000);
    }
    cr_assert(state == 'T' || state == 't', "node %d stopped", port);
    return kid;
}

/* A slot moved, and a connected primary stalls: the call that is
 * redirected (its MOVED makes the map stale) and the call after it ask
 * the map anew of the node heard from last — alive a moment ago — not of
 * the stalled one. Before, a refresh asked the connected nodes in map
 * order, the stalled owner of slot 0 first, spent the call's whole
 * command timeout there, and the call failed WK_ETIMEDOUT. */
Test(cluster, a_stalled_primary_does_not_hold_up_the_map_refresh_after_a_moved, .init = exclusive,
     .timeout = 120)
{
    wk_db_options o = cluster_options();
    o.command_timeout_ms = 300;
    wk_db *db = open_opts(&o);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("stallmap"), 30000);
    /* The map's first node (CLUSTER SLOTS lists ranges from slot 0) is
     * the one to stall; a slot moves between the two others. */
    int stalled = wk_test_cluster_slot_port(&C, 0), prim[3], from = -1, to = -1;
    cr_assert_eq(wk_test_cluster_primaries(&C, prim), 3);
    for (int k = 0; k < 3; k++)
        if (prim[k] != stalled)
            *(from < 0 ? &from : &to) = prim[k];
    /* Every primary's connection is open (the refresh asks those first). */
    uint64_t n = 0;
    wk_token t;
    bool got;
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(wk_lock_try(p, &lock, name_on(&lock, prim[k], &n), &t, &got), WK_OK);
        cr_assert(got);
    }
    char key[WK_KEY_MAX + 1];
    size_t klen;
    wk_name moving = name_on(&lock, from, &n);
    cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &lock, &moving, NULL), WK_OK);
    wk_test_migration m;
    cr_assert_eq(wk_test_cluster_migrate_begin(&C, &m, (int)wk__key_slot(key, klen), to), 0);
    while (wk_test_cluster_migrate_keys(&C, &m, 10) > 0)
        ;
    cr_assert_eq(wk_test_cluster_migrate_finish(&C, &m), 0);

    /* (Finding a name's node asks the nodes: not while one stalls.) */
    wk_name next = name_on(&lock, to, &n);
    wk_handle_stats st;
    cr_assert_eq(wk_db_stats(db, &st), WK_OK);
    uint64_t moved = st.moved;
    long long asked = wk_test_cluster_calls(&C, from, "cluster|slots") +
                      wk_test_cluster_calls(&C, to, "cluster|slots");
    long long asked_stalled = wk_test_cluster_calls(&C, stalled, "cluster|slots");
    pid_t kid = stall_node_for(stalled, 900);
    int rc = wk_lock_try(p, &lock, moving, &t, &got);
    cr_assert(rc == WK_OK && got, "the redirected try: %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_eq(wk_db_stats(db, &st), WK_OK);
    cr_assert_gt(st.moved, moved, "it was redirected");
    usleep(150 * 1000); /* past the map's shortest refresh interval (100 ms) */
    int64_t t0 = wk_monotonic_ms();
    rc = wk_lock_try(p, &lock, next, &t, &got);
    char msg[256];
    wk__copy_text(msg, sizeof(msg), wk_db_errmsg(db));
    int64_t took = wk_monotonic_ms() - t0;
    waitpid(kid, NULL, 0); /* the stalled node runs what it was sent */
    cr_assert(rc == WK_OK && got, "the next call: %s: %s", wk_err_name(rc),
              msg);
    cr_assert_eq(wk_test_cluster_calls(&C, stalled, "cluster|slots"), asked_stalled,
                 "nothing asked the stalled node for the map (the call took %lld ms)",
                 (long long)took);
    cr_assert_gt(wk_test_cluster_calls(&C, from, "cluster|slots") +
                     wk_test_cluster_calls(&C, to, "cluster|slots"),
                 asked, "the map was asked of a live node");
    wk_db_close(db);
}
