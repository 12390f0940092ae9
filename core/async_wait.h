/*
 * core/async_wait.h — the waits of the event-loop handle, shared by
 * core/async_wait.c (the parked waiters, the single server's waits lane)
 * and core/async_wait_cluster.c (a cluster handle's waits: one BLPOP per
 * slot in use, each on a connection of its own to that slot's node).
 * Not installed.
 */
#ifndef WK_CORE_ASYNC_WAIT_H
#define WK_CORE_ASYNC_WAIT_H

#include "core/async_internal.h"

/* The most of a popped element a waiter is told (a handed-over notice is
 * shorter; a longer one is told as empty: a plain wake-up). */
#define WK__WAIT_ELEMENT_MAX 64

/* Pops for lists not parked at the time: kept for when they park. */
#define WK__WAIT_EARLY_MAX 64

/* A BLPOP's answer: the list popped (none: nil) and the element taken. */
typedef struct wk__async_pop {
    char list[WK__COMPANION_KEY_MAX];
    size_t list_len;
    char element[WK__WAIT_ELEMENT_MAX];
    size_t element_len;
} wk__async_pop;

typedef struct wk__async_waiter {
    char list[WK__COMPANION_KEY_MAX];
    size_t len;
    int64_t until;
    wk__async_woke_fn woke;
    void *arg;
    const wk_entity *e; /* its entity (a cluster's pop routes by it), or NULL */
    unsigned slot;      /* its list's cluster slot */
    bool fire;          /* its wake-up was popped, or its wait failed */
    bool covered;       /* its list is in a BLPOP in flight */
    int status;
    char element[WK__WAIT_ELEMENT_MAX]; /* what its pop took */
    size_t element_len;
} wk__async_waiter;

typedef struct wk__async_wait_chans wk__async_wait_chans; /* core/async_wait_cluster.c */

struct wk__async_waits {
    wk__async_waiter *p;
    size_t n, cap;
    /* The single server's waits lane. */
    long long client_id; /* the waits connection's (0: not known) */
    bool asking_id, popping, unblocking, unblock_refused;
    long long id_reply, unblock_reply;
    wk__async_pop got; /* the BLPOP's answer */
    /* Both. */
    char early[WK__WAIT_EARLY_MAX][WK__COMPANION_KEY_MAX];
    size_t early_len[WK__WAIT_EARLY_MAX], nearly;
    char early_element[WK__WAIT_EARLY_MAX][WK__WAIT_ELEMENT_MAX];
    size_t early_element_len[WK__WAIT_EARLY_MAX];
    const char **argv; /* a BLPOP's arguments, grown to the most parked */
    size_t *lens, argv_cap, lens_cap;
    char secs[32];
    char why[WK__ERRMSG_MAX / 2];
    wk__async_wait_chans *chans; /* a cluster handle's, else NULL */
};

/* Every slot: the single server's (one BLPOP covers every waiter). */
#define WK__WAIT_ALL_SLOTS (-1L)

/* Parse a BLPOP's reply into the wk__async_pop at q->out. */
int wk__async_parse_pop(const wk_query *q, const wk_reply *r, wk_diag *d);

/* A BLPOP of the waiters of `slot` ended: `status` (not WK_OK: lost, its
 * waiters attempt again with it, `msg` their why) and what it took. */
void wk__async_waits_popped(wk_async *a, long slot, int status, const char *msg,
                            const wk__async_pop *got);

/* The arguments of a BLPOP over the lists of the waiters of `slot` not
 * woken yet, then `extra` (len 0: none), blocking until `until`, in
 * w->argv / w->lens; *ms is its block time. Returns argc, or 0 (out of
 * memory: the waiters' own times still end their sleeps). */
int wk__async_waits_pop_args(wk__async_waits *w, long slot, int64_t until, const char *extra,
                             size_t extra_len, int64_t *ms);

/* Whether `slot` has a waiter not woken yet whose list is not in the
 * BLPOP in flight (*missing), and the earliest end of their sleeps
 * (*until); false when it has no waiter not woken. */
bool wk__async_waits_live(const wk__async_waits *w, long slot, bool *missing, int64_t *until);

/* A cluster handle's waits (core/async_wait_cluster.c): send what they
 * need next (a BLPOP per slot in use, on a connection to its node; a
 * poke of a BLPOP that misses a waiter), and free their state. */
void wk__async_wait_cluster_kick(wk_async *a);
void wk__async_wait_cluster_free(wk__async_waits *w);

#endif /* WK_CORE_ASYNC_WAIT_H */
