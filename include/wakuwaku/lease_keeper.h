/*
 * wakuwaku/lease_keeper.h — keep a lease alive while work runs ("while
 * held"), and tell the work at once when the lease is lost.
 *
 * A lease keeper holds a token of a Lock, of an RwLock writer or of an
 * RwLock reader, and extends it every period (default TTL/3; see the
 * period rule below) from a thread and a connection
 * of its own (a wk_db opened from the wk_db_options you give, with their
 * capability). As soon as an extension reports that the token no longer
 * holds the lease, or the lease could have run out for want of a
 * successful extension, the keeper marks the lease lost:
 *
 *   - wk_lease_keeper_lost() returns true from then on (an atomic flag the
 *     work polls; lock-free, from any thread), and
 *   - the optional `on_lost` callback runs once on the keeper's thread.
 *
 * No new query: the keeper sends lock.extend / rwlock.extend_write /
 * rwlock.extend_read (and the matching release when asked), all WRITE, so
 * its capability must grant WRITE on the entity.
 *
 * When the lease counts as lost — the rule, conservatively:
 *   1. An extension replies false (the key is gone, or holds another
 *      token): lost at once; status WK_OK.
 *   2. An extension fails with a connection error (wk_is_connection_error:
 *      WK_EIO, WK_ETIMEDOUT, WK_EUNKNOWN): the keeper retries (every
 *      period/4, at least 10 ms) for as long as the lease may still run.
 *      The lease surely runs until `valid_until` = the moment the last
 *      *confirmed* extension was sent + TTL − a clock-drift allowance
 *      (drift = TTL/100 + 2 ms, as Redlock): the server restarted the TTL
 *      no earlier than that send. An extension with an unknown outcome
 *      (WK_EUNKNOWN: sent, reply lost) may or may not have restarted it,
 *      so it does not move valid_until. At valid_until the lease counts as
 *      lost (status: the last connection error, or WK_ETIMEDOUT if the
 *      keeper's thread just did not get to run). wk_lease_keeper_lost()
 *      checks the clock itself, so it never reports "held" past
 *      valid_until even if the keeper's thread is stuck in a slow command.
 *      A reply that arrives at or after valid_until does not count either:
 *      "held" would have been a guess in between.
 *   3. Any other failure (WK_EDENIED, WK_EREDIS, …) cannot heal by
 *      retrying: lost at once, with that status.
 * Once lost, always lost: the keeper stops extending, even if a later
 * extension would have found the token still there.
 *
 * The period rule — what the loss rule needs of the period. An extension
 * sent on time, one period after the last confirmed one, must get its
 * reply before valid_until, i.e. within TTL − drift − period. The keeper
 * leaves at least `reply` = TTL/10 (at most 50 ms, at least 1 ms) for it,
 * so wk_lease_keeper_start() refuses (WK_EINVAL, naming the limit)
 *
 *     period_ms > TTL − drift − reply      e.g. TTL 1000: period ≤ 938
 *                                               TTL 3000: period ≤ 2918
 *
 * and a TTL for which that limit is < 1 ms (TTL ≤ 3). A longer period
 * would lose a healthy lease at its first heartbeat. Within the limit the
 * margin is the user's choice: with period = TTL/3 (the default) a lease
 * survives an outage of about 2/3 TTL; near the limit, any reply or
 * wake-up of the keeper's thread later than the margin counts as a loss.
 *
 * Clock: valid_until and every time of the keeper are on the library's
 * clock (wk_monotonic_ms(): CLOCK_BOOTTIME where the system has it),
 * which keeps counting while the system is suspended, as the server's TTL
 * does: after a resume past valid_until, wk_lease_keeper_lost() is true at
 * once. (The keeper's thread sleeps on CLOCK_MONOTONIC, which stops during
 * a suspend, so after a resume on_lost may come up to one period late;
 * wk_lease_keeper_lost() does not wait for it.)
 *
 * Timeouts: the keeper's connection uses the given connect and command
 * timeouts capped at max(50 ms, min(period, TTL − drift − period)), so one
 * stuck command cannot hold the heartbeat up for longer than a period, nor
 * much past the moment its reply could still count.
 *
 * WARNING: the keeper tells; it cannot stop the work. Work that writes to a
 * shared resource must poll wk_lease_keeper_lost() (or react to the
 * callback) before each step, and should still fence its writes (see
 * lock.h): a process paused between its check and its write can act on a
 * lease that just ran out.
 *
 * THREADS: the keeper's own wk_db is used only by its thread (and by
 * wk_lease_keeper_halt() after that thread ended). wk_lease_keeper_lost(),
 * _status() and _valid_until() are lock-free and safe from any thread,
 * concurrently with everything but wk_lease_keeper_free().
 * wk_lease_keeper_halt() and _free() are called from any thread but the
 * keeper's own (never from on_lost), one at a time.
 */
#ifndef WAKUWAKU_LEASE_KEEPER_H
#define WAKUWAKU_LEASE_KEEPER_H

#include <wakuwaku/db.h>
#include <wakuwaku/lock.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Which lease a token holds. */
typedef enum wk_lease_kind {
    WK_LEASE_LOCK = 0,  /* a Lock token: wk_lock_extend / wk_lock_release */
    WK_LEASE_WRITE = 1, /* an RwLock writer token: wk_rwlock_extend_write / _release_write */
    WK_LEASE_READ = 2   /* an RwLock reader token: wk_rwlock_extend_read / _release_read */
} wk_lease_kind;

typedef struct wk_lease_keeper wk_lease_keeper;

/*
 * The lost-lease callback: runs once, on the keeper's thread, right after
 * wk_lease_keeper_lost() started returning true. `status` is WK_OK when an
 * extension found the lease gone, else the failure that kept it from being
 * renewed (see the rule above). Keep it short; it must not call
 * wk_lease_keeper_halt(), _free() or _stop(). It is not called when
 * wk_lease_keeper_start() itself found the lease gone.
 */
typedef void (*wk_lease_lost_fn)(void *ctx, int status);

/*
 * Options of wk_lease_keeper_start(). Start from
 * WK_LEASE_KEEPER_OPTIONS_INIT.
 *
 *   db         required: how the keeper connects, and with what capability
 *              (WRITE on the entity). Copied during the call.
 *   kind       which lease `token` holds.
 *   entity     required: the Lock or RwLock entity; its ttl_ms is the
 *              lease. Copied.
 *   name       the item; its bytes are copied.
 *   token      the token holding the lease (from wk_lock_try, …).
 *   period_ms  time between extensions; 0: ttl_ms / 3 (at least 1 ms).
 *              At most ttl_ms − drift − reply (the period rule above: 938
 *              for ttl_ms 1000); negative is refused.
 *   release    wk_lease_keeper_halt() releases the lease (token-checked)
 *              after the heartbeat ended. false leaves it to run out.
 *   on_lost    optional callback (see wk_lease_lost_fn), with `ctx`.
 */
typedef struct wk_lease_keeper_options {
    const wk_db_options *db;
    wk_lease_kind kind;
    const wk_entity *entity;
    wk_name name;
    wk_token token;
    int64_t period_ms;
    bool release;
    wk_lease_lost_fn on_lost;
    void *ctx;
} wk_lease_keeper_options;

#define WK_LEASE_KEEPER_OPTIONS_INIT                                                          \
    {.db = NULL, .kind = WK_LEASE_LOCK, .entity = NULL, .name = {WK_NAME_BYTES, NULL, 0, 0, 0}, \
     .token = {{0}}, .period_ms = 0, .release = false, .on_lost = NULL, .ctx = NULL}

/* What a keeper saw, from wk_lease_keeper_halt() / wk_lease_keeper_run(). */
typedef struct wk_lease_outcome {
    bool lost;           /* the lease was lost (or could have run out) before stop */
    int lost_status;     /* why (see the rule above); WK_OK when not lost */
    uint64_t extensions; /* successful extensions, the one at start included */
    bool released;       /* `release` asked and the lease was still ours to release */
    bool ran;            /* wk_lease_keeper_run(): the work was called */
    int work_status;     /* wk_lease_keeper_run(): what the work returned (WK_OK if !ran) */
} wk_lease_outcome;

/*
 * wk_lease_keeper_start — open the keeper's connection, extend the lease
 * once right away (this also proves the token still holds it and starts
 * the valid_until clock), then start the heartbeat thread.
 *
 *   out   OUT: the keeper; NULL on failure.
 *   opts  see wk_lease_keeper_options.
 *   err   OUT, may be NULL: a message on failure (at most errlen bytes,
 *         NUL-terminated; passwords never appear).
 *
 * Returns WK_OK — check wk_lease_keeper_lost(): if that first extension
 * found the lease gone the keeper starts lost (no thread, no callback);
 * WK_EINVAL (bad options, entity, kind or name; a period or TTL the
 * period rule refuses — `err` names the limit); WK_EDENIED (the
 * capability does not grant WRITE); a connection error (cannot connect, or
 * the first extension failed: nothing was started; the lease still runs
 * until its TTL from the last extension that reached the server — after
 * WK_EUNKNOWN that may be this first one); WK_ENOMEM. End it with
 * wk_lease_keeper_halt() and wk_lease_keeper_free().
 */
WK_API int wk_lease_keeper_start(wk_lease_keeper **out, const wk_lease_keeper_options *opts,
                                 char *err, size_t errlen);

/*
 * wk_lease_keeper_lost — true once the lease is lost or could have run
 * out; then true for good. Lock-free, from any thread. NULL: true.
 */
WK_API bool wk_lease_keeper_lost(wk_lease_keeper *k);

/* wk_lease_keeper_status — why it was lost (WK_OK: an extension found it
 * gone, or not lost yet). Lock-free, from any thread. */
WK_API int wk_lease_keeper_status(const wk_lease_keeper *k);

/*
 * wk_lease_keeper_valid_until — the wk_monotonic_ms() moment (a clock
 * that counts suspend) until which the lease surely runs (as of the last
 * confirmed extension); 0 once lost. Work can use it to avoid starting a step that would outlast it.
 * Lock-free, from any thread.
 */
WK_API int64_t wk_lease_keeper_valid_until(wk_lease_keeper *k);

/*
 * LIFECYCLE: start / halt / free. wk_lease_keeper_start() creates the
 * keeper and starts its thread; wk_lease_keeper_halt() stops the thread
 * and never frees; wk_lease_keeper_free() frees (halting first if need
 * be). wk_lease_keeper_stop(), which halts AND frees, is the old name of
 * that pair: a deprecated alias kept for one release (0.1.x), with
 * unchanged behaviour. (The rule of the library: start/stop for threads,
 * where stopping never frees; `stop` here keeps its 0.1 meaning until the
 * alias is gone, so the verb that only stops is `halt` meanwhile.)
 */

/*
 * wk_lease_keeper_halt — end the heartbeat (waits for the thread, and so
 * for a running on_lost), release the lease if options.release, and close
 * the connection. Does not free: the keeper stays readable (_lost(),
 * _status(), _valid_until() answer from the last confirmed extension, which
 * is no longer renewed) until wk_lease_keeper_free().
 *
 *   outcome  OUT, may be NULL: what the keeper saw.
 *
 * Returns WK_OK, the release's error (after WK_EUNKNOWN the release may or
 * may not have happened — if not, the lease runs out one TTL after the
 * last extension), or WK_EINVAL when called from the keeper's own thread
 * (from on_lost: nothing is done). A second call does nothing more and
 * returns the first one's status and outcome. NULL is a harmless no-op
 * (WK_OK, a zeroed outcome).
 */
WK_API int wk_lease_keeper_halt(wk_lease_keeper *k, wk_lease_outcome *outcome);

/*
 * wk_lease_keeper_free — halt the keeper if it still runs (as
 * wk_lease_keeper_halt(), its outcome and release status dropped: call
 * halt first to see them), then free it. Called from the keeper's own
 * thread (on_lost) it does nothing. NULL is a harmless no-op.
 */
WK_API void wk_lease_keeper_free(wk_lease_keeper *k);

/*
 * wk_lease_keeper_stop — DEPRECATED alias, kept for one release:
 * wk_lease_keeper_halt(k, outcome) and then wk_lease_keeper_free(k), the
 * keeper freed whatever the release returned. Returns halt's status. From
 * the keeper's own thread: WK_EINVAL, nothing done. NULL is a harmless
 * no-op (WK_OK). New code: halt + free.
 */
WK_API int wk_lease_keeper_stop(wk_lease_keeper *k, wk_lease_outcome *outcome);

/*
 * The work run by wk_lease_keeper_run(): poll wk_lease_keeper_lost(keeper)
 * and stop soon after it turns true. Runs on the caller's thread.
 */
typedef int (*wk_lease_work_fn)(wk_lease_keeper *keeper, void *arg);

/*
 * wk_lease_keeper_run — "while held": start a keeper, run `work(keeper,
 * arg)` on the calling thread while the keeper extends the lease, then stop
 * the keeper (releasing the lease if opts->release).
 *
 *   outcome  OUT, required: lost / lost_status (the work was told),
 *            extensions, released, and ran / work_status. When the lease
 *            was already gone at start, the work is not run (ran false,
 *            lost true).
 *
 * Returns WK_OK (see *outcome) or the error of wk_lease_keeper_start()
 * (the work was not run) or of the release. WRITE effect (extensions).
 * The caller's own handles are not used: the keeper has its own.
 */
WK_API int wk_lease_keeper_run(const wk_lease_keeper_options *opts, wk_lease_work_fn work,
                               void *arg, wk_lease_outcome *outcome, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_LEASE_KEEPER_H */
