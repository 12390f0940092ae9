/*
 * tests/core/test_async_uv.c — the libuv adapter
 * (include/wakuwaku/adapters/libuv.h): the cases of
 * tests/support/async_loop_cases.h driven by uv_run(UV_RUN_ONCE) against
 * real redis-servers (lock, limiter and cache chained in callbacks, 64 in
 * flight, reconnects onto new descriptors, timeouts through the timer,
 * detach and close leaving the loop empty).
 */
#include <stdlib.h>

#include <uv.h>
#include <wakuwaku/adapters/libuv.h>

#include "redis_fixture.h"

typedef struct loop {
    uv_loop_t uv;
    wk_async_uv *att[2];
    uv_timer_t later; /* loop_later's */
    void (*later_fn)(void *arg);
    void *later_arg;
} loop;

static loop *loop_new(void)
{
    loop *l = calloc(1, sizeof(*l));
    cr_assert_not_null(l);
    cr_assert_eq(uv_loop_init(&l->uv), 0);
    cr_assert_eq(uv_timer_init(&l->uv, &l->later), 0);
    l->later.data = l;
    return l;
}

static void loop_attach(loop *l, wk_async *a)
{
    int i = l->att[0] ? 1 : 0;
    cr_assert_null(l->att[i]);
    cr_assert_eq(wk_async_attach_uv(a, &l->uv, &l->att[i]), WK_OK);
    cr_assert_not_null(l->att[i]);
}

static void loop_turn(loop *l)
{
    uv_run(&l->uv, UV_RUN_ONCE);
}

static int loop_watched_fd(const loop *l, int i)
{
    const wk_async_uv *u = l->att[i];
    cr_assert_eq(wk_async_uv_error(u), 0, "%s", uv_strerror(wk_async_uv_error(u)));
    return u->poll ? u->fd : -1;
}

static void loop_detach(loop *l, int i)
{
    wk_async_detach_uv(l->att[i]);
    l->att[i] = NULL;
}

static void loop_free(loop *l)
{
    /* The attachments' handles are closing: one turn runs their close
     * callbacks (which free them, and closes the suite's own timer); then
     * the loop must be empty. */
    uv_close((uv_handle_t *)&l->later, NULL);
    uv_run(&l->uv, UV_RUN_NOWAIT);
    cr_assert_eq(uv_loop_alive(&l->uv), 0, "the adapter left an active handle");
    cr_assert_eq(uv_loop_close(&l->uv), 0, "the adapter left a handle on the loop");
    free(l);
}

static bool loop_empty(loop *l)
{
    return !uv_loop_alive(&l->uv);
}

static void loop_fire_timer(loop *l, int i)
{
    wk_async_uv *u = l->att[i];
    uv_timer_start(&u->timer, u->timer.timer_cb, 0, 0);
}

static bool loop_timer_armed(const loop *l, int i)
{
    return uv_is_active((const uv_handle_t *)&l->att[i]->timer);
}

static void loop_later_fired(uv_timer_t *t)
{
    loop *l = t->data;
    l->later_fn(l->later_arg);
}

static void loop_later(loop *l, int ms, void (*fn)(void *arg), void *arg)
{
    l->later_fn = fn;
    l->later_arg = arg;
    cr_assert_eq(uv_timer_start(&l->later, loop_later_fired, (uint64_t)ms, 0), 0);
}

static int loop_bad_attach(void)
{
    uv_loop_t uv;
    uv_loop_init(&uv);
    wk_async_uv *att = (wk_async_uv *)&uv;
    int rc = wk_async_attach_uv(NULL, &uv, &att);
    cr_assert_null(att);
    cr_assert_eq(wk_async_attach_uv((wk_async *)&uv, NULL, &att), WK_EINVAL);
    cr_assert_eq(wk_async_attach_uv((wk_async *)&uv, &uv, NULL), WK_EINVAL);
    wk_async_detach_uv(NULL);
    uv_loop_close(&uv);
    return rc;
}

#define LOOP_SUITE async_uv
#include "async_loop_cases.h"
