/*
 * tests/core/test_tls_cluster.c — rediss:// on a Redis Cluster whose
 * nodes have certificates of their own (tests/support/tls_server.c):
 * every node's certificate is checked against the name the handle
 * reached it by — the seed's host, or the endpoint CLUSTER SLOTS or a
 * MOVED reply named — unless options.tls_server_name overrides it for
 * every node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <wakuwaku/cache.h>
#include <wakuwaku/key.h>

#include "support.h"

/* The test's cluster: stopped by .fini, so a failed assertion leaves no
 * server or certificate behind. */
static wk_test_tls_cluster C;

static void cluster_stop(void)
{
    wk_test_tls_cluster_stop(&C);
}

static void cluster_start(wk_test_tls_cluster *c, const char *a0, const char *a1, const char *a2,
                          const char *s0, const char *s1, const char *s2)
{
    const char *const announce[WK_TEST_TLS_NODES] = {a0, a1, a2};
    const char *const san[WK_TEST_TLS_NODES] = {s0, s1, s2};
    cr_assert_eq(wk_test_tls_cluster_start(c, announce, san), 0,
                 "a TLS cluster (and openssl's certificates) did not start");
}

static wk_db_options cluster_options(const wk_test_tls_cluster *c)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = c->url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 2000;
    o.tls_ca_file = c->ca;
    return o;
}

static const wk_entity cache = WK_CACHE_ENTITY("tlsc", 60000);

/* A name of `cache` whose key lives on node `node`, and that key. */
static const char *name_on(const wk_test_tls_cluster *c, int node, char key[WK_KEY_MAX + 1],
                           size_t *klen)
{
    static char names[WK_TEST_TLS_NODES][16];
    for (int j = 0; j < 1000; j++) {
        snprintf(names[node], sizeof(names[node]), "k%d", j);
        wk_name n = wk_name_str(names[node]);
        cr_assert_eq(wk_key_build(key, WK_KEY_MAX + 1, klen, &cache, &n, NULL), WK_OK);
        if (wk_test_tls_cluster_node_of(c, key, *klen) == node)
            return names[node];
    }
    cr_assert_fail("no name on node %d", node);
    return NULL;
}

/* Whether `key` holds `body` on node i (asked on its plain port). */
static bool node_holds(const wk_test_tls_cluster *c, int i, const char *key, size_t klen,
                       const char *body)
{
    redisContext *raw = wk_test_raw_port(c->node[i].port, NULL);
    cr_assert_not_null(raw);
    redisReply *r = wk_test_cmd(raw, "GET %b", key, klen);
    bool held = r->type == REDIS_REPLY_STRING && strcmp(r->str, body) == 0;
    freeReplyObject(r);
    redisFree(raw);
    return held;
}

/* SETs node i turned away (MOVED and the like: INFO commandstats). */
static long long rejected_sets(const wk_test_tls_cluster *c, int i)
{
    redisContext *raw = wk_test_raw_port(c->node[i].port, NULL);
    cr_assert_not_null(raw);
    redisReply *r = wk_test_cmd(raw, "INFO commandstats");
    const char *at = strstr(r->str, "cmdstat_set:");
    const char *rej = at ? strstr(at, "rejected_calls=") : NULL;
    long long n = rej ? atoll(rej + strlen("rejected_calls=")) : 0;
    freeReplyObject(r);
    redisFree(raw);
    return n;
}

/* Put and get back an item on node i through the handle. */
static int put_get_on(wk_db *db, const wk_test_tls_cluster *c, int i)
{
    char key[WK_KEY_MAX + 1];
    size_t klen;
    const char *name = name_on(c, i, key, &klen);
    char body[32];
    snprintf(body, sizeof(body), "on node %d", i);
    int rc = wk_cache_put(wk_db_processor(db), &cache, wk_name_str(name), body, strlen(body));
    if (rc)
        return rc;
    wk_body got = {0};
    rc = wk_cache_get(wk_db_processor(db), &cache, wk_name_str(name), &got);
    cr_assert_eq(rc, WK_OK, "get on node %d: %s: %s", i, wk_err_name(rc), wk_db_errmsg(db));
    cr_assert(got.found && got.len == strlen(body) && memcmp(got.data, body, got.len) == 0,
              "node %d: not the body put", i);
    wk_body_free(&got);
    cr_assert(node_holds(c, i, key, klen, body), "the item is not on node %d", i);
    return WK_OK;
}

/* ---- each node against the name it was reached by */

Test(tls_cluster, every_node_is_checked_against_its_own_address, .timeout = 60,
     .fini = cluster_stop)
{
    /* The seed is reached as localhost (its certificate names only that);
     * CLUSTER SLOTS names the two others by IP, and their certificates
     * carry only that IP. */
    wk_test_tls_cluster *c = &C;
    cluster_start(c, "localhost", "127.0.0.1", "127.0.0.1", "DNS:localhost", "IP:127.0.0.1",
                  "IP:127.0.0.1");
    wk_db_options o = cluster_options(c);
    wk_db *db = NULL;
    char err[512];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open %s: %s: %s", c->url, wk_err_name(rc), err);
    for (int i = 0; i < WK_TEST_TLS_NODES; i++) {
        rc = put_get_on(db, c, i);
        cr_assert_eq(rc, WK_OK, "node %d (%s:%d): %s: %s", i, i ? "127.0.0.1" : "localhost",
                     c->tls_port[i], wk_err_name(rc), wk_db_errmsg(db));
    }
    wk_db_close(db);
}

/* ---- a certificate valid for the seed's name is no pass elsewhere */

Test(tls_cluster, a_node_with_the_seeds_certificate_is_refused, .timeout = 60, .fini = cluster_stop)
{
    /* Node 2 is announced as 127.0.0.1 but shows a certificate for
     * localhost only: the seed's name, not its own. */
    wk_test_tls_cluster *c = &C;
    cluster_start(c, "localhost", "127.0.0.1", "127.0.0.1", "DNS:localhost", "IP:127.0.0.1",
                  "DNS:localhost");
    wk_db_options o = cluster_options(c);
    wk_db *db = NULL;
    char err[512];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open %s: %s: %s", c->url, wk_err_name(rc), err);
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%d", c->tls_port[2]);

    /* Named by CLUSTER SLOTS. */
    rc = put_get_on(db, c, 2);
    cr_assert_eq(rc, WK_EAUTH, "node 2 was accepted: %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    const char *msg = wk_db_errmsg(db);
    cr_log_info("refused: %s", msg);
    cr_assert(strstr(msg, where) && strstr(msg, "not accepted") &&
                  strstr(msg, "must name 127.0.0.1"),
              "the message names neither the address nor the expected name: %s", msg);
    /* The others still work. */
    cr_assert_eq(put_get_on(db, c, 0), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(put_get_on(db, c, 1), WK_OK, "%s", wk_db_errmsg(db));
    wk_db_close(db);

    /* Named by a MOVED reply: a slot of node 0 (no keys) handed to node
     * 2 after the handle learnt the map. */
    rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open %s: %s: %s", c->url, wk_err_name(rc), err);
    char key[WK_KEY_MAX + 1], name[16];
    size_t klen;
    long long slot = -1;
    redisContext *raw = wk_test_raw_port(c->node[0].port, NULL);
    redisReply *r;
    for (int j = 0; slot < 0 && j < 1000; j++) {
        snprintf(name, sizeof(name), "m%d", j);
        wk_name m = wk_name_str(name);
        cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &cache, &m, NULL), WK_OK);
        if (wk_test_tls_cluster_node_of(c, key, klen) != 0)
            continue;
        r = wk_test_cmd(raw, "CLUSTER KEYSLOT %b", key, klen);
        long long s = r->integer;
        freeReplyObject(r);
        r = wk_test_cmd(raw, "CLUSTER COUNTKEYSINSLOT %lld", s);
        if (r->integer == 0) /* SETSLOT NODE moves only an empty slot */
            slot = s;
        freeReplyObject(r);
    }
    redisFree(raw);
    cr_assert_geq(slot, 0, "no empty slot on node 0");
    wk_name n = wk_name_str(name);
    raw = wk_test_raw_port(c->node[2].port, NULL);
    r = wk_test_cmd(raw, "CLUSTER MYID");
    char id[64];
    snprintf(id, sizeof(id), "%s", r->str);
    freeReplyObject(r);
    redisFree(raw);
    int order[WK_TEST_TLS_NODES] = {2, 0, 1}; /* the target first */
    for (int k = 0; k < WK_TEST_TLS_NODES; k++) {
        raw = wk_test_raw_port(c->node[order[k]].port, NULL);
        r = wk_test_cmd(raw, "CLUSTER SETSLOT %lld NODE %s", slot, id);
        cr_assert_eq(r->type, REDIS_REPLY_STATUS, "SETSLOT on node %d: %s", order[k], r->str);
        freeReplyObject(r);
        redisFree(raw);
    }
    long long moved_before = rejected_sets(c, 0);
    rc = wk_cache_put(wk_db_processor(db), &cache, n, "x", 1);
    cr_assert_eq(rc, WK_EAUTH, "node 2 (by MOVED) was accepted: %s: %s", wk_err_name(rc),
                 wk_db_errmsg(db));
    msg = wk_db_errmsg(db);
    cr_log_info("refused after MOVED: %s", msg);
    cr_assert(strstr(msg, where) && strstr(msg, "must name 127.0.0.1"), "%s", msg);
    cr_assert(!node_holds(c, 2, key, klen, "x"), "the put reached node 2");
    cr_assert_gt(rejected_sets(c, 0), moved_before, "node 0 did not answer MOVED");
    wk_db_close(db);
}

/* ---- tls_server_name: one name for every node */

Test(tls_cluster, server_name_overrides_every_nodes_address, .timeout = 60, .fini = cluster_stop)
{
    /* Nodes 0 and 1 carry only the name wk-cluster.test; node 2 only its
     * own address. */
    wk_test_tls_cluster *c = &C;
    cluster_start(c, "localhost", "127.0.0.1", "127.0.0.1", "DNS:wk-cluster.test",
                  "DNS:wk-cluster.test", "IP:127.0.0.1");
    wk_db_options o = cluster_options(c);
    wk_db *db = NULL;
    char err[512];

    /* Without it, the seed is checked as localhost. */
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "localhost"), "%s", err);

    o.tls_server_name = "wk-cluster.test";
    rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open %s: %s: %s", c->url, wk_err_name(rc), err);
    cr_assert_eq(put_get_on(db, c, 0), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(put_get_on(db, c, 1), WK_OK, "%s", wk_db_errmsg(db));
    /* The override holds for node 2 too, although its certificate is
     * good for the address it is reached by. */
    rc = put_get_on(db, c, 2);
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_log_info("refused: %s", wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), "must name wk-cluster.test: options.tls_server_name"), "%s",
              wk_db_errmsg(db));
    wk_db_close(db);
}

/* ---- the event-loop handle: the same checks, node by node */

static void on_status(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a, (void)msg;
    *(int *)arg = status;
}

/* A put through the loop on a name of node i: its status. */
static int loop_put_on(wk_async *a, const wk_test_tls_cluster *c, int i, char key[WK_KEY_MAX + 1],
                       size_t *klen)
{
    const char *name = name_on(c, i, key, klen);
    int status = 12345;
    int rc = wk_cache_put(wk_async_with(a, on_status, &status), &cache, wk_name_str(name), "loop",
                          4);
    cr_assert_eq(rc, WK_OK, "%s", wk_async_errmsg(a));
    wk_test_async_drain(a);
    return status;
}

/* Through the loop (core/async_cluster.c sets up each node's connection
 * itself), node 2's certificate — the seed's name, not its own address —
 * is refused (WK_EAUTH, naming both), and nodes 0 (reached as localhost)
 * and 1 (by IP) are accepted, each against its own name. */
Test(tls_cluster, the_event_loop_checks_every_node_against_its_own_address, .timeout = 60,
     .fini = cluster_stop)
{
    wk_test_tls_cluster *c = &C;
    cluster_start(c, "localhost", "127.0.0.1", "127.0.0.1", "DNS:localhost", "IP:127.0.0.1",
                  "DNS:localhost");
    wk_db_options o = cluster_options(c);
    wk_async *a = NULL;
    char err[512];
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    for (int i = 0; i < 2; i++) {
        int st = loop_put_on(a, c, i, key, &klen);
        cr_assert_eq(st, WK_OK, "node %d: %s: %s", i, wk_err_name(st), wk_async_errmsg(a));
        cr_assert(node_holds(c, i, key, klen, "loop"), "the item is not on node %d", i);
    }
    int st = loop_put_on(a, c, 2, key, &klen);
    cr_assert_eq(st, WK_EAUTH, "node 2 was accepted: %s: %s", wk_err_name(st), wk_async_errmsg(a));
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%d", c->tls_port[2]);
    cr_assert(strstr(wk_async_errmsg(a), where) && strstr(wk_async_errmsg(a), "must name 127.0.0.1"),
              "%s", wk_async_errmsg(a));
    cr_assert(!node_holds(c, 2, key, klen, "loop"), "the put reached node 2");
    wk_async_close(a);
}
