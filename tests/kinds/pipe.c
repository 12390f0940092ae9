/*
 * tests/kinds/pipe.c — the test rows of Pipe and StreamBuffer
 * (tests/kinds/kinds.h): every built-in query, including receive and
 * subscribe (a query through the caller's processor, then a connection of
 * their own); the hot paths send+recv and append+recv, whose allocations
 * are counted once the receiver's buffers have grown; and the soak's pipe
 * flow, whose invariant is that the receiver gets every message once, in
 * order, while connections are killed.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kinds/kinds.h"

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

#define PIPE_E(ns) wk_entity e = WK_PIPE_ENTITY(ns, 5000)
#define SB_E(ns) wk_entity e = WK_STREAM_BUFFER_ENTITY(ns, 5000)

static int q_pipe_send(wk_processor *p, const char *ns)
{
    PIPE_E(ns);
    return wk_pipe_send(p, &e, wk_test_name(), "m", 1);
}
static int q_pipe_finish(wk_processor *p, const char *ns)
{
    PIPE_E(ns);
    return wk_pipe_finish(p, &e, wk_test_name());
}
static int q_pipe_close(wk_processor *p, const char *ns)
{
    PIPE_E(ns);
    return wk_pipe_close(p, &e, wk_test_name());
}
static int q_pipe_receive(wk_processor *p, const char *ns)
{
    PIPE_E(ns);
    wk_pipe_receiver *r = NULL;
    int rc = wk_pipe_receive(p, &e, wk_test_name(), &r);
    wk_pipe_receiver_close(r);
    return rc;
}
static int q_sb_append(wk_processor *p, const char *ns)
{
    SB_E(ns);
    return wk_stream_buffer_append(p, &e, wk_test_name(), "b", 1, NULL);
}
static int q_sb_finish(wk_processor *p, const char *ns)
{
    SB_E(ns);
    bool now;
    return wk_stream_buffer_finish(p, &e, wk_test_name(), &now);
}
static int q_sb_read(wk_processor *p, const char *ns)
{
    SB_E(ns);
    wk_stream_buffer_contents c = WK_STREAM_BUFFER_CONTENTS_INIT;
    int rc = wk_stream_buffer_read(p, &e, wk_test_name(), 0, &c);
    wk_stream_buffer_contents_free(&c);
    return rc;
}
static int q_sb_remove(wk_processor *p, const char *ns)
{
    SB_E(ns);
    bool removed;
    return wk_stream_buffer_remove(p, &e, wk_test_name(), &removed);
}
static int q_sb_subscribe(wk_processor *p, const char *ns)
{
    SB_E(ns);
    wk_stream_buffer_subscription *s = NULL;
    int rc = wk_stream_buffer_subscribe(p, &e, wk_test_name(), 0, &s);
    wk_stream_buffer_subscription_close(s);
    return rc;
}

static const wk_test_query queries[] = {
    WK_TEST_ROW(WK_KIND_PIPE, pipe, send, q_pipe_send, 0),
    WK_TEST_ROW(WK_KIND_PIPE, pipe, finish, q_pipe_finish, 0),
    WK_TEST_ROW(WK_KIND_PIPE, pipe, close, q_pipe_close, 0),
    WK_TEST_ROW(WK_KIND_PIPE, pipe, receive, q_pipe_receive, 0),
    WK_TEST_ROW(WK_KIND_STREAM_BUFFER, stream_buffer, append, q_sb_append, 0),
    WK_TEST_ROW(WK_KIND_STREAM_BUFFER, stream_buffer, finish, q_sb_finish, 0),
    WK_TEST_ROW(WK_KIND_STREAM_BUFFER, stream_buffer, read, q_sb_read, 0),
    WK_TEST_ROW(WK_KIND_STREAM_BUFFER, stream_buffer, remove, q_sb_remove, 0),
    WK_TEST_ROW(WK_KIND_STREAM_BUFFER, stream_buffer, subscribe, q_sb_subscribe, 0),
};

/* ------------------------------------------------------------------------
 * Allocations: the receiver and the subscription outlive the cases (they
 * are opened once, in setup, on the case's handle).
 * ---------------------------------------------------------------------- */

static const wk_entity alloc_pipe = WK_PIPE_ENTITY("alloc", 60000);
static const wk_entity alloc_sb = WK_STREAM_BUFFER_ENTITY("alloc", 60000);
static wk_pipe_receiver *alloc_rx;
static wk_stream_buffer_subscription *alloc_sub;

static int pipe_setup(wk_processor *p)
{
    wk_pipe_receiver_close(alloc_rx);
    alloc_rx = NULL;
    return wk_pipe_receive(p, &alloc_pipe, wk_name_str("hot"), &alloc_rx);
}

static int pipe_cycle(wk_processor *p, unsigned i)
{
    char body[16];
    int n = snprintf(body, sizeof(body), "%u", i);
    int rc = wk_pipe_send(p, &alloc_pipe, wk_name_str("hot"), body, (size_t)n);
    wk_pipe_message m;
    if (!rc)
        rc = wk_pipe_recv(alloc_rx, &m);
    if (!rc && (m.got != WK_PIPE_MESSAGE || m.len != (size_t)n || memcmp(m.body, body, m.len)))
        return WK_TEST_WRONG_OUTCOME;
    return rc;
}

static int sb_setup(wk_processor *p)
{
    wk_stream_buffer_subscription_close(alloc_sub);
    alloc_sub = NULL;
    bool removed;
    int rc = wk_stream_buffer_remove(p, &alloc_sb, wk_name_str("hot"), &removed);
    return rc ? rc : wk_stream_buffer_subscribe(p, &alloc_sb, wk_name_str("hot"), 0, &alloc_sub);
}

static int sb_cycle(wk_processor *p, unsigned i)
{
    (void)i;
    int64_t index;
    int rc = wk_stream_buffer_append(p, &alloc_sb, wk_name_str("hot"), "chunk", 5, &index);
    wk_stream_buffer_item it;
    if (!rc)
        rc = wk_stream_buffer_recv(alloc_sub, &it);
    if (!rc && (it.got != WK_STREAM_BUFFER_BODY || it.index != (uint64_t)index || it.len != 5))
        return WK_TEST_WRONG_OUTCOME;
    return rc;
}

static const wk_test_alloc_case allocs[] = {
    {"pipe send+recv", pipe_setup, pipe_cycle},
    {"stream buffer append+recv", sb_setup, sb_cycle},
};

/* ------------------------------------------------------------------------
 * Soak: each worker process sends numbered messages on a pipe of its own
 * and receives them on a receiver it keeps, while the faults kill both
 * connections, flush the scripts and stall the server. A send whose
 * outcome is unknown may or may not have queued its number; one that
 * succeeded did. Invariant: the numbers received only grow (nothing twice,
 * nothing out of order), and none that was sent for sure is skipped.
 * ---------------------------------------------------------------------- */

typedef struct pipe_shared {
    atomic_int pipes; /* gives each worker process its pipe name */
    atomic_long delivered;
} pipe_shared;

#define SENT_RING 4096

static const wk_entity soak_pipe = WK_PIPE_ENTITY("soak", 60000);
static wk_pipe_receiver *soak_rx;
static unsigned soak_name, soak_next, soak_pending;
static long soak_last = -1;
static bool soak_sent[SENT_RING]; /* number % SENT_RING: sent for sure */

static void soak_received(const wk_test_soak_env *env, pipe_shared *s, unsigned got)
{
    if ((long)got <= soak_last) {
        env->violation("%s %d came twice or out of order", "pipe message", (int)got);
        return;
    }
    for (long k = soak_last + 1; k < (long)got; k++) {
        if (soak_sent[k % SENT_RING])
            env->violation("%s %d was sent and never received", "pipe message", (int)k);
    }
    if (soak_sent[got % SENT_RING])
        soak_pending--;
    soak_last = got;
    atomic_fetch_add(&s->delivered, 1);
}

static void pipe_op(wk_processor *p, const wk_test_soak_env *env)
{
    pipe_shared *s = env->shared;
    if (!soak_rx) {
        soak_name = (unsigned)atomic_fetch_add(&s->pipes, 1);
        env->account(wk_pipe_receive(p, &soak_pipe, wk_name_u64(soak_name), &soak_rx),
                     "pipe.receive");
        return;
    }
    if (soak_next - (unsigned)(soak_last + 1) < SENT_RING / 2) {
        char body[16];
        unsigned k = soak_next++;
        int n = snprintf(body, sizeof(body), "%u", k);
        int rc = wk_pipe_send(p, &soak_pipe, wk_name_u64(soak_name), body, (size_t)n);
        env->account(rc, "pipe.send");
        soak_sent[k % SENT_RING] = rc == WK_OK;
        soak_pending += rc == WK_OK;
    }
    /* Only while a message is queued for sure, so recv never waits. */
    if (!soak_pending)
        return;
    wk_pipe_message m;
    int rc = wk_pipe_recv(soak_rx, &m);
    env->account(rc, "pipe.recv");
    if (rc == WK_OK && m.got == WK_PIPE_MESSAGE)
        soak_received(env, s, (unsigned)strtoul((const char *)m.body, NULL, 10));
    else if (rc == WK_OK)
        env->violation("%s: got %d instead of a message", "pipe", (int)m.got);
}

static void pipe_report(const wk_test_soak_env *env, double elapsed_s)
{
    const pipe_shared *s = env->shared;
    (void)elapsed_s;
    printf("  pipe: %ld messages received, none twice, none sent for sure skipped\n",
           atomic_load(&s->delivered));
}

static const wk_test_soak_op soak[] = {
    {"pipe", 2, sizeof(pipe_shared), pipe_op, pipe_report},
};

static wk_test_kind pipe_rows = {
    .id = "pipe",
    .ops = (const char *const[]){WK_PIPE_OPS(WK_TEST_OP_NAME)
                                   WK_STREAM_BUFFER_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries,
    .nqueries = WK_TEST_COUNT(queries),
    .allocs = allocs,
    .nallocs = WK_TEST_COUNT(allocs),
    .soak = soak,
    .nsoak = WK_TEST_COUNT(soak),
};
WK_TEST_KIND(pipe_rows)
