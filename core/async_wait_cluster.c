/*
 * core/async_wait_cluster.c — the waits of an event-loop handle on a
 * Redis Cluster (core/async_wait.h). A waiter's wake-up list carries its
 * entity's hash tag: it lives in the entity's slot, and a BLPOP may name
 * the keys of one slot only. So the waiters are grouped by slot, and each
 * slot in use has a channel: one BLPOP over the lists of every waiter of
 * that slot, on a connection of its own.
 *
 * That connection is a hidden handle (core/async_sub.c, as a receiver's),
 * itself a cluster handle: the BLPOP is a query on the waiter's entity,
 * so it is routed to the primary of the slot by the map, MOVED and ASK
 * are followed, a lost node is dialled again, its socket joins the
 * handle's epoll set and is set up through the loop — the same exchange
 * as every other query of the handle, never blocking. Channels stay
 * open for the next waits of their slot, up to IDLE_MAX idle ones.
 *
 * A waiter parked in a slot whose BLPOP is in flight (its list not in it)
 * gets it re-issued by a poke: the BLPOP names, after the waiters' lists,
 * a list of the channel's own in the same slot (the first waiter's list
 * prefix with a random id: a wake-up list of nobody), and a push to it on
 * the handle's connection ends the BLPOP at once; the next one names
 * every list. (CLIENT UNBLOCK, the single server's way, would have to go
 * to the very node of the BLPOP, which the handle's connection, routed
 * by key, does not promise.) A push for a waiter while it is not covered
 * stays in its list until a BLPOP takes it: no wake-up is lost, and a
 * lost BLPOP (its node gone) has every waiter of its slot attempt again,
 * as on a single server: the attempt after a wake-up is what decides.
 *
 * While the slot migrates (the ASK window), the BLPOP — several keys, on
 * neither node — is answered TRYAGAIN, and no release pushes a wake-up
 * then (a release in the window goes in its single-key form, which wakes
 * nobody; an attempt there queues nobody). So a TRYAGAIN is the BLPOP's
 * answer (WK__QUERY_TRYAGAIN_FINAL), not something the exchange sends
 * again: after a short pause (TRYAGAIN_FIRST_PAUSE_MS, doubling up to
 * TRYAGAIN_MAX_PAUSE_MS, as the exchange's rule) every waiter of the slot
 * attempts again — takes what a release in the window freed, or, the
 * window over, queues itself as usual and parks on a BLPOP a release
 * wakes.
 */
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/token.h>

#include "core/async_wait.h"

/* Channels without waiters kept open for the next waits of their slot. */
#define IDLE_MAX 8
/* A poke no BLPOP took (its connection was lost meanwhile) goes by itself. */
#define POKE_TTL "60000"
/* After a TRYAGAIN, the slot's waiters attempt again after this pause,
 * doubled after each TRYAGAIN in a row up to the max. */
#define TRYAGAIN_FIRST_PAUSE_MS 10
#define TRYAGAIN_MAX_PAUSE_MS 100

typedef struct chan {
    wk_async *a;
    unsigned slot;
    wk__async_sub *sub; /* its connection; NULL once the handle closes */
    bool popping;       /* a BLPOP is in flight */
    bool poking;        /* a poke is in flight on the handle's connection */
    bool poked;         /* the BLPOP in flight was poked (once each) */
    int64_t retry_at;   /* after a TRYAGAIN: the waiters attempt again then (0: none) */
    int pause_ms;       /* the next pause after a TRYAGAIN (0: none in a row) */
    char poke[WK__COMPANION_KEY_MAX];
    size_t poke_len;
    wk__async_pop got;
} chan;

struct wk__async_wait_chans {
    chan **c; /* each allocated once: callbacks point to it */
    size_t n, cap;
};

static const wk_script poke_script = {
    "wait.poke",
    "redis.call('RPUSH', KEYS[1], '1')\nredis.call('PEXPIRE', KEYS[1], ARGV[1])\nreturn 1\n"};

/* A waiter of `slot` not woken yet (its entity routes the channel's
 * queries), or NULL. */
static const wk__async_waiter *live_in(const wk__async_waits *w, unsigned slot)
{
    for (size_t i = 0; i < w->n; i++)
        if (!w->p[i].fire && w->p[i].slot == slot)
            return &w->p[i];
    return NULL;
}

/* Every waiter of `slot` not woken yet fails its wait with rc: it
 * attempts again (or gives up), as after a lost BLPOP. */
static void fail_slot(wk__async_waits *w, unsigned slot, int rc, const char *why)
{
    for (size_t i = 0; i < w->n; i++)
        if (!w->p[i].fire && w->p[i].slot == slot) {
            w->p[i].fire = true;
            w->p[i].status = rc;
        }
    wk__copy_text(w->why, sizeof(w->why), why);
}

/* ---- a channel's connection --------------------------------------------- */

/* The time asked for after a TRYAGAIN came: the slot's waiters attempt
 * again (each one's wait ends WK_OK with nothing popped). */
static void chan_run(void *arg)
{
    chan *c = arg;
    if (!c->retry_at || wk__boot_ms() < c->retry_at)
        return;
    c->retry_at = 0;
    fail_slot(c->a->waits, c->slot, WK_OK, "");
    wk__async_wait_cluster_kick(c->a);
}

static void chan_gone(void *arg)
{
    /* The handle closes: its hidden handle with it, the sub freed right
     * after (closed from its `gone`). */
    chan *c = arg;
    wk__async_sub_close(c->sub);
    c->sub = NULL;
}

static void chan_reply(void *arg, int status, const char *msg)
{
    chan *c = arg;
    wk_async *a = c->a;
    c->popping = false;
    c->poked = false;
    if (status == WK_EREDIS && strstr(msg, "TRYAGAIN") && c->sub) {
        /* The slot migrates: no wake-up can come; attempt after a pause. */
        c->pause_ms = !c->pause_ms ? TRYAGAIN_FIRST_PAUSE_MS
                      : c->pause_ms * 2 > TRYAGAIN_MAX_PAUSE_MS ? TRYAGAIN_MAX_PAUSE_MS
                                                                 : c->pause_ms * 2;
        c->retry_at = wk__boot_ms() + c->pause_ms;
        wk__async_sub_wake_at(c->sub, c->retry_at);
        c->got.list_len = 0;
        wk__async_waits_popped(a, (long)c->slot, WK_OK, "", &c->got); /* none covered now */
        return;
    }
    if (status == WK_OK)
        c->pause_ms = 0;
    if (status == WK_OK && c->got.list_len == c->poke_len &&
        memcmp(c->got.list, c->poke, c->poke_len) == 0)
        c->got.list_len = 0; /* poked: issued again, over every list */
    wk__async_waits_popped(a, (long)c->slot, status, msg, &c->got);
    wk__async_wait_cluster_kick(a);
}

static void on_poke(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a, (void)status, (void)msg;
    /* Failed: not again for this BLPOP; the new waiter is covered by the
     * next one, or its own time ends its sleep. */
    ((chan *)arg)->poking = false;
}

/* The poke list of a channel opened for waiter p: p's list with a random
 * id in place of p's (a wake-up list of nobody, in p's slot); a list too
 * short to hold an id gets a tag of the slot. */
static void poke_key(chan *c, const wk__async_waiter *p)
{
    wk_token id;
    wk_token_random(&id);
    size_t keep = p->len > WK_TOKEN_LEN ? p->len - WK_TOKEN_LEN : 0;
    if (keep && wk__key_slot(p->list, keep + WK_TOKEN_LEN) == c->slot) {
        memcpy(c->poke, p->list, keep);
        c->poke_len = keep;
    } else {
        char tag[4];
        size_t n = wk__key_tag_for_slot(c->slot, tag);
        c->poke[0] = '{';
        memcpy(c->poke + 1, tag, n);
        memcpy(c->poke + 1 + n, "}:w:", 4);
        c->poke_len = n + 5;
    }
    memcpy(c->poke + c->poke_len, id.bytes, WK_TOKEN_LEN);
    c->poke_len += WK_TOKEN_LEN;
    if (wk__key_slot(c->poke, c->poke_len) != c->slot)
        c->poke_len = 0; /* cannot be: then no poke, new waiters wait for the BLPOP's end */
}

/* A channel for the slot of waiter p, its connection opening; NULL with
 * the slot's waiters failed (memory, the copy of the settings). */
static chan *chan_open(wk_async *a, const wk__async_waiter *p)
{
    wk__async_waits *w = a->waits;
    wk__async_wait_chans *cs = w->chans;
    chan *c = calloc(1, sizeof(*c));
    char err[WK__ERRMSG_MAX] = "out of memory";
    int rc = c ? WK_OK : WK_ENOMEM;
    if (!rc && wk__grow_array(&cs->c, &cs->cap, cs->n + 1, sizeof(*cs->c)))
        rc = WK_ENOMEM;
    if (!rc) {
        *c = (chan){.a = a, .slot = p->slot};
        poke_key(c, p);
        rc = wk__async_sub_open(&c->sub, a, chan_run, chan_gone, chan_reply, c, err, sizeof(err));
    }
    if (rc) {
        free(c);
        fail_slot(w, p->slot, rc, err);
        return NULL;
    }
    cs->c[cs->n++] = c;
    return c;
}

static void chan_free(chan *c)
{
    wk__async_sub_close(c->sub); /* NULL: closed with the handle already */
    free(c);
}

/* ---- what the waits send ------------------------------------------------ */

/* One BLPOP over the lists of the slot's waiters not woken yet and the
 * poke list, until the first of their ends, on the channel's connection. */
static void chan_pop(wk_async *a, chan *c, const wk__async_waiter *p, int64_t until)
{
    wk__async_waits *w = a->waits;
    int64_t ms;
    int k = wk__async_waits_pop_args(w, (long)c->slot, until, c->poke, c->poke_len, &ms);
    if (!k)
        return; /* the waiters' own times still end their sleeps */
    wk_access access = {p->e, WK_WRITE}; /* a pop removes; routed by the first list */
    wk_query q = {.name = "wait.pop",
                  .effect = {&access, 1},
                  .argc = k,
                  .argv = w->argv,
                  .argvlen = w->lens,
                  .flags = WK__QUERY_TRYAGAIN_FINAL,
                  .parse = wk__async_parse_pop,
                  .out = &c->got};
    c->popping = wk__async_sub_send(c->sub, &q, ms) == WK_OK;
    for (size_t i = 0; c->popping && i < w->n; i++)
        if (w->p[i].slot == c->slot && !w->p[i].fire)
            w->p[i].covered = true;
}

/* Push to the poke list (on the handle's connection, routed by the map
 * to the slot's node): the BLPOP in flight ends at once. */
static void chan_poke(wk_async *a, chan *c, const wk__async_waiter *p)
{
    wk_access access = {p->e, WK_WRITE};
    const char *argv[2] = {c->poke, POKE_TTL};
    size_t lens[2] = {c->poke_len, strlen(POKE_TTL)};
    wk_query q = {.name = "wait.poke",
                  .effect = {&access, 1},
                  .script = &poke_script,
                  .nkeys = 1,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = lens};
    c->poking = wk__async_lane_submit(&a->lane[WK__LANE_MAIN], &q, on_poke, c) == WK_OK;
    c->poked = c->poking;
}

/* Idle channels beyond IDLE_MAX close (none has a query in flight). */
static void close_idle(wk__async_waits *w)
{
    wk__async_wait_chans *cs = w->chans;
    size_t idle = 0;
    for (size_t i = cs->n; i-- > 0;) {
        chan *c = cs->c[i];
        if (c->popping || c->poking || c->retry_at || live_in(w, c->slot) || ++idle <= IDLE_MAX)
            continue;
        chan_free(c);
        cs->c[i] = cs->c[--cs->n];
    }
}

void wk__async_wait_cluster_kick(wk_async *a)
{
    wk__async_waits *w = a->waits;
    if (!w->chans && !(w->chans = calloc(1, sizeof(*w->chans)))) {
        for (size_t i = 0; i < w->n; i++)
            if (!w->p[i].fire)
                fail_slot(w, w->p[i].slot, WK_ENOMEM, "out of memory");
        return;
    }
    wk__async_wait_chans *cs = w->chans;
    /* A channel for each slot with a waiter not woken yet. */
    for (size_t i = 0; i < w->n; i++) {
        const wk__async_waiter *p = &w->p[i];
        bool known = false;
        for (size_t k = 0; k < cs->n && !known; k++)
            known = cs->c[k]->slot == p->slot;
        if (!p->fire && !known)
            chan_open(a, p);
    }
    for (size_t k = 0; k < cs->n; k++) {
        chan *c = cs->c[k];
        bool missing;
        int64_t until;
        const wk__async_waiter *p = live_in(w, c->slot);
        if (!c->sub || !p || !wk__async_waits_live(w, (long)c->slot, &missing, &until))
            continue;
        if (!c->popping && !c->retry_at)
            chan_pop(a, c, p, until);
        else if (missing && c->poke_len && !c->poking && !c->poked)
            chan_poke(a, c, p);
    }
    close_idle(w);
}

void wk__async_wait_cluster_free(wk__async_waits *w)
{
    wk__async_wait_chans *cs = w->chans;
    for (size_t i = 0; cs && i < cs->n; i++)
        chan_free(cs->c[i]);
    if (cs)
        free(cs->c);
    free(cs);
    w->chans = NULL;
}
