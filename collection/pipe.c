/*
 * collection/pipe.c — Pipe (wakuwaku/pipe.h): the crate's sender and
 * closer (RPUSH + PEXPIRE on :m / :c), and a receiver that takes messages
 * with a script it may repeat after a lost reply, on a blocking handle of
 * its own (core/blocking.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <wakuwaku/pipe.h>

#include "collection/dynamic_internal.h"
#include "collection/receiver.h"
#include "core/async_internal.h"
#include "core/blocking.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(pipe) = {WK_KIND_PIPE, wk__entity_check_ttl};

/* RPUSH and PEXPIRE together: the crate's MULTI/EXEC, as one query. */
static const wk_script push_script = {"pipe.push", "redis.call('RPUSH', KEYS[1], ARGV[1])\n"
                                                   "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                                   "return 1\n"};

/*
 * Take message number ARGV[1] + 1: KEYS :m, :c, :r; ARGV taken, ttl_ms.
 * If :r already records that number, the reply of an earlier run was lost:
 * answer it again rather than pop another. Else pop :m, or — when :m is
 * empty — the close marker, in BLPOP's key order. {1, body}, {2} (closed)
 * or {0} (nothing yet).
 */
static const wk_script take_script = {
    "pipe.take",
    "local want = tonumber(ARGV[1]) + 1\n"
    "local n = tonumber(redis.call('HGET', KEYS[3], 'n') or '0')\n"
    "if n == want then\n"
    "  if redis.call('HGET', KEYS[3], 'c') == '1' then return {2} end\n"
    "  return {1, redis.call('HGET', KEYS[3], 'b') or ''}\n"
    "end\n"
    "local body = redis.call('LPOP', KEYS[1])\n"
    "local closed = '0'\n"
    "if not body then\n"
    "  if not redis.call('LPOP', KEYS[2]) then return {0} end\n"
    "  body, closed = '', '1'\n"
    "end\n"
    "redis.call('HSET', KEYS[3], 'n', string.format('%d', want), 'b', body, 'c', closed)\n"
    "redis.call('PEXPIRE', KEYS[3], ARGV[2])\n"
    "if closed == '1' then return {2} end\n"
    "return {1, body}\n"};

enum { KEY_M, KEY_C, KEY_R, NKEYS };
static const char *const suffixes[NKEYS] = {":m", ":c", ":r"};

struct wk_pipe_receiver {
    wk__receiver rx; /* the blocking handle, the entity and name, the stop */
    char keys[NKEYS][WK_KEY_MAX];
    size_t key_len[NKEYS];
    uint64_t taken; /* messages taken, by this receiver or its predecessors */
    bool ended;
    /* The stop (rx.stop, set under `mu`): `waiting` is true only inside
     * the BLMOVE, the one place an interrupt may cut, so a take is never
     * cut short. */
    pthread_mutex_t mu;
    bool waiting;
    /* The last message (the take's parser copies it here). */
    uint8_t *body;
    size_t len, cap;
    int took; /* the take's reply: 0 nothing, 1 a message, 2 the close */
    /* Through the loop (wk_pipe_recv_async): the receive's output, when
     * it reports GONE, and the query in flight. */
    wk_pipe_message *out;
    int64_t gone_at;
};

/* The query in flight through the loop (rx.inflight). */
enum { IDLE, TAKING, WAITING };

/* A loop receiver whose open has not answered (or failed): no count. */
#define NOT_COUNTED UINT64_MAX

static const wk__receiver_loop loop_fns; /* below: the receiver through the loop */

/* ------------------------------------------------------------------------
 * Helpers shared with StreamBuffer (collection/dynamic_internal.h)
 * ---------------------------------------------------------------------- */

int wk__send_body_ttl(const wk__call *c, const void *body, size_t len, const char *extra)
{
    char ttl[24];
    const char *args[3];
    size_t lens[3];
    int n = 0;
    if (body) {
        args[n] = body;
        lens[n++] = len;
    }
    lens[n] = wk__fmt_i64(ttl, c->e->ttl_ms);
    args[n++] = ttl;
    if (extra) {
        args[n] = extra;
        lens[n++] = strlen(extra);
    }
    return wk__op_send(c, args, lens, n);
}

int wk__codec_encoded(wk_processor *p, const char *op, const wk_codec *codec, const void *value,
                      int (*use)(void *ctx, const uint8_t *bytes, size_t len), void *ctx)
{
    if (!wk__codec_ok(codec) || !value)
        return p ? wk__processor_fail(p, WK_EINVAL, "%s: a codec and a value are required", op)
                 : WK_EINVAL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    int rc = wk__codec_encode(p, op, codec, value, &bytes, &len);
    if (rc)
        return rc;
    rc = use(ctx, bytes, len);
    if (bytes && codec->free_bytes)
        codec->free_bytes(codec, bytes);
    else
        free(bytes);
    return rc;
}

/* ------------------------------------------------------------------------
 * Sender
 * ---------------------------------------------------------------------- */

static int push(wk_processor *p, const char *op, const wk_entity *e, const wk_name *name,
                const char *suffix, const void *body, size_t len)
{
    const wk__op push_op = {.name = op, .kind = WK_KIND_PIPE, .mode = WK_WRITE,
                            .script = &push_script, .suffix = {suffix}};
    wk__call c;
    int rc = wk__op_begin(&c, p, &push_op, e, *name, NULL);
    if (rc)
        return rc;
    if ((!body && len) || len > WK_BODY_MAX)
        return wk__op_fail(&c, WK_EINVAL, "body NULL or longer than WK_BODY_MAX");
    return wk__send_body_ttl(&c, body ? body : "", len, NULL);
}

int wk_pipe_send(wk_processor *p, const wk_entity *pipe, wk_name name, const void *body, size_t len)
{
    return push(p, "pipe.send", pipe, &name, ":m", body, len);
}

int wk_pipe_finish(wk_processor *p, const wk_entity *pipe, wk_name name)
{
    return push(p, "pipe.finish", pipe, &name, ":c", "", 0);
}

/* The old name (pipe.h): the same query, under its old query name. */
int wk_pipe_close(wk_processor *p, const wk_entity *pipe, wk_name name)
{
    return push(p, "pipe.close", pipe, &name, ":c", "", 0);
}

typedef struct typed_send {
    wk_processor *p;
    const wk_entity *pipe;
    wk_name name;
} typed_send;

static int send_encoded(void *ctx, const uint8_t *bytes, size_t len)
{
    typed_send *t = ctx;
    return wk_pipe_send(t->p, t->pipe, t->name, bytes, len);
}

int wk_pipe_send_typed(wk_processor *p, const wk_entity *pipe, wk_name name, const wk_codec *codec,
                       const void *value)
{
    typed_send t = {p, pipe, name};
    return wk__codec_encoded(p, "pipe.send", codec, value, send_encoded, &t);
}

/* ------------------------------------------------------------------------
 * The receiver
 * ---------------------------------------------------------------------- */

/* HGET :r n → the count taken so far (absent: 0). */
static int parse_count(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    uint64_t *out = q->out;
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return wk__parse_error_reply(q, r, d, "a Pipe receiver hash");
    if (wk_reply_get_type(r) == WK_REPLY_NIL) {
        *out = 0;
        return WK_OK;
    }
    size_t len;
    const char *s = wk_reply_str(r, &len);
    if (!s || !len || len > 19)
        return wk_diag_fail(d, WK_ECORRUPT, "pipe.receive: the receiver state holds no count");
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return wk_diag_fail(d, WK_ECORRUPT,
                                "pipe.receive: the receiver state's count is not a number");
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return WK_OK;
}

static int parse_take(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_pipe_receiver *rx = q->out;
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return wk__parse_error_reply(q, r, d, "Pipe lists and hash");
    const wk_reply *kind = wk_reply_at(r, 0);
    if (wk_reply_get_type(kind) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "pipe.take: expected {kind, body}");
    long long k = wk_reply_integer(kind);
    if (k == 0 || k == 2) {
        rx->took = (int)k;
        return WK_OK;
    }
    size_t len;
    const char *s = wk_reply_str(wk_reply_at(r, 1), &len);
    if (k != 1 || !s)
        return wk_diag_fail(d, WK_EPROTO, "pipe.take: expected {kind, body}");
    if (wk__grow_array_from(&rx->body, &rx->cap, len + 1, 1, 256))
        return wk_diag_fail(d, WK_ENOMEM, "pipe.take: out of memory for a message");
    memcpy(rx->body, s, len);
    rx->body[len] = '\0';
    rx->len = len;
    rx->took = 1;
    return WK_OK;
}

/* The count taken so far, of the receiver state :r (a WRITE: receiving
 * takes the pipe's messages). Its begin checks wk_pipe_receive()'s
 * arguments, `out` included. */
static const wk__op count_op = {.name = "pipe.receive",
                                .kind = WK_KIND_PIPE,
                                .mode = WK_WRITE,
                                .flags = WK_QUERY_PARSE_ERRORS,
                                .command = "HGET",
                                .suffix = {":r"},
                                .parse = parse_count,
                                .out_name = "out"};

int wk_pipe_receive(wk_processor *p, const wk_entity *pipe, wk_name name, wk_pipe_receiver **out)
{
    if (out)
        *out = NULL;
    wk__call c;
    int rc = wk__op_begin(&c, p, &count_op, pipe, name, out);
    if (rc)
        return rc;
    bool loop = wk__receiver_is_loop(p);
    if (!loop && (rc = wk__no_deferred(p, count_op.name)))
        return rc;
    /* The entity and the name passed the checks above. */
    char keys[NKEYS][WK_KEY_MAX];
    size_t key_len[NKEYS];
    for (int i = 0; i < NKEYS; i++)
        if ((rc =
                 wk__key_build_checked(keys[i], WK_KEY_MAX, &key_len[i], pipe, &name, suffixes[i])))
            return wk__op_fail(&c, rc, "cannot build its key %s", suffixes[i]);
    static const char *const field[1] = {"n"};
    static const size_t field_len[1] = {1};
    wk_pipe_receiver *r = calloc(1, sizeof(*r));
    if (!r)
        return wk__processor_fail(p, WK_ENOMEM, "pipe.receive: out of memory");
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return wk__processor_fail(p, WK_ENOMEM, "pipe.receive: no mutex");
    }
    memcpy(r->keys, keys, sizeof(keys));
    memcpy(r->key_len, key_len, sizeof(key_len));
    char err[256];
    if (loop) {
        /* Through the loop: the count comes with the open's callback,
         * and the receiver takes nothing before (NOT_COUNTED). */
        r->taken = NOT_COUNTED;
        rc = wk__receiver_open_loop(&r->rx, p, pipe, WK_KIND_PIPE, &name, &loop_fns, r, err,
                                    sizeof(err));
        c.out = &r->taken;
        if (rc)
            rc = wk__processor_fail(p, rc, "pipe.receive: %s", err);
        else
            rc = wk__op_send(&c, field, field_len, 1);
    } else {
        c.out = &r->taken;
        if ((rc = wk__op_send(&c, field, field_len, 1)) == WK_OK &&
            (rc = wk__receiver_open(&r->rx, p->db, pipe, WK_KIND_PIPE, &name, err, sizeof(err))))
            rc = wk__processor_fail(p, rc, "pipe.receive: %s", err);
    }
    if (rc) {
        wk_pipe_receiver_close(r);
        return rc;
    }
    *out = r;
    return WK_OK;
}

/* One take, never cut short by a stop. */
static int take(void *self)
{
    wk_pipe_receiver *r = self;
    char want[24], ttl[24];
    const char *argv[5] = {r->keys[KEY_M], r->keys[KEY_C], r->keys[KEY_R], want, ttl};
    size_t argvlen[5] = {r->key_len[KEY_M], r->key_len[KEY_C], r->key_len[KEY_R],
                         wk__fmt_i64(want, (int64_t)r->taken),
                         wk__fmt_i64(ttl, r->rx.held.entity.ttl_ms)};
    wk_access access = {&r->rx.held.entity, WK_WRITE};
    wk_query q = {.name = "pipe.take",
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_PARSE_ERRORS,
                  .script = &take_script,
                  .nkeys = 3,
                  .argc = 5,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_take,
                  .out = r};
    r->took = 0;
    return wk__receiver_send(&r->rx, &q, 0);
}

static int parse_wait(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return wk__parse_error_reply(q, r, d, "a Pipe list");
    return WK_OK;
}

/* Wait up to `ms` for :m to hold something, without taking it: BLMOVE
 * from :m to its own head changes nothing. */
static int send_wait(wk_pipe_receiver *r, int64_t ms)
{
    char secs[32];
    int n = snprintf(secs, sizeof(secs), "%.3f", (double)ms / 1000.0);
    const char *argv[6] = {"BLMOVE", r->keys[KEY_M], r->keys[KEY_M], "LEFT", "LEFT", secs};
    size_t argvlen[6] = {6, r->key_len[KEY_M], r->key_len[KEY_M], 4, 4, (size_t)n};
    wk_access access = {&r->rx.held.entity, WK_WRITE};
    wk_query q = {.name = "pipe.wait",
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_PARSE_ERRORS,
                  .parse = parse_wait,
                  .argc = 6,
                  .argv = argv,
                  .argvlen = argvlen};
    return wk__receiver_send(&r->rx, &q, ms);
}

/* The blocking form's slice: the one place a stop may cut. */
static int wait_slice(wk_pipe_receiver *r, int64_t ms)
{
    pthread_mutex_lock(&r->mu);
    bool stopped = wk__receiver_stopped(&r->rx);
    r->waiting = !stopped;
    pthread_mutex_unlock(&r->mu);
    if (stopped)
        return WK_OK;
    int rc = send_wait(r, ms);
    pthread_mutex_lock(&r->mu);
    r->waiting = false;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* The receiver's outcome for a failed query: nothing was delivered, and
 * the next call asks for the same message, so a lost reply is no unknown
 * outcome here. */
static int connection_status(int rc)
{
    return rc == WK_EUNKNOWN ? WK_EIO : rc;
}

int wk_pipe_recv(wk_pipe_receiver *r, wk_pipe_message *msg)
{
    if (!r || !msg || r->rx.sub) /* through the loop: wk_pipe_recv_async */
        return WK_EINVAL;
    msg->body = NULL;
    msg->len = 0;
    if (r->ended) {
        msg->got = WK_PIPE_END;
        return WK_OK;
    }
    int64_t ttl = r->rx.held.entity.ttl_ms;
    int64_t gone_at = wk__add_ms(wk__boot_ms(), ttl);
    for (;;) {
        if (wk__receiver_stopped(&r->rx)) {
            msg->got = WK_PIPE_STOPPED;
            return WK_OK;
        }
        int rc = take(r);
        if (rc)
            return connection_status(rc);
        if (r->took == 1) {
            r->taken++;
            msg->got = WK_PIPE_MESSAGE;
            msg->body = r->body;
            msg->len = r->len;
            return WK_OK;
        }
        if (r->took == 2) {
            r->taken++;
            r->ended = true;
            msg->got = WK_PIPE_END;
            return WK_OK;
        }
        int64_t left = gone_at - wk__boot_ms();
        if (left <= 0) {
            msg->got = WK_PIPE_GONE;
            return WK_OK;
        }
        rc = wait_slice(r, left < WK_PIPE_POLL_MS ? left : WK_PIPE_POLL_MS);
        if (rc && !wk__receiver_stopped(&r->rx))
            return connection_status(rc);
    }
}

/* ------------------------------------------------------------------------
 * The receiver through the loop: wk_pipe_recv()'s steps, each query's
 * reply deciding the next (take; nothing: wait one slice; take …).
 * ---------------------------------------------------------------------- */

static void loop_deliver(wk_pipe_receiver *r, int status, wk_pipe_got got, const char *why)
{
    wk_pipe_message *m = r->out;
    m->got = status ? 0 : got;
    m->body = got == WK_PIPE_MESSAGE ? r->body : NULL;
    m->len = got == WK_PIPE_MESSAGE ? r->len : 0;
    wk__receiver_deliver(&r->rx, status, why);
}

/* Send the next query (`taking`: the take, else a wait of one slice), or
 * end the receive with what is decided without one. */
static void loop_next(wk_pipe_receiver *r, bool taking)
{
    int64_t left = r->gone_at - wk__boot_ms();
    if (wk__receiver_stopped(&r->rx)) {
        loop_deliver(r, WK_OK, WK_PIPE_STOPPED, NULL);
        return;
    }
    if (!taking && left <= 0) {
        loop_deliver(r, WK_OK, WK_PIPE_GONE, NULL);
        return;
    }
    int rc = taking ? take(r) : send_wait(r, left < WK_PIPE_POLL_MS ? left : WK_PIPE_POLL_MS);
    if (rc) {
        loop_deliver(r, rc, 0, r->rx.msg);
        return;
    }
    r->rx.inflight = taking ? TAKING : WAITING;
}

static void loop_reply(void *self, int was, int status, const char *msg)
{
    wk_pipe_receiver *r = self;
    bool took = was == TAKING;
    if (status && (took || !wk__receiver_stopped(&r->rx))) {
        loop_deliver(r, connection_status(status), 0, msg);
        return;
    }
    if (took && r->took) {
        r->taken++;
        r->ended = r->took == 2;
        loop_deliver(r, WK_OK, r->ended ? WK_PIPE_END : WK_PIPE_MESSAGE, NULL);
        return;
    }
    loop_next(r, !took);
}

/* A receive decided without a query: the end, a stop (a take in flight
 * is never cut: its reply decides). */
static bool loop_decided(const void *self)
{
    const wk_pipe_receiver *r = self;
    return r->rx.inflight != TAKING && (r->ended || wk__receiver_stopped(&r->rx));
}

static int loop_local(void *self)
{
    wk_pipe_receiver *r = self;
    *r->out = (wk_pipe_message){.got = r->ended ? WK_PIPE_END : WK_PIPE_STOPPED};
    return WK_OK;
}

static const wk__receiver_loop loop_fns = {
    .reply = loop_reply, .decided = loop_decided, .local = loop_local, .first = take};

int wk_pipe_recv_async(wk_pipe_receiver *r, wk_pipe_message *msg, wk_async_done_fn done, void *arg)
{
    if (!r || !msg)
        return WK_EINVAL;
    int rc = wk__receiver_begin(&r->rx, "pipe.recv", r->taken != NOT_COUNTED, done, arg);
    if (rc)
        return rc;
    *msg = (wk_pipe_message){0};
    r->out = msg;
    r->gone_at = wk__add_ms(wk__boot_ms(), r->rx.held.entity.ttl_ms);
    return wk__receiver_first(&r->rx, r, TAKING);
}

int wk_pipe_recv_typed(wk_pipe_receiver *r, const wk_codec *codec, void *value, wk_pipe_got *got)
{
    if (!r || r->rx.sub || !wk__codec_ok(codec) || !value || !got)
        return WK_EINVAL;
    wk_pipe_message m;
    int rc = wk_pipe_recv(r, &m);
    *got = rc ? 0 : m.got;
    if (rc || m.got != WK_PIPE_MESSAGE)
        return rc;
    return wk__codec_decode(wk_db_processor(r->rx.b), "pipe.recv", codec, r->keys[KEY_M],
                            r->key_len[KEY_M], m.body, m.len, value);
}

void wk_pipe_receiver_stop(wk_pipe_receiver *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    atomic_store(&r->rx.stop, true);
    if (r->waiting)
        wk__blocking_interrupt(r->rx.b);
    pthread_mutex_unlock(&r->mu);
    /* Through the loop: a receive that is not taking ends now. */
    if (r->rx.sub && r->rx.busy)
        wk__receiver_kick(&r->rx);
}

const char *wk_pipe_receiver_errmsg(const wk_pipe_receiver *r)
{
    return r ? wk__receiver_errmsg(&r->rx) : "";
}

void wk_pipe_receiver_close(wk_pipe_receiver *r)
{
    if (!r)
        return;
    wk__receiver_close(&r->rx);
    pthread_mutex_destroy(&r->mu);
    free(r->body);
    free(r);
}
