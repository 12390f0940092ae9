/*
 * tests/collection/test_pipe.c — Pipe against a real redis-server: order
 * and end, the key bytes of the Rust crate, the crate's side played with
 * raw commands (both directions), gone, corruption, a stop from another
 * thread, a lost reply, and one sender and one receiver in two processes
 * while the receiver's connections are killed.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_fixture.h"

static wk_pipe_receiver *receiver_of(wk_db *db, const wk_entity *e, const char *name)
{
    wk_pipe_receiver *r = NULL;
    int rc = wk_pipe_receive(wk_db_processor(db), e, wk_name_str(name), &r);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    return r;
}

/* The next outcome; a message is compared with `want` (NULL: not one). */
static void expect(wk_pipe_receiver *r, wk_pipe_got got, const char *want)
{
    wk_pipe_message m;
    int rc = wk_pipe_recv(r, &m);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_pipe_receiver_errmsg(r));
    cr_assert_eq(m.got, got, "got %d, expected %d", m.got, got);
    if (want) {
        cr_assert_eq(m.len, strlen(want));
        cr_assert(memcmp(m.body, want, m.len) == 0, "%.*s", (int)m.len, (const char *)m.body);
    }
}

Test(pipe, messages_in_order_then_the_end, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("pipe"), 60000);
    static const char bin[] = {'a', '\0', 'b'};
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("s"), "one", 3), WK_OK);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("s"), "", 0), WK_OK);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("s"), bin, 3), WK_OK);
    cr_assert_eq(wk_pipe_close(p, &pipe, wk_name_str("s")), WK_OK);
    /* Sent after the close, before the receiver took the marker: read
     * anyway, as in the crate (BLPOP takes :m first). */
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("s"), "late", 4), WK_OK);
    wk_pipe_receiver *r = receiver_of(db, &pipe, "s");
    expect(r, WK_PIPE_MESSAGE, "one");
    expect(r, WK_PIPE_MESSAGE, "");
    wk_pipe_message m;
    cr_assert_eq(wk_pipe_recv(r, &m), WK_OK);
    cr_assert_eq(m.got, WK_PIPE_MESSAGE);
    cr_assert(m.len == 3 && memcmp(m.body, bin, 3) == 0);
    expect(r, WK_PIPE_MESSAGE, "late");
    expect(r, WK_PIPE_END, NULL);
    expect(r, WK_PIPE_END, NULL);
    wk_pipe_receiver_close(r);
    wk_pipe_receiver_close(NULL);
    wk_db_close(db);
}

/* The bytes of the spec's example: send, close and their TTLs. */
/* Receiving needs an OUT and an immediate processor: both refused with
 * the operation's message, and nothing is opened. */
Test(pipe, receive_refuses_a_missing_out_and_a_batch, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("args"), 60000);
    cr_assert_eq(wk_pipe_receive(wk_db_processor(db), &pipe, wk_name_str("a"), NULL), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "pipe.receive: out is required");
    wk_batch *b = NULL;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_pipe_receiver *r = (wk_pipe_receiver *)1;
    cr_assert_eq(wk_pipe_receive(wk_batch_processor(b), &pipe, wk_name_str("a"), &r), WK_EINVAL);
    cr_assert_null(r);
    wk_batch_close(b);
    wk_db_close(db);
}

Test(pipe, key_bytes_and_values_pinned_against_the_spec, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity pipe = WK_PIPE_ENTITY("to-client", 60000);
    char name[64];
    snprintf(name, sizeof(name), "s1-%d", (int)getpid());
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str(name), "hi", 2), WK_OK);
    cr_assert_eq(wk_pipe_close(p, &pipe, wk_name_str(name)), WK_OK);
    redisContext *raw = wk_test_raw(wk_test_url());
    char m[128], c[128];
    snprintf(m, sizeof(m), "@@wakuwaku-entity:Pipe:{to-client:%s}:m", name);
    snprintf(c, sizeof(c), "@@wakuwaku-entity:Pipe:{to-client:%s}:c", name);
    redisReply *rp = wk_test_cmd(raw, "LRANGE %s 0 -1", m);
    cr_assert(rp->elements == 1 && strcmp(rp->element[0]->str, "hi") == 0);
    freeReplyObject(rp);
    rp = wk_test_cmd(raw, "LRANGE %s 0 -1", c);
    cr_assert(rp->elements == 1 && rp->element[0]->len == 0, "the close marker is \"\"");
    freeReplyObject(rp);
    rp = wk_test_cmd(raw, "PTTL %s", m);
    cr_assert(rp->integer > 50000 && rp->integer <= 60000, "%lld", rp->integer);
    freeReplyObject(rp);
    rp = wk_test_cmd(raw, "PTTL %s", c);
    cr_assert(rp->integer > 50000 && rp->integer <= 60000, "%lld", rp->integer);
    freeReplyObject(rp);
    /* Integer names in decimal. */
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_u64(4242), "x", 1), WK_OK);
    rp = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:Pipe:{to-client:4242}:m");
    cr_assert_eq(rp->integer, 1);
    freeReplyObject(rp);
    freeReplyObject(wk_test_cmd(raw, "DEL %s %s @@wakuwaku-entity:Pipe:{to-client:4242}:m", m, c));
    redisFree(raw);
    wk_db_close(db);
}

/* The crate's sender is MULTI, RPUSH :m, PEXPIRE :m, EXEC; its close the
 * same on :c with "". */
static void rust_push(redisContext *raw, const char *key, const char *value, size_t len)
{
    freeReplyObject(wk_test_cmd(raw, "MULTI"));
    freeReplyObject(wk_test_cmd(raw, "RPUSH %s %b", key, value, len));
    freeReplyObject(wk_test_cmd(raw, "PEXPIRE %s 60000", key));
    redisReply *r = wk_test_cmd(raw, "EXEC");
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
}

Test(pipe, rust_sender_to_c_receiver, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("rs2c"), 60000);
    char m[256], c[256];
    snprintf(m, sizeof(m), "@@wakuwaku-entity:Pipe:{%s:chat}:m", pipe.ns);
    snprintf(c, sizeof(c), "@@wakuwaku-entity:Pipe:{%s:chat}:c", pipe.ns);
    redisContext *raw = wk_test_raw(wk_test_url());
    rust_push(raw, m, "hello", 5);
    rust_push(raw, m, "world", 5);
    rust_push(raw, c, "", 0);
    wk_pipe_receiver *r = receiver_of(db, &pipe, "chat");
    expect(r, WK_PIPE_MESSAGE, "hello");
    expect(r, WK_PIPE_MESSAGE, "world");
    expect(r, WK_PIPE_END, NULL);
    /* Both lists were taken empty, so they are gone. */
    redisReply *rp = wk_test_cmd(raw, "EXISTS %s %s", m, c);
    cr_assert_eq(rp->integer, 0);
    freeReplyObject(rp);
    wk_pipe_receiver_close(r);
    redisFree(raw);
    wk_db_close(db);
}

Test(pipe, c_sender_to_rust_receiver, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("c2rs"), 60000);
    char m[256], c[256];
    snprintf(m, sizeof(m), "@@wakuwaku-entity:Pipe:{%s:chat}:m", pipe.ns);
    snprintf(c, sizeof(c), "@@wakuwaku-entity:Pipe:{%s:chat}:c", pipe.ns);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("chat"), "a", 1), WK_OK);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("chat"), "b", 1), WK_OK);
    cr_assert_eq(wk_pipe_close(p, &pipe, wk_name_str("chat")), WK_OK);
    /* The crate's receiver: BLPOP :m :c <ttl in s, ryu-formatted>. */
    redisContext *raw = wk_test_raw(wk_test_url());
    const char *want[3][2] = {{m, "a"}, {m, "b"}, {c, ""}};
    for (int i = 0; i < 3; i++) {
        redisReply *rp = wk_test_cmd(raw, "BLPOP %s %s 60.0", m, c);
        cr_assert_eq(rp->type, REDIS_REPLY_ARRAY);
        cr_assert_str_eq(rp->element[0]->str, want[i][0]);
        cr_assert_str_eq(rp->element[1]->str, want[i][1]);
        freeReplyObject(rp);
    }
    redisFree(raw);
    wk_db_close(db);
}

Test(pipe, nothing_for_a_ttl_is_gone_and_the_receiver_may_wait_again, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("gone"), 300);
    wk_pipe_receiver *r = receiver_of(db, &pipe, "g");
    expect(r, WK_PIPE_GONE, NULL);
    cr_assert_eq(wk_pipe_send(wk_db_processor(db), &pipe, wk_name_str("g"), "back", 4), WK_OK);
    expect(r, WK_PIPE_MESSAGE, "back");
    wk_pipe_receiver_close(r);
    wk_db_close(db);
}

static int decode_prefixed(const wk_codec *codec, const uint8_t *bytes, size_t len, void *value)
{
    (void)codec;
    if (len < 3 || memcmp(bytes, "ok:", 3) != 0)
        return wk_codec_fail(WK_ECORRUPT, "no ok: prefix");
    snprintf(value, 32, "%.*s", (int)(len - 3), (const char *)bytes + 3);
    return WK_OK;
}
static int encode_prefixed(const wk_codec *codec, const void *value, uint8_t **bytes, size_t *len)
{
    (void)codec;
    size_t n = strlen(value);
    *bytes = malloc(n + 3);
    if (!*bytes)
        return WK_ENOMEM;
    memcpy(*bytes, "ok:", 3);
    memcpy(*bytes + 3, value, n);
    *len = n + 3;
    return WK_OK;
}
static const wk_codec prefixed = {"prefixed", encode_prefixed, decode_prefixed, NULL};

Test(pipe, corruption_is_an_error_not_gone, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("corrupt"), 60000);
    cr_assert_eq(wk_pipe_send_typed(p, &pipe, wk_name_str("t"), &prefixed, "fine"), WK_OK);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("t"), "garbage", 7), WK_OK);
    cr_assert_eq(wk_pipe_send_typed(p, &pipe, wk_name_str("t"), &prefixed, "after"), WK_OK);
    wk_pipe_receiver *r = receiver_of(db, &pipe, "t");
    char v[32];
    wk_pipe_got got;
    cr_assert_eq(wk_pipe_recv_typed(r, &prefixed, v, &got), WK_OK);
    cr_assert(got == WK_PIPE_MESSAGE && strcmp(v, "fine") == 0);
    cr_assert_eq(wk_pipe_recv_typed(r, &prefixed, v, &got), WK_ECORRUPT);
    cr_assert(strstr(wk_pipe_receiver_errmsg(r), "no ok: prefix"), "%s",
              wk_pipe_receiver_errmsg(r));
    cr_assert_eq(wk_pipe_recv_typed(r, &prefixed, v, &got), WK_OK, "the bad one was taken");
    cr_assert(got == WK_PIPE_MESSAGE && strcmp(v, "after") == 0);
    wk_pipe_receiver_close(r);

    /* A message list of another type: WK_ECORRUPT naming the type. */
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "SET @@wakuwaku-entity:Pipe:{%s:w}:m not-a-list", pipe.ns));
    r = receiver_of(db, &pipe, "w");
    wk_pipe_message m;
    cr_assert_eq(wk_pipe_recv(r, &m), WK_ECORRUPT, "%s", wk_pipe_receiver_errmsg(r));
    cr_assert(strstr(wk_pipe_receiver_errmsg(r), "another Redis type"), "%s",
              wk_pipe_receiver_errmsg(r));
    wk_pipe_receiver_close(r);
    redisFree(raw);
    wk_db_close(db);
}

Test(pipe, read_only_handle_may_not_receive_and_sends_nothing, .timeout = 60)
{
    /* A server of its own: the command counters see this test alone. */
    wk_test_server own;
    cr_assert_eq(wk_test_server_start(&own, NULL), 0);
    wk_db *db = wk_test_open_url(own.url, wk_cap_read_only());
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("ro"), 60000);
    redisContext *raw = wk_test_raw(own.url);
    long long before = wk_test_total_calls(raw);
    wk_pipe_receiver *r = (wk_pipe_receiver *)1;
    cr_assert_eq(wk_pipe_receive(wk_db_processor(db), &pipe, wk_name_str("x"), &r), WK_EDENIED);
    cr_assert_null(r);
    cr_assert_eq(wk_pipe_send(wk_db_processor(db), &pipe, wk_name_str("x"), "m", 1), WK_EDENIED);
    cr_assert_eq(wk_test_total_calls(raw), before, "refused before sending");
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&own);
}

static void *stop_later(void *arg)
{
    wk_test_sleep_ms(300);
    wk_pipe_receiver_stop(arg);
    return NULL;
}

/* Bounded by the suite's timeout: unstopped, this receiver waits 10 min. */
Test(pipe, another_thread_stops_the_wait_and_nothing_is_lost, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("stop"), 600000);
    wk_pipe_receiver *r = receiver_of(db, &pipe, "s");
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stop_later, r), 0);
    expect(r, WK_PIPE_STOPPED, NULL);
    pthread_join(t, NULL);
    expect(r, WK_PIPE_STOPPED, NULL);
    wk_pipe_receiver_close(r);
    cr_assert_eq(wk_pipe_send(wk_db_processor(db), &pipe, wk_name_str("s"), "kept", 4), WK_OK);
    r = receiver_of(db, &pipe, "s");
    expect(r, WK_PIPE_MESSAGE, "kept");
    wk_pipe_receiver_close(r);
    wk_db_close(db);
}

/* The take's reply is dropped by a proxy after the server ran it: the
 * crate's BLPOP would have lost the message; the next recv gets it. */
Test(pipe, a_lost_take_reply_is_asked_again_and_delivered_once, .timeout = 60)
{
    wk_test_proxy *proxy;
    const char *url = wk_test_url();
    cr_assert_eq(wk_test_proxy_start(&proxy, atoi(strrchr(url, ':') + 1)), 0);
    wk_db *db = wk_test_open_url(wk_test_proxy_url(proxy), NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("lost"), 60000);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("l"), "zero", 4), WK_OK);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("l"), "first", 5), WK_OK);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("l"), "second", 6), WK_OK);
    wk_pipe_receiver *r = receiver_of(db, &pipe, "l");
    /* The first take loads the script, so the dropped reply is a run's,
     * not a NOSCRIPT. */
    expect(r, WK_PIPE_MESSAGE, "zero");
    wk_test_proxy_drop_next_reply(proxy, NULL, NULL);
    wk_pipe_message m;
    int rc = wk_pipe_recv(r, &m);
    cr_assert_eq(rc, WK_EIO, "%s: %s", wk_err_name(rc), wk_pipe_receiver_errmsg(r));
    cr_assert_eq(wk_test_proxy_drops(proxy), 1);
    /* The server popped "first" already. */
    redisContext *raw = wk_test_raw(url);
    redisReply *rp = wk_test_cmd(raw, "LLEN @@wakuwaku-entity:Pipe:{%s:l}:m", pipe.ns);
    cr_assert_eq(rp->integer, 1);
    freeReplyObject(rp);
    expect(r, WK_PIPE_MESSAGE, "first");
    expect(r, WK_PIPE_MESSAGE, "second");
    wk_pipe_receiver_close(r);
    redisFree(raw);
    wk_db_close(db);
    wk_test_proxy_stop(proxy);
}

/* ------------------------------------------------------------------------
 * Across processes, under CLIENT KILL
 * ---------------------------------------------------------------------- */

#define FLOW_N 3000

static void sender_child(const char *ns)
{
    wk_db *db = wk_test_open_as(NULL, "wk-pipe-sender", -1);
    if (!db)
        _exit(2);
    wk_entity pipe = WK_PIPE_ENTITY(ns, 60000);
    for (int i = 0; i < FLOW_N; i++) {
        char body[16];
        int n = snprintf(body, sizeof(body), "%d", i);
        if (wk_pipe_send(wk_db_processor(db), &pipe, wk_name_str("flow"), body, (size_t)n))
            _exit(3);
        if (i % 8 == 0)
            usleep(1000);
    }
    _exit(wk_pipe_close(wk_db_processor(db), &pipe, wk_name_str("flow")) ? 4 : 0);
}

Test(pipe, across_processes_under_client_kill_nothing_lost_nothing_repeated, .timeout = 60)
{
    const char *ns = wk_test_ns("flow");
    wk_db *db = wk_test_open_as(NULL, "wk-pipe-rx", -1);
    cr_assert_not_null(db);
    wk_entity pipe = WK_PIPE_ENTITY(ns, 60000);
    wk_pipe_receiver *r = receiver_of(db, &pipe, "flow");
    pid_t kid = fork();
    cr_assert_neq(kid, -1);
    if (kid == 0)
        sender_child(ns);
    wk_test_killer *killer = wk_test_killer_start("wk-pipe-rx");
    int next = 0, errors = 0;
    for (;;) {
        wk_pipe_message m;
        int rc = wk_pipe_recv(r, &m);
        if (rc) {
            cr_assert(wk_is_connection_error(rc), "%s: %s", wk_err_name(rc),
                      wk_pipe_receiver_errmsg(r));
            errors++;
            continue;
        }
        if (m.got == WK_PIPE_END)
            break;
        cr_assert_eq(m.got, WK_PIPE_MESSAGE, "got %d", m.got);
        char want[16];
        int n = snprintf(want, sizeof(want), "%d", next);
        cr_assert(m.len == (size_t)n && memcmp(m.body, want, m.len) == 0,
                  "expected %s, got %.*s (lost or repeated)", want, (int)m.len,
                  (const char *)m.body);
        next++;
    }
    int kills = wk_test_killer_stop(killer);
    int status;
    waitpid(kid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sender status %d", status);
    cr_assert_eq(next, FLOW_N);
    cr_assert_gt(kills, 0, "the receiver's connection was never killed");
    cr_assert_gt(errors, 0, "no recv saw a killed connection");
    printf("pipe flow: %d messages, %d kills, %d failed recvs, 0 lost, 0 repeated\n", next, kills,
           errors);
    wk_pipe_receiver_close(r);
    wk_db_close(db);
}

/* The receiver's own connection selects the handle's database (the
 * crate's dedicated connection must be told to; here it is). */
Test(pipe, the_receiver_waits_in_the_handles_database, .timeout = 60)
{
    wk_db *db = wk_test_open_as(NULL, NULL, 5);
    cr_assert_not_null(db);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("db5"), 60000);
    wk_pipe_receiver *r = receiver_of(db, &pipe, "d");
    /* The same name in database 0 is another pipe. */
    wk_db *db0 = wk_test_open(NULL);
    cr_assert_eq(wk_pipe_send(wk_db_processor(db0), &pipe, wk_name_str("d"), "db0", 3), WK_OK);
    cr_assert_eq(wk_pipe_send(wk_db_processor(db), &pipe, wk_name_str("d"), "db5", 3), WK_OK);
    expect(r, WK_PIPE_MESSAGE, "db5");
    wk_pipe_receiver_close(r);
    r = receiver_of(db0, &pipe, "d");
    expect(r, WK_PIPE_MESSAGE, "db0");
    wk_pipe_receiver_close(r);
    wk_db_close(db0);
    wk_db_close(db);
}

Test(pipe, sends_in_a_batch_arrive_in_order, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("batch"), 60000);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    cr_assert_eq(wk_pipe_send(wk_batch_processor(b), &pipe, wk_name_str("b"), "1", 1), WK_OK);
    cr_assert_eq(wk_pipe_send(wk_batch_processor(b), &pipe, wk_name_str("b"), "2", 1), WK_OK);
    cr_assert_eq(wk_pipe_close(wk_batch_processor(b), &pipe, wk_name_str("b")), WK_OK);
    /* Receiving needs its outcome at once: refused in a batch. */
    wk_pipe_receiver *r = (wk_pipe_receiver *)1;
    cr_assert_eq(wk_pipe_receive(wk_batch_processor(b), &pipe, wk_name_str("b"), &r), WK_EINVAL);
    cr_assert_null(r);
    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    wk_batch_close(b);
    r = receiver_of(db, &pipe, "b");
    expect(r, WK_PIPE_MESSAGE, "1");
    expect(r, WK_PIPE_MESSAGE, "2");
    expect(r, WK_PIPE_END, NULL);
    wk_pipe_receiver_close(r);
    wk_db_close(db);
}

Test(pipe, bad_input_is_refused_with_the_reason_and_sends_nothing, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity no_ttl = WK_PIPE_ENTITY("bad", 0);
    cr_assert_eq(wk_pipe_send(p, &no_ttl, wk_name_str("x"), "m", 1), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "pipe.send: invalid entity Pipe:bad: ttl_ms must be > 0"),
              "%s", wk_db_errmsg(db));
    wk_entity lock = WK_LOCK_ENTITY("bad", 1000);
    cr_assert_eq(wk_pipe_close(p, &lock, wk_name_str("x")), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "is not a Pipe"), "%s", wk_db_errmsg(db));
    wk_entity pipe = WK_PIPE_ENTITY("bad", 1000);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("x"), NULL, 1), WK_EINVAL);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str(NULL), "m", 1), WK_EINVAL);
    cr_assert_eq(wk_pipe_receive(p, &pipe, wk_name_str("x"), NULL), WK_EINVAL);
    cr_assert_eq(wk_pipe_send_typed(p, &pipe, wk_name_str("x"), NULL, "v"), WK_EINVAL);
    cr_assert_eq(wk_pipe_recv(NULL, NULL), WK_EINVAL);
    wk_pipe_receiver_stop(NULL);
    cr_assert_str_eq(wk_pipe_receiver_errmsg(NULL), "");
    wk_db_close(db);
}
