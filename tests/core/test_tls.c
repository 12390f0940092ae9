/*
 * tests/core/test_tls.c — rediss:// against real redis-servers with TLS:
 * certificates made by the `openssl` command line in a temporary
 * directory (a CA, a server certificate for 127.0.0.1 / localhost, a
 * client certificate, and an unrelated CA), queries, a batch and a
 * settings follower over TLS, client certificates, and the refusals:
 * unknown CA, wrong name, redis:// at a TLS port, rediss:// at a plain one.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <openssl/err.h>

#include <wakuwaku/batch.h>
#include <wakuwaku/cache.h>
#include <wakuwaku/settings.h>

#include "core/db_internal.h"
#include "support.h"

typedef wk_test_tls tls_server;

static void tls_start_with(tls_server *t, bool auth_clients, const char *extra)
{
    cr_assert_eq(wk_test_tls_start(t, auth_clients, extra), 0,
                 "redis-server with TLS (and openssl's certificates) did not start");
}

static void tls_start(tls_server *t, bool auth_clients)
{
    tls_start_with(t, auth_clients, NULL);
}

static void tls_stop(tls_server *t)
{
    wk_test_tls_stop(t);
}

static wk_db_options tls_options(const tls_server *t)
{
    return wk_test_tls_options(t);
}

static int try_open(const wk_db_options *o, char *err, size_t errlen)
{
    wk_db *db = (wk_db *)o; /* must be reset to NULL on failure */
    int rc = wk_db_open(&db, o, err, errlen);
    if (rc)
        cr_assert_null(db);
    wk_db_close(db);
    return rc;
}

/* ---- queries, a batch and a follower over TLS */

typedef struct seen {
    int changes;
} seen;

Test(tls, lock_batch_and_follower_over_tls, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    wk_db *db = NULL;
    char err[512];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open over TLS: %s: %s", wk_err_name(rc), err);

    /* It really is TLS: the server counts this client on its TLS port. */
    redisContext *raw = wk_test_raw(t.s.url);
    redisReply *r = wk_test_cmd(raw, "CLIENT LIST");
    char laddr[48];
    snprintf(laddr, sizeof(laddr), "laddr=127.0.0.1:%d", t.tls_port);
    cr_assert(strstr(r->str, laddr), "no client on the TLS port:\n%s", r->str);
    freeReplyObject(r);

    wk_entity lock = WK_LOCK_ENTITY("tls", 5000);
    wk_token tok;
    bool got = false, released = false;
    rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &tok, &got);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got);
    rc = wk_lock_release(wk_db_processor(db), &lock, wk_name_str("a"), &tok, &released);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(released);

    /* A batch large enough for many TLS records each way. */
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    enum { N = 400 };
    static wk_token toks[N];
    static bool gots[N];
    for (int i = 0; i < N; i++)
        wk_lock_try(wk_batch_processor(b), &lock, wk_name_u64((uint64_t)i), &toks[i], &gots[i]);
    rc = wk_batch_exec(b);
    cr_assert_eq(rc, WK_OK, "batch over TLS: %s", wk_db_errmsg(db));
    for (int i = 0; i < N; i++)
        cr_assert(gots[i], "lock %d not acquired", i);
    wk_batch_close(b);

    /* Idle past the probe interval: the connection is kept (a session
     * ticket the server sent is not mistaken for a stray reply). */
    long long connected = wk_test_cmd_calls(raw, "hello");
    wk_test_sleep_ms(1100);
    cr_assert_eq(wk_db_ping(db), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_test_cmd_calls(raw, "hello"), connected, "the idle TLS link was reopened");

    /* A settings follower: its own handle and a subscriber, both TLS. */
    wk_entity e = WK_SETTINGS_ENTITY("tls");
    int64_t version;
    rc = wk_settings_put(wk_db_processor(db), &e, wk_name_str("cfg"), "k", 1, "v1", 2, &version);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    wk_settings_follower_options fo = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    fo.db = &o;
    fo.settings = &e;
    fo.name = wk_name_str("cfg");
    wk_settings_follower *f = NULL;
    rc = wk_settings_follower_start(&f, &fo, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "follower over TLS: %s: %s", wk_err_name(rc), err);
    rc = wk_settings_put(wk_db_processor(db), &e, wk_name_str("cfg"), "k", 1, "v2", 2, &version);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    bool reached = false;
    cr_assert_eq(wk_settings_follower_wait(f, version, 5000, &reached), WK_OK);
    cr_assert(reached, "the follower did not see the change over TLS");
    char buf[8];
    size_t len;
    bool found;
    cr_assert_eq(wk_settings_follower_get(f, "k", 1, buf, sizeof(buf), &len, &found), WK_OK);
    cr_assert(found && len == 2 && memcmp(buf, "v2", 2) == 0);
    wk_settings_follower_free(f);

    redisFree(raw);
    wk_db_close(db);
    tls_stop(&t);
}

/* ---- reconnects: a restarted server is reached over TLS again */

Test(tls, reconnect_after_a_server_restart, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    wk_db *db = NULL;
    char err[512];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), err);
    cr_assert_eq(wk_db_ping(db), WK_OK, "%s", wk_db_errmsg(db));

    char port[32], cert[160], key[160], ca[160];
    snprintf(port, sizeof(port), "tls-port %d", t.tls_port);
    snprintf(cert, sizeof(cert), "tls-cert-file %s/server.crt", t.certs);
    snprintf(key, sizeof(key), "tls-key-file %s/server.key", t.certs);
    snprintf(ca, sizeof(ca), "tls-ca-cert-file %s", t.ca);
    const char *config[] = {port, cert, key, ca, "tls-auth-clients no", NULL};
    wk_test_server_stop(&t.s);
    cr_assert_eq(wk_test_server_restart(&t.s, config), 0);
    wk_test_sleep_ms(1100); /* past the idle probe */

    /* The idle probe finds the old TLS link dead; the query goes to a new
     * one (same SSL_CTX), so a retry-safe PING succeeds. */
    rc = wk_db_ping(db);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    wk_entity lock = WK_LOCK_ENTITY("tls-re", 5000);
    wk_token tok;
    bool got = false;
    rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &tok, &got);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got);
    redisContext *raw = wk_test_raw(t.s.url);
    redisReply *r = wk_test_cmd(raw, "CLIENT LIST");
    char laddr[48];
    snprintf(laddr, sizeof(laddr), "laddr=127.0.0.1:%d", t.tls_port);
    cr_assert(strstr(r->str, laddr), "the new connection is not on the TLS port:\n%s", r->str);
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
    tls_stop(&t);
}

/* A reconnect resumes the session the server gave the connection before
 * (an abbreviated handshake), on the handle's own connection and on a
 * pool's. */
Test(tls, a_reconnect_resumes_the_session, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    o.client_name = "tls-resume";
    wk_db *db = NULL;
    char err[512];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), err);
    cr_assert_eq(wk_db_ping(db), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(!wk__tls_resumed(&db->conn->link), "the first connection had no session to resume");
    redisContext *raw = wk_test_raw(t.s.url);
    for (int round = 0; round < 2; round++) {
        cr_assert_eq(wk_test_kill_clients_named(raw, "tls-resume"), 1);
        rc = wk_db_ping(db);
        cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
        cr_assert(wk__tls_resumed(&db->conn->link), "reconnect %d: a full handshake", round + 1);
    }
    redisFree(raw);
    wk_db_close(db);
    tls_stop(&t);
}

/* ---- replies across TLS records, and many in one record */

enum { BIG = 1 << 20, SMALL = 300 };

static wk_db *open_ok(const wk_db_options *o)
{
    wk_db *db = NULL;
    char err[512];
    int rc = wk_db_open(&db, o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open over TLS: %s: %s", wk_err_name(rc), err);
    return db;
}

/* A value of BIG bytes that no shifted copy matches. */
static unsigned char *big_value(void)
{
    unsigned char *v = malloc(BIG);
    cr_assert_not_null(v);
    for (size_t i = 0; i < BIG; i++)
        v[i] = (unsigned char)(i * 7 + (i >> 13));
    return v;
}

/* Put `len` bytes of v, read them back whole (a MiB: 64 records of
 * 16 KiB and more, several socket reads), then a batch of SMALL reads
 * whose small replies share records. */
static void big_and_many(wk_db *db, const unsigned char *v, size_t len)
{
    wk_entity cache = WK_CACHE_ENTITY("tls", 60000);
    int rc = wk_cache_put(wk_db_processor(db), &cache, wk_name_str("big"), v, len);
    cr_assert_eq(rc, WK_OK, "put: %s", wk_db_errmsg(db));
    wk_body body = WK_BODY_INIT;
    rc = wk_cache_get(wk_db_processor(db), &cache, wk_name_str("big"), &body);
    cr_assert_eq(rc, WK_OK, "get: %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert(body.found && body.len == len, "got %zu bytes of %zu", body.len, len);
    cr_assert(memcmp(body.data, v, len) == 0, "the value came back changed");
    wk_body_free(&body);

    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    char val[32];
    for (int i = 0; i < SMALL; i++) {
        int n = snprintf(val, sizeof(val), "value %d", i);
        wk_cache_put(wk_batch_processor(b), &cache, wk_name_u64((uint64_t)i), val, (size_t)n);
    }
    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    static wk_buffer got[SMALL];
    static char bufs[SMALL][32];
    for (int i = 0; i < SMALL; i++) {
        got[i] = (wk_buffer){.data = bufs[i], .cap = sizeof(bufs[i])};
        wk_cache_get_into(wk_batch_processor(b), &cache, wk_name_u64((uint64_t)i), &got[i]);
    }
    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    for (int i = 0; i < SMALL; i++) {
        int n = snprintf(val, sizeof(val), "value %d", i);
        cr_assert(got[i].found && got[i].len == (size_t)n && memcmp(bufs[i], val, (size_t)n) == 0,
                  "reply %d reached the wrong query: '%.*s'", i, (int)got[i].len, bufs[i]);
    }
    wk_batch_close(b);
}

Test(tls, replies_across_records_and_many_in_one_record, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    wk_db *db = open_ok(&o);
    unsigned char *v = big_value();
    big_and_many(db, v, BIG);
    free(v);
    wk_db_close(db);
    tls_stop(&t);
}

/* A waiting acquire that times out over TLS keeps its blocking
 * connection (its BLPOP is abandoned, its late reply read through TLS and
 * dropped): no new TLS handshake per timed-out wait (before: 6). */
Test(tls, waits_that_time_out_keep_their_tls_connection, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    wk_db *db = open_ok(&o);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("tlswait"), 30000);
    wk_token held;
    bool got = false;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &held, &got), WK_OK);
    cr_assert(got);
    redisContext *raw = wk_test_raw(t.s.url);
    long long before = wk_test_info(raw, "stats", "total_connections_received");
    wk_test_time_out_waits(p, &lock, "x", 6);
    long long opened = wk_test_info(raw, "stats", "total_connections_received") - before;
    cr_assert_eq(opened, 1, "6 timed-out waits opened %lld TLS connections (the first: 1)", opened);
    bool released = false;
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("x"), &held, &released), WK_OK);
    redisFree(raw);
    wk_db_close(db);
    tls_stop(&t);
}

/* OpenSSL judges a read or write that did not complete by this thread's
 * error queue: an error the application left there must not turn "wait
 * for more bytes" into a failure (the library empties the queue before
 * each SSL_read and SSL_write, when it holds anything). Through a proxy
 * that passes the server's bytes on 1500 at a time, so reads end inside
 * records and SSL_read answers "want more" many times per value. */
Test(tls, an_error_left_in_the_openssl_queue_does_not_fail_a_query, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_test_proxy *proxy;
    cr_assert_eq(wk_test_proxy_start(&proxy, t.tls_port), 0);
    wk_test_proxy_slice(proxy, 1500);
    char url[80];
    snprintf(url, sizeof(url), "rediss%s", wk_test_proxy_url(proxy) + strlen("redis"));
    wk_db_options o = tls_options(&t);
    o.url = url;
    wk_db *db = open_ok(&o);
    /* A misjudged read would fail the query and a reconnect would retry
     * it: count the connections too. */
    redisContext *raw = wk_test_raw(t.s.url);
    long long connected = wk_test_cmd_calls(raw, "hello");
    unsigned char *v = big_value();
    for (int round = 0; round < 3; round++) {
        ERR_raise(ERR_LIB_USER, 1); /* the application's own, left behind */
        big_and_many(db, v, 64 * 1024);
    }
    free(v);
    cr_assert_eq(wk_test_cmd_calls(raw, "hello"), connected,
                 "a read was taken for a failure and the connection reopened");
    redisFree(raw);
    wk_db_close(db);
    wk_test_proxy_stop(proxy);
    tls_stop(&t);
}

/* ---- client certificates (tls-auth-clients yes) */

Test(tls, client_certificate_required_and_accepted, .timeout = 30)
{
    tls_server t;
    tls_start(&t, true);
    wk_db_options o = tls_options(&t);
    char err[512];
    int rc = try_open(&o, err, sizeof(err));
    cr_assert_neq(rc, WK_OK, "opened without the client certificate the server requires");
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "client certificate"), "%s", err);

    o.tls_cert_file = t.client_crt;
    rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EINVAL, "a certificate without its key: %s", wk_err_name(rc));
    cr_assert(strstr(err, "tls_key_file"), "%s", err);

    o.tls_key_file = t.client_key;
    wk_db *db = NULL;
    rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "with the client certificate: %s: %s", wk_err_name(rc), err);
    cr_assert_eq(wk_db_ping(db), WK_OK, "%s", wk_db_errmsg(db));
    wk_db_close(db);
    tls_stop(&t);
}

/* ---- AUTH over TLS: the password is sent, never printed */

Test(tls, password_over_tls, .timeout = 30)
{
    tls_server t;
    tls_start_with(&t, false, "requirepass s3cr3t-tls");
    wk_db_options o = tls_options(&t);
    char url[128], err[512];
    snprintf(url, sizeof(url), "rediss://:wr0ng-pw@127.0.0.1:%d", t.tls_port);
    o.url = url;
    int rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);
    cr_assert_null(strstr(err, "wr0ng-pw"), "the password leaked: %s", err);
    snprintf(url, sizeof(url), "rediss://:s3cr3t-tls@127.0.0.1:%d", t.tls_port);
    wk_db *db = NULL;
    rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), err);
    cr_assert_eq(wk_db_ping(db), WK_OK, "%s", wk_db_errmsg(db));
    wk_db_close(db);
    tls_stop(&t);
}

/* ---- refusals */

Test(tls, unknown_ca_is_refused, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    o.tls_ca_file = t.other_ca;
    char err[512];
    int rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "certificate") && strstr(err, "not accepted"), "%s", err);
    /* X509_verify_cert_error_string()'s reason (the server may send its
     * CA along, which is then a self-signed certificate nobody trusts). */
    cr_assert(strstr(err, "unable to get local issuer certificate") ||
                  strstr(err, "self-signed certificate in certificate chain"),
              "no reason: %s", err);

    /* The system's CAs (no CA given) do not know the test CA either. */
    o.tls_ca_file = NULL;
    rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);

    /* A missing CA file is an option error. */
    o.tls_ca_file = "/nonexistent/ca.crt";
    rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "/nonexistent/ca.crt"), "%s", err);
    cr_assert(strstr(err, "No such file or directory"), "the reason is the file's: %s", err);
    /* Likewise an unreadable CA directory, and a client certificate or key
     * that is not there: the file's own reason, not OpenSSL's. */
    o.tls_ca_file = NULL;
    o.tls_ca_dir = "/nonexistent/certs";
    rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "/nonexistent/certs") && strstr(err, "No such file or directory"), "%s",
              err);
    o.tls_ca_dir = NULL;
    o.tls_ca_file = t.ca;
    o.tls_cert_file = "/nonexistent/client.crt";
    o.tls_key_file = "/nonexistent/client.key";
    rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "/nonexistent/client.crt") && strstr(err, "No such file or directory"),
              "%s", err);
    o.tls_ca_file = "/";
    o.tls_cert_file = o.tls_key_file = NULL;
    rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "is a directory"), "%s", err);
    tls_stop(&t);
}

Test(tls, wrong_name_is_refused, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    o.tls_server_name = "wrong.example";
    char err[512];
    int rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "hostname mismatch"), "%s", err);
    cr_assert(strstr(err, "wrong.example"), "%s", err);

    /* The names the certificate carries are accepted. */
    o.tls_server_name = "localhost";
    cr_assert_eq(try_open(&o, err, sizeof(err)), WK_OK, "%s", err);
    char url[96];
    snprintf(url, sizeof(url), "rediss://localhost:%d", t.tls_port);
    o.url = url;
    o.tls_server_name = NULL;
    rc = try_open(&o, err, sizeof(err));
    /* localhost may resolve to ::1 first, where nothing listens. */
    cr_assert(rc == WK_OK || rc == WK_EIO, "%s: %s", wk_err_name(rc), err);
    tls_stop(&t);
}

Test(tls, no_fallback_between_plain_and_tls, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    char err[512];

    /* redis:// at the TLS port: refused, with a hint, never downgraded. */
    wk_db_options o = WK_DB_OPTIONS_INIT;
    char url[96];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", t.tls_port);
    o.url = url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    int rc = try_open(&o, err, sizeof(err));
    cr_assert_neq(rc, WK_OK, "a plain connection to the TLS port worked");
    cr_assert(strstr(err, "rediss://"), "%s: %s", wk_err_name(rc), err);

    /* TLS options need rediss://. */
    o.url = t.s.url;
    o.tls_ca_file = t.ca;
    rc = try_open(&o, err, sizeof(err));
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "tls_ca_file") && strstr(err, "rediss://"), "%s", err);

    /* rediss:// at the plain port: the handshake fails, bounded by the
     * connect timeout. */
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", t.s.port);
    o.url = url;
    int64_t start = wk_test_now_ms();
    rc = try_open(&o, err, sizeof(err));
    cr_assert(rc == WK_EIO || rc == WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "TLS handshake"), "%s", err);
    cr_assert_lt(wk_test_now_ms() - start, 3000);
    tls_stop(&t);
}

Test(tls, handshake_is_bounded_by_the_connect_timeout, .timeout = 30)
{
    /* A server that accepts and never speaks TLS: stopped (SIGSTOP). */
    tls_server t;
    tls_start(&t, false);
    kill(t.s.pid, SIGSTOP);
    wk_db_options o = tls_options(&t);
    o.connect_timeout_ms = 300;
    char err[512];
    int64_t start = wk_test_now_ms();
    int rc = try_open(&o, err, sizeof(err));
    int64_t took = wk_test_now_ms() - start;
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "TLS handshake"), "%s", err);
    cr_assert_lt(took, 1500, "the handshake took %lld ms", (long long)took);
    kill(t.s.pid, SIGCONT);
    tls_stop(&t);
}

Test(tls, url_scheme)
{
    wk_url u;
    char err[128];
    cr_assert_eq(wk_url_parse(&u, "rediss://h", err, sizeof(err)), WK_OK, "%s", err);
    cr_assert(u.tls);
    cr_assert_str_eq(u.host, "h");
    cr_assert_eq(u.port, 6379);
    wk_url_free(&u);
    cr_assert_eq(wk_url_parse(&u, "rediss://:pw@[::1]:7000/3", err, sizeof(err)), WK_OK);
    cr_assert(u.tls);
    cr_assert_eq(u.port, 7000);
    cr_assert_eq(u.database, 3);
    wk_url_free(&u);
    cr_assert_eq(wk_url_parse(&u, "redis://h", err, sizeof(err)), WK_OK);
    cr_assert(!u.tls);
    wk_url_free(&u);
    cr_assert_eq(wk_url_parse(&u, "redisss://h", err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "rediss://"), "%s", err);
}

/* ---- the event-loop handle over TLS: the handshake runs in the loop */

static void on_async(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    int *out = arg;
    *out = status;
    if (status != WK_OK)
        cr_log_info("async: %s", msg);
}

Test(tls, event_loop_handle_over_tls, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    wk_async *a;
    char err[256];
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_entity lock = WK_LOCK_ENTITY("tls-async", 30000);
    wk_token token;
    bool acquired = false, released = false;
    int st_try = 1, st_release = 1;
    wk_lock_try(wk_async_with(a, on_async, &st_try), &lock, wk_name_str("job"), &token, &acquired);
    wk_test_async_drain(a);
    wk_lock_release(wk_async_with(a, on_async, &st_release), &lock, wk_name_str("job"), &token,
                    &released);
    wk_test_async_drain(a);
    cr_assert_eq(st_try, WK_OK, "%s", wk_async_errmsg(a));
    cr_assert_eq(st_release, WK_OK);
    cr_assert(acquired && released);
    wk_async_close(a);

    /* An unknown CA is refused in the loop too, as WK_EAUTH. */
    o.tls_ca_file = t.other_ca;
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);
    int st = 1;
    wk_lock_try(wk_async_with(a, on_async, &st), &lock, wk_name_str("job"), &token, &acquired);
    wk_test_async_drain(a);
    cr_assert_eq(st, WK_EAUTH, "%s", wk_err_name(st));
    cr_assert(strstr(wk_async_errmsg(a), "not accepted"), "%s", wk_async_errmsg(a));
    wk_async_close(a);
    tls_stop(&t);
}

/* ---- the newer paths over TLS: each opens connections of its own ------- */

static void turn_while(wk_async *a, const int *status, int64_t ms)
{
    for (int64_t until = wk_monotonic_ms() + ms; wk_monotonic_ms() < until && *status == 12345;)
        wk_test_async_turn(a);
}

/* A waiting acquire through the loop (its waits-only connection), a pipe
 * followed through the loop (the receiver's hidden handle), a near cache
 * (its data and subscriber connections) and a multiplexed pool, all over
 * rediss:// — each of those connections does the handshake. */
Test(tls, loop_waits_loop_receivers_near_cache_and_pool_over_tls, .timeout = 30)
{
    tls_server t;
    tls_start(&t, false);
    wk_db_options o = tls_options(&t);
    char err[256];
    wk_db *db = NULL;
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_processor *p = wk_db_processor(db);
    wk_async *a;
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);

    /* The loop waits; a blocking release wakes it. */
    wk_entity lock = WK_LOCK_ENTITY("tls-newer", 30000);
    wk_token held, token;
    bool got = false, acquired = false, was = false;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("w"), &held, &got), WK_OK);
    cr_assert(got);
    int st = 12345;
    cr_assert_eq(wk_lock_acquire(wk_async_with(a, on_async, &st), &lock, wk_name_str("w"),
                                 wk_deadline_in(20000), NULL, &token, &acquired),
                 WK_OK, "%s", wk_async_errmsg(a));
    turn_while(a, &st, 500);
    cr_assert_eq(st, 12345, "still waiting: %s", wk_async_errmsg(a));
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("w"), &held, &was), WK_OK);
    turn_while(a, &st, 10000);
    cr_assert_eq(st, WK_OK, "%s", wk_async_errmsg(a));
    cr_assert(acquired, "woken over TLS and holding the lock");

    /* A pipe through the loop. */
    wk_entity pipe = WK_PIPE_ENTITY("tls-newer", 30000);
    wk_pipe_receiver *r = NULL;
    st = 12345;
    cr_assert_eq(wk_pipe_receive(wk_async_with(a, on_async, &st), &pipe, wk_name_str("q"), &r),
                 WK_OK, "%s", wk_async_errmsg(a));
    turn_while(a, &st, 10000);
    cr_assert_eq(st, WK_OK, "%s", wk_async_errmsg(a));
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("q"), "hello", 5), WK_OK);
    wk_pipe_message m = {0};
    st = 12345;
    cr_assert_eq(wk_pipe_recv_async(r, &m, on_async, &st), WK_OK, "%s", wk_pipe_receiver_errmsg(r));
    turn_while(a, &st, 10000);
    cr_assert_eq(st, WK_OK, "%s", wk_pipe_receiver_errmsg(r));
    cr_assert(m.got == WK_PIPE_MESSAGE && m.len == 5 && memcmp(m.body, "hello", 5) == 0);
    wk_pipe_receiver_close(r);
    wk_async_close(a);

    /* A near cache: a read, a hit, and another handle's put invalidates it. */
    wk_entity cache = WK_CACHE_ENTITY("tls-newer", 60000);
    const wk_entity *served[] = {&cache};
    wk_near_cache_options no = WK_NEAR_CACHE_OPTIONS_INIT;
    no.entities = served;
    no.nentities = 1;
    wk_near_cache *nc = NULL;
    cr_assert_eq(wk_near_cache_open(&nc, db, &no, err, sizeof(err)), WK_OK, "%s", err);
    cr_assert_eq(wk_cache_put(p, &cache, wk_name_str("k"), "v1", 2), WK_OK);
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_near_cache_get(nc, &cache, wk_name_str("k"), &b), WK_OK, "%s",
                 wk_near_cache_errmsg());
    wk_near_state ns;
    cr_assert_eq(wk_near_cache_peek(nc, &cache, wk_name_str("k"), &ns), WK_OK);
    cr_assert_eq(ns, WK_NEAR_VERIFIED, "kept, with tracking on over TLS");
    cr_assert_eq(wk_cache_put(p, &cache, wk_name_str("k"), "v2", 2), WK_OK);
    for (int64_t until = wk_monotonic_ms() + 5000;
         wk_monotonic_ms() < until && ns == WK_NEAR_VERIFIED;) {
        wk_test_sleep_ms(5);
        wk_near_cache_peek(nc, &cache, wk_name_str("k"), &ns);
    }
    cr_assert_neq(ns, WK_NEAR_VERIFIED, "the put's invalidation came over the TLS subscriber");
    cr_assert_eq(wk_near_cache_get(nc, &cache, wk_name_str("k"), &b), WK_OK);
    cr_assert(b.found && b.len == 2 && memcmp(b.data, "v2", 2) == 0);
    wk_body_free(&b);
    wk_near_cache_close(nc);

    /* A multiplexed pool: threads' queries share its TLS connections. */
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &o;
    po.size = 2;
    wk_pool *pool = NULL;
    cr_assert_eq(wk_pool_open(&pool, &po, err, sizeof(err)), WK_OK, "%s", err);
    for (int i = 0; i < 8; i++) {
        wk_token tk;
        bool g = false, rel = false;
        cr_assert_eq(wk_lock_try(wk_pool_processor(pool), &lock, wk_name_u64((uint64_t)i), &tk, &g),
                     WK_OK, "%s", wk_pool_errmsg(pool));
        cr_assert(g);
        cr_assert_eq(wk_lock_release(wk_pool_processor(pool), &lock, wk_name_u64((uint64_t)i), &tk,
                                     &rel),
                     WK_OK);
        cr_assert(rel);
    }
    wk_pool_close(pool);
    wk_db_close(db);
    tls_stop(&t);
}
