/*
 * tests/collection/test_semaphore.c — Semaphore against a real
 * redis-server: N permits admit N holders and refuse one more; the bound
 * holds under contention from 4 processes; a killed holder's permit frees
 * itself after its TTL; extend renews only running permits; owned and
 * inspect write nothing; force release; waiters are woken by a release.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_fixture.h"

static wk_processor *proc(wk_db *db)
{
    return wk_db_processor(db);
}

static bool try_permit(wk_db *db, const wk_entity *e, const char *name, wk_token *t)
{
    bool got = false;
    int rc = wk_semaphore_try(proc(db), e, wk_name_str(name), t, &got);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    return got;
}

Test(semaphore, permits_admit_n_holders_and_refuse_one_more, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SEMAPHORE_ENTITY(wk_test_ns("sem"), 3, 10000);
    wk_token t[4];
    for (int i = 0; i < 3; i++)
        cr_assert(try_permit(db, &e, "pool", &t[i]), "permit %d of 3", i);
    cr_assert_not(try_permit(db, &e, "pool", &t[3]), "a 4th holder of 3 permits");
    cr_assert(try_permit(db, &e, "other", &t[3]), "names are independent");
    wk_semaphore_state st;
    cr_assert_eq(wk_semaphore_inspect(proc(db), &e, wk_name_str("pool"), &st), WK_OK);
    cr_assert_eq(st.running, 3);
    cr_assert_eq(st.available, 0);
    bool ok;
    cr_assert_eq(wk_semaphore_release(proc(db), &e, wk_name_str("pool"), &t[1], &ok), WK_OK);
    cr_assert(ok);
    cr_assert_eq(wk_semaphore_release(proc(db), &e, wk_name_str("pool"), &t[1], &ok), WK_OK);
    cr_assert_not(ok, "a second release reports false");
    cr_assert_eq(wk_semaphore_inspect(proc(db), &e, wk_name_str("pool"), &st), WK_OK);
    cr_assert_eq(st.running, 2);
    cr_assert_eq(st.available, 1);
    cr_assert(try_permit(db, &e, "pool", &t[1]), "a released permit is free again");
    cr_assert_not(try_permit(db, &e, "pool", &t[3]));
    wk_db_close(db);
}

Test(semaphore, layout_pinned_sorted_set_scored_by_lease_end, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SEMAPHORE_ENTITY(wk_test_ns("semraw"), 2, 5000);
    wk_token t;
    cr_assert(try_permit(db, &e, "p", &t));
    redisContext *raw = wk_test_raw(wk_test_url());
    char key[256];
    snprintf(key, sizeof(key), "@@wakuwaku-entity:Semaphore:{%s:p}:permits", e.ns);
    redisReply *r = wk_test_cmd(raw, "ZRANGE %s 0 -1 WITHSCORES", key);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->elements, 2);
    cr_assert_eq(r->element[0]->len, WK_TOKEN_LEN);
    cr_assert(memcmp(r->element[0]->str, t.bytes, WK_TOKEN_LEN) == 0);
    long long end = atoll(r->element[1]->str);
    freeReplyObject(r);
    r = wk_test_cmd(raw, "TIME");
    long long now = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    cr_assert(end > now && end <= now + 5000, "lease end %lld, server now %lld", end, now);
    r = wk_test_cmd(raw, "PTTL %s", key);
    cr_assert(r->integer > 0 && r->integer <= 5000, "the set expires with its leases: %lld",
              r->integer);
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- the bound under contention: 4 processes, shared-memory counter */

#define WORKERS 4
#define ROUNDS 150
#define PERMITS 2

typedef struct bound_shared {
    atomic_int holders, most, over;
    atomic_long taken;
} bound_shared;

static int bound_worker(const char *ns, bound_shared *s, bool wait)
{
    wk_db *db = wk_test_open_child();
    if (!db)
        return 2;
    wk_entity e = WK_SEMAPHORE_ENTITY(ns, PERMITS, 10000);
    for (int done = 0; done < ROUNDS;) {
        wk_token t;
        bool got = false, ok = false;
        int rc = wait ? wk_semaphore_acquire(wk_db_processor(db), &e, wk_name_str("hot"),
                                             wk_deadline_in(60000), &t, &got)
                      : wk_semaphore_try(wk_db_processor(db), &e, wk_name_str("hot"), &t, &got);
        if (rc != WK_OK)
            return 3;
        if (!got) {
            if (wait)
                return 4; /* a 60 s deadline never passes here */
            continue;
        }
        int now = atomic_fetch_add(&s->holders, 1) + 1;
        if (now > PERMITS)
            atomic_fetch_add(&s->over, 1);
        for (int m = atomic_load(&s->most); now > m;)
            if (atomic_compare_exchange_weak(&s->most, &m, now))
                break;
        usleep(200);
        atomic_fetch_sub(&s->holders, 1);
        if (wk_semaphore_release(wk_db_processor(db), &e, wk_name_str("hot"), &t, &ok) != WK_OK ||
            !ok)
            return 5;
        atomic_fetch_add(&s->taken, 1);
        done++;
    }
    wk_db_close(db);
    return 0;
}

static void contend(bool wait)
{
    const char *ns = wk_test_ns(wait ? "semwait" : "semtry");
    bound_shared *s =
        mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(s != MAP_FAILED);
    memset(s, 0, sizeof(*s));
    pid_t kids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0)
            _exit(bound_worker(ns, s, wait));
    }
    for (int i = 0; i < WORKERS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d failed (%d)", i,
                  status);
    }
    fprintf(stderr, "semaphore %s: %ld permits taken, at most %d holders at once (permits %d)\n",
            wait ? "acquire" : "try", atomic_load(&s->taken), atomic_load(&s->most), PERMITS);
    cr_assert_eq(atomic_load(&s->over), 0, "%d times more holders than permits",
                 atomic_load(&s->over));
    cr_assert_leq(atomic_load(&s->most), PERMITS);
    cr_assert_eq(atomic_load(&s->taken), (long)WORKERS * ROUNDS);
    munmap(s, sizeof(*s));
}

Test(semaphore, bound_holds_under_contention_from_4_processes_trying, .timeout = 120)
{
    contend(false);
}

Test(semaphore, bound_holds_under_contention_from_4_processes_waiting, .timeout = 120)
{
    contend(true);
}

/* ---- a killed holder's permit frees itself after its lease */

Test(semaphore, killed_holders_permit_frees_itself_after_its_ttl, .timeout = 120)
{
    const char *ns = wk_test_ns("semkill");
    const int ttl = 500;
    wk_entity e = WK_SEMAPHORE_ENTITY(ns, 1, ttl);
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t holder = fork();
    cr_assert_geq(holder, 0);
    if (holder == 0) {
        wk_db *db = wk_test_open_child();
        wk_token t;
        bool got = false;
        if (db)
            wk_semaphore_try(wk_db_processor(db), &e, wk_name_str("one"), &t, &got);
        char c = got ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || write(ready[1], &t, sizeof(t)) != sizeof(t))
            _exit(2);
        pause();
        _exit(0);
    }
    char c = 0;
    wk_token dead;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    cr_assert_eq(read(ready[0], &dead, sizeof(dead)), (ssize_t)sizeof(dead));
    cr_assert_eq(c, 'y');
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    wk_db *db = wk_test_open(NULL);
    wk_token t;
    cr_assert_not(try_permit(db, &e, "one", &t), "the dead holder's lease still runs");
    /* The waiter is woken when the lease can have ended (no release
     * comes); bounded by the suite's timeout. */
    bool got = false;
    cr_assert_eq(
        wk_semaphore_acquire(proc(db), &e, wk_name_str("one"), wk_deadline_in(100000), &t, &got),
        WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got);
    wk_lease_state own;
    cr_assert_eq(wk_semaphore_owned(proc(db), &e, wk_name_str("one"), &dead, &own), WK_OK);
    cr_assert_not(own.owned, "the dead holder's permit is gone");
    bool ok;
    cr_assert_eq(wk_semaphore_release(proc(db), &e, wk_name_str("one"), &dead, &ok), WK_OK);
    cr_assert_not(ok);
    cr_assert_eq(wk_semaphore_owned(proc(db), &e, wk_name_str("one"), &t, &own), WK_OK);
    cr_assert(own.owned, "a stale release leaves the new holder alone");
    wk_db_close(db);
}

Test(semaphore, extend_renews_only_a_running_permit, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SEMAPHORE_ENTITY(wk_test_ns("semext"), 1, 150);
    wk_token old, fresh;
    bool ok;
    cr_assert(try_permit(db, &e, "x", &old));
    cr_assert_eq(wk_semaphore_extend(proc(db), &e, wk_name_str("x"), &old, &ok), WK_OK);
    cr_assert(ok, "a running permit is renewed");
    /* Wait for the lease to end (bounded by the suite timeout). */
    wk_lease_state own = {true, 0};
    while (own.owned)
        cr_assert_eq(wk_semaphore_owned(proc(db), &e, wk_name_str("x"), &old, &own), WK_OK);
    cr_assert_eq(wk_semaphore_extend(proc(db), &e, wk_name_str("x"), &old, &ok), WK_OK);
    cr_assert_not(ok, "an ended permit is never revived");
    cr_assert(try_permit(db, &e, "x", &fresh), "its place is free");
    cr_assert_eq(wk_semaphore_extend(proc(db), &e, wk_name_str("x"), &old, &ok), WK_OK);
    cr_assert_not(ok);
    wk_semaphore_state st;
    cr_assert_eq(wk_semaphore_inspect(proc(db), &e, wk_name_str("x"), &st), WK_OK);
    cr_assert_eq(st.running, 1, "only the new holder runs");
    wk_db_close(db);
}

/* ---- owned and inspect write nothing: a private server, so the write
 * counter counts this test's commands only. */

Test(semaphore, owned_and_inspect_write_nothing_and_read_only_may_ask,
     .init = wk_test_private_start, .fini = wk_test_private_stop, .timeout = 120)
{
    wk_db *rw = wk_test_open_url(wk_test_private_url(), NULL);
    wk_db *ro = wk_test_open_url(wk_test_private_url(), wk_cap_read_only());
    redisContext *raw = wk_test_raw(wk_test_private_url());
    wk_entity e = WK_SEMAPHORE_ENTITY("owned", 2, 5000);
    long long d0 = wk_test_changes(raw);
    wk_token t;
    cr_assert(try_permit(rw, &e, "x", &t));
    long long d1 = wk_test_changes(raw), zadds = wk_test_cmd_calls(raw, "zadd");
    cr_assert_gt(d1, d0, "a try writes (the counter works)");
    cr_assert_gt(zadds, 0);
    wk_test_sleep_ms(50);
    wk_lease_state own;
    cr_assert_eq(wk_semaphore_owned(proc(ro), &e, wk_name_str("x"), &t, &own), WK_OK, "%s",
                 wk_db_errmsg(ro));
    cr_assert(own.owned);
    cr_assert(own.ttl_ms > 0 && own.ttl_ms < 5000, "owned does not extend: %lld",
              (long long)own.ttl_ms);
    wk_token stranger;
    wk_token_random(&stranger);
    cr_assert_eq(wk_semaphore_owned(proc(ro), &e, wk_name_str("x"), &stranger, &own), WK_OK);
    cr_assert_not(own.owned);
    cr_assert_eq(own.ttl_ms, 0);
    wk_semaphore_state st;
    cr_assert_eq(wk_semaphore_inspect(proc(ro), &e, wk_name_str("x"), &st), WK_OK);
    cr_assert_eq(st.running, 1);
    cr_assert_eq(st.available, 1);
    cr_assert_eq(wk_test_changes(raw), d1, "owned and inspect wrote something");
    cr_assert_eq(wk_test_cmd_calls(raw, "zadd"), zadds, "nothing renewed a permit");
    bool got, was_held;
    cr_assert_eq(wk_semaphore_try(proc(ro), &e, wk_name_str("x"), &t, &got), WK_EDENIED);
    cr_assert_eq(wk_semaphore_force_release(proc(ro), &e, wk_name_str("x"), &was_held),
                 WK_EDENIED);
    cr_assert_eq(
        wk_semaphore_acquire(proc(ro), &e, wk_name_str("x"), wk_deadline_in(1000), &t, &got),
        WK_EDENIED);
    cr_assert_eq(wk_test_changes(raw), d1, "refused queries sent nothing");
    redisFree(raw);
    wk_db_close(ro);
    wk_db_close(rw);
}

/* ---- force release frees everyone and wakes a waiter */

Test(semaphore, force_release_frees_every_permit_and_wakes_a_waiter, .timeout = 120)
{
    const char *ns = wk_test_ns("semforce");
    /* Leases far longer than the suite's timeout: only the force release
     * can let the waiter in. */
    wk_entity e = WK_SEMAPHORE_ENTITY(ns, 2, 600000);
    wk_db *db = wk_test_open(NULL);
    wk_token a, b;
    cr_assert(try_permit(db, &e, "x", &a));
    cr_assert(try_permit(db, &e, "x", &b));
    int took[2];
    cr_assert_eq(pipe(took), 0);
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        wk_db *kdb = wk_test_open_child();
        wk_token t;
        bool got = false;
        if (!kdb)
            _exit(2);
        int rc = wk_semaphore_acquire(wk_db_processor(kdb), &e, wk_name_str("x"),
                                      wk_deadline_in(100000), &t, &got);
        char c = rc == WK_OK && got ? 'y' : 'n';
        _exit(write(took[1], &c, 1) == 1 ? 0 : 3);
    }
    /* Wait until the child is queued: its registration appears. */
    redisContext *raw = wk_test_raw(wk_test_url());
    for (long long n = 0; n == 0;) {
        redisReply *r =
            wk_test_cmd(raw, "ZCARD {%s:x}:q@@wakuwaku-entity:Semaphore:{%s:x}:permits", e.ns, e.ns);
        n = r->integer;
        freeReplyObject(r);
    }
    bool was_held = false;
    cr_assert_eq(wk_semaphore_force_release(proc(db), &e, wk_name_str("x"), &was_held), WK_OK);
    cr_assert(was_held, "two permits were running");
    char c = 0;
    cr_assert_eq(read(took[0], &c, 1), 1);
    cr_assert_eq(c, 'y', "the waiter took a freed permit");
    int status;
    waitpid(kid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    bool ok;
    cr_assert_eq(wk_semaphore_extend(proc(db), &e, wk_name_str("x"), &a, &ok), WK_OK);
    cr_assert_not(ok, "a forced-out holder cannot extend");
    wk_lease_state own;
    cr_assert_eq(wk_semaphore_owned(proc(db), &e, wk_name_str("x"), &b, &own), WK_OK);
    cr_assert_not(own.owned);
    redisFree(raw);
    wk_db_close(db);
}

Test(semaphore, refusals_name_the_rule, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = proc(db);
    wk_entity frac = WK_SEMAPHORE_ENTITY("x", 1.5, 1000);
    wk_entity zero = WK_SEMAPHORE_ENTITY("x", 0, 1000);
    wk_entity huge = WK_SEMAPHORE_ENTITY("x", WK_SEMAPHORE_PERMITS_MAX + 1, 1000);
    wk_entity nottl = WK_SEMAPHORE_ENTITY("x", 2, 0);
    wk_entity good = WK_SEMAPHORE_ENTITY("x", 2, 1000);
    wk_token t = {{0}};
    bool b;
    char msg[WK_ENTITY_MSG_MAX];
    cr_assert_eq(wk_entity_check_msg(&frac, msg, sizeof(msg)), WK_EINVAL);
    cr_assert_str_eq(msg, "permits must be a whole number from 1 to 1000000 (got 1.5)");
    cr_assert_eq(wk_semaphore_try(p, &frac, wk_name_str("a"), &t, &b), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "permits must be a whole number"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_semaphore_try(p, &zero, wk_name_str("a"), &t, &b), WK_EINVAL);
    cr_assert_eq(wk_semaphore_try(p, &huge, wk_name_str("a"), &t, &b), WK_EINVAL);
    cr_assert_eq(wk_entity_check_msg(&nottl, msg, sizeof(msg)), WK_EINVAL);
    cr_assert_str_eq(msg, "ttl_ms must be > 0 (got 0)");
    wk_entity fair = WK__ENTITY_FLAGS(WK_KIND_SEMAPHORE, "x", 1000, 2, 0, 0, WK_ENTITY_FAIR);
    cr_assert_eq(wk_entity_check_msg(&fair, msg, sizeof(msg)), WK_EINVAL);
    cr_assert_str_eq(msg, "flags must be 0 (got 1): a Semaphore has no fair mode");
    cr_assert_eq(wk_semaphore_try(p, &good, wk_name_str("a"), NULL, &b), WK_EINVAL);
    cr_assert_eq(wk_semaphore_release(p, &good, wk_name_str("a"), NULL, &b), WK_EINVAL);
    cr_assert_eq(wk_semaphore_extend(p, &good, wk_name_str("a"), &t, NULL), WK_EINVAL);
    cr_assert_eq(wk_semaphore_owned(p, &good, wk_name_str("a"), &t, NULL), WK_EINVAL);
    cr_assert_eq(wk_semaphore_inspect(p, &good, wk_name_str("a"), NULL), WK_EINVAL);
    cr_assert_eq(wk_semaphore_force_release(p, &good, wk_name_str("a"), NULL), WK_EINVAL);
    cr_assert_eq(wk_semaphore_acquire(p, &good, wk_name_str("a"), 0, &t, NULL), WK_EINVAL);
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    cr_assert_eq(
        wk_semaphore_acquire(wk_batch_processor(batch), &good, wk_name_str("a"), 0, &t, &b),
        WK_EINVAL, "waiting through a batch is refused");
    wk_batch_close(batch);
    wk_db_close(db);
}

/* ---- a try whose reply is lost: WK_EUNKNOWN, and its token holds a
 * permit (the outcome rule of docs/GUARANTEES.md) */

Test(semaphore, lost_try_reply_is_unknown_and_its_token_holds_a_permit,
     .init = wk_test_private_start, .fini = wk_test_private_stop, .timeout = 120)
{
    const char *colon = strrchr(wk_test_private_url(), ':');
    cr_assert(colon);
    wk_test_proxy *proxy;
    cr_assert_eq(wk_test_proxy_start(&proxy, atoi(colon + 1)), 0);
    wk_db *db = wk_test_open_url(wk_test_proxy_url(proxy), NULL);
    wk_entity e = WK_SEMAPHORE_ENTITY("lost", 1, 60000);
    wk_token warm, t, other;
    cr_assert(try_permit(db, &e, "warm", &warm), "loads the script");
    wk_test_proxy_drop_next_reply(proxy, NULL, NULL);
    bool got = true;
    int rc = wk_semaphore_try(proc(db), &e, wk_name_str("x"), &t, &got);
    cr_assert_eq(wk_test_proxy_drops(proxy), 1);
    cr_assert_eq(rc, WK_EUNKNOWN, "got %s (%s)", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_not(got, "never reported acquired without a reply");
    wk_lease_state own;
    cr_assert_eq(wk_semaphore_owned(proc(db), &e, wk_name_str("x"), &t, &own), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(own.owned, "the token it left holds the permit");
    cr_assert_not(try_permit(db, &e, "x", &other), "and that permit counts against the bound");
    bool was_running;
    cr_assert_eq(wk_semaphore_release(proc(db), &e, wk_name_str("x"), &t, &was_running), WK_OK);
    cr_assert(was_running);
    cr_assert(try_permit(db, &e, "x", &other));
    wk_db_close(db);
    wk_test_proxy_stop(proxy);
}

/* A refusal of a missing argument names the argument the call takes:
 * inspect and force_release take no token. */
Test(semaphore, a_refusal_names_the_missing_argument, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SEMAPHORE_ENTITY(wk_test_ns("sem"), 2, 10000);
    bool b;
    cr_assert_eq(wk_semaphore_release(proc(db), &e, wk_name_str("pool"), NULL, &b), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "semaphore.release: token and outcome are required");
    cr_assert_eq(wk_semaphore_inspect(proc(db), &e, wk_name_str("pool"), NULL), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "semaphore.inspect: state is required");
    cr_assert_eq(wk_semaphore_force_release(proc(db), &e, wk_name_str("pool"), NULL), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "semaphore.force_release: was_held is required");
    wk_db_close(db);
}
