/*
 * tests/support/async_loop_cases.h — the cases every event-loop adapter
 * (include/wakuwaku/adapters/) must pass, run by the real loop against
 * real redis-servers. Included once by a suite (tests/core/test_async_uv.c,
 * test_async_event.c) after it defined, for its loop:
 *
 *   LOOP_SUITE                  the criterion suite name
 *   typedef struct loop loop;   the loop and the adapter's attachments
 *   loop *loop_new(void);
 *   void loop_attach(loop *l, wk_async *a);  attach (asserts WK_OK); up to
 *                                            LOOP_MAX_HANDLES handles
 *   void loop_turn(loop *l);    one turn of the loop, waiting for events
 *   int loop_watched_fd(const loop *l, int i); the descriptor the i-th
 *                               attachment watches (-1: none)
 *   void loop_detach(loop *l, int i);
 *   void loop_free(loop *l);    after every detach: asserts the loop is
 *                               left with nothing of the adapter's
 *   int loop_bad_attach(void);  attach with NULL arguments: the status
 *   bool loop_empty(loop *l);   nothing of the adapter's is armed (no
 *                               watcher, no timer)
 *   void loop_fire_timer(loop *l, int i); make the i-th attachment's timer
 *                               fire at the next turn, as a timer counted
 *                               from a stale clock would, early
 *   bool loop_timer_armed(const loop *l, int i);
 *   void loop_later(loop *l, int ms, void (*fn)(void *arg), void *arg);
 *                               a one-shot timer of the loop's own (not
 *                               the adapter's) calling fn(arg) in `ms`,
 *                               outside any wakuwaku callback (again
 *                               before it fired: it starts anew)
 *
 * Time only bounds the suite (its .timeout); no case compares durations.
 */
#ifndef WK_TEST_ASYNC_LOOP_CASES_H
#define WK_TEST_ASYNC_LOOP_CASES_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <wakuwaku/wakuwaku.h>

#include "support.h"

#define LOOP_MAX_HANDLES 2

static const wk_entity lc_lock = WK_LOCK_ENTITY("adapter", 30000);
static const wk_entity lc_bucket = WK_TOKEN_BUCKET_ENTITY("adapter", 1000, 1, 1000);
static const wk_entity lc_cache = WK_CACHE_ENTITY("adapter", 60000);

/* A handle on `url`; its connections named `client_name` (NULL: none). */
static wk_async *lc_open_as(const char *url, int command_timeout_ms, const char *client_name)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = 2000;
    o.command_timeout_ms = command_timeout_ms;
    o.client_name = client_name;
    wk_async *a = NULL;
    char err[256];
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);
    return a;
}

static wk_async *lc_open(const char *url, int command_timeout_ms)
{
    return lc_open_as(url, command_timeout_ms, NULL);
}

/* Turn the loop until the handles have nothing pending. */
static void lc_drain(loop *l, wk_async *a, wk_async *b)
{
    while (wk_async_pending(a) || (b && wk_async_pending(b)))
        loop_turn(l);
}

typedef struct lc_result {
    int status;
    int calls;
    char msg[256];
} lc_result;

static void lc_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    lc_result *r = arg;
    r->status = status;
    r->calls++;
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
}

/* One read through the loop, so that the handle is connected after. */
static void lc_settle(loop *l, wk_async *a)
{
    lc_result r = {0};
    wk_token_bucket_state st;
    cr_assert_eq(
        wk_token_bucket_peek(wk_async_with(a, lc_done, &r), &lc_bucket, wk_name_str("settle"), &st),
        WK_OK);
    lc_drain(l, a, NULL);
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_OK, "%s: %s", wk_err_name(r.status), r.msg);
}

/* A request as the example servers run it: lock, limiter, cache, release,
 * each step submitted from the previous one's callback. */
typedef struct lc_job {
    char name[96];
    wk_token token;
    bool acquired, released;
    wk_token_bucket_outcome limit;
    int step, status;
    char msg[256];
} lc_job;

static void lc_job_step(wk_async *a, int status, const char *msg, void *arg)
{
    lc_job *j = arg;
    if (status != WK_OK) {
        j->status = status;
        snprintf(j->msg, sizeof(j->msg), "step %d: %s", j->step, msg);
        j->step = -1;
        return;
    }
    int rc = WK_OK;
    switch (++j->step) {
    case 1:
        cr_assert(j->acquired, "%s", j->name);
        rc = wk_token_bucket_acquire(wk_async_with(a, lc_job_step, j), &lc_bucket,
                                     wk_name_str(j->name), 1, &j->limit);
        break;
    case 2:
        cr_assert(j->limit.allowed, "%s", j->name);
        rc = wk_cache_put(wk_async_with(a, lc_job_step, j), &lc_cache, wk_name_str(j->name),
                          j->name, strlen(j->name));
        break;
    case 3:
        rc = wk_lock_release(wk_async_with(a, lc_job_step, j), &lc_lock, wk_name_str(j->name),
                             &j->token, &j->released);
        break;
    default:
        break; /* 4: done */
    }
    cr_assert_eq(rc, WK_OK, "step %d: %s", j->step, wk_err_name(rc));
}

static void lc_job_start(wk_async *a, lc_job *j, const char *ns, int i)
{
    memset(j, 0, sizeof(*j));
    snprintf(j->name, sizeof(j->name), "%s-%d", ns, i);
    cr_assert_eq(wk_lock_try(wk_async_with(a, lc_job_step, j), &lc_lock, wk_name_str(j->name),
                             &j->token, &j->acquired),
                 WK_OK);
}

static void lc_job_check(const lc_job *j)
{
    cr_assert_eq(j->step, 4, "%s: %s (%s)", j->name, j->msg, wk_err_name(j->status));
    cr_assert(j->released, "%s", j->name);
}

Test(LOOP_SUITE, lock_limiter_and_cache_complete_through_the_loop, .timeout = 60)
{
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    const char *name = wk_test_ns("basic");
    lc_result r[4] = {{0}};
    wk_token token;
    bool acquired = false;
    wk_token_bucket_outcome limit = {0};
    char body[32];
    wk_buffer got = {.data = body, .cap = sizeof(body)};
    wk_lock_try(wk_async_with(a, lc_done, &r[0]), &lc_lock, wk_name_str(name), &token, &acquired);
    wk_token_bucket_acquire(wk_async_with(a, lc_done, &r[1]), &lc_bucket, wk_name_str(name), 3,
                            &limit);
    wk_cache_put(wk_async_with(a, lc_done, &r[2]), &lc_cache, wk_name_str(name), "hello", 5);
    wk_cache_get_into(wk_async_with(a, lc_done, &r[3]), &lc_cache, wk_name_str(name), &got);
    lc_drain(l, a, NULL);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(r[i].calls, 1);
        cr_assert_eq(r[i].status, WK_OK, "%d: %s", i, r[i].msg);
    }
    cr_assert(acquired);
    cr_assert(limit.allowed);
    cr_assert_eq(limit.remaining, 997);
    cr_assert(got.found);
    cr_assert_eq(got.len, 5);
    cr_assert_eq(memcmp(body, "hello", 5), 0);
    cr_assert_eq(loop_watched_fd(l, 0), wk_async_fd(a));
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
}

Test(LOOP_SUITE, sixty_four_requests_in_flight_chain_lock_limiter_cache_release, .timeout = 60)
{
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    const char *ns = wk_test_ns("many");
    static lc_job jobs[64];
    for (int i = 0; i < 64; i++)
        lc_job_start(a, &jobs[i], ns, i);
    cr_assert_eq(wk_async_pending(a), 64);
    lc_drain(l, a, NULL);
    for (int i = 0; i < 64; i++)
        lc_job_check(&jobs[i]);
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
}

/* The server kills the connection while the handle is idle; requests
 * submitted before the loop noticed complete on a new connection — a
 * new socket, usually with the old one's number, which the adapter must
 * watch anew (epoll forgets a closed descriptor). Twice. */
/* A waiting acquire through the adapter: once the waiter sleeps the
 * descriptor is the epoll set of both connections (a new number, which
 * the adapter watches), and a release by a blocking handle wakes it. */
Test(LOOP_SUITE, a_lock_waited_for_through_the_adapter_is_woken_by_a_release, .timeout = 60)
{
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    lc_settle(l, a);
    int socket_fd = wk_async_fd(a);
    wk_db *db = wk_test_open(NULL);
    const char *name = wk_test_ns("wait");
    wk_token held, token;
    bool got = false, acquired = false, rel = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lc_lock, wk_name_str(name), &held, &got), WK_OK);
    cr_assert(got);
    lc_result r = {0};
    cr_assert_eq(wk_lock_acquire(wk_async_with(a, lc_done, &r), &lc_lock, wk_name_str(name),
                                 wk_deadline_in(20000), NULL, &token, &acquired),
                 WK_OK);
    while (wk_async_fd(a) == socket_fd) /* until it sleeps on its wake-up */
        loop_turn(l);
    cr_assert_eq(r.calls, 0, "%s", r.msg);
    cr_assert_eq(loop_watched_fd(l, 0), wk_async_fd(a), "the adapter watches the set");
    cr_assert_eq(wk_lock_release(wk_db_processor(db), &lc_lock, wk_name_str(name), &held, &rel),
                 WK_OK);
    lc_drain(l, a, NULL);
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_OK, "%s", r.msg);
    cr_assert(acquired);
    wk_db_close(db);
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
}

/* A pipe followed through the adapter: each receive's callback starts
 * the next, until the end (wakuwaku/async.h, 8.). */
Test(LOOP_SUITE, a_pipe_followed_through_the_adapter_gets_every_message, .timeout = 60)
{
    static const wk_entity pipe = WK_PIPE_ENTITY("adapter", 30000);
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    lc_settle(l, a);
    wk_db *db = wk_test_open(NULL);
    const char *name = wk_test_ns("follow");
    wk_test_follower f = {0};
    lc_result opened = {0};
    cr_assert_eq(
        wk_pipe_receive(wk_async_with(a, lc_done, &opened), &pipe, wk_name_str(name), &f.r), WK_OK);
    lc_drain(l, a, NULL);
    cr_assert_eq(opened.status, WK_OK, "%s", opened.msg);
    cr_assert_eq(loop_watched_fd(l, 0), wk_async_fd(a), "the adapter watches the set");
    cr_assert_eq(wk_pipe_recv_async(f.r, &f.m, wk_test_follow_pipe, &f), WK_OK);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(wk_pipe_send(wk_db_processor(db), &pipe, wk_name_str(name), &"abcdef"[i], 1),
                     WK_OK);
    cr_assert_eq(wk_pipe_finish(wk_db_processor(db), &pipe, wk_name_str(name)), WK_OK);
    while (!f.ended)
        loop_turn(l);
    cr_assert_eq(f.status, WK_OK);
    cr_assert_eq(f.m.got, WK_PIPE_END);
    cr_assert_eq(f.n, 6);
    cr_assert_arr_eq(f.got, "abcdef", 6);
    wk_pipe_receiver_close(f.r);
    wk_db_close(db);
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
}

/* A settings map followed through the adapter (wakuwaku/async.h, 10.):
 * the subscriber joins the epoll set the adapter watches, and puts and a
 * remove by a blocking handle reach the mirror, in order, through the
 * loop. */
static void lc_count_change(void *ctx, const wk_settings_change *c)
{
    (void)c;
    (*(int *)ctx)++;
}

Test(LOOP_SUITE, a_settings_map_followed_through_the_adapter_gets_every_change, .timeout = 60)
{
    static const wk_entity settings = WK_SETTINGS_ENTITY("adapter");
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    lc_settle(l, a);
    wk_db *db = wk_test_open(NULL);
    const char *name = wk_test_ns("settings");
    int64_t v = 0; /* written before: the map has its epoch (a first put's new epoch reloads) */
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, wk_name_str(name), "k", 1, "-", 1,
                                 &v),
                 WK_OK);
    int changes = 0;
    wk_settings_follower_options o = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    o.settings = &settings;
    o.name = wk_name_str(name);
    o.on_change = lc_count_change;
    o.ctx = &changes;
    wk_settings_follower *f = NULL;
    lc_result started = {0};
    char err[256];
    cr_assert_eq(wk_settings_follower_start_async(&f, wk_async_with(a, lc_done, &started), &o, err,
                                                  sizeof(err)),
                 WK_OK, "%s", err);
    while (!started.calls)
        loop_turn(l);
    cr_assert_eq(started.status, WK_OK, "%s", started.msg);
    cr_assert_eq(loop_watched_fd(l, 0), wk_async_fd(a), "the adapter watches the set");
    for (int i = 0; i < 5; i++)
        cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, wk_name_str(name), "k", 1,
                                     &"abcde"[i], 1, &v),
                     WK_OK);
    cr_assert_eq(wk_settings_remove(wk_db_processor(db), &settings, wk_name_str(name), "k", 1,
                                    NULL),
                 WK_OK);
    while (wk_settings_follower_version(f) < v + 1)
        loop_turn(l);
    cr_assert_eq(changes, 6, "each change once, in order (%d)", changes);
    bool found = true;
    cr_assert_eq(wk_settings_follower_get(f, "k", 1, NULL, 0, NULL, &found), WK_OK);
    cr_assert_not(found);
    wk_settings_follower_free(f);
    wk_db_close(db);
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
}

Test(LOOP_SUITE, a_killed_connection_is_replaced_and_watched_anew, .timeout = 60)
{
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    lc_settle(l, a);
    const char *ns = wk_test_ns("killed");
    static lc_job jobs[16];
    for (int round = 0; round < 2; round++) {
        int fd = wk_async_fd(a);
        cr_assert_geq(fd, 0);
        cr_assert_eq(loop_watched_fd(l, 0), fd);
        cr_assert_eq(wk_test_kill_client_fd(wk_test_url(), fd), 0);
        for (int i = 0; i < 16; i++)
            lc_job_start(a, &jobs[i], ns, round * 16 + i);
        lc_drain(l, a, NULL);
        for (int i = 0; i < 16; i++)
            lc_job_check(&jobs[i]);
        cr_assert_eq(loop_watched_fd(l, 0), wk_async_fd(a));
    }
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
}

/* A reconnect onto a descriptor with another number: b's connection is
 * killed and a's closed, so b's new socket takes a's old number. */
Test(LOOP_SUITE, a_reconnect_on_another_descriptor_is_followed, .timeout = 60)
{
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    wk_async *b = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    loop_attach(l, b);
    lc_settle(l, a);
    lc_settle(l, b);
    int fa = wk_async_fd(a), fb = wk_async_fd(b);
    cr_assert_neq(fa, fb);
    cr_assert_eq(wk_test_kill_client_fd(wk_test_url(), fb), 0);
    loop_detach(l, 0);
    wk_async_close(a);
    static lc_job jobs[8];
    for (int i = 0; i < 8; i++)
        lc_job_start(b, &jobs[i], wk_test_ns("moved"), i);
    lc_drain(l, b, NULL);
    for (int i = 0; i < 8; i++)
        lc_job_check(&jobs[i]);
    cr_assert_neq(wk_async_fd(b), fb, "a new socket, on the number a had");
    cr_assert_eq(loop_watched_fd(l, 1), wk_async_fd(b));
    loop_detach(l, 1);
    wk_async_close(b);
    loop_free(l);
}

/* A stopped server: the loop's timer expires the command timeout — a
 * sent write is WK_EUNKNOWN, a read WK_ETIMEDOUT; once it runs again the
 * next query reconnects. */
Test(LOOP_SUITE, a_stalled_server_times_out_through_the_loop_timer, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    loop *l = loop_new();
    wk_async *a = lc_open(s.url, 1000);
    loop_attach(l, a);
    lc_settle(l, a);
    lc_result w = {0}, rd = {0}, again = {0};
    wk_token token;
    bool acquired = true;
    wk_token_bucket_state st;
    kill(s.pid, SIGSTOP);
    wk_lock_try(wk_async_with(a, lc_done, &w), &lc_lock, wk_name_str("stalled"), &token, &acquired);
    wk_token_bucket_peek(wk_async_with(a, lc_done, &rd), &lc_bucket, wk_name_str("stalled"), &st);
    while (wk_async_timeout_ms(a) < 0)
        loop_turn(l); /* written: the command timeout runs */
    /* The timer fires before the deadline: nothing is due yet, the watch
     * is not called, and the adapter must arm the timer again itself. */
    loop_fire_timer(l, 0);
    loop_turn(l);
    if (wk_async_pending(a))
        cr_assert(loop_timer_armed(l, 0), "an early timer left the handle without one");
    lc_drain(l, a, NULL);
    kill(s.pid, SIGCONT);
    cr_assert_eq(w.status, WK_EUNKNOWN, "%s: %s", wk_err_name(w.status), w.msg);
    cr_assert(strstr(w.msg, "may or may not"), "%s", w.msg);
    cr_assert_eq(rd.status, WK_ETIMEDOUT, "%s: %s", wk_err_name(rd.status), rd.msg);
    wk_token_bucket_peek(wk_async_with(a, lc_done, &again), &lc_bucket, wk_name_str("stalled"),
                         &st);
    lc_drain(l, a, NULL);
    cr_assert_eq(again.status, WK_OK, "%s", again.msg);
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
    wk_test_server_stop(&s);
}

/* Detached with queries queued: the loop keeps nothing of the adapter,
 * wk_async_close() completes them, nothing leaks (the sanitized build). */
Test(LOOP_SUITE, detach_then_close_completes_what_is_queued_and_leaks_nothing, .timeout = 60)
{
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    lc_settle(l, a);
    lc_result r[3] = {{0}};
    wk_token token;
    bool acquired;
    wk_token_bucket_state st;
    wk_lock_try(wk_async_with(a, lc_done, &r[0]), &lc_lock, wk_name_str(wk_test_ns("detach")),
                &token, &acquired);
    wk_token_bucket_peek(wk_async_with(a, lc_done, &r[1]), &lc_bucket, wk_name_str("detach"), &st);
    wk_cache_put(wk_async_with(a, lc_done, &r[2]), &lc_cache, wk_name_str("detach"), "x", 1);
    loop_detach(l, 0);
    cr_assert_eq(wk_async_pending(a), 3, "detaching completes nothing");
    wk_async_close(a);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].calls, 1);
        cr_assert_eq(r[i].status, WK_EIO, "%d: %s", i, wk_err_name(r[i].status));
    }
    loop_free(l);
}

typedef struct lc_detacher {
    loop *l;
    int calls;
} lc_detacher;

static void lc_detach_in_callback(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a, (void)status, (void)msg;
    lc_detacher *d = arg;
    d->calls++;
    loop_detach(d->l, 0);
}

Test(LOOP_SUITE, detaching_from_a_callback_is_safe, .timeout = 60)
{
    loop *l = loop_new();
    wk_async *a = lc_open(wk_test_url(), 2000);
    loop_attach(l, a);
    lc_detacher d = {l, 0};
    wk_token_bucket_state st;
    wk_token_bucket_peek(wk_async_with(a, lc_detach_in_callback, &d), &lc_bucket,
                         wk_name_str("from-callback"), &st);
    while (d.calls == 0)
        loop_turn(l);
    wk_async_close(a);
    loop_free(l);
}

/* Nobody listens: the dial fails through the loop (libuv reports the
 * socket's error as a poll status), the queries complete with WK_EIO,
 * and the handle, down with nothing queued (descriptor -1, events 0,
 * timeout -1), leaves nothing armed; the next submission dials again. */
Test(LOOP_SUITE, a_refused_connection_fails_through_the_loop_and_disarms, .timeout = 60)
{
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", wk_test_free_port());
    loop *l = loop_new();
    wk_async *a = lc_open(url, 2000);
    loop_attach(l, a);
    for (int round = 0; round < 2; round++) {
        lc_result r = {0};
        wk_token token;
        bool acquired = true;
        cr_assert_eq(wk_lock_try(wk_async_with(a, lc_done, &r), &lc_lock, wk_name_str("refused"),
                                 &token, &acquired),
                     WK_OK);
        lc_drain(l, a, NULL);
        cr_assert_eq(r.calls, 1);
        cr_assert_eq(r.status, WK_EIO, "%d: %s: %s", round, wk_err_name(r.status), r.msg);
        cr_assert(strstr(r.msg, "cannot connect"), "%s", r.msg);
        cr_assert_not(acquired);
        cr_assert_eq(wk_async_fd(a), -1);
        cr_assert_eq(loop_watched_fd(l, 0), -1);
        cr_assert(loop_empty(l), "round %d: a watcher or timer is still armed", round);
    }
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
}

/* A dial that fails inside the submitting call (no such unix socket):
 * the callback is due at once but never runs inside the call, so the
 * watch asks for timeout 0 and the loop's next turn runs it. */
Test(LOOP_SUITE, a_query_failing_at_submission_completes_on_the_next_turn, .timeout = 60)
{
    char url[96];
    snprintf(url, sizeof(url), "unix:///tmp/wk-no-such-socket-%d", (int)getpid());
    loop *l = loop_new();
    wk_async *a = lc_open(url, 2000);
    loop_attach(l, a);
    lc_result r = {0};
    wk_token_bucket_state st;
    cr_assert_eq(wk_token_bucket_peek(wk_async_with(a, lc_done, &r), &lc_bucket,
                                      wk_name_str("nowhere"), &st),
                 WK_OK);
    cr_assert_eq(r.calls, 0, "never inside the submitting call");
    cr_assert_eq(wk_async_timeout_ms(a), 0);
    cr_assert_not(loop_empty(l), "the timer is armed");
    loop_turn(l);
    cr_assert_eq(r.calls, 1, "one turn runs it");
    cr_assert_eq(r.status, WK_EIO, "%s: %s", wk_err_name(r.status), r.msg);
    loop_detach(l, 0);
    wk_async_close(a);
    loop_free(l);
}

/* ---- asked again from a loop timer after WK_EIO ----------------------
 *
 * A receive (a subscription's read) ends WK_EIO when the server kills
 * the connections of the handle (its own, idle, and the receiver's, its
 * wait in flight): the handle waits for nothing then. README's advice is
 * to ask again later, from the loop's timer: that call, outside any
 * wakuwaku callback, changes what the handle waits for, and the adapter
 * must hear of it at once (no wk_async_process() comes before it would). */

/* Whether a client named `name` is blocked in a command (CLIENT LIST:
 * flags holding 'b'). */
static bool lc_blocked(redisContext *c, const char *name)
{
    char field[96];
    snprintf(field, sizeof(field), " name=%s ", name);
    redisReply *list = wk_test_cmd(c, "CLIENT LIST TYPE normal");
    bool blocked = false;
    char *save = NULL;
    for (char *line = strtok_r(list->str, "\n", &save); line && !blocked;
         line = strtok_r(NULL, "\n", &save)) {
        const char *flags = strstr(line, " flags=");
        if (strstr(line, field) && flags) {
            flags += strlen(" flags=");
            blocked = memchr(flags, 'b', strcspn(flags, " ")) != NULL;
        }
    }
    freeReplyObject(list);
    return blocked;
}

static void lc_nothing(void *arg)
{
    (void)arg;
}

/* Kill every connection named `name` (the handle's own, idle, and the
 * receiver's) while the receive `r` waits on the server, until it ended
 * (again if a kill came between two of a Pipe's waits: its take went
 * out again on a new connection); then turn the loop until the handle
 * waits for nothing (both losses seen): no descriptor events, no
 * timeout. */
static void lc_kill_while_waiting(loop *l, wk_async *a, const char *name, const lc_result *r)
{
    redisContext *raw = wk_test_raw(wk_test_url());
    int killed = 0;
    while (r->calls == 0) {
        if (lc_blocked(raw, name))
            killed += wk_test_kill_clients_named(raw, name);
        loop_later(l, 5, lc_nothing, NULL); /* a turn of 5 ms at most */
        loop_turn(l);
    }
    redisFree(raw);
    cr_assert_geq(killed, 2, "the handle's connection and the receiver's");
    cr_assert_eq(r->status, WK_EIO, "%s: %s", wk_err_name(r->status), r->msg);
    while (wk_async_events(a) != 0)
        loop_turn(l);
    cr_assert_eq(wk_async_timeout_ms(a), -1, "the handle waits for nothing");
}

/* What a loop timer asks again: a receive of `rx` into `out`. */
typedef struct lc_again {
    int (*ask)(struct lc_again *);
    void *rx;
    void *out;
    lc_result r; /* its completions */
    int rc;      /* the call's */
    bool asked;
} lc_again;

static void lc_ask_again(void *arg)
{
    lc_again *g = arg;
    g->rc = g->ask(g);
    g->asked = true;
}

/* From a loop timer, outside any wakuwaku callback: ask again, then turn
 * the loop until that receive ended WK_OK (an adapter that was not told
 * of the receive watches nothing: the loop stalls until the suite's
 * timeout). */
static void lc_again_from_timer(loop *l, lc_again *g)
{
    int before = g->r.calls;
    loop_later(l, 1, lc_ask_again, g);
    while (!g->asked)
        loop_turn(l);
    cr_assert_eq(g->rc, WK_OK, "%s", wk_err_name(g->rc));
    while (g->r.calls == before)
        loop_turn(l);
    cr_assert_eq(g->r.status, WK_OK, "%s: %s", wk_err_name(g->r.status), g->r.msg);
}

/* A case's setting: a loop, a handle attached to it whose connections
 * are named after the item, and a blocking handle that feeds the item. */
typedef struct lc_rig {
    loop *l;
    wk_async *a;
    wk_db *db;
    wk_processor *p;  /* db's */
    const char *name; /* the item's, and the client name */
    lc_result opened; /* the receiver's open */
} lc_rig;

static void lc_rig_open(lc_rig *x, const char *prefix)
{
    memset(x, 0, sizeof(*x));
    x->name = wk_test_ns(prefix);
    x->l = loop_new();
    x->a = lc_open_as(wk_test_url(), 2000, x->name);
    loop_attach(x->l, x->a);
    lc_settle(x->l, x->a);
    x->db = wk_test_open(NULL);
    x->p = wk_db_processor(x->db);
}

/* The receiver's open was submitted (rc): it completes WK_OK; then a
 * receive (g) ends WK_EIO, its connection killed while it waits. */
static void lc_rig_fail_receive(lc_rig *x, int rc, lc_again *g)
{
    cr_assert_eq(rc, WK_OK, "%s", wk_async_errmsg(x->a));
    lc_drain(x->l, x->a, NULL);
    cr_assert_eq(x->opened.status, WK_OK, "%s", x->opened.msg);
    cr_assert_eq(g->ask(g), WK_OK);
    lc_kill_while_waiting(x->l, x->a, x->name, &g->r);
}

static void lc_rig_close(lc_rig *x)
{
    wk_db_close(x->db);
    loop_detach(x->l, 0);
    wk_async_close(x->a);
    loop_free(x->l);
}

static int lc_pipe_ask(lc_again *g)
{
    return wk_pipe_recv_async(g->rx, g->out, lc_done, &g->r);
}

Test(LOOP_SUITE, a_pipe_receive_ended_eio_is_asked_again_from_a_loop_timer, .timeout = 60)
{
    static const wk_entity pipe = WK_PIPE_ENTITY("adapter", 30000);
    lc_rig x;
    lc_rig_open(&x, "pipe-again");
    wk_pipe_receiver *rx = NULL;
    int rc =
        wk_pipe_receive(wk_async_with(x.a, lc_done, &x.opened), &pipe, wk_name_str(x.name), &rx);
    wk_pipe_message m;
    lc_again g = {.ask = lc_pipe_ask, .rx = rx, .out = &m};
    lc_rig_fail_receive(&x, rc, &g);
    cr_assert_eq(wk_pipe_send(x.p, &pipe, wk_name_str(x.name), "later", 5), WK_OK);
    lc_again_from_timer(x.l, &g);
    cr_assert_eq(m.got, WK_PIPE_MESSAGE);
    cr_assert_eq(m.len, 5);
    cr_assert_arr_eq(m.body, "later", 5);
    wk_pipe_receiver_close(rx);
    lc_rig_close(&x);
}

static int lc_sb_ask(lc_again *g)
{
    return wk_stream_buffer_recv_async(g->rx, g->out, lc_done, &g->r);
}

Test(LOOP_SUITE, a_stream_buffer_read_ended_eio_is_asked_again_from_a_loop_timer, .timeout = 60)
{
    static const wk_entity sb = WK_STREAM_BUFFER_ENTITY("adapter", 30000);
    lc_rig x;
    lc_rig_open(&x, "sb-again");
    cr_assert_eq(wk_stream_buffer_append(x.p, &sb, wk_name_str(x.name), "zero", 4, NULL), WK_OK);
    wk_stream_buffer_subscription *sub = NULL;
    int rc = wk_stream_buffer_subscribe(wk_async_with(x.a, lc_done, &x.opened), &sb,
                                        wk_name_str(x.name), 1, &sub); /* after "zero" */
    wk_stream_buffer_item it;
    lc_again g = {.ask = lc_sb_ask, .rx = sub, .out = &it};
    lc_rig_fail_receive(&x, rc, &g);
    cr_assert_eq(wk_stream_buffer_append(x.p, &sb, wk_name_str(x.name), "one", 3, NULL), WK_OK);
    lc_again_from_timer(x.l, &g);
    cr_assert_eq(it.got, WK_STREAM_BUFFER_BODY);
    cr_assert_eq(it.index, 1);
    cr_assert_eq(it.len, 3);
    cr_assert_arr_eq(it.body, "one", 3);
    wk_stream_buffer_subscription_close(sub);
    lc_rig_close(&x);
}

static int lc_lv_ask(lc_again *g)
{
    return wk_live_view_recv_async(g->rx, g->out, lc_done, &g->r);
}

Test(LOOP_SUITE, a_live_view_read_ended_eio_is_asked_again_from_a_loop_timer, .timeout = 60)
{
    static const wk_entity lv = WK_LIVE_VIEW_ENTITY("adapter", 100);
    static const wk_live_view_sub_options opts = {.poll_ms = 20000}; /* one XREAD waits */
    lc_rig x;
    lc_rig_open(&x, "lv-again");
    bool created = false;
    cr_assert_eq(wk_live_view_create(x.p, &lv, wk_name_str(x.name), "a", 1, &created), WK_OK);
    cr_assert(created);
    wk_live_view_sub *sub = NULL;
    wk_live_view_body head = WK_LIVE_VIEW_BODY_INIT;
    int rc = wk_live_view_subscribe(wk_async_with(x.a, lc_done, &x.opened), &lv,
                                    wk_name_str(x.name), &opts, &head, &sub);
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    lc_again g = {.ask = lc_lv_ask, .rx = sub, .out = &ev};
    lc_rig_fail_receive(&x, rc, &g);
    cr_assert_eq(head.version, 1);
    wk_live_view_commit_outcome out;
    cr_assert_eq(wk_live_view_commit(x.p, &lv, wk_name_str(x.name), 1, "b", 1, "ab", 2, &out),
                 WK_OK);
    cr_assert_eq(out.result, WK_LIVE_VIEW_COMMITTED);
    lc_again_from_timer(x.l, &g);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF);
    cr_assert_eq(ev.version, 2);
    cr_assert_eq(ev.len, 1);
    cr_assert_arr_eq(ev.data, "b", 1);
    wk_live_view_body_free(&head);
    wk_live_view_sub_close(sub);
    lc_rig_close(&x);
}

Test(LOOP_SUITE, attaching_needs_a_handle_and_a_loop, .timeout = 60)
{
    cr_assert_eq(loop_bad_attach(), WK_EINVAL);
}

#endif /* WK_TEST_ASYNC_LOOP_CASES_H */
