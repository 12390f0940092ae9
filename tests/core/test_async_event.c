/*
 * tests/core/test_async_event.c — the libevent adapter
 * (include/wakuwaku/adapters/libevent.h): the cases of
 * tests/support/async_loop_cases.h driven by
 * event_base_loop(EVLOOP_ONCE) against real redis-servers (lock, limiter
 * and cache chained in callbacks, 64 in flight, reconnects onto new
 * descriptors, timeouts through the timer, detach and close leaving the
 * base empty).
 */
#include <stdlib.h>

#include <event2/event.h>
#include <wakuwaku/adapters/libevent.h>

#include "redis_fixture.h"

typedef struct loop {
    struct event_base *base;
    wk_async_event *att[2];
    struct event *later; /* loop_later's */
    void (*later_fn)(void *arg);
    void *later_arg;
} loop;

static void loop_later_fired(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    loop *l = arg;
    l->later_fn(l->later_arg);
}

static loop *loop_new(void)
{
    loop *l = calloc(1, sizeof(*l));
    cr_assert_not_null(l);
    l->base = event_base_new();
    cr_assert_not_null(l->base);
    l->later = evtimer_new(l->base, loop_later_fired, l);
    cr_assert_not_null(l->later);
    return l;
}

static void loop_attach(loop *l, wk_async *a)
{
    int i = l->att[0] ? 1 : 0;
    cr_assert_null(l->att[i]);
    cr_assert_eq(wk_async_attach_event(a, l->base, &l->att[i]), WK_OK);
    cr_assert_not_null(l->att[i]);
}

static void loop_turn(loop *l)
{
    event_base_loop(l->base, EVLOOP_ONCE);
}

static int loop_watched_fd(const loop *l, int i)
{
    const wk_async_event *e = l->att[i];
    cr_assert_eq(wk_async_event_error(e), 0);
    return e->events ? e->fd : -1;
}

static void loop_detach(loop *l, int i)
{
    wk_async_detach_event(l->att[i]);
    l->att[i] = NULL;
}

static void loop_free(loop *l)
{
    event_free(l->later); /* the suite's own timer; then nothing may be left */
    cr_assert_eq(event_base_get_num_events(l->base, EVENT_BASE_COUNT_ADDED), 0,
                 "the adapter left an event on the base");
    event_base_free(l->base);
    free(l);
}

static bool loop_empty(loop *l)
{
    return event_base_get_num_events(l->base, EVENT_BASE_COUNT_ADDED) == 0;
}

static void loop_fire_timer(loop *l, int i)
{
    struct timeval now = {0, 0};
    event_add(l->att[i]->timer, &now);
}

static bool loop_timer_armed(const loop *l, int i)
{
    return evtimer_pending(l->att[i]->timer, NULL);
}

static void loop_later(loop *l, int ms, void (*fn)(void *arg), void *arg)
{
    struct timeval tv = {ms / 1000, ms % 1000 * 1000};
    l->later_fn = fn;
    l->later_arg = arg;
    cr_assert_eq(evtimer_add(l->later, &tv), 0);
}

static int loop_bad_attach(void)
{
    struct event_base *base = event_base_new();
    wk_async_event *att = (wk_async_event *)base;
    int rc = wk_async_attach_event(NULL, base, &att);
    cr_assert_null(att);
    cr_assert_eq(wk_async_attach_event((wk_async *)base, NULL, &att), WK_EINVAL);
    cr_assert_eq(wk_async_attach_event((wk_async *)base, base, NULL), WK_EINVAL);
    wk_async_detach_event(NULL);
    event_base_free(base);
    return rc;
}

#define LOOP_SUITE async_event
#include "async_loop_cases.h"
