/*
 * tests/kinds/live_view.c — the test rows of LiveView (tests/kinds/kinds.h):
 * every built-in query (subscribe and resume run one recv, so their
 * subscription's own reads are covered too; the typed wrappers run the
 * same queries); the commit + get cycle, whose allocations are counted
 * (get returns a heap body by design: the counted path is the commit and
 * version read); and a soak operation whose invariant is that a view's
 * body always equals its version's expected text (each commit appends
 * "+" and writers race through the parent check).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "tests/kinds/kinds.h"

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

#define VIEW_E(ns) wk_entity e = WK_LIVE_VIEW_ENTITY(ns, 4)

static int q_create(wk_processor *p, const char *ns)
{
    VIEW_E(ns);
    bool created;
    return wk_live_view_create(p, &e, wk_test_name(), "body", 4, &created);
}
static int q_commit(wk_processor *p, const char *ns)
{
    VIEW_E(ns);
    wk_live_view_commit_outcome out;
    return wk_live_view_commit(p, &e, wk_test_name(), 1, "d", 1, "bodyd", 5, &out);
}
static int q_get(wk_processor *p, const char *ns)
{
    VIEW_E(ns);
    wk_live_view_body b = WK_LIVE_VIEW_BODY_INIT;
    int rc = wk_live_view_get(p, &e, wk_test_name(), &b);
    wk_live_view_body_free(&b);
    return rc;
}
static int q_version(wk_processor *p, const char *ns)
{
    VIEW_E(ns);
    uint64_t v;
    bool found;
    return wk_live_view_version(p, &e, wk_test_name(), &v, &found);
}
static int q_history(wk_processor *p, const char *ns)
{
    VIEW_E(ns);
    wk_live_view_log h = WK_LIVE_VIEW_LOG_INIT;
    int rc = wk_live_view_history(p, &e, wk_test_name(), &h);
    wk_live_view_log_free(&h);
    return rc;
}
static int q_remove(wk_processor *p, const char *ns)
{
    VIEW_E(ns);
    bool removed;
    return wk_live_view_remove(p, &e, wk_test_name(), &removed);
}

/* One recv on a subscription with a short poll: an absent view is GONE at
 * once, an existing one gives its next entry or GONE after one poll. */
static int recv_once(wk_live_view_sub *sub, int rc)
{
    if (rc || !sub)
        return rc;
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    rc = wk_live_view_recv(sub, &ev);
    wk_live_view_sub_close(sub);
    return rc;
}
static int q_subscribe(wk_processor *p, const char *ns)
{
    VIEW_E(ns);
    wk_live_view_sub_options o = {.poll_ms = 1};
    wk_live_view_body head = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    int rc = wk_live_view_subscribe(p, &e, wk_test_name(), &o, &head, &sub);
    wk_live_view_body_free(&head);
    return recv_once(sub, rc);
}
static int q_resume(wk_processor *p, const char *ns)
{
    VIEW_E(ns);
    wk_live_view_sub_options o = {.poll_ms = 1};
    wk_live_view_sub *sub = NULL;
    int rc = wk_live_view_resume(p, &e, wk_test_name(), 0, &o, &sub);
    return recv_once(sub, rc);
}

static const wk_test_query queries[] = {
    WK_TEST_ROW(WK_KIND_LIVE_VIEW, live_view, create, q_create, 0),
    WK_TEST_ROW(WK_KIND_LIVE_VIEW, live_view, commit, q_commit, 0),
    WK_TEST_ROW(WK_KIND_LIVE_VIEW, live_view, get, q_get, 0),
    WK_TEST_ROW(WK_KIND_LIVE_VIEW, live_view, version, q_version, 0),
    WK_TEST_ROW(WK_KIND_LIVE_VIEW, live_view, history, q_history, 0),
    WK_TEST_ROW(WK_KIND_LIVE_VIEW, live_view, remove, q_remove, 0),
    WK_TEST_ROW(WK_KIND_LIVE_VIEW, live_view, subscribe, q_subscribe, 0),
    WK_TEST_ROW(WK_KIND_LIVE_VIEW, live_view, resume, q_resume, 0),
};

/* ------------------------------------------------------------------------
 * Allocations: a commit and a version read
 * ---------------------------------------------------------------------- */

static const wk_entity alloc_view = WK_LIVE_VIEW_ENTITY("alloc", 16);

static int alloc_setup(wk_processor *p)
{
    bool created, removed;
    int rc = wk_live_view_remove(p, &alloc_view, wk_name_str("v"), &removed);
    return rc ? rc : wk_live_view_create(p, &alloc_view, wk_name_str("v"), "b", 1, &created);
}

static int commit_cycle(wk_processor *p, unsigned i)
{
    (void)i;
    uint64_t v;
    bool found;
    int rc = wk_live_view_version(p, &alloc_view, wk_name_str("v"), &v, &found);
    if (rc || !found)
        return rc ? rc : WK_TEST_WRONG_OUTCOME;
    wk_live_view_commit_outcome out;
    rc = wk_live_view_commit(p, &alloc_view, wk_name_str("v"), v, "d", 1, "body", 4, &out);
    return rc != WK_OK                                                    ? rc
           : out.result == WK_LIVE_VIEW_COMMITTED && out.version == v + 1 ? WK_OK
                                                                          : WK_TEST_WRONG_OUTCOME;
}

/* A follower on the same view: each op commits once and receives that
 * version (the subscription's buffers are reused, events borrow them). */
static const wk_entity follow_view = WK_LIVE_VIEW_ENTITY("alloc-follow", 16);
static wk_live_view_sub *follower;
static uint64_t followed;

static int follow_setup(wk_processor *p)
{
    bool created, removed;
    int rc = wk_live_view_remove(p, &follow_view, wk_name_str("v"), &removed);
    if (!rc)
        rc = wk_live_view_create(p, &follow_view, wk_name_str("v"), "b", 1, &created);
    followed = 1;
    /* Left open for the process's life: the test runs in a process of its own. */
    return rc ? rc : wk_live_view_resume(p, &follow_view, wk_name_str("v"), 1, NULL, &follower);
}

static int commit_and_follow(wk_processor *p, unsigned i)
{
    (void)i;
    wk_live_view_commit_outcome out;
    int rc =
        wk_live_view_commit(p, &follow_view, wk_name_str("v"), followed, "d", 1, "body", 4, &out);
    if (rc || out.result != WK_LIVE_VIEW_COMMITTED)
        return rc ? rc : WK_TEST_WRONG_OUTCOME;
    wk_live_view_event ev;
    rc = wk_live_view_recv(follower, &ev);
    if (rc)
        return rc;
    if (ev.version != followed + 1 ||
        (ev.type != WK_LIVE_VIEW_DIFF && ev.type != WK_LIVE_VIEW_SNAPSHOT))
        return WK_TEST_WRONG_OUTCOME;
    followed = ev.version;
    return WK_OK;
}

static const wk_test_alloc_case allocs[] = {
    {"live view version + commit", alloc_setup, commit_cycle},
    {"live view commit + recv (a follower)", follow_setup, commit_and_follow},
};

/* ------------------------------------------------------------------------
 * Soak: the body at version v is "b" followed by v - 1 '+'
 * ---------------------------------------------------------------------- */

#define SOAK_NAMES 2
#define SOAK_MAX_LEN 256

static const wk_entity soak_view = WK_LIVE_VIEW_ENTITY("soak", 3);

typedef struct view_shared {
    atomic_long commits, conflicts, checks;
} view_shared;

static void view_op(wk_processor *p, const wk_test_soak_env *env)
{
    view_shared *s = env->shared;
    unsigned n = randombytes_uniform(SOAK_NAMES);
    wk_live_view_body b = WK_LIVE_VIEW_BODY_INIT;
    int rc = wk_live_view_get(p, &soak_view, wk_name_u64(n), &b);
    env->account(rc, "live_view.get");
    if (rc == WK_OK && !b.found) {
        bool created;
        env->account(wk_live_view_create(p, &soak_view, wk_name_u64(n), "b", 1, &created),
                     "live_view.create");
    } else if (rc == WK_OK) {
        if (b.len != b.version || b.data[0] != 'b' ||
            (b.len > 1 && strspn((const char *)b.data + 1, "+") != b.len - 1))
            env->violation("%s %d: the body does not match its version", "live view", (int)n);
        atomic_fetch_add(&s->checks, 1);
        if (b.len >= SOAK_MAX_LEN) {
            bool removed;
            env->account(wk_live_view_remove(p, &soak_view, wk_name_u64(n), &removed),
                         "live_view.remove");
        } else {
            char next[SOAK_MAX_LEN + 1];
            memcpy(next, b.data, b.len);
            next[b.len] = '+';
            wk_live_view_commit_outcome out;
            rc = wk_live_view_commit(p, &soak_view, wk_name_u64(n), b.version, "+", 1, next,
                                     b.len + 1, &out);
            env->account(rc, "live_view.commit");
            if (rc == WK_OK)
                atomic_fetch_add(out.result == WK_LIVE_VIEW_COMMITTED ? &s->commits : &s->conflicts,
                                 1);
        }
    }
    wk_live_view_body_free(&b);
}

static void view_report(const wk_test_soak_env *env, double elapsed_s)
{
    (void)elapsed_s;
    view_shared *s = env->shared;
    printf("  live view commits: %ld, conflicts: %ld, body checks: %ld\n", atomic_load(&s->commits),
           atomic_load(&s->conflicts), atomic_load(&s->checks));
}

static const wk_test_soak_op soak[] = {
    {"live view", 1, sizeof(view_shared), view_op, view_report},
};

static wk_test_kind live_view_rows = {
    .id = "live_view",
    .ops = (const char *const[]){WK_LIVE_VIEW_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries,
    .nqueries = WK_TEST_COUNT(queries),
    .allocs = allocs,
    .nallocs = WK_TEST_COUNT(allocs),
    .soak = soak,
    .nsoak = WK_TEST_COUNT(soak),
};
WK_TEST_KIND(live_view_rows)
