/*
 * tests/collection/test_fenced_lock.c — FencedLock against a real
 * redis-server: fences strictly increase per name across release, expiry
 * and force release; the Redis layout; owned/inspect write nothing; the
 * deadline acquire; refusals.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collection/wake.h"
#include "redis_fixture.h"

static wk_processor *proc(wk_db *db)
{
    return wk_db_processor(db);
}

static wk_fenced_lease take(wk_db *db, const wk_entity *e, const char *name)
{
    wk_fenced_lease lease;
    int rc = wk_fenced_lock_try(proc(db), e, wk_name_str(name), &lease);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    return lease;
}

Test(fenced_lock, try_release_cycle_hands_out_increasing_fences, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_FENCED_LOCK_ENTITY(wk_test_ns("fenced"), 10000);
    wk_fenced_lease a = take(db, &e, "x");
    cr_assert(a.acquired);
    cr_assert_eq(a.fence, 1, "the first fence of a name is 1 (got %lld)", (long long)a.fence);
    wk_fenced_lease b = take(db, &e, "x");
    cr_assert_not(b.acquired, "a held lock is refused");
    cr_assert_eq(b.fence, 0, "a refused try hands out no fence");
    wk_fenced_lease other = take(db, &e, "y");
    cr_assert(other.acquired);
    cr_assert_eq(other.fence, 1, "fences count per name");
    bool released;
    cr_assert_eq(wk_fenced_lock_release(proc(db), &e, wk_name_str("x"), &b.token, &released),
                 WK_OK);
    cr_assert_not(released, "a foreign token releases nothing");
    cr_assert_eq(wk_fenced_lock_release(proc(db), &e, wk_name_str("x"), &a.token, &released),
                 WK_OK);
    cr_assert(released);
    cr_assert_eq(wk_fenced_lock_release(proc(db), &e, wk_name_str("x"), &a.token, &released),
                 WK_OK);
    cr_assert_not(released, "a second release reports false");
    wk_fenced_lease c = take(db, &e, "x");
    cr_assert(c.acquired);
    /* Refused tries in between spent no fence: 2, not 3. */
    cr_assert_eq(c.fence, 2, "fence after a release: %lld", (long long)c.fence);
    wk_db_close(db);
}

Test(fenced_lock, layout_pinned_lease_hash_and_persistent_counter, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_FENCED_LOCK_ENTITY(wk_test_ns("fencedraw"), 5000);
    wk_fenced_lease a = take(db, &e, "acct");
    cr_assert(a.acquired);
    redisContext *raw = wk_test_raw(wk_test_url());
    char lease_key[256], fence_key[256];
    snprintf(lease_key, sizeof(lease_key), "@@wakuwaku-entity:FencedLock:{%s:acct}:lease", e.ns);
    snprintf(fence_key, sizeof(fence_key), "@@wakuwaku-entity:FencedLock:{%s:acct}:fence", e.ns);
    redisReply *r = wk_test_cmd(raw, "HGET %s token", lease_key);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    cr_assert_eq(r->len, WK_TOKEN_LEN);
    cr_assert(memcmp(r->str, a.token.bytes, WK_TOKEN_LEN) == 0);
    freeReplyObject(r);
    r = wk_test_cmd(raw, "HGET %s fence", lease_key);
    cr_assert_str_eq(r->str, "1");
    freeReplyObject(r);
    r = wk_test_cmd(raw, "PTTL %s", lease_key);
    cr_assert(r->integer > 0 && r->integer <= 5000, "lease pttl %lld", r->integer);
    freeReplyObject(r);
    r = wk_test_cmd(raw, "GET %s", fence_key);
    cr_assert_str_eq(r->str, "1");
    freeReplyObject(r);
    r = wk_test_cmd(raw, "PTTL %s", fence_key);
    cr_assert_eq(r->integer, -1, "the counter never expires (pttl %lld)", r->integer);
    freeReplyObject(r);
    /* Both keys carry the hash tag {<ns>:acct} (pinned byte for byte
     * above), so they share a cluster slot and one script may touch both. */
    redisFree(raw);
    wk_db_close(db);
}

/* The "done when": fences keep increasing after a lease ran out,
 * after a release, after a force release and after the lease key was
 * deleted underneath the holder; the old holder can no longer act. */
Test(fenced_lock, fencing_monotonic_across_expiry_release_and_force_release, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_FENCED_LOCK_ENTITY(wk_test_ns("fencedmono"), 100);
    redisContext *raw = wk_test_raw(wk_test_url());
    char lease_key[256];
    snprintf(lease_key, sizeof(lease_key), "@@wakuwaku-entity:FencedLock:{%s:job}:lease", e.ns);
    int64_t last = 0;
    bool ok;
    for (int round = 0; round < 8; round++) {
        wk_fenced_lease l = take(db, &e, "job");
        /* Wait (bounded by the suite timeout) for the lease to run out. */
        while (!l.acquired)
            l = take(db, &e, "job");
        cr_assert_gt(l.fence, last, "round %d: fence %lld after %lld", round, (long long)l.fence,
                     (long long)last);
        last = l.fence;
        switch (round % 4) {
        case 0: /* release */
            cr_assert_eq(wk_fenced_lock_release(proc(db), &e, wk_name_str("job"), &l.token, &ok),
                         WK_OK);
            cr_assert(ok);
            break;
        case 1: /* let it run out; the next take loops until then */
            break;
        case 2: /* an operator frees it */
            cr_assert_eq(wk_fenced_lock_force_release(proc(db), &e, wk_name_str("job"), &ok),
                         WK_OK);
            cr_assert(ok, "a running lease was freed");
            cr_assert_eq(wk_fenced_lock_extend(proc(db), &e, wk_name_str("job"), &l.token, &ok),
                         WK_OK);
            cr_assert_not(ok, "the evicted holder cannot extend");
            break;
        case 3: /* the lease key vanishes underneath (DEL) */
            freeReplyObject(wk_test_cmd(raw, "DEL %s", lease_key));
            cr_assert_eq(wk_fenced_lock_release(proc(db), &e, wk_name_str("job"), &l.token, &ok),
                         WK_OK);
            cr_assert_not(ok);
            break;
        }
    }
    cr_assert_geq(last, 8);
    wk_fenced_lock_state st;
    cr_assert_eq(wk_fenced_lock_inspect(proc(db), &e, wk_name_str("job"), &st), WK_OK);
    cr_assert_eq(st.last_fence, last, "inspect reports the last fence");
    redisFree(raw);
    wk_db_close(db);
}

Test(fenced_lock, extend_keeps_the_fence_and_restarts_the_lease, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_FENCED_LOCK_ENTITY(wk_test_ns("fencedext"), 400);
    wk_fenced_lease l = take(db, &e, "x");
    cr_assert(l.acquired);
    /* Extend several times, each before the lease can have run out (the
     * owned check says so); the lock stays ours with the same fence. */
    for (int i = 0; i < 5; i++) {
        wk_fenced_lock_ownership own;
        cr_assert_eq(wk_fenced_lock_owned(proc(db), &e, wk_name_str("x"), &l.token, &own), WK_OK);
        cr_assert(own.owned);
        cr_assert_eq(own.fence, l.fence);
        bool ext;
        cr_assert_eq(wk_fenced_lock_extend(proc(db), &e, wk_name_str("x"), &l.token, &ext), WK_OK);
        cr_assert(ext);
        wk_test_sleep_ms(100);
    }
    wk_fenced_lease other = take(db, &e, "x");
    cr_assert_not(other.acquired, "extended lease still held");
    wk_fenced_lock_state st;
    cr_assert_eq(wk_fenced_lock_inspect(proc(db), &e, wk_name_str("x"), &st), WK_OK);
    cr_assert(st.held);
    cr_assert(st.ttl_ms > 0 && st.ttl_ms <= 400);
    cr_assert_eq(st.last_fence, l.fence, "extend hands out no fence");
    wk_db_close(db);
}

/* ---- owned and inspect write nothing: a private server, so the write
 * counter counts this test's commands only. */

Test(fenced_lock, owned_writes_nothing_extends_nothing_and_read_only_may_ask,
     .init = wk_test_private_start, .fini = wk_test_private_stop, .timeout = 120)
{
    wk_db *rw = wk_test_open_url(wk_test_private_url(), NULL);
    wk_db *ro = wk_test_open_url(wk_test_private_url(), wk_cap_read_only());
    redisContext *raw = wk_test_raw(wk_test_private_url());
    wk_entity e = WK_FENCED_LOCK_ENTITY("owned", 5000);
    long long d0 = wk_test_changes(raw);
    wk_fenced_lease l = take(rw, &e, "x");
    cr_assert(l.acquired);
    long long d1 = wk_test_changes(raw), pexpires = wk_test_cmd_calls(raw, "pexpire");
    cr_assert_gt(d1, d0, "an acquire writes (the counter works)");
    cr_assert_gt(pexpires, 0, "the acquire's PEXPIRE is counted");
    /* Let some of the lease go by, so an extension would show. */
    wk_test_sleep_ms(50);
    wk_fenced_lock_ownership own;
    cr_assert_eq(wk_fenced_lock_owned(proc(ro), &e, wk_name_str("x"), &l.token, &own), WK_OK, "%s",
                 wk_db_errmsg(ro));
    cr_assert(own.owned);
    cr_assert_eq(own.fence, l.fence);
    cr_assert(own.ttl_ms > 0 && own.ttl_ms < 5000, "owned does not extend: ttl %lld",
              (long long)own.ttl_ms);
    wk_token stranger;
    wk_token_random(&stranger);
    cr_assert_eq(wk_fenced_lock_owned(proc(ro), &e, wk_name_str("x"), &stranger, &own), WK_OK);
    cr_assert_not(own.owned);
    cr_assert_eq(own.ttl_ms, 0);
    cr_assert_eq(wk_fenced_lock_owned(proc(ro), &e, wk_name_str("nobody"), &l.token, &own), WK_OK);
    cr_assert_not(own.owned);
    wk_fenced_lock_state st;
    cr_assert_eq(wk_fenced_lock_inspect(proc(ro), &e, wk_name_str("x"), &st), WK_OK);
    cr_assert(st.held);
    cr_assert_eq(st.last_fence, 1);
    cr_assert_eq(wk_fenced_lock_inspect(proc(ro), &e, wk_name_str("nobody"), &st), WK_OK);
    cr_assert_not(st.held);
    cr_assert_eq(st.last_fence, 0);
    cr_assert_eq(wk_test_changes(raw), d1, "owned and inspect wrote something");
    cr_assert_eq(wk_test_cmd_calls(raw, "pexpire"), pexpires, "nothing extended a lease");
    /* A read-only handle may ask but not take or free. */
    wk_fenced_lease denied;
    bool freed;
    cr_assert_eq(wk_fenced_lock_try(proc(ro), &e, wk_name_str("x"), &denied), WK_EDENIED);
    cr_assert_eq(wk_fenced_lock_force_release(proc(ro), &e, wk_name_str("x"), &freed), WK_EDENIED);
    cr_assert_eq(
        wk_fenced_lock_acquire(proc(ro), &e, wk_name_str("x"), wk_deadline_in(1000), &denied),
        WK_EDENIED);
    cr_assert_eq(wk_test_changes(raw), d1, "refused queries sent nothing");
    redisFree(raw);
    wk_db_close(ro);
    wk_db_close(rw);
}

/* ---- acquire waits for the holder's release, and is ordered after it */

Test(fenced_lock, acquire_waits_for_release_by_another_process, .timeout = 120)
{
    const char *ns = wk_test_ns("fencedwait");
    wk_entity e = WK_FENCED_LOCK_ENTITY(ns, 600000);
    int took[2], go[2];
    cr_assert_eq(pipe(took), 0);
    cr_assert_eq(pipe(go), 0);
    pid_t holder = fork();
    cr_assert_geq(holder, 0);
    if (holder == 0) {
        wk_db *db = wk_test_open_child();
        wk_fenced_lease l = {0};
        bool ok = false;
        char c;
        if (db)
            wk_fenced_lock_try(wk_db_processor(db), &e, wk_name_str("job"), &l);
        c = l.acquired ? 'y' : 'n';
        if (write(took[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(3);
        wk_fenced_lock_release(wk_db_processor(db), &e, wk_name_str("job"), &l.token, &ok);
        _exit(ok ? 0 : 4);
    }
    char c = 0;
    cr_assert_eq(read(took[0], &c, 1), 1);
    cr_assert_eq(c, 'y');
    wk_db *db = wk_test_open(NULL);
    wk_fenced_lease l;
    /* A past deadline: exactly one try, refused. */
    cr_assert_eq(wk_fenced_lock_acquire(proc(db), &e, wk_name_str("job"), wk_deadline_in(-1), &l),
                 WK_OK);
    cr_assert_not(l.acquired);
    cr_assert_eq(write(go[1], "x", 1), 1);
    /* The lease is 10 min, the deadline 100 s, the suite's timeout 120 s:
     * without the release's wake-up the waiter sleeps until the deadline
     * and fails; only the release can let it through in time. */
    int rc = wk_fenced_lock_acquire(proc(db), &e, wk_name_str("job"), wk_deadline_in(100000), &l);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(l.acquired);
    cr_assert_eq(l.fence, 2, "the waiter's fence follows the holder's");
    int status;
    waitpid(holder, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "holder status %d", status);
    wk_db_close(db);
}

/* ---- handing over: the release gives the lease, with the next fence,
 * to the waiter, whose pop returns holding it */

/* Until the wait queue of `name` of e holds n waiters. */
static void wait_queued(redisContext *raw, const wk_entity *e, const char *name, long long n)
{
    char key[WK_KEY_MAX];
    size_t len;
    wk_name nm = wk_name_str(name);
    cr_assert_eq(wk_key_build(key, sizeof(key), &len, e, &nm, ":lease"), WK_OK);
    wk__wake_keys k;
    cr_assert_eq(wk__wake_keys_build(&k, key, len), WK_OK);
    for (;;) {
        redisReply *r = wk_test_cmd(raw, "ZCARD %b", k.q, k.q_len);
        long long got = r->integer;
        freeReplyObject(r);
        if (got == n)
            return;
        wk_test_sleep_ms(5);
    }
}

/* The locals of the handoff tests: a server of the test's own (its
 * counters are the test's), a handle `db` holding `held` of item "job"
 * of `e` (a 10-minute lease, namespace ns), a raw connection, and a pipe
 * `out` for the waiters' fences. */
#define HANDOFF_FIXTURE(ns)                                                                        \
    wk_test_server srv = {0};                                                                      \
    cr_assert_eq(wk_test_server_start(&srv, NULL), 0);                                             \
    setenv("WK_TEST_REDIS_URL", srv.url, 1);                                                       \
    wk_entity e = WK_FENCED_LOCK_ENTITY(ns, 600000);                                               \
    wk_db *db = wk_test_open(NULL);                                                                \
    redisContext *raw = wk_test_raw(srv.url);                                                      \
    wk_fenced_lease held = take(db, &e, "job");                                                    \
    cr_assert(held.acquired);                                                                      \
    int out[2];                                                                                    \
    cr_assert_eq(pipe(out), 0)

/* A waiter in a child: 0 and its fence written to `out` once acquired
 * (then released), else non-zero. */
static pid_t fenced_waiter(const wk_entity *e, int64_t wait_ms, int out)
{
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid)
        return kid;
    wk_db *cdb = wk_test_open_child();
    wk_fenced_lease l = {0};
    bool ok = false;
    if (!cdb || wk_fenced_lock_acquire(wk_db_processor(cdb), e, wk_name_str("job"),
                                       wk_deadline_in(wait_ms), &l) != WK_OK ||
        !l.acquired)
        _exit(3);
    if (write(out, &l.fence, sizeof(l.fence)) != (ssize_t)sizeof(l.fence))
        _exit(4);
    wk_fenced_lock_release(wk_db_processor(cdb), e, wk_name_str("job"), &l.token, &ok);
    _exit(ok ? 0 : 5);
}

Test(fenced_lock, a_release_hands_the_lease_and_the_next_fence_to_the_waiter, .timeout = 120)
{
    HANDOFF_FIXTURE("handoff");
    pid_t kid = fenced_waiter(&e, 100000, out[1]);
    wait_queued(raw, &e, "job", 1);
    long long scripts = wk_test_scripts_run(raw);
    bool ok = false;
    cr_assert_eq(wk_fenced_lock_release(proc(db), &e, wk_name_str("job"), &held.token, &ok), WK_OK);
    cr_assert(ok);
    int64_t fence = 0;
    cr_assert_eq(read(out[0], &fence, sizeof(fence)), (ssize_t)sizeof(fence));
    int status;
    cr_assert_eq(waitpid(kid, &status, 0), kid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "waiter status %d", status);
    cr_assert_eq(fence, held.fence + 1, "the fence drawn for the waiter in the release");
    /* The holder's release and the waiter's: no attempt after the pop. */
    cr_assert_eq(wk_test_scripts_run(raw) - scripts, 2, "%lld scripts",
                 wk_test_scripts_run(raw) - scripts);
    wk_fenced_lock_state st;
    cr_assert_eq(wk_fenced_lock_inspect(proc(db), &e, wk_name_str("job"), &st), WK_OK);
    cr_assert_eq(st.last_fence, fence, "the counter moved once, for the waiter");
    cr_assert_not(st.held);
    wk_fenced_lease next = take(db, &e, "job");
    cr_assert(next.acquired && next.fence == fence + 1, "still monotonic after a handoff");
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&srv);
}

/* A (deadline 3 s) queues and is killed; B (deadline 60 s) queues behind
 * it. The release hands the lease — fence f + 1 — to the dead A; B takes
 * it from A once A's registration has ended, with a fence drawn anew
 * (f + 2): fences still increase, and B does not wait out the 10-minute
 * lease. */
Test(fenced_lock, a_lease_handed_to_a_dead_waiter_goes_on_with_a_new_fence, .timeout = 120)
{
    HANDOFF_FIXTURE("dead-waiter");
    pid_t a = fenced_waiter(&e, 3000, out[1]);
    wait_queued(raw, &e, "job", 1);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    pid_t b = fenced_waiter(&e, 60000, out[1]);
    wait_queued(raw, &e, "job", 2);
    bool ok = false;
    cr_assert_eq(wk_fenced_lock_release(proc(db), &e, wk_name_str("job"), &held.token, &ok), WK_OK);
    wk_fenced_lock_state st;
    cr_assert_eq(wk_fenced_lock_inspect(proc(db), &e, wk_name_str("job"), &st), WK_OK);
    cr_assert(st.held, "handed to the dead waiter, not freed");
    cr_assert_eq(st.last_fence, held.fence + 1);
    int64_t fence = 0;
    cr_assert_eq(read(out[0], &fence, sizeof(fence)), (ssize_t)sizeof(fence));
    int status;
    cr_assert_eq(waitpid(b, &status, 0), b);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "B: status %d", status);
    cr_assert_eq(fence, held.fence + 2, "B's fence is drawn anew, above the dead waiter's");
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&srv);
}

Test(fenced_lock, refusals, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = proc(db);
    wk_entity zero = WK_FENCED_LOCK_ENTITY("x", 0);
    wk_entity good = WK_FENCED_LOCK_ENTITY("x", 1000);
    wk_entity lock = WK_LOCK_ENTITY("x", 1000);
    wk_fenced_lease l;
    wk_token t = {{0}};
    bool b;
    wk_fenced_lock_ownership own;
    wk_fenced_lock_state st;
    cr_assert_eq(wk_fenced_lock_try(p, &zero, wk_name_str("a"), &l), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "ttl_ms must be > 0"), "%s", wk_db_errmsg(db));
    wk_entity fair = WK__ENTITY_FLAGS(WK_KIND_FENCED_LOCK, "x", 1000, 0, 0, 0, WK_ENTITY_FAIR);
    cr_assert_eq(wk_fenced_lock_try(p, &fair, wk_name_str("a"), &l), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "a FencedLock has no fair mode"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_fenced_lock_try(p, &lock, wk_name_str("a"), &l), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "is not a FencedLock"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_fenced_lock_try(p, &good, wk_name_str(NULL), &l), WK_EINVAL);
    cr_assert_eq(wk_fenced_lock_try(p, &good, wk_name_str("a"), NULL), WK_EINVAL);
    cr_assert_eq(wk_fenced_lock_try(NULL, &good, wk_name_str("a"), &l), WK_EINVAL);
    cr_assert_eq(wk_fenced_lock_release(p, &good, wk_name_str("a"), NULL, &b), WK_EINVAL);
    /* A missing token is named (it is not "an outcome"). */
    cr_assert_str_eq(wk_db_errmsg(db), "fenced_lock.release: token and outcome are required");
    cr_assert_eq(wk_fenced_lock_extend(p, &good, wk_name_str("a"), &t, NULL), WK_EINVAL);
    cr_assert_eq(wk_fenced_lock_owned(p, &good, wk_name_str("a"), NULL, &own), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "fenced_lock.owned: token and state are required");
    cr_assert_eq(wk_fenced_lock_inspect(p, &good, wk_name_str("a"), NULL), WK_EINVAL);
    cr_assert_eq(wk_fenced_lock_force_release(p, &good, wk_name_str("a"), NULL), WK_EINVAL);
    cr_assert_eq(wk_fenced_lock_acquire(p, &good, wk_name_str("a"), 0, NULL), WK_EINVAL);
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    cr_assert_eq(wk_fenced_lock_acquire(wk_batch_processor(batch), &good, wk_name_str("a"), 0, &l),
                 WK_EINVAL, "waiting through a batch is refused");
    wk_batch_close(batch);
    (void)st;
    wk_db_close(db);
}

/* A counter that is not an integer (someone else's data in the key) is a
 * server error, not a lease: nothing is taken. */
Test(fenced_lock, corrupt_counter_is_an_error_and_takes_nothing, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_FENCED_LOCK_ENTITY(wk_test_ns("fencedbad"), 5000);
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(
        wk_test_cmd(raw, "SET @@wakuwaku-entity:FencedLock:{%s:x}:fence not-a-number", e.ns));
    wk_fenced_lease l;
    cr_assert_eq(wk_fenced_lock_try(proc(db), &e, wk_name_str("x"), &l), WK_EREDIS);
    cr_assert_not(l.acquired);
    wk_fenced_lock_state st;
    cr_assert_eq(wk_fenced_lock_inspect(proc(db), &e, wk_name_str("x"), &st), WK_ECORRUPT);
    redisReply *r = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:FencedLock:{%s:x}:lease", e.ns);
    cr_assert_eq(r->integer, 0, "no lease without a fence");
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- a try whose reply is lost: WK_EUNKNOWN, and its token holds the
 * lock (the outcome rule of docs/GUARANTEES.md) */

static int private_port(void)
{
    const char *colon = strrchr(wk_test_private_url(), ':');
    cr_assert(colon);
    return atoi(colon + 1);
}

Test(fenced_lock, lost_try_reply_is_unknown_and_its_token_holds_the_lock,
     .init = wk_test_private_start, .fini = wk_test_private_stop, .timeout = 120)
{
    wk_test_proxy *proxy;
    cr_assert_eq(wk_test_proxy_start(&proxy, private_port()), 0);
    wk_db *db = wk_test_open_url(wk_test_proxy_url(proxy), NULL);
    wk_entity e = WK_FENCED_LOCK_ENTITY("lost", 60000);
    /* Load the script first: a lost NOSCRIPT reply would hide nothing. */
    wk_fenced_lease warm = take(db, &e, "warm");
    cr_assert(warm.acquired);
    wk_test_proxy_drop_next_reply(proxy, NULL, NULL);
    wk_fenced_lease l;
    int rc = wk_fenced_lock_try(proc(db), &e, wk_name_str("x"), &l);
    cr_assert_eq(wk_test_proxy_drops(proxy), 1);
    cr_assert_eq(rc, WK_EUNKNOWN, "the try ran, its reply was lost: got %s (%s)", wk_err_name(rc),
                 wk_db_errmsg(db));
    cr_assert_not(l.acquired, "never reported acquired without a reply");
    /* The token it left may hold the lock — here it does, under fence 1. */
    wk_fenced_lock_ownership own;
    cr_assert_eq(wk_fenced_lock_owned(proc(db), &e, wk_name_str("x"), &l.token, &own), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(own.owned);
    cr_assert_eq(own.fence, 1);
    bool released;
    cr_assert_eq(wk_fenced_lock_release(proc(db), &e, wk_name_str("x"), &l.token, &released),
                 WK_OK);
    cr_assert(released, "the unknown outcome's token releases the lock");
    wk_fenced_lease next = take(db, &e, "x");
    cr_assert_eq(next.fence, 2, "the lost try's fence was spent");
    wk_db_close(db);
    wk_test_proxy_stop(proxy);
}
