/*
 * tests/core/test_key_injective.c — no key belongs to two items (issue 21,
 * finding 2): a Lock's companion keys (wake queue, registrations, wake-up
 * lists) never equal another name's item key, against a real redis-server;
 * and, over every kind's layout and adversarial names, every item key and
 * companion key names exactly one (kind, namespace, name), in that item's
 * cluster slot.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wakuwaku/wakuwaku.h>

#include "core/private.h"
#include "redis_fixture.h"

TestSuite(key_injective, .timeout = 60);

/* ------------------------------------------------------------------------
 * The reported scenario: "{job}" and "{job}:q"
 * ---------------------------------------------------------------------- */

typedef struct waiter {
    const wk_entity *e;
    int rc;
    bool acquired;
} waiter;

static void *wait_for_job(void *arg)
{
    waiter *w = arg;
    wk_db *db = wk_test_open(NULL);
    wk_token t;
    w->rc = wk_lock_acquire(wk_db_processor(db), w->e, wk_name_str("{job}"), wk_deadline_in(1500),
                            NULL, &t, &w->acquired);
    wk_db_close(db);
    return NULL;
}

/* Until some client is blocked (the waiter's BLPOP): CLIENT LIST flags. */
static void until_blocked(redisContext *raw)
{
    for (int i = 0; i < 2000; i++) {
        redisReply *r = wk_test_cmd(raw, "CLIENT LIST");
        bool blocked = r && r->str && strstr(r->str, "flags=b ");
        freeReplyObject(r);
        if (blocked)
            return;
        usleep(1000);
    }
    cr_assert_fail("the waiter never blocked");
}

Test(key_injective, waiting_for_a_name_leaves_its_suffixed_name_free)
{
    wk_entity e = WK_LOCK_ENTITY("inj1", 5000);
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_token held, other;
    bool ok = false;
    cr_assert_eq(wk_lock_try(p, &e, wk_name_str("{job}"), &held, &ok), WK_OK);
    cr_assert(ok);

    waiter w = {&e, -1, false};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, wait_for_job, &w), 0);
    until_blocked(raw);

    /* "{job}:q" is free: nobody took it. */
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &e, wk_name_str("{job}:q"), &st), WK_OK);
    cr_expect(!st.held, "the free lock \"{job}:q\" is reported held while \"{job}\" has a waiter");
    cr_assert_eq(wk_lock_try(p, &e, wk_name_str("{job}:q"), &other, &ok), WK_OK);
    cr_expect(ok, "the free lock \"{job}:q\" cannot be taken while \"{job}\" has a waiter");
    bool released = false;
    if (ok) {
        /* Its force release must not touch "{job}"'s queue. */
        cr_assert_eq(wk_lock_force_release(p, &e, wk_name_str("{job}:q"), &released), WK_OK);
        cr_expect(released);
    }
    cr_assert_eq(wk_lock_release(p, &e, wk_name_str("{job}"), &held, &released), WK_OK);
    cr_assert(released);
    pthread_join(th, NULL);
    cr_expect_eq(w.rc, WK_OK, "the waiter of \"{job}\" failed: %s", wk_err_name(w.rc));
    cr_expect(w.acquired, "the waiter of \"{job}\" was not woken by the release");
    redisFree(raw);
    wk_db_close(db);
}

Test(key_injective, a_held_suffixed_name_does_not_break_waiting)
{
    wk_entity e = WK_LOCK_ENTITY("inj2", 5000);
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_token a, b, c;
    bool ok = false;
    cr_assert_eq(wk_lock_try(p, &e, wk_name_str("{job}"), &a, &ok), WK_OK);
    cr_assert(ok);
    cr_assert_eq(wk_lock_try(p, &e, wk_name_str("{job}:q"), &b, &ok), WK_OK);
    cr_assert(ok);
    int rc = wk_lock_acquire(p, &e, wk_name_str("{job}"), wk_deadline_in(50), NULL, &c, &ok);
    cr_expect_eq(rc, WK_OK, "waiting for \"{job}\" while \"{job}:q\" is held: %s (%s)",
                 wk_err_name(rc), wk_db_errmsg(db));
    cr_expect(!ok);
    wk_db_close(db);
}
