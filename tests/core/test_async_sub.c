/*
 * tests/core/test_async_sub.c — receivers through the event-loop handle
 * (wakuwaku/async.h, 8.): a Pipe receiver and a StreamBuffer
 * subscription opened through wk_async_with() deliver to callbacks on
 * the loop, on a connection of their own in the handle's epoll set, with
 * the guarantees of their blocking forms: every message / body once and
 * in order, a lost reply asked again (no loss, no duplicate), the end,
 * GONE, the stop, a new receiver going on from where the last one was;
 * the handle's other queries never wait behind their waits; closing the
 * handle ends what is outstanding.
 */
#include <string.h>

#include "redis_fixture.h"

static const wk_entity pipe_e = WK_PIPE_ENTITY("asub", 30000);
static const wk_entity pipe_short = WK_PIPE_ENTITY("asub-short", 400);
static const wk_entity sb_e = WK_STREAM_BUFFER_ENTITY("asub", 30000);
static const wk_entity sb_short = WK_STREAM_BUFFER_ENTITY("asub-short", 400);
static const wk_entity lv_e = WK_LIVE_VIEW_ENTITY("asub", 100);
static const wk_entity cache = WK_CACHE_ENTITY("asub", 60000);

/* A completion as its callback saw it (tests/support). */
typedef wk_test_done done;
#define on_done wk_test_on_done

static void turn_until(wk_async *a, const done *d, int calls)
{
    while (d->calls < calls)
        wk_test_async_turn(a);
}

/* A loop handle through a proxy that can lose a reply, and a blocking
 * handle straight to the same server. */
typedef struct lossy {
    wk_test_server srv;
    wk_test_proxy *px;
    wk_async *a;
    wk_db *db;
    wk_processor *p; /* db's */
} lossy;

static void lossy_open(lossy *x)
{
    cr_assert_eq(wk_test_server_start(&x->srv, NULL), 0);
    cr_assert_eq(wk_test_proxy_start(&x->px, x->srv.port), 0);
    x->a = wk_test_open_async(wk_test_proxy_url(x->px), NULL, 2000);
    x->db = wk_test_open_url(x->srv.url, NULL);
    x->p = wk_db_processor(x->db);
}

static void lossy_close(lossy *x)
{
    wk_async_close(x->a);
    wk_db_close(x->db);
    wk_test_proxy_stop(x->px);
    wk_test_server_stop(&x->srv);
}

/* While a receive waits (d->calls still `calls`), a cache put through
 * the handle completes: its queries never queue behind a receiver's wait. */
static void put_while_waiting(wk_async *a, const char *name, const done *d, int calls)
{
    done put = {0};
    cr_assert_eq(wk_cache_put(wk_async_with(a, on_done, &put), &cache, wk_name_str(name), "v", 1),
                 WK_OK);
    turn_until(a, &put, 1);
    cr_assert_eq(put.status, WK_OK, "%s", put.msg);
    cr_assert_eq(d->calls, calls, "a query of the handle does not wait behind the receive");
}

/* ---- Pipe --------------------------------------------------------------- */

typedef struct pipe_rx {
    wk_pipe_receiver *r;
    wk_pipe_message m;
    done d;
} pipe_rx;

/* A receiver's open through the loop (its rc, the receiver): its
 * callback runs with WK_OK. */
static void await_open(wk_async *a, int rc, const void *rx, done *opened)
{
    cr_assert_eq(rc, WK_OK, "%s", wk_async_errmsg(a));
    cr_assert_not_null(rx);
    turn_until(a, opened, 1);
    cr_assert_eq(opened->status, WK_OK, "%s", opened->msg);
}

/* A receive was queued (rc): its callback runs once, never inside the
 * call. */
static void await_next(wk_async *a, int rc, const char *errmsg, done *d, int before)
{
    cr_assert_eq(rc, WK_OK, "%s", errmsg);
    cr_assert_eq(d->calls, before, "never inside the call");
    turn_until(a, d, before + 1);
    cr_assert_eq(d->calls, before + 1);
}

static void pipe_open(wk_async *a, pipe_rx *x, const wk_entity *e, const char *name)
{
    done opened = {0};
    memset(x, 0, sizeof(*x));
    int rc = wk_pipe_receive(wk_async_with(a, on_done, &opened), e, wk_name_str(name), &x->r);
    await_open(a, rc, x->r, &opened);
}

/* One receive through the loop, to its callback. */
static void pipe_next(wk_async *a, pipe_rx *x)
{
    int before = x->d.calls;
    int rc = wk_pipe_recv_async(x->r, &x->m, on_done, &x->d);
    await_next(a, rc, wk_pipe_receiver_errmsg(x->r), &x->d, before);
}

/* A receive ended WK_OK with outcome `got` (`want` wanted) and `body`. */
static void await_body(const done *d, int got, int want, const void *data, size_t len,
                       const char *body)
{
    cr_assert_eq(d->status, WK_OK, "%s (%s)", wk_err_name(d->status), d->msg);
    cr_assert_eq(got, want, "got %d, wanted %d (%s)", got, want, body);
    cr_assert_eq(len, strlen(body));
    cr_assert_arr_eq(data, body, len);
}

static void pipe_expect(wk_async *a, pipe_rx *x, const char *body)
{
    pipe_next(a, x);
    await_body(&x->d, x->m.got, WK_PIPE_MESSAGE, x->m.body, x->m.len, body);
}

Test(async_sub, a_pipe_is_followed_through_the_loop_in_order_to_its_end, .timeout = 60)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 2000);
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *name = wk_test_ns("follow");
    cr_assert_eq(wk_pipe_send(p, &pipe_e, wk_name_str(name), "one", 3), WK_OK);
    pipe_rx x;
    pipe_open(a, &x, &pipe_e, name);
    pipe_expect(a, &x, "one");

    /* Waiting: the handle's own queries go on, and a send wakes it. */
    cr_assert_eq(wk_pipe_recv_async(x.r, &x.m, on_done, &x.d), WK_OK);
    cr_assert_eq(wk_async_pending(a), 1, "the receive outstanding counts");
    for (int i = 0; i < 4; i++)
        wk_test_async_turn(a);
    cr_assert_eq(x.d.calls, 1, "nothing to receive yet");
    put_while_waiting(a, name, &x.d, 1);
    cr_assert_eq(wk_pipe_send(p, &pipe_e, wk_name_str(name), "two", 3), WK_OK);
    turn_until(a, &x.d, 2);
    cr_assert_eq(x.m.got, WK_PIPE_MESSAGE);
    cr_assert_arr_eq(x.m.body, "two", 3);

    cr_assert_eq(wk_pipe_send(p, &pipe_e, wk_name_str(name), "three", 5), WK_OK);
    cr_assert_eq(wk_pipe_finish(p, &pipe_e, wk_name_str(name)), WK_OK);
    pipe_expect(a, &x, "three");
    pipe_next(a, &x);
    cr_assert_eq(x.m.got, WK_PIPE_END);
    pipe_next(a, &x);
    cr_assert_eq(x.m.got, WK_PIPE_END, "every later receive says so too");
    cr_assert_eq(wk_async_pending(a), 0);
    /* The blocking calls refuse a loop receiver (they would block it). */
    cr_assert_eq(wk_pipe_recv(x.r, &x.m), WK_EINVAL);
    wk_pipe_receiver_close(x.r);
    wk_async_close(a);
    wk_db_close(db);
}

/* A take whose reply is lost delivers nothing (WK_EIO, never
 * WK_EUNKNOWN); the next receive gets that message, and no other is
 * skipped or repeated. */
Test(async_sub, a_lost_take_reply_is_asked_again_no_loss_no_duplicate, .timeout = 60)
{
    lossy l;
    lossy_open(&l);
    wk_async *a = l.a;
    wk_processor *p = l.p;
    for (int i = 0; i < 3; i++) {
        char b[8];
        int n = snprintf(b, sizeof(b), "m%d", i);
        cr_assert_eq(wk_pipe_send(p, &pipe_e, wk_name_str("lost"), b, (size_t)n), WK_OK);
    }
    pipe_rx x;
    pipe_open(a, &x, &pipe_e, "lost");
    pipe_expect(a, &x, "m0"); /* the hidden connection is up, the script loaded */
    wk_test_proxy_drop_next_reply(l.px, NULL, NULL);
    pipe_next(a, &x);
    cr_assert_eq(wk_test_proxy_drops(l.px), 1);
    cr_assert_eq(x.d.status, WK_EIO, "%s (%s)", wk_err_name(x.d.status), x.d.msg);
    pipe_expect(a, &x, "m1"); /* the message whose reply was lost */
    pipe_expect(a, &x, "m2");
    /* A new receiver (blocking) goes on after the last one taken. */
    cr_assert_eq(wk_pipe_send(p, &pipe_e, wk_name_str("lost"), "m3", 2), WK_OK);
    wk_pipe_receiver_close(x.r);
    wk_pipe_receiver *br = NULL;
    cr_assert_eq(wk_pipe_receive(p, &pipe_e, wk_name_str("lost"), &br), WK_OK);
    wk_pipe_message m;
    cr_assert_eq(wk_pipe_recv(br, &m), WK_OK);
    cr_assert_eq(m.got, WK_PIPE_MESSAGE);
    cr_assert_arr_eq(m.body, "m3", 2);
    wk_pipe_receiver_close(br);
    lossy_close(&l);
}

Test(async_sub, a_pipe_without_messages_for_a_ttl_is_gone, .timeout = 60)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 2000);
    pipe_rx x;
    pipe_open(a, &x, &pipe_short, wk_test_ns("gone"));
    int64_t start = wk_monotonic_ms();
    pipe_next(a, &x);
    cr_assert_eq(x.d.status, WK_OK, "%s", x.d.msg);
    cr_assert_eq(x.m.got, WK_PIPE_GONE);
    cr_assert_geq(wk_monotonic_ms() - start, 400, "not before one TTL");
    wk_pipe_receiver_close(x.r);
    wk_async_close(a);
}

/* A receive that its handle's close ended tries to receive again from
 * its callback: refused with WK_EIO, never queued. */
typedef struct again {
    pipe_rx *x;
    int rc;
} again;

static void on_closed_again(wk_async *a, int status, const char *msg, void *arg)
{
    again *g = arg;
    on_done(a, status, msg, &g->x->d);
    g->rc = wk_pipe_recv_async(g->x->r, &g->x->m, on_done, &g->x->d);
}

Test(async_sub, a_stop_ends_a_waiting_receive_and_closing_the_handle_ends_another, .timeout = 60)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 2000);
    pipe_rx x, y;
    pipe_open(a, &x, &pipe_e, wk_test_ns("stop"));
    pipe_open(a, &y, &pipe_e, wk_test_ns("closed"));
    cr_assert_eq(wk_pipe_recv_async(x.r, &x.m, on_done, &x.d), WK_OK);
    again g = {.x = &y, .rc = WK_OK};
    cr_assert_eq(wk_pipe_recv_async(y.r, &y.m, on_closed_again, &g), WK_OK);
    cr_assert_eq(wk_pipe_recv_async(x.r, &x.m, on_done, &x.d), WK_EINVAL, "one at a time");
    for (int i = 0; i < 4; i++)
        wk_test_async_turn(a);
    wk_pipe_receiver_stop(x.r);
    turn_until(a, &x.d, 1);
    cr_assert_eq(x.m.got, WK_PIPE_STOPPED);
    pipe_next(a, &x);
    cr_assert_eq(x.m.got, WK_PIPE_STOPPED, "every later receive says so too");
    cr_assert_eq(y.d.calls, 0);
    /* Closing a receiver drops its receive: never called back. */
    pipe_rx z;
    pipe_open(a, &z, &pipe_e, wk_test_ns("dropped"));
    cr_assert_eq(wk_pipe_recv_async(z.r, &z.m, on_done, &z.d), WK_OK);
    cr_assert_eq(wk_async_pending(a), 2);
    wk_pipe_receiver_close(z.r);
    cr_assert_eq(wk_async_pending(a), 1, "only y's receive is left");
    for (int i = 0; i < 4; i++)
        wk_test_async_turn(a);
    cr_assert_eq(z.d.calls, 0);
    wk_async_close(a);
    cr_assert_eq(y.d.calls, 1, "closing the handle ends the receive outstanding");
    cr_assert_eq(y.d.status, WK_EIO);
    cr_assert_eq(g.rc, WK_EIO, "a receive from that callback is refused");
    cr_assert_eq(wk_pipe_recv_async(y.r, &y.m, on_done, &y.d), WK_EIO);
    wk_pipe_receiver_close(x.r);
    wk_pipe_receiver_close(y.r);
}

/* Callbacks chain: each receive starts the next from its callback, and
 * the receivers of two pipes share the loop. */
Test(async_sub, two_pipes_are_followed_at_once_by_chained_callbacks, .timeout = 60)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 2000);
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *names[2] = {wk_test_ns("two-a"), wk_test_ns("two-b")};
    wk_test_follower c[2] = {{0}};
    for (int k = 0; k < 2; k++) {
        pipe_rx x;
        pipe_open(a, &x, &pipe_e, names[k]);
        c[k].r = x.r;
        cr_assert_eq(wk_pipe_recv_async(c[k].r, &c[k].m, wk_test_follow_pipe, &c[k]), WK_OK);
    }
    for (int i = 0; i < 10; i++)
        for (int k = 0; k < 2; k++)
            cr_assert_eq(wk_pipe_send(p, &pipe_e, wk_name_str(names[k]), &"abcdefghij"[i], 1),
                         WK_OK);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(wk_pipe_finish(p, &pipe_e, wk_name_str(names[k])), WK_OK);
    while (!c[0].ended || !c[1].ended)
        wk_test_async_turn(a);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(c[k].status, WK_OK);
        cr_assert_eq(c[k].m.got, WK_PIPE_END);
        cr_assert_eq(c[k].n, 10);
        cr_assert_arr_eq(c[k].got, "abcdefghij", 10);
        wk_pipe_receiver_close(c[k].r);
    }
    wk_async_close(a);
    wk_db_close(db);
}

/* ---- StreamBuffer ------------------------------------------------------- */

typedef struct sb_rx {
    wk_stream_buffer_subscription *s;
    wk_stream_buffer_item it;
    done d;
} sb_rx;

static void sb_open(wk_async *a, sb_rx *x, const wk_entity *e, const char *name, uint64_t from)
{
    done opened = {0};
    memset(x, 0, sizeof(*x));
    int rc = wk_stream_buffer_subscribe(wk_async_with(a, on_done, &opened), e, wk_name_str(name),
                                        from, &x->s);
    await_open(a, rc, x->s, &opened);
}

static void sb_next(wk_async *a, sb_rx *x)
{
    int before = x->d.calls;
    int rc = wk_stream_buffer_recv_async(x->s, &x->it, on_done, &x->d);
    await_next(a, rc, wk_stream_buffer_subscription_errmsg(x->s), &x->d, before);
}

static void sb_expect(wk_async *a, sb_rx *x, uint64_t index, const char *body)
{
    sb_next(a, x);
    await_body(&x->d, x->it.got, WK_STREAM_BUFFER_BODY, x->it.body, x->it.len, body);
    cr_assert_eq(x->it.index, index);
}

static void sb_append(wk_processor *p, const wk_entity *e, const char *name, const char *body)
{
    cr_assert_eq(wk_stream_buffer_append(p, e, wk_name_str(name), body, strlen(body), NULL), WK_OK);
}

Test(async_sub, a_stream_buffer_is_followed_through_the_loop_to_its_end, .timeout = 60)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 2000);
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *name = wk_test_ns("sb-follow");
    sb_append(p, &sb_e, name, "zero");
    sb_append(p, &sb_e, name, "one");
    sb_rx x, late;
    sb_open(a, &x, &sb_e, name, 0);
    sb_open(a, &late, &sb_e, name, 1); /* from index 1 */
    sb_expect(a, &x, 0, "zero");
    sb_expect(a, &x, 1, "one");
    sb_expect(a, &late, 1, "one");

    /* Waiting: the handle's own queries go on, and an append wakes it. */
    cr_assert_eq(wk_stream_buffer_recv_async(x.s, &x.it, on_done, &x.d), WK_OK);
    cr_assert_eq(wk_async_pending(a), 1);
    for (int i = 0; i < 4; i++)
        wk_test_async_turn(a);
    put_while_waiting(a, name, &x.d, 2);
    sb_append(p, &sb_e, name, "two");
    turn_until(a, &x.d, 3);
    cr_assert_eq(x.it.got, WK_STREAM_BUFFER_BODY);
    cr_assert_eq(x.it.index, 2);
    cr_assert_arr_eq(x.it.body, "two", 3);

    cr_assert_eq(wk_stream_buffer_finish(p, &sb_e, wk_name_str(name), NULL), WK_OK);
    sb_next(a, &x);
    cr_assert_eq(x.it.got, WK_STREAM_BUFFER_END);
    sb_next(a, &x);
    cr_assert_eq(x.it.got, WK_STREAM_BUFFER_END, "every later receive says so too");
    sb_expect(a, &late, 2, "two");
    sb_next(a, &late);
    cr_assert_eq(late.it.got, WK_STREAM_BUFFER_END);
    cr_assert_eq(wk_stream_buffer_recv(x.s, &x.it), WK_EINVAL, "the blocking call refuses it");
    wk_stream_buffer_subscription_close(x.s);
    wk_stream_buffer_subscription_close(late.s);
    wk_async_close(a);
    wk_db_close(db);
}

/* A read whose reply is lost (the connection drops with it)
 * is WK_EIO; the next receive reads on from the same cursor. */
Test(async_sub, a_lost_read_reply_reads_on_from_the_same_cursor, .timeout = 60)
{
    lossy l;
    lossy_open(&l);
    wk_async *a = l.a;
    wk_processor *p = l.p;
    sb_append(p, &sb_e, "lost", "b0");
    sb_append(p, &sb_e, "lost", "b1");
    sb_rx x;
    sb_open(a, &x, &sb_e, "lost", 0);
    sb_expect(a, &x, 0, "b0");
    sb_expect(a, &x, 1, "b1");
    sb_append(p, &sb_e, "lost", "b2");
    sb_append(p, &sb_e, "lost", "b3");
    wk_test_proxy_drop_next_reply(l.px, NULL, NULL);
    sb_next(a, &x);
    cr_assert_eq(wk_test_proxy_drops(l.px), 1);
    cr_assert_eq(x.d.status, WK_EIO, "%s (%s)", wk_err_name(x.d.status), x.d.msg);
    sb_expect(a, &x, 2, "b2");
    sb_expect(a, &x, 3, "b3");
    wk_stream_buffer_subscription_close(x.s);
    lossy_close(&l);
}

Test(async_sub, an_expired_stream_buffer_is_gone_and_a_stop_ends_a_read, .timeout = 60)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 2000);
    wk_db *db = wk_test_open(NULL);
    const char *name = wk_test_ns("sb-gone");
    sb_append(wk_db_processor(db), &sb_short, name, "only");
    sb_rx x, y;
    sb_open(a, &x, &sb_short, name, 0);
    sb_open(a, &y, &sb_e, wk_test_ns("sb-stop"), 0);
    sb_expect(a, &x, 0, "only");
    sb_next(a, &x); /* nothing appended for a TTL: the key expired */
    cr_assert_eq(x.d.status, WK_OK, "%s", x.d.msg);
    cr_assert_eq(x.it.got, WK_STREAM_BUFFER_GONE);

    cr_assert_eq(wk_stream_buffer_recv_async(y.s, &y.it, on_done, &y.d), WK_OK);
    for (int i = 0; i < 4; i++)
        wk_test_async_turn(a);
    cr_assert_eq(y.d.calls, 0);
    wk_stream_buffer_subscription_stop(y.s);
    turn_until(a, &y.d, 1);
    cr_assert_eq(y.it.got, WK_STREAM_BUFFER_STOPPED);
    wk_stream_buffer_subscription_close(x.s);
    wk_stream_buffer_subscription_close(y.s);
    wk_async_close(a);
    wk_db_close(db);
}

/* ---- LiveView ----------------------------------------------------------- */

static const wk_live_view_sub_options lv_opts = {.poll_ms = 200};

typedef struct lv_rx {
    wk_live_view_sub *s;
    wk_live_view_event ev;
    done d;
} lv_rx;

static void lv_next(wk_async *a, lv_rx *x)
{
    int before = x->d.calls;
    int rc = wk_live_view_recv_async(x->s, &x->ev, on_done, &x->d);
    await_next(a, rc, wk_live_view_sub_errmsg(x->s), &x->d, before);
}

static void lv_expect(wk_async *a, lv_rx *x, wk_live_view_event_type type, uint64_t version,
                      const char *data)
{
    lv_next(a, x);
    await_body(&x->d, x->ev.type, type, x->ev.data, x->ev.len, data);
    cr_assert_eq(x->ev.version, version);
}

static void lv_commit(wk_processor *p, const char *name, uint64_t parent, const char *diff,
                      const char *body)
{
    wk_live_view_commit_outcome out;
    cr_assert_eq(wk_live_view_commit(p, &lv_e, wk_name_str(name), parent, diff, strlen(diff), body,
                                     strlen(body), &out),
                 WK_OK);
    cr_assert_eq(out.result, WK_LIVE_VIEW_COMMITTED);
}

Test(async_sub, a_live_view_is_followed_through_the_loop_until_removed, .timeout = 60)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 2000);
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *name = wk_test_ns("lv-follow");
    bool b = false;
    cr_assert_eq(wk_live_view_create(p, &lv_e, wk_name_str(name), "a", 1, &b), WK_OK);
    lv_commit(p, name, 1, "b", "ab");
    lv_rx x = {0};
    done opened = {0};
    wk_live_view_body head = WK_LIVE_VIEW_BODY_INIT;
    int rc = wk_live_view_subscribe(wk_async_with(a, on_done, &opened), &lv_e, wk_name_str(name),
                                    &lv_opts, &head, &x.s);
    await_open(a, rc, x.s, &opened);
    cr_assert(head.found);
    cr_assert_eq(head.version, 2);
    cr_assert_arr_eq(head.data, "ab", 2);

    /* Waiting: the handle's own queries go on, and a commit wakes it. */
    cr_assert_eq(wk_live_view_recv_async(x.s, &x.ev, on_done, &x.d), WK_OK);
    cr_assert_eq(wk_async_pending(a), 1);
    put_while_waiting(a, name, &x.d, 0);
    lv_commit(p, name, 2, "c", "abc");
    turn_until(a, &x.d, 1);
    cr_assert_eq(x.ev.type, WK_LIVE_VIEW_DIFF);
    cr_assert_eq(x.ev.version, 3);
    cr_assert_arr_eq(x.ev.data, "c", 1);
    lv_commit(p, name, 3, "d", "abcd");
    lv_expect(a, &x, WK_LIVE_VIEW_DIFF, 4, "d");

    cr_assert_eq(wk_live_view_remove(p, &lv_e, wk_name_str(name), &b), WK_OK);
    lv_next(a, &x);
    cr_assert_eq(x.d.status, WK_OK, "%s", x.d.msg);
    cr_assert_eq(x.ev.type, WK_LIVE_VIEW_GONE);
    cr_assert_eq(wk_live_view_recv(x.s, &x.ev), WK_EINVAL, "the blocking call refuses it");
    wk_live_view_body_free(&head);
    wk_live_view_sub_close(x.s);
    wk_async_close(a);
    wk_db_close(db);
}

/* Resumed through the loop from an old version: every change after it;
 * a read whose reply is lost is WK_EIO and the next one reads on from the
 * same cursor; a stop ends a waiting read. */
Test(async_sub, a_resumed_live_view_reads_on_after_a_lost_reply_and_stops, .timeout = 60)
{
    lossy l;
    lossy_open(&l);
    bool b = false;
    cr_assert_eq(wk_live_view_create(l.p, &lv_e, wk_name_str("lost"), "a", 1, &b), WK_OK);
    lv_commit(l.p, "lost", 1, "b", "ab");
    lv_rx x = {0};
    cr_assert_eq(wk_live_view_resume(wk_async_with(l.a, on_done, &x.d), &lv_e, wk_name_str("lost"),
                                     1, &lv_opts, &x.s),
                 WK_OK);
    lv_expect(l.a, &x, WK_LIVE_VIEW_DIFF, 2, "b");
    lv_commit(l.p, "lost", 2, "c", "abc");
    lv_commit(l.p, "lost", 3, "d", "abcd");
    wk_test_proxy_drop_next_reply(l.px, NULL, NULL);
    lv_next(l.a, &x);
    cr_assert_eq(wk_test_proxy_drops(l.px), 1);
    cr_assert_eq(x.d.status, WK_EIO, "%s (%s)", wk_err_name(x.d.status), x.d.msg);
    lv_expect(l.a, &x, WK_LIVE_VIEW_DIFF, 3, "c");
    lv_expect(l.a, &x, WK_LIVE_VIEW_DIFF, 4, "d");
    cr_assert_eq(wk_live_view_recv_async(x.s, &x.ev, on_done, &x.d), WK_OK);
    for (int i = 0; i < 4; i++)
        wk_test_async_turn(l.a);
    int before = x.d.calls;
    wk_live_view_sub_stop(x.s);
    turn_until(l.a, &x.d, before + 1);
    cr_assert_eq(x.ev.type, WK_LIVE_VIEW_STOPPED);
    wk_live_view_sub_close(x.s);
    lossy_close(&l);
}
