/*
 * wakuwaku/cron.h — a cron runtime: jobs run on an interval, on threads of
 * the runtime's own, and a helper that makes a job run once per interval
 * across all replicas of a service.
 *
 * Each replica runs its own wk_cron. A job has an interval and a kind:
 *
 *   WK_CRON_AT_LEAST      runs start at least `interval` apart and never
 *                         overlap: the next run starts `interval` after
 *                         the previous start, or when the previous run
 *                         finishes if that is later.
 *   WK_CRON_AFTER_FINISH  the next run starts `interval` after the
 *                         previous run finished.
 *   WK_CRON_AFTER_START   the next run starts `interval` after the
 *                         previous start, whether or not that run has
 *                         finished. WARNING: a run slower than the interval
 *                         overlaps the next one (each run gets a thread of
 *                         its own), so the job must be safe to run
 *                         concurrently with itself.
 *
 * Every job runs once as soon as the runtime starts (or as soon as it is
 * added to a running runtime), then on its schedule. Times are measured on
 * the library's clock (wk_monotonic_ms(): CLOCK_BOOTTIME where the system
 * has it, so time spent suspended counts; after a resume, due jobs run);
 * a "start" is the moment the runtime launched the run
 * (wk_cron_started_ms()), a "finish" the moment the job function returned.
 * An interval so large that the next start would overflow (INT64_MAX)
 * means "never again": the job runs once.
 *
 * A job returns a status: anything but WK_OK (0) is logged at
 * WK_LOG_ERROR through the runtime's log callback, and the schedule goes
 * on unchanged. Jobs are not retried early after a failure.
 *
 * Shutdown (wk_cron_stop()) stops scheduling, raises every job's stop flag
 * (wk_cron_stopping()), and waits for every running job to return.
 * WARNING: a job that never returns makes wk_cron_stop() (and
 * wk_cron_free()) wait forever — threads cannot be cancelled safely, and
 * freeing the runtime under a running job would be a use-after-free. Long
 * jobs must poll wk_cron_stopping() or sleep with wk_cron_sleep().
 *
 * Once per interval across replicas (wk_cron_add_once()): each run first
 * takes a Lock lease with wk_lock_try() (never waits) and runs the job only
 * if it got it; it does NOT release the lease afterwards. The lease (the
 * Lock entity's TTL) must be shorter than the interval. Replicas whose runs
 * fall due within one lease of each other therefore share a single run:
 * the first takes the lease, the others find it held and skip; by the next
 * tick, an interval later, the lease has run out and the lock is free
 * again. A lease ≥ the interval would make the winner's own next tick find
 * its old lease still held, so the helper refuses it (WK_EINVAL).
 *   What this guarantees: across all replicas, runs start at least one
 *   lease apart. While every replica's tick for an interval comes within
 *   one lease of the earliest one — replicas started together drift apart
 *   only by scheduling delays — the job runs exactly once per interval.
 *   Replicas whose ticks are spread wider run it more than once in some
 *   intervals, though never more often than once per lease. So pick the
 *   lease close to the interval (e.g. 80 %: a wide spread tolerated), yet
 *   short enough that the winner's next tick, an interval later, finds it
 *   expired despite scheduling delays. A replica started later runs its
 *   start-up run if the last lease has run out, and keeps that phase.
 *   A run longer than the lease would let another replica start the job
 *   while it still runs; set keep_alive to run it under a lease keeper
 *   (lease_keeper.h) that extends the lease for as long as it runs; the job
 *   then sees wk_cron_stopping() turn true if the lease is lost. When a
 *   kept-alive run ends, the lease is set back to end where it would have
 *   ended without the extensions — its tick's lock.try + the lease, on the
 *   server's clock — or deleted if that moment has passed, so the
 *   extensions never make the next tick (of any replica) find it held. A
 *   run that ends within the lease therefore behaves as without
 *   keep_alive; a longer one frees the lock as it ends. (If that cut-back
 *   fails — connection lost — it is logged at WK_LOG_WARN and the lease
 *   runs until one TTL after its last extension.)
 *   If lock.try's reply is lost (WK_EUNKNOWN), the run is skipped and
 *   logged at WK_LOG_ERROR; a lease it may have taken runs out within the
 *   TTL, before the next tick.
 *
 * Redis queries: the helper sends lock.try (WRITE) and, with keep_alive,
 * lock.extend (WRITE, from the keeper) plus two token-checked scripts of
 * its own on the lock: cron.lease_end (READ: where the lease just taken
 * ends, from the server's TIME and PTTL) and cron.lease_cut (WRITE:
 * PEXPIREAT back to that end after the run). All under the capability of
 * the wk_db_options it is given.
 *
 * THREADS: the runtime has one scheduler thread and starts one thread per
 * run. wk_cron_new/_add/_add_once/_start/_stop/_free/_errmsg are called
 * from the thread(s) that own the runtime, one at a time (not from a job).
 * The wk_cron_ctx functions are for the job they were given to, on its run
 * thread. The log callback is called from the scheduler and from run
 * threads, possibly concurrently: it must be thread-safe.
 */
#ifndef WAKUWAKU_CRON_H
#define WAKUWAKU_CRON_H

#include <wakuwaku/db.h>
#include <wakuwaku/lease_keeper.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Log levels, lowest first. */
typedef enum wk_log_level {
    WK_LOG_DEBUG = 0,
    WK_LOG_INFO = 1,
    WK_LOG_WARN = 2,
    WK_LOG_ERROR = 3
} wk_log_level;

/* wk_log_level_name — "debug", "info", "warn", "error" ("?" otherwise). Static. */
WK_API const char *wk_log_level_name(wk_log_level level);

/* A log callback: `message` (one line, no newline) is borrowed for the
 * call. Called from several threads, possibly at once. */
typedef void (*wk_log_fn)(void *ctx, wk_log_level level, const char *message);

typedef enum wk_cron_kind {
    WK_CRON_AT_LEAST = 0,
    WK_CRON_AFTER_FINISH = 1,
    WK_CRON_AFTER_START = 2
} wk_cron_kind;

typedef struct wk_cron wk_cron;
typedef struct wk_cron_ctx wk_cron_ctx;

/* A job: return WK_OK, or a status that is logged as the run's error.
 * `ctx` is valid for the duration of the call only. */
typedef int (*wk_cron_fn)(wk_cron_ctx *ctx, void *arg);

/*
 * Options of wk_cron_new(). Start from WK_CRON_OPTIONS_INIT.
 *
 *   log        optional: where messages go (job errors at WK_LOG_ERROR,
 *              lost leases at WK_LOG_WARN, runs at WK_LOG_DEBUG), with
 *              `log_ctx`. NULL: no logging.
 *   log_level  messages below this level are not passed to `log`.
 */
typedef struct wk_cron_options {
    wk_log_fn log;
    void *log_ctx;
    wk_log_level log_level;
} wk_cron_options;

#define WK_CRON_OPTIONS_INIT {.log = NULL, .log_ctx = NULL, .log_level = WK_LOG_INFO}

/*
 * A job's registration, for wk_cron_add(). Start from WK_CRON_JOB_INIT.
 *
 *   name         1..127 bytes, for messages (and the default lock name of
 *                wk_cron_add_once()). Copied.
 *   kind         see above.
 *   interval_ms  > 0.
 *   fn, arg      the job and its argument (arg is passed as is; it must
 *                stay valid until wk_cron_stop() returned).
 */
typedef struct wk_cron_job {
    const char *name;
    wk_cron_kind kind;
    int64_t interval_ms;
    wk_cron_fn fn;
    void *arg;
} wk_cron_job;

#define WK_CRON_JOB_INIT \
    {.name = NULL, .kind = WK_CRON_AT_LEAST, .interval_ms = 0, .fn = NULL, .arg = NULL}

/*
 * Options of wk_cron_add_once(). Start from WK_CRON_ONCE_OPTIONS_INIT.
 *
 *   db          required: how to connect and with what capability (WRITE
 *               on the Lock entity). Copied, strings and capability
 *               included. The runtime keeps one connection per job (a run
 *               that overlaps another opens a second one).
 *   lock        required: a Lock entity; its ttl_ms is the lease and must
 *               be < the job's interval. Copied.
 *   name        which lock of the entity; bytes NULL (the default): the
 *               job's name. Bytes copied.
 *   keep_alive  run the job under a lease keeper (extends the lease every
 *               TTL/3 on a connection of its own) because a run may outlast
 *               the lease; when the run ends, the lease is cut back to its
 *               tick's end (see above). Needs a lease the keeper accepts
 *               (lease_keeper.h: TTL ≥ 4 ms). Without it, a run longer
 *               than the lease is logged at WK_LOG_WARN.
 */
typedef struct wk_cron_once_options {
    const wk_db_options *db;
    const wk_entity *lock;
    wk_name name;
    bool keep_alive;
} wk_cron_once_options;

#define WK_CRON_ONCE_OPTIONS_INIT \
    {.db = NULL, .lock = NULL, .name = {WK_NAME_BYTES, NULL, 0, 0, 0}, .keep_alive = false}

/*
 * LIFECYCLE: new / start / stop / free, the library's rule for objects
 * that own threads (docs/basics.md, "Threads and ownership"): wk_cron_stop() joins
 * every thread and never frees; wk_cron_free() frees, stopping first if
 * need be. (The lease keeper and the settings follower follow the same
 * rule with start / halt / free.)
 */

/*
 * wk_cron_new — a runtime with no jobs; nothing runs until wk_cron_start().
 * `opts` NULL: WK_CRON_OPTIONS_INIT. Returns WK_OK, WK_EINVAL, WK_ENOMEM;
 * *out is NULL on failure. Free it with wk_cron_free().
 */
WK_API int wk_cron_new(wk_cron **out, const wk_cron_options *opts);

/*
 * wk_cron_add — register a job (before or after wk_cron_start(); once
 * started, it runs at once). Returns WK_OK; WK_EINVAL (bad name, kind,
 * interval or fn; runtime stopped — see wk_cron_errmsg()); WK_ENOMEM.
 */
WK_API int wk_cron_add(wk_cron *cron, const wk_cron_job *job);

/*
 * wk_cron_add_once — register a job that runs once per interval across
 * replicas (see above): each run takes the lease with wk_lock_try() and
 * runs `job->fn` only if it got it, and never releases it.
 *
 * Returns WK_OK; WK_EINVAL (as wk_cron_add, or: missing db or lock, not a
 * Lock entity, a lease not shorter than the interval, keep_alive with a
 * lease under 4 ms — see wk_cron_errmsg()); WK_ENOMEM. Errors of a run (cannot connect, lock.try
 * denied or failed, the job's own) are logged at WK_LOG_ERROR and the
 * schedule goes on. A run that did not get the lease is logged at
 * WK_LOG_DEBUG and is not an error.
 */
WK_API int wk_cron_add_once(wk_cron *cron, const wk_cron_job *job,
                            const wk_cron_once_options *once);

/*
 * wk_cron_start — start the scheduler thread: every job runs at once, then
 * on its schedule. Returns WK_OK; WK_EINVAL (already started or stopped);
 * WK_ENOMEM (no thread).
 */
WK_API int wk_cron_start(wk_cron *cron);

/*
 * wk_cron_stop — stop scheduling (no run starts after it is called), raise
 * the stop flag of every running job, and wait until all of them returned
 * (see the WARNING above about jobs that never return). Calling it again
 * is a no-op. Returns WK_OK, or WK_EINVAL when called from one of the
 * runtime's own threads (a job: nothing is done). NULL: WK_OK.
 */
WK_API int wk_cron_stop(wk_cron *cron);

/* wk_cron_free — wk_cron_stop() then free the runtime and its
 * connections. NULL is a harmless no-op. Not from a job. */
WK_API void wk_cron_free(wk_cron *cron);

/* wk_cron_errmsg — why the last wk_cron_add, _add_once or _start call
 * failed; borrowed until the next such call; "" if it did not fail. Never
 * NULL. */
WK_API const char *wk_cron_errmsg(const wk_cron *cron);

/* ------------------------------------------------------------------------
 * For jobs: their run's context
 * ---------------------------------------------------------------------- */

/*
 * wk_cron_stopping — true once the job should stop early: the runtime is
 * shutting down, or (wk_cron_add_once() with keep_alive) the lease was
 * lost. Lock-free.
 */
WK_API bool wk_cron_stopping(wk_cron_ctx *ctx);

/*
 * wk_cron_sleep — sleep `ms` milliseconds, waking early when the runtime
 * shuts down (INT64_MAX: until shutdown). Returns false if it woke early
 * because of shutdown, true otherwise. (A lost lease does not wake it;
 * poll wk_cron_stopping().)
 */
WK_API bool wk_cron_sleep(wk_cron_ctx *ctx, int64_t ms);

/* wk_cron_job_name — the job's name (borrowed, valid during the run). */
WK_API const char *wk_cron_job_name(const wk_cron_ctx *ctx);

/* wk_cron_run_number — 1 for the start-up run, then 2, 3, … (counts the
 * runs launched; a wk_cron_add_once() run that skipped still counts). */
WK_API uint64_t wk_cron_run_number(const wk_cron_ctx *ctx);

/* wk_cron_started_ms — when the runtime launched this run
 * (wk_monotonic_ms() clock); the "start" of the kinds above. */
WK_API int64_t wk_cron_started_ms(const wk_cron_ctx *ctx);

/* wk_cron_lease — the lease keeper of a wk_cron_add_once() run with
 * keep_alive (borrowed, valid during the run); NULL otherwise. */
WK_API wk_lease_keeper *wk_cron_lease(wk_cron_ctx *ctx);

/* wk_cron_log — log through the runtime's callback, prefixed with the
 * job's name. */
WK_API void wk_cron_log(wk_cron_ctx *ctx, wk_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_CRON_H */
