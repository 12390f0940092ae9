/*
 * tests/core/test_async.c — the event-loop handle (wakuwaku/async.h),
 * driven by a plain poll() loop: built-in and script queries complete
 * through callbacks with their outputs written, pipelined in order;
 * capabilities are checked at submission; connecting and its failures go
 * through the loop; and the outcome rules of blocking handles hold
 * (timeouts, dropped replies, NOSCRIPT, reconnects).
 */
#include <signal.h>
#include <string.h>

#include "redis_fixture.h"

static const wk_entity lock = WK_LOCK_ENTITY("async", 30000);
static const wk_entity bucket = WK_TOKEN_BUCKET_ENTITY("async", 10, 1, 1000);
static const wk_entity cache = WK_CACHE_ENTITY("async", 60000);

#define open_async wk_test_open_async

typedef struct done_log {
    int n;
    int status[256];
    int order[256];
    char msg[256];
} done_log;

typedef struct done_ref {
    done_log *log;
    int id;
} done_ref;

static void on_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    done_ref *r = arg;
    done_log *log = r->log;
    cr_assert_lt(log->n, 256);
    log->status[log->n] = status;
    log->order[log->n] = r->id;
    log->n++;
    if (status != WK_OK)
        snprintf(log->msg, sizeof(log->msg), "%s", msg);
}

Test(async, built_in_queries_complete_with_their_outputs, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 1000);
    done_log log = {0};
    done_ref refs[4] = {{&log, 0}, {&log, 1}, {&log, 2}, {&log, 3}};
    const char *name = wk_test_ns("basic");
    wk_token token;
    bool acquired = false;
    wk_token_bucket_outcome limit = {0};
    char body[32];
    wk_buffer got = {.data = body, .cap = sizeof(body)};
    /* The scripts loaded first: a query answered NOSCRIPT completes after
     * the ones behind it (async.h, SEMANTICS 3). */
    cr_assert_eq(wk_lock_try(wk_async_with(a, NULL, NULL), &lock, wk_name_str(wk_test_ns("warm")), &token,
                             &acquired),
                 WK_OK);
    cr_assert_eq(wk_token_bucket_acquire(wk_async_with(a, NULL, NULL), &bucket,
                                         wk_name_str(wk_test_ns("warm")), 3, &limit),
                 WK_OK);
    wk_test_async_drain(a);
    acquired = false;
    limit = (wk_token_bucket_outcome){0};
    cr_assert_eq(wk_lock_try(wk_async_with(a, on_done, &refs[0]), &lock, wk_name_str(name), &token,
                             &acquired),
                 WK_OK);
    cr_assert_eq(wk_token_bucket_acquire(wk_async_with(a, on_done, &refs[1]), &bucket,
                                         wk_name_str(name), 3, &limit),
                 WK_OK);
    cr_assert_eq(
        wk_cache_put(wk_async_with(a, on_done, &refs[2]), &cache, wk_name_str(name), "hello", 5),
        WK_OK);
    cr_assert_eq(
        wk_cache_get_into(wk_async_with(a, on_done, &refs[3]), &cache, wk_name_str(name), &got),
        WK_OK);
    cr_assert_eq(log.n, 0, "callbacks never run inside the submitting call");
    cr_assert_eq(wk_async_pending(a), 4);
    wk_test_async_drain(a);
    cr_assert_eq(log.n, 4);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(log.status[i], WK_OK, "query %d: %s (%s)", i, wk_err_name(log.status[i]),
                     log.msg);
        cr_assert_eq(log.order[i], i, "in submission order");
    }
    cr_assert(acquired);
    cr_assert(limit.allowed);
    cr_assert_eq(limit.remaining, 7);
    cr_assert(got.found);
    cr_assert_eq(got.len, 5);
    cr_assert_eq(memcmp(body, "hello", 5), 0);

    /* The lock is really held: a second try is refused, release works. */
    bool again = true, released = false;
    done_ref r = {&log, 9};
    wk_lock_try(wk_async_with(a, on_done, &r), &lock, wk_name_str(name), &(wk_token){0}, &again);
    wk_lock_release(wk_async_with(a, on_done, &r), &lock, wk_name_str(name), &token, &released);
    wk_test_async_drain(a);
    cr_assert_not(again);
    cr_assert(released);
    wk_async_close(a);
}

Test(async, sixty_four_in_flight_complete_in_submission_order, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 2000);
    /* Connected first, so that all 64 are queued while the loop waits. */
    while (wk_async_fd(a) < 0 || wk_async_timeout_ms(a) >= 0)
        wk_test_async_turn(a);
    done_log log = {0};
    done_ref refs[64];
    wk_token tokens[64];
    bool got[64];
    const char *ns = wk_test_ns("many");
    char names[64][64];
    for (int i = 0; i < 64; i++) {
        refs[i] = (done_ref){&log, i};
        snprintf(names[i], sizeof(names[i]), "%s-%d", ns, i);
        cr_assert_eq(wk_lock_try(wk_async_with(a, on_done, &refs[i]), &lock, wk_name_str(names[i]),
                                 &tokens[i], &got[i]),
                     WK_OK);
    }
    wk_test_async_drain(a);
    cr_assert_eq(log.n, 64);
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(log.status[i], WK_OK, "%d: %s", i, log.msg);
        cr_assert_eq(log.order[i], i);
        cr_assert(got[i]);
    }
    wk_async_close(a);
}

Test(async, a_refused_query_fails_at_submission_and_is_never_sent, .timeout = 60)
{
    /* A server of its own: the other suites' SETs do not move its count. */
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_async *a = open_async(s.url, wk_cap_read_only(), 1000);
    redisContext *raw = wk_test_raw(s.url);
    long long before = wk_test_cmd_calls(raw, "set");
    done_log log = {0};
    done_ref r = {&log, 0};
    wk_token token;
    bool acquired = true;
    int rc = wk_lock_try(wk_async_with(a, on_done, &r), &lock, wk_name_str(wk_test_ns("ro")),
                         &token, &acquired);
    cr_assert_eq(rc, WK_EDENIED);
    cr_assert_eq(wk_async_pending(a), 0);
    /* A read is allowed and goes through. */
    wk_token_bucket_state st;
    rc = wk_token_bucket_peek(wk_async_with(a, on_done, &r), &bucket, wk_name_str(wk_test_ns("ro")),
                              &st);
    cr_assert_eq(rc, WK_OK);
    wk_test_async_drain(a);
    cr_assert_eq(log.n, 1, "only the admitted query completes");
    cr_assert_eq(log.status[0], WK_OK, "%s", log.msg);
    cr_assert_eq(wk_test_cmd_calls(raw, "set"), before);
    redisFree(raw);
    wk_async_close(a);
    wk_test_server_stop(&s);
}

Test(async, a_refused_connection_fails_the_queries_through_the_loop, .timeout = 60)
{
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", wk_test_free_port());
    wk_async *a = open_async(url, NULL, 500);
    done_log log = {0};
    done_ref r = {&log, 0};
    bool acquired = true;
    wk_token token;
    cr_assert_eq(
        wk_lock_try(wk_async_with(a, on_done, &r), &lock, wk_name_str("x"), &token, &acquired),
        WK_OK);
    wk_test_async_drain(a);
    cr_assert_eq(log.n, 1);
    cr_assert_eq(log.status[0], WK_EIO, "%s", wk_err_name(log.status[0]));
    cr_assert(strstr(log.msg, "cannot connect"), "%s", log.msg);
    cr_assert(strstr(log.msg, "not sent"), "%s", log.msg);
    cr_assert_not(acquired);
    wk_async_close(a);
}

Test(async, a_stalled_server_makes_a_sent_write_unknown_and_a_read_timed_out, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_async *a = open_async(s.url, NULL, 300);
    wk_test_async_drain(a);
    while (wk_async_fd(a) < 0 || wk_async_timeout_ms(a) >= 0)
        wk_test_async_turn(a); /* connected and set up */
    done_log log = {0};
    done_ref w = {&log, 0}, rd = {&log, 1};
    wk_token token;
    bool acquired = true;
    wk_token_bucket_state st;
    kill(s.pid, SIGSTOP);
    wk_lock_try(wk_async_with(a, on_done, &w), &lock, wk_name_str("stalled"), &token, &acquired);
    wk_token_bucket_peek(wk_async_with(a, on_done, &rd), &bucket, wk_name_str("stalled"), &st);
    wk_test_async_drain(a);
    kill(s.pid, SIGCONT);
    cr_assert_eq(log.n, 2);
    cr_assert_eq(log.status[0], WK_EUNKNOWN, "%s", wk_err_name(log.status[0]));
    cr_assert_eq(log.status[1], WK_ETIMEDOUT, "%s", wk_err_name(log.status[1]));
    cr_assert_not(acquired);
    /* The server is back: the next query reconnects. */
    done_ref again = {&log, 2};
    wk_token_bucket_peek(wk_async_with(a, on_done, &again), &bucket, wk_name_str("stalled"), &st);
    wk_test_async_drain(a);
    cr_assert_eq(log.status[2], WK_OK, "%s", log.msg);
    wk_async_close(a);
    wk_test_server_stop(&s);
}

Test(async, a_lost_reply_makes_a_write_unknown_and_resends_a_read, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_test_proxy *px;
    cr_assert_eq(wk_test_proxy_start(&px, s.port), 0);
    wk_async *a = open_async(wk_test_proxy_url(px), NULL, 2000);
    wk_test_async_drain(a);
    while (wk_async_fd(a) < 0 || wk_async_timeout_ms(a) >= 0)
        wk_test_async_turn(a);
    done_log log = {0};
    done_ref w = {&log, 0};
    wk_token token;
    bool acquired = true;
    wk_test_proxy_drop_next_reply(px, NULL, NULL);
    wk_lock_try(wk_async_with(a, on_done, &w), &lock, wk_name_str("lost"), &token, &acquired);
    wk_test_async_drain(a);
    cr_assert_eq(log.status[0], WK_EUNKNOWN, "%s (%s)", wk_err_name(log.status[0]), log.msg);
    cr_assert(strstr(log.msg, "may or may not"), "%s", log.msg);

    /* A retry-safe read whose reply was lost is sent once more.
     * (Reconnect first, so that the drop hits the read, not the set-up.) */
    done_ref rd = {&log, 1};
    wk_token_bucket_state st;
    wk_token_bucket_peek(wk_async_with(a, NULL, NULL), &bucket, wk_name_str("lost"), &st);
    wk_test_async_drain(a);
    wk_test_proxy_drop_next_reply(px, NULL, NULL);
    wk_token_bucket_peek(wk_async_with(a, on_done, &rd), &bucket, wk_name_str("lost"), &st);
    wk_test_async_drain(a);
    cr_assert_eq(log.status[1], WK_OK, "%s (%s)", wk_err_name(log.status[1]), log.msg);
    cr_assert_eq(wk_test_proxy_drops(px), 2);
    wk_async_close(a);
    wk_test_proxy_stop(px);
    wk_test_server_stop(&s);
}

Test(async, a_flushed_script_is_sent_again_as_eval, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 1000);
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "SCRIPT FLUSH"));
    done_log log = {0};
    done_ref r = {&log, 0};
    wk_token_bucket_outcome out = {0};
    wk_token_bucket_acquire(wk_async_with(a, on_done, &r), &bucket,
                            wk_name_str(wk_test_ns("noscript")), 1, &out);
    wk_test_async_drain(a);
    cr_assert_eq(log.n, 1, "one callback, not one per attempt");
    cr_assert_eq(log.status[0], WK_OK, "%s", log.msg);
    cr_assert(out.allowed);
    redisFree(raw);
    wk_async_close(a);
}

typedef struct chain {
    wk_async *a;
    int left, done;
    wk_token_bucket_outcome out;
    const char *name;
} chain;

static void next_link(wk_async *a, int status, const char *msg, void *arg)
{
    chain *c = arg;
    cr_assert_eq(status, WK_OK, "%s", msg);
    c->done++;
    if (--c->left > 0)
        cr_assert_eq(wk_token_bucket_acquire(wk_async_with(a, next_link, c), &bucket,
                                             wk_name_str(c->name), 1, &c->out),
                     WK_OK);
}

Test(async, a_callback_submits_the_next_query, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 1000);
    chain c = {.a = a, .left = 5, .name = wk_test_ns("chain")};
    wk_token_bucket_acquire(wk_async_with(a, next_link, &c), &bucket, wk_name_str(c.name), 1,
                            &c.out);
    wk_test_async_drain(a);
    cr_assert_eq(c.done, 5);
    cr_assert_eq(c.out.remaining, 5);
    wk_async_close(a);
}

Test(async, an_idle_connection_killed_by_the_server_is_replaced, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 1000);
    done_log log = {0};
    done_ref r = {&log, 0};
    wk_token_bucket_state st;
    wk_token_bucket_peek(wk_async_with(a, on_done, &r), &bucket, wk_name_str("idle"), &st);
    wk_test_async_drain(a);
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "CLIENT KILL TYPE normal SKIPME yes"));
    redisFree(raw);
    for (int i = 0; i < 5; i++)
        wk_test_async_turn(a); /* sees the EOF */
    wk_token_bucket_peek(wk_async_with(a, on_done, &r), &bucket, wk_name_str("idle"), &st);
    wk_test_async_drain(a);
    cr_assert_eq(log.n, 2);
    cr_assert_eq(log.status[1], WK_OK, "%s", log.msg);
    wk_async_close(a);
}

Test(async, a_wrong_password_and_a_peer_that_is_not_redis_fail_clearly, .timeout = 60)
{
    const char *cfg[] = {"requirepass sesame", NULL};
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, cfg), 0);
    char url[96];
    snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", s.port);
    wk_async *a = open_async(url, NULL, 1000);
    done_log log = {0};
    done_ref r = {&log, 0};
    wk_token_bucket_state st;
    wk_token_bucket_peek(wk_async_with(a, on_done, &r), &bucket, wk_name_str("pw"), &st);
    wk_test_async_drain(a);
    cr_assert_eq(log.status[0], WK_EAUTH, "%s: %s", wk_err_name(log.status[0]), log.msg);
    cr_assert_null(strstr(log.msg, "wrong"), "never prints the password: %s", log.msg);
    wk_async_close(a);
    wk_test_server_stop(&s);

    static const char http[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    wk_test_peer peer;
    cr_assert_eq(wk_test_peer_start(&peer, NULL, 0, http, sizeof(http) - 1), 0);
    a = open_async(peer.url, NULL, 1000);
    done_ref r2 = {&log, 1};
    wk_token_bucket_peek(wk_async_with(a, on_done, &r2), &bucket, wk_name_str("pw"), &st);
    wk_test_async_drain(a);
    cr_assert_eq(log.status[1], WK_EPROTO, "%s: %s", wk_err_name(log.status[1]), log.msg);
    wk_async_close(a);
    wk_test_peer_stop(&peer);
}

Test(async, closing_completes_what_is_queued, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 1000);
    done_log log = {0};
    done_ref r = {&log, 0};
    wk_token_bucket_state st;
    wk_token_bucket_peek(wk_async_with(a, on_done, &r), &bucket, wk_name_str("close"), &st);
    wk_async_close(a);
    cr_assert_eq(log.n, 1);
    cr_assert_eq(log.status[0], WK_EIO);
    cr_assert(strstr(log.msg, "closed"), "%s", log.msg);
}

Test(async, bad_input, .timeout = 60)
{
    char err[128];
    wk_async *a = (wk_async *)&err;
    cr_assert_eq(wk_async_open(NULL, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_eq(wk_async_open(&a, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_null(a);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = "ftp://nope";
    o.capability = wk_cap_read_write();
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert_null(a);
    cr_assert_null(wk_async_with(NULL, NULL, NULL));
    cr_assert_eq(wk_async_fd(NULL), -1);
    cr_assert_eq(wk_async_pending(NULL), 0);
    wk_async_process(NULL, 0);
    wk_async_close(NULL);
}

/* What the watch callback was told, in order. */
typedef struct watch_log {
    int n;
    int fd[128];
} watch_log;

static void record_watch(wk_async *a, int fd, unsigned events, int64_t timeout_ms, void *arg)
{
    (void)a, (void)events, (void)timeout_ms;
    watch_log *w = arg;
    if (w->n < 128)
        w->fd[w->n++] = fd;
}

Test(async, a_replaced_connection_is_reported_as_no_descriptor_first, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 1000);
    while (wk_async_fd(a) < 0 || wk_async_timeout_ms(a) >= 0)
        wk_test_async_turn(a);
    int old = wk_async_fd(a);
    watch_log w = {0};
    wk_async_set_watch(a, record_watch, &w);
    cr_assert_eq(w.n, 1);
    cr_assert_eq(w.fd[0], old);
    /* Killed before the handle noticed: the next turn sees the EOF and
     * connects again at once, often on a socket with the same number. */
    cr_assert_eq(wk_test_kill_client_fd(wk_test_url(), old), 0);
    done_log log = {0};
    done_ref r = {&log, 0};
    wk_token_bucket_state st;
    wk_token_bucket_peek(wk_async_with(a, on_done, &r), &bucket, wk_name_str("replaced"), &st);
    wk_test_async_drain(a);
    cr_assert_eq(log.status[0], WK_OK, "%s", log.msg);
    int gone = -1;
    for (int i = 1; i < w.n && gone < 0; i++)
        if (w.fd[i] == -1)
            gone = i;
    cr_assert_geq(gone, 1, "the old descriptor was reported gone");
    for (int i = 1; i < gone; i++)
        cr_assert_eq(w.fd[i], old, "nothing else before it");
    cr_assert_geq(wk_async_fd(a), 0);
    wk_async_close(a);
}

typedef struct closing_chain {
    int calls, rc;
    done_log log;
} closing_chain;

static void submit_again(wk_async *a, int status, const char *msg, void *arg)
{
    (void)status, (void)msg;
    closing_chain *c = arg;
    c->calls++;
    static done_ref r;
    r = (done_ref){&c->log, 1};
    wk_token_bucket_state st;
    c->rc =
        wk_token_bucket_peek(wk_async_with(a, on_done, &r), &bucket, wk_name_str("closing"), &st);
}

Test(async, a_callback_run_by_close_cannot_submit, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 1000);
    closing_chain c = {0};
    wk_token_bucket_state st;
    wk_token_bucket_peek(wk_async_with(a, submit_again, &c), &bucket, wk_name_str("closing"), &st);
    wk_async_close(a);
    cr_assert_eq(c.calls, 1);
    cr_assert_eq(c.rc, WK_EIO, "%s", wk_err_name(c.rc));
    cr_assert_eq(c.log.n, 0, "a refused submission's callback never runs");
}

/* A waiting call through the loop is queued (tests/core/test_async_wait.c
 * has the waits); one with a bad argument is refused at once, its detail
 * on the handle, and nothing is queued. */
Test(async, a_waiting_call_with_a_bad_argument_is_refused_at_once, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 1000);
    bool acquired = true;
    int rc = wk_lock_acquire(wk_async_with(a, NULL, NULL), &lock, wk_name_str("wait"),
                             wk_monotonic_ms() + 1000, NULL, NULL, &acquired);
    cr_assert_eq(rc, WK_EINVAL, "%s", wk_err_name(rc));
    cr_assert_eq(wk_async_pending(a), 0, "nothing queued");
    cr_assert(strstr(wk_async_errmsg(a), "lock.acquire") && strstr(wk_async_errmsg(a), "token"),
              "wk_async_errmsg: \"%s\"", wk_async_errmsg(a));
    wk_async_close(a);
}

/* A refused call's detail is the handle's message until the next call is
 * accepted; a connection failure's message is kept until a refusal. */
Test(async, wk_async_errmsg_says_why_a_call_was_refused, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), wk_cap_read_only(), 1000);
    wk_token token;
    bool acquired = true;
    int rc = wk_lock_try(wk_async_with(a, NULL, NULL), &lock, wk_name_str("ro"), &token, &acquired);
    cr_assert_eq(rc, WK_EDENIED, "%s", wk_err_name(rc));
    cr_assert(strstr(wk_async_errmsg(a), "read-only"), "wk_async_errmsg: \"%s\"",
              wk_async_errmsg(a));
    cr_assert_str_eq(wk_async_errmsg(a), wk_processor_errmsg(wk_async_with(a, NULL, NULL)));
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(wk_async_with(a, NULL, NULL), &lock, wk_name_str("ro"), &st),
                 WK_OK);
    cr_assert_str_eq(wk_async_errmsg(a), "", "an accepted call clears it");
    wk_test_async_drain(a);
    wk_async_close(a);
}

/* Chains of lock try + release that keep queries in flight while the
 * ones before them complete, and a SCRIPT FLUSH now and then: the handle
 * lets its completed front go (moving the rest down) under the load, and
 * a query sent again as EVAL later still names its own lock and token. */
typedef struct pc_chain {
    wk_async *a;
    redisContext *raw; /* chain 0's: flushes the scripts */
    char name[48];
    wk_token token;
    bool acquired, released;
    int round, replies, bad, status;
} pc_chain;

static void pc_next(wk_async *a, int status, const char *msg, void *arg);

static void pc_try(pc_chain *c)
{
    c->acquired = c->released = false;
    cr_assert_eq(wk_lock_try(wk_async_with(c->a, pc_next, c), &lock, wk_name_str(c->name),
                             &c->token, &c->acquired),
                 WK_OK);
}

static void pc_next(wk_async *a, int status, const char *msg, void *arg)
{
    (void)msg;
    pc_chain *c = arg;
    if (status != WK_OK)
        c->status = status;
    if (++c->replies % 2) {
        /* The try's: release what it took. */
        c->bad += !c->acquired;
        cr_assert_eq(wk_lock_release(wk_async_with(a, pc_next, c), &lock, wk_name_str(c->name),
                                     &c->token, &c->released),
                     WK_OK);
        return;
    }
    c->bad += !c->released;
    if (c->raw && c->round % 4 == 1)
        freeReplyObject(wk_test_cmd(c->raw, "SCRIPT FLUSH"));
    if (++c->round < 20)
        pc_try(c);
}

Test(async, chains_keep_queries_in_flight_while_the_front_completes, .timeout = 60)
{
    wk_async *a = open_async(wk_test_url(), NULL, 2000);
    redisContext *raw = wk_test_raw(wk_test_url());
    static pc_chain chains[48];
    const char *ns = wk_test_ns("chains");
    for (int i = 0; i < 48; i++) {
        chains[i] = (pc_chain){.a = a, .raw = i ? NULL : raw};
        snprintf(chains[i].name, sizeof(chains[i].name), "%s-%d", ns, i);
        pc_try(&chains[i]);
    }
    wk_test_async_drain(a);
    cr_assert_eq(wk_async_pending(a), 0);
    for (int i = 0; i < 48; i++) {
        cr_assert_eq(chains[i].status, WK_OK, "chain %d: %s", i, wk_err_name(chains[i].status));
        cr_assert_eq(chains[i].round, 20, "chain %d", i);
        cr_assert_eq(chains[i].bad, 0, "chain %d: a try or release of its own lock failed", i);
    }
    redisFree(raw);
    wk_async_close(a);
}
