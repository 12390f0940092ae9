/*
 * collection/lease_script.h — the lease kinds (Lock, RwLock, FencedLock,
 * Semaphore) over the operation runner (collection/op.h): their takes
 * (a try, an attempt of a waiting acquire, and the single-key steps of a
 * take that a migration splits), the try every kind shares, and the
 * waiting acquire over collection/wake.h. Each public lease function is a
 * wk__op descriptor and one of these calls. Not installed.
 */
#ifndef WK_COLLECTION_LEASE_SCRIPT_H
#define WK_COLLECTION_LEASE_SCRIPT_H

#include "collection/common.h"
#include "collection/op.h"
#include "collection/wake.h"

/* The scripts of the cycles the benchmark repeats with raw hiredis
 * (bench/bench_lease_kinds.c), KEYS and ARGV as documented beside them. */
extern const wk__two_forms wk__fenced_lock_try_forms; /* lease, fence | token, ttl, -1, w */
#define wk__fenced_lock_try_script (wk__fenced_lock_try_forms.script)
extern const wk__two_forms wk__fenced_lock_release_forms; /* lease, fence, q, e | token, w */
#define wk__fenced_lock_release_script (wk__fenced_lock_release_forms.script)
extern const wk__two_forms wk__semaphore_try_forms;     /* permits, q, e | token, ttl, N, -1, w */
#define wk__semaphore_try_script (wk__semaphore_try_forms.script)
extern const wk__two_forms wk__semaphore_release_forms; /* permits, q, e | token, w, ttl, N */
#define wk__semaphore_release_script (wk__semaphore_release_forms.script)
/* permits, q, e | token, ttl, N, cap, w; its single-key form in semaphore.c */
extern const wk__two_forms wk__semaphore_acquire_forms;

/* ------------------------------------------------------------------------
 * While a slot migrates (core/core_internal.h, wk__two_forms): the single-key
 * forms of the lease scripts, KEYS[1] = the item's first key, ARGV as the
 * full form's. None wakes a waiter (the wake keys are left out): a waiter
 * wakes at the end of its sleep, at the latest when the lease it waited
 * for would have run out, and attempts again. collection/lease_fallback.c.
 * ---------------------------------------------------------------------- */

extern const wk_script wk__lock_release_single;        /* lock | token, w */
extern const wk_script wk__lock_acquire_single;        /* lock | token, ttl, w, cap, fair */
extern const wk_script wk__reader_release_single;      /* sorted set | token, w */
extern const wk_script wk__fenced_lock_release_single; /* lease | token, w */

/* ------------------------------------------------------------------------
 * Split takes: the takes of RwLock (writer w + readers r) and FencedLock
 * (lease + fence) need two item keys at once, and Redis refuses a script
 * while its keys are split by a migration or missing. On TRYAGAIN such a
 * take goes on in single-key steps, each on the node that holds its key
 * (core routes it and follows ASK), which is safe because each key is
 * linearizable on its own: write your own mark, then look at the other's.
 *
 *   1. mark   (the take's single-key form, sent by core at once): the
 *             writer SET NX w; a reader ZADD r; a FencedLock HSET the
 *             lease if absent, its fence "0" (not drawn yet). Not taken
 *             there: the reply says so, {0, sleep}, and that is the
 *             outcome. Else {2, 0}: marked, steps 2-3 follow.
 *   2. check  on the other key: a writer looks for running readers, a
 *             reader for a writer ({0, ms it stays} → give the mark back,
 *             not acquired); a FencedLock draws its fence (INCR).
 *   3. commit (FencedLock) the fence into the lease if the token still
 *             holds it (else not acquired: a drawn fence is handed out
 *             only to a holder, so handed-out fences still increase in
 *             the order of acquisition).
 *
 * A writer and a reader that both do this (or one of them the atomic full
 * form) cannot both succeed: the later mark's check sees the earlier one.
 * Both may give back: a spurious refusal, retried like any. Every write
 * step is a lease query (acknowledged with lease_replicas). A mark is never
 * left behind on failure: a failed step 2 or 3 gives it back with the
 * kind's release, and only if that fails too is WK_EUNKNOWN returned (held
 * under the token, perhaps). Waits are not queued (as the other
 * single-key forms): a waiter sleeps the other side's remaining lease.
 *
 * A take is split only where its caller can run the steps: not through a
 * deferred processor (a batch), whose take waits out TRYAGAIN as any
 * query does and fails as not run (WK_ETIMEDOUT). Its descriptor names
 * the steps (wk__op.steps, with `forms`); wk__lease_take() runs them.
 * ---------------------------------------------------------------------- */

/* The marks (step 1): KEYS[1] = the marked key, ARGV = the full form's.
 * {2, 0} marked; {0, sleep ms} not taken (0 for a try, whose ARGV has no
 * cap). */
extern const wk_script wk__rwlock_write_mark;  /* w | token, ttl[, w, cap, fair] */
extern const wk_script wk__rwlock_read_mark;   /* r | token, ttl[, w, cap, fair] */
extern const wk_script wk__fenced_lock_mark;   /* lease | token, ttl[, cap, w] */

/* What a take answered, in the full form's shape (1/0, a fence or 0,
 * {1, fence}, {0, sleep}) or as a mark ({2, 0}). */
typedef struct wk__take_reply {
    bool parsed; /* the reply is here; else op->parse wrote the call's OUT */
    bool acquired;
    bool marked; /* only step 1 ran: finish with wk__split_take_finish() */
    int64_t n;   /* acquired: the fence (FencedLock); else ms to sleep */
} wk__take_reply;

/* The parser of those replies and of the steps' (`out`: wk__take_reply).
 * A lease query's WAIT is judged for an acquired or marked reply. */
int wk__take_parse(const wk_query *q, const wk_reply *r, wk_diag *d);

/* Steps 2 and 3 of one kind and side. */
typedef struct wk__split_steps {
    int marked; /* the item key (wk__call.key) step 1 marks; the other is the other one */
    /* KEYS: the other key. ARGV: token, ttl. {1, n}: free (n: the drawn
     * fence), or {0, ms the other side's lease runs}. */
    const wk_script *check;
    bool draws;              /* it writes (INCR): a lease query */
    const wk_script *commit; /* NULL, or KEYS: the marked key. ARGV: token, n. n or 0 */
    wk__lease_release_fn give_back; /* the kind's release, with the token */
} wk__split_steps;

extern const wk__split_steps wk__rwlock_write_steps; /* marked w, other r */
extern const wk__split_steps wk__rwlock_read_steps;  /* marked r, other w */
extern const wk__split_steps wk__fenced_lock_steps;  /* marked lease, other fence */

/* Steps 2 and 3 of the take of call c (its op's steps, token and cap_ms)
 * whose step 1 answered `marked`: *out as the full form would have
 * answered (the sleep within cap_ms). Returns WK_OK; WK_ENOTREPLICATED
 * from a step's WAIT (the caller gives the lease back, wk__lease_settle);
 * a step's failure after the mark was given back (WK_EUNKNOWN reported as
 * WK_EIO: nothing is held); WK_EUNKNOWN when the give-back failed too. */
int wk__split_take_finish(const wk__call *c, wk__take_reply *out);

/* ------------------------------------------------------------------------
 * Takes, tries and waits
 * ---------------------------------------------------------------------- */

/* Send the take of call c (begun on a take's descriptor: its token set,
 * c->cap_ms for an attempt). A take a migration may split (op->steps)
 * through an immediate processor is parsed into *got (got->parsed), and
 * finished when only its mark ran; any other take is parsed by op->parse
 * into c->out, *got left unparsed. The query's status, or the steps'. */
int wk__lease_take(wk__call *c, wk__take_reply *got);

/* A try with a bool outcome (Lock, RwLock, Semaphore): begin `op` with
 * the caller's token, draw the token anew (written now, so that a batch's
 * caller has it before the batch runs; `acquired` when the reply is
 * parsed), take, and give back an unacknowledged lease through the kind's
 * public `release` (wk__lease_settle). */
int wk__lease_try(wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
                  wk_token *token, bool *acquired, wk__lease_release_fn release);

/* One attempt of a waiting acquire (wk__waiter.attempt) whose ctx is the
 * wk__call of the acquire-or-park take: that take with `cap_ms`. */
int wk__lease_attempt(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out);

/* The wait of an acquire (wk__wake_wait) whose plain try did not take
 * it: c is begun on the acquire-or-park take with the try's token (the
 * waiter's place in the queue, and the lease's once taken); `attempt`
 * is wk__lease_attempt or the kind's; `release` gives back a lease taken
 * but not acknowledged; `handed_n` receives the number of a handed-over
 * notice (a fence), or NULL. The take's op->leave, when set, is the
 * waiter's leave (wk__lease_leave). */
int wk__lease_wait(wk__call *c, int64_t deadline, wk__lease_release_fn release,
                   int (*attempt)(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out),
                   int64_t *handed_n, bool *acquired);

/* The leave of call c's waiter: c->op->leave sent on c's keys and token
 * (a kind that hands over: it passes on an item handed to the waiter),
 * or wk__wake_leave. `p` is the processor to send it through. */
int wk__lease_leave_call(const wk__call *c, wk_processor *p);

/* The whole waiting acquire of a bool-outcome kind: wk__wake_begin()
 * (the checks and one plain try, `try_once`), then wk__lease_wait() of
 * `acquire` with wk__lease_attempt. */
int wk__lease_acquire(const wk__op *acquire, wk__try_fn try_once, wk__lease_release_fn release,
                      wk_processor *p, const wk_entity *e, wk_name name, int64_t deadline,
                      const wk_backoff *backoff, wk_token *token, bool *acquired);

/* The waiting acquire through an event-loop handle's processor p
 * (collection/lease_loop.c; wakuwaku/async.h, SEMANTICS 6): draw the
 * token, queue the first attempt of `acquire` and return its queuing
 * status; the caller's callback (the one p was taken with) runs once
 * when it is acquired, refused or past the deadline, *acquired (and
 * *fence, FencedLock, when not NULL) written before. */
int wk__lease_loop_acquire(const wk__op *acquire, wk_processor *p, const wk_entity *e,
                           wk_name name, int64_t deadline, wk_token *token, bool *acquired,
                           int64_t *fence, wk__lease_release_fn release);

#endif /* WK_COLLECTION_LEASE_SCRIPT_H */
