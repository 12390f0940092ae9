/*
 * tests/core/test_async_wait.c — waiting acquires through the event-loop
 * handle (wakuwaku/async.h, SEMANTICS 6): Lock, RwLock, FencedLock and
 * Semaphore acquires with a deadline complete through their callback,
 * woken by a release from another handle, leaving the queue at the
 * deadline; fair Locks go first come, first served; the loop is never
 * blocked by the waits; closing completes them.
 */
#include <pthread.h>
#include <string.h>

#include "collection/wake.h"
#include "core/async_internal.h"
#include "redis_fixture.h"

static const wk_entity lock = WK_LOCK_ENTITY("await", 30000);
static const wk_entity fair = WK_LOCK_FAIR_ENTITY("await-fair", 30000);
static const wk_entity rw = WK_RWLOCK_ENTITY("await-rw", 30000);
static const wk_entity fenced = WK_FENCED_LOCK_ENTITY("await-fenced", 30000);
static const wk_entity sem = WK_SEMAPHORE_ENTITY("await-sem", 1, 30000);
static const wk_entity cache = WK_CACHE_ENTITY("await", 60000);

static wk_async *open_loop(void)
{
    return wk_test_open_async(wk_test_url(), NULL, 2000);
}

/* One waiting acquire's outcome, as its callback (on_wait) saw it. */
typedef wk_test_waitreq waitreq;
#define on_wait wk_test_on_wait

/* Members of the wait queue of item `name` of `e` (the companion keys of
 * collection/wake.h). */
static long long queued(redisContext *raw, const wk_entity *e, const char *name, const char *suffix)
{
    char key[WK_KEY_MAX];
    size_t len;
    wk_name item = wk_name_str(name);
    cr_assert_eq(wk_key_build(key, sizeof(key), &len, e, &item, suffix), WK_OK);
    wk__wake_keys k;
    cr_assert_eq(wk__wake_keys_build(&k, key, len), WK_OK);
    redisReply *r = redisCommand(raw, "ZCARD %b", k.q, k.q_len);
    cr_assert(r && r->type == REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* Turn the loop until `n` waiters of the item are queued on the server. */
static void turn_until_queued(wk_async *a, redisContext *raw, const wk_entity *e, const char *name,
                              const char *suffix, long long n)
{
    while (queued(raw, e, name, suffix) < n)
        wk_test_async_turn(a);
}

/* What the cases start with: a loop handle, a blocking handle holding
 * item `name` of a lock entity (Lock or fair Lock; NULL: nothing held), a
 * raw connection. */
typedef struct scene {
    wk_async *a;
    wk_db *db;
    redisContext *raw;
    const char *name;
    wk_processor *p; /* db's */
    wk_name n;       /* name's */
    wk_token held;
} scene;

/* The scene on the server at `url`. */
static void scene_open_at(scene *s, const char *url, const wk_entity *e, const char *prefix)
{
    s->a = wk_test_open_async(url, NULL, 2000);
    s->db = wk_test_open_url(url, NULL);
    s->raw = wk_test_raw(url);
    s->name = wk_test_ns(prefix);
    s->p = wk_db_processor(s->db);
    s->n = wk_name_str(s->name);
    if (!e)
        return; /* the case takes its own kind of lease */
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(s->db), e, wk_name_str(s->name), &s->held, &got),
                 WK_OK);
    cr_assert(got);
}

/* The scene on the suite's shared server. */
static void scene_open(scene *s, const wk_entity *e, const char *prefix)
{
    scene_open_at(s, wk_test_url(), e, prefix);
}

/* The blocking holder releases. */
static void scene_release(scene *s, const wk_entity *e)
{
    bool rel = false;
    cr_assert_eq(wk_lock_release(wk_db_processor(s->db), e, wk_name_str(s->name), &s->held, &rel),
                 WK_OK);
    cr_assert(rel);
}

static void scene_close(scene *s)
{
    redisFree(s->raw);
    wk_db_close(s->db);
    wk_async_close(s->a); /* NULL once closed by the case */
}

/* Turn the loop until `n` waits sleep between attempts (their attempt
 * answered: not acquired), then check none has completed. */
static void turn_until_asleep(wk_async *a, size_t n, const waitreq *r)
{
    while (wk__async_parked(a) < n)
        wk_test_async_turn(a);
    cr_assert_eq(r->calls, 0, "still waiting: %s (%s)", wk_err_name(r->status), r->msg);
}

/* Queue a Lock acquire through the loop for request r. */
static void wait_lock(scene *s, const wk_entity *e, waitreq *r, int64_t deadline)
{
    int rc = wk_lock_acquire(wk_async_with(s->a, on_wait, r), e, wk_name_str(s->name), deadline,
                             NULL, &r->token, &r->acquired);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_async_errmsg(s->a));
}

Test(async_wait, a_free_lock_is_acquired_through_the_loop, .timeout = 60)
{
    wk_async *a = open_loop();
    const char *name = wk_test_ns("free");
    waitreq r = {0};
    int rc = wk_lock_acquire(wk_async_with(a, on_wait, &r), &lock, wk_name_str(name),
                             wk_monotonic_ms() + 2000, NULL, &r.token, &r.acquired);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_async_errmsg(a));
    cr_assert_eq(r.calls, 0, "never from inside the submitting call");
    wk_test_async_drain(a);
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_OK, "%s", r.msg);
    cr_assert(r.acquired);
    wk_db *db = wk_test_open(NULL);
    wk_lease_state st;
    cr_assert_eq(wk_lock_owned(wk_db_processor(db), &lock, wk_name_str(name), &r.token, &st),
                 WK_OK);
    cr_assert(st.owned, "the loop's token holds the lock");
    wk_db_close(db);
    wk_async_close(a);
}

Test(async_wait, a_waiter_is_woken_by_a_release_from_a_blocking_handle, .timeout = 60)
{
    scene s;
    scene_open(&s, &lock, "woken");
    bool released = false;
    waitreq r = {.flag = &released};
    int64_t start = wk_monotonic_ms();
    wait_lock(&s, &lock, &r, start + 20000);
    turn_until_queued(s.a, s.raw, &lock, s.name, NULL, 1);
    turn_until_asleep(s.a, 1, &r); /* still waiting while the lock is held */
    released = true;
    scene_release(&s, &lock);
    wk_test_async_drain(s.a);
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_OK, "%s", r.msg);
    cr_assert(r.acquired, "woken and acquired");
    cr_assert(r.flag_then, "after the release");
    /* Woken by the push, not at the end of its sleep (the holder's lease,
     * 30 s) nor the deadline (20 s). */
    cr_assert_lt(r.at - start, 10000, "took %lld ms", (long long)(r.at - start));
    cr_assert_eq(queued(s.raw, &lock, s.name, NULL), 0, "it left the queue");
    scene_close(&s);
}

Test(async_wait, the_deadline_completes_the_wait_and_it_leaves_the_queue, .timeout = 60)
{
    scene s;
    scene_open(&s, &lock, "deadline");
    waitreq r = {0};
    int64_t deadline = wk_monotonic_ms() + 400;
    wait_lock(&s, &lock, &r, deadline);
    turn_until_queued(s.a, s.raw, &lock, s.name, NULL, 1);
    wk_test_async_drain(s.a);
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_OK, "as the blocking path: not acquired is an outcome (%s)", r.msg);
    cr_assert_not(r.acquired);
    cr_assert_geq(r.at, deadline, "not before the deadline");
    cr_assert_eq(queued(s.raw, &lock, s.name, NULL), 0, "the waiter left the queue");
    scene_close(&s);
}

Test(async_wait, a_fair_lock_goes_to_three_loop_waiters_in_arrival_order, .timeout = 60)
{
    scene s;
    scene_open(&s, &fair, "fifo");
    int seq = 0;
    waitreq r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (waitreq){.seq = &seq, .release_e = &fair, .release_name = s.name};
        wait_lock(&s, &fair, &r[i], wk_monotonic_ms() + 20000);
        turn_until_queued(s.a, s.raw, &fair, s.name, NULL, i + 1);
    }
    /* A try by anyone else does not barge in ahead of them. */
    scene_release(&s, &fair);
    wk_token other;
    bool barged = true;
    cr_assert_eq(wk_lock_try(wk_db_processor(s.db), &fair, wk_name_str(s.name), &other, &barged),
                 WK_OK);
    cr_assert_not(barged);
    wk_test_async_drain(s.a);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].calls, 1);
        cr_assert_eq(r[i].status, WK_OK, "%d: %s", i, r[i].msg);
        cr_assert(r[i].acquired, "%d", i);
        cr_assert_eq(r[i].order, i, "waiter %d got it %d-th", i, r[i].order);
    }
    scene_close(&s);
}

static void on_get(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a, (void)msg;
    *(int *)arg = status == WK_OK ? 1 : -1;
}

Test(async_wait, ordinary_queries_complete_while_five_waits_are_pending, .timeout = 60)
{
    scene s;
    scene_open(&s, &lock, "busy");
    waitreq r[5];
    for (int i = 0; i < 5; i++) {
        r[i] = (waitreq){.release_e = &lock, .release_name = s.name};
        wait_lock(&s, &lock, &r[i], wk_monotonic_ms() + 20000);
    }
    turn_until_queued(s.a, s.raw, &lock, s.name, NULL, 5);
    /* Twice: a put and a get, each completing while every wait sleeps. */
    for (int round = 0; round < 2; round++) {
        int done = 0;
        char body[16];
        wk_buffer buf = {.data = body, .cap = sizeof(body)};
        wk_processor *p = wk_async_with(s.a, NULL, NULL);
        cr_assert_eq(wk_cache_put(p, &cache, wk_name_str(s.name), "v", 1), WK_OK);
        cr_assert_eq(
            wk_cache_get_into(wk_async_with(s.a, on_get, &done), &cache, wk_name_str(s.name), &buf),
            WK_OK);
        while (!done)
            wk_test_async_turn(s.a);
        cr_assert_eq(done, 1);
        cr_assert(buf.found);
        for (int i = 0; i < 5; i++)
            cr_assert_eq(r[i].calls, 0, "no wait completed: the lock is still held");
    }
    scene_release(&s, &lock);
    wk_test_async_drain(s.a);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(r[i].status, WK_OK, "%d: %s", i, r[i].msg);
        cr_assert(r[i].acquired, "%d: each in turn (each releases in its callback)", i);
        cr_assert(r[i].released, "%d", i);
    }
    scene_close(&s);
}

/* Asleep in the queue at the close, each may be handed the lock until its
 * registration ends (a release may come before that): WK_EUNKNOWN, never
 * "not sent" (issue 36, finding 5). */
Test(async_wait, closing_completes_pending_waits_as_unknown, .timeout = 60)
{
    scene s;
    scene_open(&s, &lock, "closing");
    waitreq r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (waitreq){0};
        wait_lock(&s, &lock, &r[i], wk_monotonic_ms() + 20000);
    }
    turn_until_queued(s.a, s.raw, &lock, s.name, NULL, 3);
    turn_until_asleep(s.a, 3, &r[2]); /* every attempt answered */
    wk_async_close(s.a);
    s.a = NULL;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].calls, 1, "%d: called once", i);
        cr_assert_eq(r[i].status, WK_EUNKNOWN, "%d: %s (%s)", i, wk_err_name(r[i].status),
                     r[i].msg);
        cr_assert(strstr(r[i].msg, "the handle closed while it waited: the token may hold"), "%d: %s", i,
                  r[i].msg);
        cr_assert_not(r[i].acquired);
    }
    scene_close(&s);
}

Test(async_wait, rwlock_readers_and_writers_wait_through_the_loop, .timeout = 60)
{
    scene s;
    scene_open(&s, NULL, "rw");
    wk_token w;
    bool got = false, rel = false, ran = false;
    cr_assert_eq(wk_rwlock_try_write(s.p, &rw, s.n, &w, &got), WK_OK);
    cr_assert(got);
    waitreq rd = {0}, wr = {0};
    cr_assert_eq(wk_rwlock_acquire_read(wk_async_with(s.a, on_wait, &rd), &rw, s.n,
                                        wk_monotonic_ms() + 20000, NULL, &rd.token, &rd.acquired),
                 WK_OK);
    turn_until_asleep(s.a, 1, &rd); /* a reader waits while a writer holds it */
    cr_assert_eq(wk_rwlock_release_write(s.p, &rw, s.n, &w, &rel), WK_OK);
    wk_test_async_drain(s.a);
    cr_assert_eq(rd.status, WK_OK, "%s", rd.msg);
    cr_assert(rd.acquired);
    /* Now a writer through the loop waits for that reader. */
    cr_assert_eq(wk_rwlock_acquire_write(wk_async_with(s.a, on_wait, &wr), &rw, s.n,
                                         wk_monotonic_ms() + 20000, NULL, &wr.token, &wr.acquired),
                 WK_OK);
    turn_until_asleep(s.a, 1, &wr);
    cr_assert_eq(wk_rwlock_release_read(s.p, &rw, s.n, &rd.token, &ran), WK_OK);
    cr_assert(ran);
    wk_test_async_drain(s.a);
    cr_assert_eq(wr.status, WK_OK, "%s", wr.msg);
    cr_assert(wr.acquired);
    scene_close(&s);
}

Test(async_wait, a_fenced_lock_waited_for_through_the_loop_gets_a_higher_fence, .timeout = 60)
{
    scene s;
    scene_open(&s, NULL, "fenced");
    wk_fenced_lease held = {0};
    bool rel = false;
    cr_assert_eq(wk_fenced_lock_try(s.p, &fenced, s.n, &held), WK_OK);
    cr_assert(held.acquired);
    cr_assert_geq(held.fence, 1);
    waitreq r = {0};
    cr_assert_eq(wk_fenced_lock_acquire(wk_async_with(s.a, on_wait, &r), &fenced, s.n,
                                        wk_monotonic_ms() + 20000, &r.lease),
                 WK_OK);
    turn_until_asleep(s.a, 1, &r);
    cr_assert_eq(wk_fenced_lock_release(s.p, &fenced, s.n, &held.token, &rel), WK_OK);
    wk_test_async_drain(s.a);
    cr_assert_eq(r.status, WK_OK, "%s", r.msg);
    cr_assert(r.lease.acquired);
    cr_assert_gt(r.lease.fence, held.fence, "fences increase: %lld after %lld",
                 (long long)r.lease.fence, (long long)held.fence);
    wk_fenced_lock_ownership st = {0};
    cr_assert_eq(wk_fenced_lock_owned(s.p, &fenced, s.n, &r.lease.token, &st), WK_OK);
    cr_assert(st.owned, "the fence is the holder's");
    cr_assert_eq(st.fence, r.lease.fence);
    scene_close(&s);
}

/* The release hands the lock over (collection/wake.h): the loop waiter's
 * pop returns holding it, so the server runs the release's script and no
 * attempt after the pop — as for a blocking waiter. A FencedLock's fence
 * comes in the notice: the holder's + 1. On a private server, so that the
 * scripts counted are these alone. */
Test(async_wait, a_handed_over_lock_completes_the_loop_waiter_with_no_attempt, .timeout = 60,
     .init = wk_test_private_start, .fini = wk_test_private_stop)
{
    scene s;
    scene_open_at(&s, wk_test_private_url(), &lock, "handed");
    waitreq r = {0};
    wait_lock(&s, &lock, &r, wk_monotonic_ms() + 20000);
    turn_until_asleep(s.a, 1, &r);
    long long before = wk_test_scripts_run(s.raw);
    scene_release(&s, &lock);
    wk_test_async_drain(s.a);
    cr_assert_eq(r.status, WK_OK, "%s", r.msg);
    cr_assert(r.acquired);
    cr_assert_eq(wk_test_scripts_run(s.raw) - before, 1, "the release alone: %lld scripts",
                 wk_test_scripts_run(s.raw) - before);
    wk_lease_state st;
    cr_assert_eq(wk_lock_owned(s.p, &lock, s.n, &r.token, &st), WK_OK);
    cr_assert(st.owned, "the loop's token holds the lock");

    wk_fenced_lease held = {0};
    bool rel = false;
    cr_assert_eq(wk_fenced_lock_try(s.p, &fenced, s.n, &held), WK_OK);
    cr_assert(held.acquired);
    waitreq f = {0};
    cr_assert_eq(wk_fenced_lock_acquire(wk_async_with(s.a, on_wait, &f), &fenced, s.n,
                                        wk_monotonic_ms() + 20000, &f.lease),
                 WK_OK);
    turn_until_asleep(s.a, 1, &f);
    before = wk_test_scripts_run(s.raw);
    cr_assert_eq(wk_fenced_lock_release(s.p, &fenced, s.n, &held.token, &rel), WK_OK);
    wk_test_async_drain(s.a);
    cr_assert_eq(f.status, WK_OK, "%s", f.msg);
    cr_assert(f.lease.acquired);
    cr_assert_eq(wk_test_scripts_run(s.raw) - before, 1, "the release alone");
    cr_assert_eq(f.lease.fence, held.fence + 1, "the fence handed over: %lld after %lld",
                 (long long)f.lease.fence, (long long)held.fence);
    wk_fenced_lock_ownership fo = {0};
    cr_assert_eq(wk_fenced_lock_owned(s.p, &fenced, s.n, &f.lease.token, &fo), WK_OK);
    cr_assert(fo.owned && fo.fence == f.lease.fence);
    scene_close(&s);
}

/* An RwLock writer's release and a Semaphore's release hand the lease
 * over too: the loop waiter's pop returns holding it (the server runs the
 * release's script and no attempt after the pop), its token the holder. */
Test(async_wait, a_handed_over_writer_lease_or_permit_completes_the_loop_waiter_with_no_attempt,
     .timeout = 60, .init = wk_test_private_start, .fini = wk_test_private_stop)
{
    scene s;
    scene_open_at(&s, wk_test_private_url(), NULL, "handed-more");
    bool got = false, rel = false;
    wk_token w;
    cr_assert_eq(wk_rwlock_try_write(s.p, &rw, s.n, &w, &got), WK_OK);
    cr_assert(got);
    waitreq r = {0};
    cr_assert_eq(wk_rwlock_acquire_write(wk_async_with(s.a, on_wait, &r), &rw, s.n,
                                         wk_monotonic_ms() + 20000, NULL, &r.token, &r.acquired),
                 WK_OK);
    turn_until_asleep(s.a, 1, &r);
    long long before = wk_test_scripts_run(s.raw);
    cr_assert_eq(wk_rwlock_release_write(s.p, &rw, s.n, &w, &rel), WK_OK);
    wk_test_async_drain(s.a);
    cr_assert_eq(r.status, WK_OK, "%s", r.msg);
    cr_assert(r.acquired);
    cr_assert_eq(wk_test_scripts_run(s.raw) - before, 1, "RwLock: the release alone: %lld scripts",
                 wk_test_scripts_run(s.raw) - before);
    wk_lease_state st;
    cr_assert_eq(wk_rwlock_owned_write(s.p, &rw, s.n, &r.token, &st), WK_OK);
    cr_assert(st.owned, "the loop's token holds the writer lease");

    wk_token held;
    cr_assert_eq(wk_semaphore_try(s.p, &sem, s.n, &held, &got), WK_OK);
    cr_assert(got);
    waitreq q = {0};
    cr_assert_eq(wk_semaphore_acquire(wk_async_with(s.a, on_wait, &q), &sem, s.n,
                                      wk_monotonic_ms() + 20000, &q.token, &q.acquired),
                 WK_OK);
    turn_until_asleep(s.a, 1, &q);
    before = wk_test_scripts_run(s.raw);
    cr_assert_eq(wk_semaphore_release(s.p, &sem, s.n, &held, &rel), WK_OK);
    wk_test_async_drain(s.a);
    cr_assert_eq(q.status, WK_OK, "%s", q.msg);
    cr_assert(q.acquired);
    cr_assert_eq(wk_test_scripts_run(s.raw) - before, 1,
                 "Semaphore: the release alone: %lld scripts", wk_test_scripts_run(s.raw) - before);
    cr_assert_eq(wk_semaphore_owned(s.p, &sem, s.n, &q.token, &st), WK_OK);
    cr_assert(st.owned, "the loop's token holds the permit");
    scene_close(&s);
}

Test(async_wait, a_semaphore_permit_is_waited_for_through_the_loop, .timeout = 60)
{
    scene s;
    scene_open(&s, NULL, "sem");
    bool got = false, ran = false;
    cr_assert_eq(wk_semaphore_try(s.p, &sem, s.n, &s.held, &got), WK_OK);
    cr_assert(got);
    waitreq r = {0};
    cr_assert_eq(wk_semaphore_acquire(wk_async_with(s.a, on_wait, &r), &sem, s.n,
                                      wk_monotonic_ms() + 20000, &r.token, &r.acquired),
                 WK_OK);
    turn_until_asleep(s.a, 1, &r); /* the one permit is taken */
    cr_assert_eq(wk_semaphore_release(s.p, &sem, s.n, &s.held, &ran), WK_OK);
    wk_test_async_drain(s.a);
    cr_assert_eq(r.status, WK_OK, "%s", r.msg);
    cr_assert(r.acquired);
    scene_close(&s);
}

/* The loop handle through a proxy that can lose a reply (a server of the
 * case's own). */
typedef struct lossy {
    wk_test_server s;
    wk_test_proxy *px;
    wk_async *a;
    wk_db *db; /* straight to the server */
} lossy;

/* One acquire and release through the loop, so that its set-up is over
 * and the acquire script is loaded (a lost NOSCRIPT would run nothing). */
static void lc_settle_free(wk_async *a)
{
    waitreq r = {.release_e = &lock, .release_name = "warm"};
    cr_assert_eq(wk_lock_acquire(wk_async_with(a, on_wait, &r), &lock, wk_name_str("warm"),
                                 wk_deadline_in(5000), NULL, &r.token, &r.acquired),
                 WK_OK);
    wk_test_async_drain(a);
    cr_assert(r.released, "%s", r.msg);
}

static void lossy_open(lossy *x)
{
    cr_assert_eq(wk_test_server_start(&x->s, NULL), 0);
    cr_assert_eq(wk_test_proxy_start(&x->px, x->s.port), 0);
    x->a = wk_test_open_async(wk_test_proxy_url(x->px), NULL, 2000);
    x->db = wk_test_open_url(x->s.url, NULL);
    lc_settle_free(x->a);
}

static void lossy_close(lossy *x)
{
    wk_async_close(x->a);
    wk_db_close(x->db);
    wk_test_proxy_stop(x->px);
    wk_test_server_stop(&x->s);
}

/* An attempt whose reply is lost is WK_EUNKNOWN, as the blocking acquire's
 * try: its token may hold the lock — and here it does. */
Test(async_wait, a_lost_attempt_reply_is_unknown_and_its_token_may_hold_the_lock, .timeout = 60)
{
    lossy x;
    lossy_open(&x);
    waitreq r = {0};
    wk_test_proxy_drop_next_reply(x.px, NULL, NULL);
    cr_assert_eq(wk_lock_acquire(wk_async_with(x.a, on_wait, &r), &lock, wk_name_str("lost"),
                                 wk_deadline_in(5000), NULL, &r.token, &r.acquired),
                 WK_OK);
    wk_test_async_drain(x.a);
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_EUNKNOWN, "%s (%s)", wk_err_name(r.status), r.msg);
    cr_assert_not(r.acquired);
    wk_lease_state st;
    cr_assert_eq(wk_lock_owned(wk_db_processor(x.db), &lock, wk_name_str("lost"), &r.token, &st),
                 WK_OK);
    cr_assert(st.owned, "the token the callback was given holds it");
    lossy_close(&x);
}

/* A wake-up pop whose reply is lost took at most the wake-up: the waiter
 * attempts again at once and gets the lock. */
Test(async_wait, a_lost_wake_up_pop_only_makes_the_waiter_attempt_again, .timeout = 60)
{
    lossy x;
    lossy_open(&x);
    wk_token held;
    bool got = false, rel = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(x.db), &lock, wk_name_str("pop"), &held, &got), WK_OK);
    waitreq r = {0};
    int64_t start = wk_monotonic_ms();
    cr_assert_eq(wk_lock_acquire(wk_async_with(x.a, on_wait, &r), &lock, wk_name_str("pop"),
                                 start + 20000, NULL, &r.token, &r.acquired),
                 WK_OK);
    turn_until_asleep(x.a, 1, &r);
    for (int i = 0; i < 3; i++) /* CLIENT ID answered, the BLPOP is blocked */
        wk_test_async_turn(x.a);
    wk_test_proxy_drop_next_reply(x.px, NULL, NULL);
    cr_assert_eq(wk_lock_release(wk_db_processor(x.db), &lock, wk_name_str("pop"), &held, &rel),
                 WK_OK);
    wk_test_async_drain(x.a);
    cr_assert_eq(wk_test_proxy_drops(x.px), 1);
    cr_assert_eq(r.status, WK_OK, "%s", r.msg);
    cr_assert(r.acquired, "acquired after the lost pop");
    cr_assert_lt(r.at - start, 10000, "not at the end of a sleep");
    lossy_close(&x);
}

/* ------------------------------------------------------------------------
 * Every exit tells the truth (issue 36)
 * ---------------------------------------------------------------------- */

/* The token the lock key of item `name` holds (false: none). */
static bool lock_holder(redisContext *raw, const wk_entity *e, const char *name, wk_token *t)
{
    char key[WK_KEY_MAX];
    size_t len;
    wk_name item = wk_name_str(name);
    cr_assert_eq(wk_key_build(key, sizeof(key), &len, e, &item, NULL), WK_OK);
    redisReply *r = redisCommand(raw, "GET %b", key, len);
    cr_assert_not_null(r);
    bool held = r->type == REDIS_REPLY_STRING && r->len == WK_TOKEN_LEN;
    if (held)
        memcpy(t->bytes, r->str, WK_TOKEN_LEN);
    freeReplyObject(r);
    return held;
}

/* A blocking waiter of item s->name with a long deadline, on its own
 * thread: when it got the lock (wk_monotonic_ms), or 0. */
typedef struct behind {
    const wk_entity *e;
    const char *name;
    pthread_t thread;
    int rc;
    bool got;
    int64_t at;
} behind;

static void *behind_run(void *arg)
{
    behind *b = arg;
    wk_db *db = wk_test_open(NULL);
    wk_token t;
    b->rc = wk_lock_acquire(wk_db_processor(db), b->e, wk_name_str(b->name),
                            wk_deadline_in(25000), NULL, &t, &b->got);
    b->at = wk_monotonic_ms();
    bool ok;
    if (b->got)
        wk_lock_release(wk_db_processor(db), b->e, wk_name_str(b->name), &t, &ok);
    wk_db_close(db);
    return NULL;
}

/* The loop's turn comes 150 ms after a waiter's deadline (a busy loop):
 * the wait still ends with its final attempt, which leaves the queue, so
 * the release that follows hands the lock to the next waiter, not to a
 * token whose acquire said "not acquired". Before: it completed WK_OK
 * with no attempt and no leave, stayed at the head, and the release
 * handed it the lock for the whole TTL (finding 4). */
Test(async_wait, a_loop_turn_late_at_the_deadline_still_leaves_the_queue, .timeout = 60)
{
    static const wk_entity long_lock = WK_LOCK_ENTITY("await-late", 20000);
    scene s;
    scene_open(&s, &long_lock, "late-turn");
    waitreq r = {0};
    int64_t deadline = wk_monotonic_ms() + 600;
    wait_lock(&s, &long_lock, &r, deadline);
    turn_until_queued(s.a, s.raw, &long_lock, s.name, NULL, 1);
    turn_until_asleep(s.a, 1, &r);
    behind b = {.e = &long_lock, .name = s.name};
    cr_assert_eq(pthread_create(&b.thread, NULL, behind_run, &b), 0);
    while (queued(s.raw, &long_lock, s.name, NULL) < 2)
        wk_test_sleep_ms(5);
    wk_test_sleep_ms((int)(deadline - wk_monotonic_ms()) + 150); /* the loop does not turn */
    wk_test_async_drain(s.a);
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_OK, "%s (%s)", wk_err_name(r.status), r.msg);
    cr_assert_not(r.acquired);
    cr_assert_eq(queued(s.raw, &long_lock, s.name, NULL), 1, "the late waiter left the queue");
    int64_t released = wk_monotonic_ms();
    scene_release(&s, &long_lock);
    wk_token now_held;
    if (lock_holder(s.raw, &long_lock, s.name, &now_held))
        cr_assert_neq(memcmp(now_held.bytes, r.token.bytes, WK_TOKEN_LEN), 0,
                      "a token whose acquire said 'not acquired' was handed the lock");
    pthread_join(b.thread, NULL);
    cr_assert_eq(b.rc, WK_OK);
    cr_assert(b.got);
    cr_assert_lt(b.at - released, 5000, "the next waiter got it %lld ms after the release",
                 (long long)(b.at - released));
    scene_close(&s);
}

/* The release hands the lock to a loop waiter (the server pops its
 * notice into the waits connection), and the handle is closed before the
 * loop reads it: the waiter may hold the lock, so it completes
 * WK_EUNKNOWN with its token, which does hold it, and releasing with that
 * token frees it for the next waiter. Before: WK_EIO "the handle is
 * closing (not sent)", the token holding the lock for its whole TTL
 * (finding 5). */
Test(async_wait, closing_right_after_a_handoff_reports_unknown_and_the_token_holds, .timeout = 60)
{
    static const wk_entity long_lock = WK_LOCK_ENTITY("await-close", 20000);
    scene s;
    scene_open(&s, &long_lock, "close-handoff");
    waitreq r = {0};
    wait_lock(&s, &long_lock, &r, wk_monotonic_ms() + 20000);
    turn_until_queued(s.a, s.raw, &long_lock, s.name, NULL, 1);
    turn_until_asleep(s.a, 1, &r);
    /* Its waits connection's BLPOP is blocked on the server (as a client
     * in CLIENT LIST with cmd=blpop) before the release. */
    for (;;) {
        redisReply *cl = redisCommand(s.raw, "CLIENT LIST");
        bool blocked = cl && cl->type == REDIS_REPLY_STRING && strstr(cl->str, "cmd=blpop");
        freeReplyObject(cl);
        if (blocked)
            break;
        wk_test_async_turn(s.a);
    }
    scene_release(&s, &long_lock);
    wk_token holder;
    cr_assert(lock_holder(s.raw, &long_lock, s.name, &holder));
    cr_assert_eq(memcmp(holder.bytes, r.token.bytes, WK_TOKEN_LEN), 0, "handed to the waiter");
    wk_async_close(s.a);
    s.a = NULL;
    cr_assert_eq(r.calls, 1);
    cr_assert_eq(r.status, WK_EUNKNOWN, "%s (%s)", wk_err_name(r.status), r.msg);
    cr_assert_not(r.acquired);
    bool ok = false;
    cr_assert_eq(wk_lock_release(s.p, &long_lock, s.n, &r.token, &ok), WK_OK);
    cr_assert(ok, "the token it gave holds the lock");
    scene_close(&s);
}
