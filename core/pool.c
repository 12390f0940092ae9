/*
 * core/pool.c — N handles behind one processor that any thread may call
 * (see wakuwaku/pool.h for the rules).
 *
 * The pool is a free stack of handle indices and a queue of waiting
 * threads under one mutex; each waiter sleeps on a CLOCK_MONOTONIC
 * condition of its own, and a returned handle goes to the oldest. The shared
 * processor belongs to `front`, a wk_db without a connection of its own:
 * it admits a query against the capability (so a refusal waits for
 * nothing), fixes the query's deadline, borrows a handle by then, runs
 * the query through that handle's own dispatcher bounded by the same
 * deadline (wk__db_bound) and gives the handle back. Everything a query
 * does on the wire is the handle's; the pool adds the wait and nothing
 * else, and the wait spends the query's deadline.
 *
 * Messages: the front's detail message is per thread (wk__db_msg() sends
 * it to thread_msg below). Why a thread-local buffer rather than a buffer
 * per pool and thread: wk_processor_errmsg() and the helpers that read it
 * (fill once, …) see only the processor, and per-pool per-thread storage
 * (pthread keys) could not free a thread's buffer when a pool closes
 * while the thread lives on. One buffer per thread, shared by every pool,
 * is what "this thread's last query" needs, and nothing else is global.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/pool.h>

#include "core/db_internal.h"
#include "core/core_internal.h"
#include "core/pool_mux.h"

struct wk_pool {
    wk_db front;           /* first member: &pool->front.proc is the processor */
    pthread_mutex_t mu;
    struct waiter *head, *tail; /* threads waiting for a handle, oldest first */
    int wait_ms;
    size_t size;
    wk_db **handles;       /* all of them; index i is handle i */
    bool *borrowed;        /* per handle: out of the free stack */
    size_t *free_stack;    /* indices of free handles; top at nfree - 1 */
    size_t nfree;
    size_t nwaiting;       /* threads in the queue */
    bool closed;           /* wk_pool_close() ran with handles still out */
    /* Multiplexing (core/pool_mux.h): handle i is lane i, shared in flight
     * by any number of queries while it is not borrowed (lanes[i].closed
     * while it is, set under `mu`); NULL: one query per connection. */
    wk__mux_lane *lanes;
    /* The blocking handles of waits made through the shared processor
     * (core/blocking.c), kept for the next wait: at most `size`. Under
     * `mu`. */
    wk_db **idle_waits;
    size_t nidle_waits;
    /* wk_pool_stats(): borrows (the shared processor's included), how long
     * each waited, and those that got no handle in time */
    _Atomic uint64_t borrows, timeouts, wait_ns;
    _Atomic uint64_t wait_buckets[WK_STATS_BUCKETS + 1];
};

static _Thread_local char thread_msg[WK__ERRMSG_MAX];
/* The calling thread's bound on its queries through a pool's shared
 * processor (wk__db_bound() on the front; 0: none): per thread, since the
 * front serves every thread at once. */
static _Thread_local int64_t thread_bound;

char *wk__pool_thread_msg(void)
{
    return thread_msg;
}

int64_t wk__pool_bound(int64_t deadline)
{
    int64_t prev = thread_bound;
    thread_bound = deadline;
    return prev;
}

/* Free everything; the caller made sure no handle is out. */
static void destroy(wk_pool *pool)
{
    for (size_t i = 0; pool->lanes && i < pool->size; i++)
        wk__mux_free(&pool->lanes[i]);
    free(pool->lanes);
    for (size_t i = 0; i < pool->size; i++)
        wk_db_close(pool->handles[i]);
    for (size_t i = 0; i < pool->nidle_waits; i++)
        wk_db_close(pool->idle_waits[i]);
    free(pool->idle_waits);
    pthread_mutex_destroy(&pool->mu);
    wk_cap_free(pool->front.cap);
    free(pool->handles);
    free(pool->borrowed);
    free(pool->free_stack);
    free(pool);
}

/* A thread waiting for a handle, on its own stack, in the pool's queue. */
typedef struct waiter {
    pthread_cond_t cv;     /* signalled by give() once `handle` is set */
    size_t handle;
    bool granted;
    bool open;             /* a multiplexed query's: waits for any lane to open */
    struct waiter *next;
} waiter;

/* Take w out of the queue (it timed out before a handle came). */
static void unqueue(wk_pool *pool, waiter *w)
{
    waiter *prev = NULL;
    for (waiter *x = pool->head; x; prev = x, x = x->next) {
        if (x != w)
            continue;
        if (prev)
            prev->next = w->next;
        else
            pool->head = w->next;
        if (pool->tail == w)
            pool->tail = prev;
        return;
    }
}

static int timed_out(wk_pool *pool, bool cut)
{
    wk__bump(&pool->timeouts);
    if (cut)
        return wk__db_fail(&pool->front, WK_ETIMEDOUT,
                           "pool: no free connection before the call's deadline (not sent)");
    return wk__db_fail(&pool->front, WK_ETIMEDOUT, "pool: no free connection within %d ms",
                       pool->wait_ms);
}

/* The free handle on top of the stack, borrowed now (a lane closed to
 * shared queries). Under `mu`. */
static size_t pop_free(wk_pool *pool)
{
    size_t i = pool->free_stack[--pool->nfree];
    pool->borrowed[i] = true;
    if (pool->lanes)
        atomic_store(&pool->lanes[i].closed, true);
    return i;
}

/*
 * Take a free handle's index, or queue and wait for one until wait_ms
 * have passed or, sooner, until `call_deadline` (the query's; 0: none; a
 * deadline already past takes nothing: the query would have no time to
 * run). A returned handle goes straight to the longest waiter (give()),
 * so waiters are served in order and no wake-up finds the handle taken
 * by a thread that did not wait. The most recently returned free handle
 * goes out first (a stack): under light load one connection stays warm.
 */
static int take(wk_pool *pool, int64_t call_deadline, size_t *index, bool open)
{
    int64_t now = wk__boot_ms();
    if (call_deadline && now >= call_deadline)
        return timed_out(pool, true);
    pthread_mutex_lock(&pool->mu);
    if (open && pool->nfree > 0) {
        pthread_mutex_unlock(&pool->mu); /* a lane is open: share it */
        return WK_OK;
    }
    if (pool->nfree > 0) {
        size_t i = pop_free(pool);
        pthread_mutex_unlock(&pool->mu);
        wk__bump(&pool->borrows);
        wk__hist_add(pool->wait_buckets, &pool->wait_ns, 0); /* no wait */
        *index = i;
        return WK_OK;
    }
    if (pool->wait_ms == 0) {
        pthread_mutex_unlock(&pool->mu);
        return timed_out(pool, false);
    }
    int64_t deadline = wk__add_ms(now, pool->wait_ms);
    bool cut = call_deadline && call_deadline < deadline;
    if (cut)
        deadline = call_deadline;
    waiter w = {.granted = false, .open = open};
    if (wk__cond_init_monotonic(&w.cv) != WK_OK) {
        pthread_mutex_unlock(&pool->mu);
        return wk__db_fail(&pool->front, WK_ENOMEM, "pool: cannot make a condition to wait on");
    }
    if (pool->tail)
        pool->tail->next = &w;
    else
        pool->head = &w;
    pool->tail = &w;
    pool->nwaiting++;
    uint64_t start = wk__now_ns();
    while (!w.granted && wk__boot_ms() < deadline) {
        struct timespec ts;
        wk__cond_abstime(deadline, &ts);
        pthread_cond_timedwait(&w.cv, &pool->mu, &ts);
    }
    if (!w.granted)
        unqueue(pool, &w);
    pool->nwaiting--;
    pthread_mutex_unlock(&pool->mu);
    pthread_cond_destroy(&w.cv);
    if (!w.granted)
        return timed_out(pool, cut);
    if (open)
        return WK_OK; /* counted by the query */
    wk__bump(&pool->borrows);
    wk__hist_add(pool->wait_buckets, &pool->wait_ns, wk__now_ns() - start);
    *index = w.handle;
    return WK_OK;
}

/* Wake every multiplexed query waiting for an open lane (under `mu`). */
static void grant_open(wk_pool *pool)
{
    waiter *prev = NULL;
    for (waiter *x = pool->head; x;) {
        waiter *next = x->next;
        if (x->open) {
            if (prev)
                prev->next = next;
            else
                pool->head = next;
            if (pool->tail == x)
                pool->tail = prev;
            x->granted = true;
            pthread_cond_signal(&x->cv);
        } else {
            prev = x;
        }
        x = next;
    }
}

/* Give handle i back (WK_EINVAL, changing nothing, if it is not out): to
 * the longest waiter if any, else to the free stack. After a close with
 * handles out, the last one back frees the pool. */
static int give(wk_pool *pool, size_t i)
{
    pthread_mutex_lock(&pool->mu);
    if (!pool->borrowed[i]) {
        pthread_mutex_unlock(&pool->mu);
        return WK_EINVAL;
    }
    bool last = false;
    waiter *w = pool->head;
    if (w && w->open) {
        /* Multiplexed queries waited for a lane: handle i opens, and each
         * of them may share it; a borrower next in line then takes an
         * open lane (and waits for it to go quiet). */
        pool->borrowed[i] = false;
        pool->free_stack[pool->nfree++] = i;
        atomic_store(&pool->lanes[i].closed, false);
        grant_open(pool);
        w = pool->head;
        if (w) {
            pool->head = w->next;
            if (!pool->head)
                pool->tail = NULL;
            w->handle = pop_free(pool);
            w->granted = true;
            pthread_cond_signal(&w->cv);
        }
        last = pool->closed && pool->nfree == pool->size;
    } else if (w) {
        /* Still borrowed, now by w. Signalled under the lock: w cannot
         * destroy its condition before it has the lock again. */
        pool->head = w->next;
        if (!pool->head)
            pool->tail = NULL;
        w->handle = i;
        w->granted = true;
        pthread_cond_signal(&w->cv);
    } else {
        pool->borrowed[i] = false;
        pool->free_stack[pool->nfree++] = i;
        if (pool->lanes)
            atomic_store(&pool->lanes[i].closed, false);
        last = pool->closed && pool->nfree == pool->size;
    }
    pthread_mutex_unlock(&pool->mu);
    if (last)
        destroy(pool);
    return WK_OK;
}

/* The lane this thread used last (a hint, for any pool). */
static _Thread_local size_t thread_lane;

/* The open lane with the fewest queries waiting, looking first at the one
 * this thread used last (with as many threads as connections each keeps
 * its own; two threads racing for the same idle lane would make one wait
 * for the other's read); false: every one is borrowed. */
static bool pick(wk_pool *pool, size_t *index)
{
    int best = -1;
    size_t first = thread_lane < pool->size ? thread_lane : 0;
    for (size_t k = 0; k < pool->size; k++) {
        size_t i = first + k < pool->size ? first + k : first + k - pool->size;
        if (atomic_load_explicit(&pool->lanes[i].closed, memory_order_relaxed))
            continue;
        int load = atomic_load_explicit(&pool->lanes[i].load, memory_order_relaxed);
        if (best < 0 || load < best) {
            best = load;
            *index = i;
            if (load == 0)
                break;
        }
    }
    if (best >= 0)
        thread_lane = *index;
    return best >= 0;
}

/* A query shares an open connection with whatever is in flight on it
 * (core/pool_mux.h); with every connection borrowed it waits for one to
 * come back, as a query of a pool that does not multiplex. */
static int mux_process(wk_pool *pool, wk_query *q, int64_t deadline)
{
    uint64_t start = 0;
    for (;;) {
        size_t i = 0;
        if (!pick(pool, &i)) {
            if (!start)
                start = wk__now_ns();
            int rc = take(pool, deadline, &i, true);
            if (rc)
                return rc;
            continue;
        }
        int rc = wk__mux_run(&pool->lanes[i], q, deadline, thread_msg);
        if (rc == WK__MUX_CLOSED)
            continue; /* borrowed meanwhile */
        wk__bump(&pool->borrows);
        wk__hist_add(pool->wait_buckets, &pool->wait_ns, start ? wk__now_ns() - start : 0);
        return rc;
    }
}

static int pool_process(wk_processor *self, wk_query *q)
{
    wk_pool *pool = (wk_pool *)self;
    thread_msg[0] = '\0';
    if (!q)
        return WK_EINVAL;
    if (!q->name)
        q->name = "query";
    /* Refused queries wait for nothing and take no connection. */
    int rc = wk__db_admit(&pool->front, q);
    if (rc)
        return rc;
    /* The query's one deadline, fixed now: the wait for a connection
     * spends it, and the query runs on the connection with what is left
     * (and never past an enclosing call's bound, thread_bound). */
    int64_t deadline = wk__deadline_after(pool->front.conn->command_timeout);
    if (wk__query_acked(pool->front.conn, q)) /* its WAIT, as the handle allows */
        deadline = wk__add_ms(deadline, pool->front.conn->lease_ack_timeout_ms);
    deadline = wk__deadline_min(deadline, thread_bound);
    bool acked = wk__query_acked(pool->front.conn, q);
    if (pool->lanes && !acked)
        return mux_process(pool, q, deadline);
    /* One query per connection — or, multiplexing, a lease query with its
     * WAIT, which the server blocks on (up to the ack timeout): it takes
     * a connection of its own, once the queries in flight there are in,
     * so it holds up nobody's reply. */
    size_t i = 0;
    rc = take(pool, deadline, &i, false);
    if (rc)
        return rc;
    if (pool->lanes && wk__mux_drain(&pool->lanes[i], deadline) != WK_OK) {
        give(pool, i);
        return timed_out(pool, true);
    }
    wk_db *db = pool->handles[i];
    int64_t outer = wk__db_bound(db, deadline);
    rc = wk__db_process(&db->proc, q);
    wk__db_bound(db, outer);
    /* Copied while the handle is still ours: the next borrower clears it. */
    if (rc)
        wk__copy_text(thread_msg, sizeof(thread_msg), db->errmsg);
    give(pool, i);
    return rc;
}

static int alloc_arrays(wk_pool *pool, size_t n)
{
    pool->handles = calloc(n, sizeof(*pool->handles));
    pool->borrowed = calloc(n, sizeof(*pool->borrowed));
    pool->free_stack = calloc(n, sizeof(*pool->free_stack));
    pool->idle_waits = calloc(n, sizeof(*pool->idle_waits));
    return pool->handles && pool->borrowed && pool->free_stack && pool->idle_waits ? WK_OK
                                                                                    : WK_ENOMEM;
}

static int open_lanes(wk_pool *pool, char *err, size_t errlen)
{
    pool->lanes = calloc(pool->size, sizeof(*pool->lanes));
    if (!pool->lanes)
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "pool: out of memory");
    for (size_t i = 0; i < pool->size; i++) {
        pool->lanes[i].kick_fd = -1; /* not made yet: wk__mux_free() skips it */
        if (wk__mux_init(&pool->lanes[i], pool->handles[i]) != WK_OK)
            return wk__errbuf_set(err, errlen, WK_ENOMEM,
                                  "pool: cannot make the wake-up of connection %zu", i + 1);
    }
    return WK_OK;
}

int wk_pool_open(wk_pool **out, const wk_pool_options *opts, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "pool: out is NULL");
    *out = NULL;
    if (!opts || !opts->db)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "pool: %s",
                              opts ? "options.db is NULL (the connections' options are required)"
                                   : "options are NULL");
    if (opts->size < 1 || opts->size > WK_POOL_MAX_SIZE)
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "pool: size must be 1..%d connections (got %d)", WK_POOL_MAX_SIZE,
                              opts->size);
    if (opts->wait_ms < 0)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "pool: wait_ms must be >= 0 (got %d)",
                              opts->wait_ms);

    wk_pool *pool = calloc(1, sizeof(*pool));
    if (!pool)
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "pool: out of memory");
    if (alloc_arrays(pool, (size_t)opts->size) || pthread_mutex_init(&pool->mu, NULL)) {
        free(pool->handles);
        free(pool->borrowed);
        free(pool->free_stack);
        free(pool);
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "pool: out of memory");
    }
    pool->wait_ms = opts->wait_ms;
    int rc = WK_OK;
    bool multiplex = opts->multiplex;
    char msg[WK__ERRMSG_MAX];
    for (int i = 0; i < opts->size && !rc; i++) {
        rc = wk_db_open(&pool->handles[i], opts->db, msg, sizeof(msg));
        if (rc)
            wk__errbuf_set(err, errlen, rc, "pool: connection %d of %d: %s", i + 1, opts->size,
                           msg);
        else
            pool->size++;
    }
    /* The front checks against the same capability as every handle. */
    if (!rc) {
        rc = wk_cap_intersect(&pool->front.cap, wk_db_capability(pool->handles[0]),
                              wk_db_capability(pool->handles[0]), NULL);
        if (rc)
            wk__errbuf_set(err, errlen, rc, "pool: cannot copy the capability: %s",
                           wk_strerror(rc));
    }
    /* A cluster's queries go to the node of their slot: one query per
     * connection there (the continuous exchange has one lane). */
    if (!rc && multiplex && !pool->handles[0]->conn->cluster)
        rc = open_lanes(pool, err, errlen);
    if (rc) {
        destroy(pool);
        return rc;
    }
    pool->front.proc.process = pool_process;
    pool->front.proc.db = &pool->front;
    pool->front.conn = pool->handles[0]->conn;
    pool->front.pool = pool;
    for (size_t i = 0; i < pool->size; i++)
        pool->free_stack[i] = pool->size - 1 - i; /* handle 0 on top */
    pool->nfree = pool->size;
    *out = pool;
    return WK_OK;
}

void wk_pool_close(wk_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    bool out = pool->nfree < pool->size;
    pool->closed = true;
    pthread_mutex_unlock(&pool->mu);
    if (!out)
        destroy(pool);
}

wk_db *wk__pool_take_wait_handle(wk_pool *pool)
{
    pthread_mutex_lock(&pool->mu);
    wk_db *b = pool->nidle_waits ? pool->idle_waits[--pool->nidle_waits] : NULL;
    pthread_mutex_unlock(&pool->mu);
    return b;
}

void wk__pool_keep_wait_handle(wk_pool *pool, wk_db *b)
{
    pthread_mutex_lock(&pool->mu);
    bool kept = !pool->closed && pool->nidle_waits < pool->size;
    if (kept)
        pool->idle_waits[pool->nidle_waits++] = b;
    pthread_mutex_unlock(&pool->mu);
    if (!kept)
        wk_db_close(b);
}

uint64_t wk__pool_leader_kicks(wk_pool *pool)
{
    uint64_t n = 0;
    for (size_t i = 0; pool->lanes && i < pool->size; i++)
        n += atomic_load_explicit(&pool->lanes[i].kicks, memory_order_relaxed);
    return n;
}

wk_processor *wk_pool_processor(wk_pool *pool)
{
    return pool ? &pool->front.proc : NULL;
}

int wk_pool_borrow(wk_pool *pool, wk_db **db)
{
    thread_msg[0] = '\0';
    if (db)
        *db = NULL;
    if (!pool || !db)
        return WK_EINVAL;
    size_t i = 0;
    int64_t until = wk__add_ms(wk__boot_ms(), pool->wait_ms);
    int rc = take(pool, 0, &i, false);
    if (rc)
        return rc;
    /* A lane taken open may still carry shared queries: they finish
     * first (within the same wait_ms). */
    if (pool->lanes && wk__mux_drain(&pool->lanes[i], until) != WK_OK) {
        give(pool, i);
        return timed_out(pool, false);
    }
    *db = pool->handles[i];
    return WK_OK;
}

int wk_pool_return(wk_pool *pool, wk_db *db)
{
    if (!pool || !db)
        return WK_EINVAL;
    /* The handles never change after open, so the search needs no lock;
     * give() checks `borrowed` under it. */
    size_t i = 0;
    while (i < pool->size && pool->handles[i] != db)
        i++;
    return i < pool->size ? give(pool, i) : WK_EINVAL;
}

const char *wk_pool_errmsg(const wk_pool *pool)
{
    (void)pool;
    return thread_msg;
}

int wk_pool_stats(wk_pool *pool, wk_pool_usage *out)
{
    if (!pool || !out)
        return WK_EINVAL;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&pool->mu);
    out->size = pool->size;
    out->in_use = pool->size - pool->nfree;
    for (size_t i = 0; pool->lanes && i < pool->size; i++)
        out->in_use += !pool->borrowed[i] &&
                       atomic_load_explicit(&pool->lanes[i].load, memory_order_relaxed) > 0;
    out->waiting = pool->nwaiting;
    pthread_mutex_unlock(&pool->mu);
    out->borrows = atomic_load_explicit(&pool->borrows, memory_order_relaxed);
    out->borrow_timeouts = atomic_load_explicit(&pool->timeouts, memory_order_relaxed);
    wk__hist_read(out->borrow_buckets, &out->borrow_wait_ns, pool->wait_buckets, &pool->wait_ns);
    /* Every connection once (the front shares the first's) and the waits
     * made through the shared processor or a borrowed handle. */
    wk__stats_add(&out->handles, &pool->front);
    for (size_t i = 0; i < pool->size; i++)
        wk__stats_add(&out->handles, pool->handles[i]);
    return WK_OK;
}
