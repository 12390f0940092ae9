/*
 * core/core_internal.h — what core/ offers the other modules of the library
 * (collection/, …) without exposing hiredis. Not installed.
 */
#ifndef WK_CORE_INTERNAL_H
#define WK_CORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdint.h>
#include <time.h>

#include <wakuwaku/db.h>
#include <wakuwaku/key.h>
#include <wakuwaku/query.h>

#include "base/base.h"
#include "entity/kind.h"

/* Record a detail message on the handle behind `p` and return `status`. */
int wk__processor_fail(wk_processor *p, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The key of `q` (a script's first key, a command's first argument)
 * rendered with wk__render_key(); "" when the query has none. */
void wk__query_key(const wk_query *q, char *dst, size_t cap);

/* wk_key_build() for an entity whose kind and namespace were already
 * checked (wk_entity_check() does that): every query's builder calls
 * wk__prepare(), which checks the descriptor first, so the hot path scans
 * the names once. Same arguments and returns; buf, len, name not NULL. */
int wk__key_build_checked(char *buf, size_t cap, size_t *len, const wk_entity *entity,
                          const wk_name *name, const char *suffix);

/* Checks an item name for wk_key_build(): WK_OK, or WK_EINVAL with "name
 * is NULL", "name is N bytes, more than WK_NAME_MAX (2048)", … in msg
 * (may be NULL). Defined in core/key.c. */
int wk__name_check(const wk_name *name, char *msg, size_t len);

/* CRC16/XMODEM (poly 0x1021, init 0), as Redis Cluster uses. Defined in
 * core/key.c. */
uint16_t wk__crc16(const void *data, size_t len);

/* Where the hash tag of a key is, if it has one: the bytes between the
 * first '{' and the first '}' after it, when not empty. */
bool wk__hash_tag(const char *key, size_t len, size_t *start, size_t *end);

/* The bytes a key's slot is the CRC of: its hash tag, or the whole key. */
void wk__key_hashed(const char *key, size_t len, const char **bytes, size_t *n);

/* The cluster slot (0..16383) of a key, with the hash-tag rule. */
unsigned wk__key_slot(const void *key, size_t len);

/* ------------------------------------------------------------------------
 * Scripts with a single-key form (core/exchange.c)
 *
 * While a cluster slot migrates, Redis answers TRYAGAIN to a script whose
 * declared keys are not all on the node (a lease's wake keys usually exist
 * nowhere). A query flagged WK__QUERY_SINGLE_KEY has q->script pointing at
 * the `script` member of a wk__two_forms; on TRYAGAIN the exchange sends
 * `single_key` at once instead: KEYS = the query's key number `key` only
 * (0: the first), ARGV = the query's arguments unchanged (its other keys
 * are left out). Its reply goes to the query's parser, which must read it
 * (the full form's shape, or one the parser knows: collection/lease_script.h).
 * ---------------------------------------------------------------------- */

#define WK__QUERY_SINGLE_KEY (1u << 31) /* internal; q->script is a wk__two_forms */

typedef struct wk__two_forms {
    wk_script script;            /* first: the query's script points here */
    const wk_script *single_key; /* touches its KEYS[1] only */
    int key;                     /* which of the query's keys that is */
} wk__two_forms;

/* ------------------------------------------------------------------------
 * Companion keys (core/key.c): the one place that derives a key that is
 * not an item key. Every companion key of every kind comes from here.
 * ---------------------------------------------------------------------- */

typedef enum wk__key_role {
    WK__ROLE_WAKE_QUEUE, /* the wake queue (sorted set) */
    WK__ROLE_WAKE_REGS,  /* the waiters' registrations (sorted set) */
    WK__ROLE_WAKE_LIST,  /* the prefix of a waiter's wake-up list: + 16-byte id */
} wk__key_role;

/* The longest companion key, a waiter's list (id of WK_TOKEN_LEN = 16
 * bytes) included. */
#define WK__COMPANION_KEY_MAX (2 * WK_KEY_MAX + 32)

/* Write the companion key `role` of the item whose anchor key (the item
 * key its kind hangs companions on: the key of a single-key item, the
 * first key of a multi-key one, built by wk__key_build_checked() from
 * (kind, namespace, name)) is item_key[0..item_len), into buf. The
 * result is in the anchor key's cluster slot, never equals any item key
 * of any kind, and no two (anchor key, role) give the same bytes (the
 * proof is in core/key.c). NUL-terminated. WK_OK, or WK_EINVAL (item_len
 * > WK_KEY_MAX, unknown role, buffer too small). Thread-safe. */
int wk__companion_key(char *buf, size_t cap, size_t *len, const char *item_key, size_t item_len,
                      wk__key_role role);
/* The n companion keys roles[i] of one item at once (the tag found once),
 * each into bufs[i] (caps[i] bytes), lengths into lens[i]; same rules. */
int wk__companion_keys(const char *item_key, size_t item_len, const wk__key_role *roles, int n,
                       char *const *bufs, const size_t *caps, size_t *lens);

/* The shortest string T of [0-9A-Za-z] (1..3 bytes, shortest first) whose
 * CRC16 slot is `slot`, into t (not NUL-terminated); returns its length. */
size_t wk__key_tag_for_slot(unsigned slot, char t[4]);

/* ------------------------------------------------------------------------
 * The clock of leases and deadlines (core/clock.c). Thread-safe.
 * ---------------------------------------------------------------------- */

/* Milliseconds on CLOCK_BOOTTIME (counts time spent suspended, like the
 * server's lease clock), or CLOCK_MONOTONIC where the system has no
 * CLOCK_BOOTTIME. Arbitrary origin; never goes back. Every lease validity
 * and every deadline of the helpers is measured on it. */
int64_t wk__boot_ms(void);

/* t + ms, saturated at INT64_MAX / INT64_MIN instead of overflowing. */
int64_t wk__add_ms(int64_t t, int64_t ms);

/* Sleep until wk__boot_ms() >= when (at once if it is already). Signals
 * do not cut it short. */
void wk__sleep_until_ms(int64_t when);

/* The CLOCK_MONOTONIC time at which a wk__boot_ms() deadline `when` falls
 * as of now, for pthread_cond_timedwait() on a condition whose clock is
 * CLOCK_MONOTONIC (conditions cannot use CLOCK_BOOTTIME). After a suspend
 * the wait wakes late, never early: re-read wk__boot_ms() after waking. */
void wk__cond_abstime(int64_t when, struct timespec *ts);

/* The deadline of a call on `db` starting now (its command timeout from
 * now), and a bound every query on `db` keeps besides its own until set
 * again (0: none; returns the previous one): a caller whose one call runs
 * several queries (the near cache's get, a waiting acquire, the `wk`
 * CLI's --timeout) fixes the deadline once, and every query on `db`, any
 * reconnect inside them included, ends by it. Same thread rule as `db`;
 * on a pool's shared handle (no connection of its own, many threads) the
 * bound is the calling thread's, on its queries through any pool's
 * shared processor: their wait for a connection ends by it too. */
int64_t wk__db_call_deadline(const wk_db *db);
int64_t wk__db_bound(wk_db *db, int64_t deadline);

/* How often a multiplexing pool's threads woke the lanes' leaders from
 * their poll (core/pool_mux.h), summed over the lanes; for tests. */
struct wk_pool;
uint64_t wk__pool_leader_kicks(struct wk_pool *pool);

/* How many chunks of token streams the process has mapped (core/token.c;
 * never unmapped); for tests. */
size_t wk__token_chunks(void);

/* Lock `mu`, waiting until the wk__boot_ms() deadline `when` at most:
 * 0, or ETIMEDOUT (not locked). A wall-clock change cannot stretch the
 * wait by more than one 100 ms step. */
int wk__mutex_lock_until(pthread_mutex_t *mu, int64_t when);

/* ------------------------------------------------------------------------
 * Set-up plumbing of the thread-owning helpers (core/options.c)
 * ---------------------------------------------------------------------- */

/* A deep copy of `src` into `dst` that outlives the caller's: the strings
 * and the capability are the copy's own. WK_OK, or WK_ENOMEM (or the
 * status of copying the capability) with nothing left to free. A NULL
 * capability stays NULL (wk_db_open() then says so). */
/*
 * Acknowledged leases (wk_db_options.lease_replicas). A query that takes
 * or lengthens a lease sets WK__QUERY_LEASE in its flags (a bit of the
 * library's own, beside the public WK_QUERY_* ones). On a handle with
 * lease_replicas N, every path that sends it (a single query, a batch, a
 * cluster's fan-out, the event loop) writes `WAIT N lease_ack_timeout_ms`
 * right behind it in the same send on the same connection, and reads
 * that reply too before the query's parser runs: if the connection is
 * lost before it, the query is LOST (a write: WK_EUNKNOWN), never held.
 * Its parser ends with wk__lease_acknowledged(d, &held): when the lease
 * was taken (*held) but fewer than N replicas acknowledged it (or the
 * WAIT failed) it sets *held false and returns WK_ENOTREPLICATED with the
 * message; otherwise WK_OK. The kind then gives the lease back
 * (wk__lease_settle in collection/common.h).
 */
#define WK__QUERY_LEASE (1u << 16)

/* A library operation's query, built by the op runner (collection/op.c)
 * from its static descriptor: `name` is a string that lives as long as
 * the program, and the entity's kind was checked to be that operation's.
 * The metrics wrapper then confirms only the namespace's bytes. */
#define WK__QUERY_OP (1u << 17)

/* A ROLE query asking whether the node is still the primary (a
 * redis-sentinel:// handle's followers and near cache). Its reply judged
 * in the exchange: a node that says it is not the primary drops the
 * connection once the round ends — the next query asks the sentinels
 * anew — and the query completes with that reply (*primary false). */
#define WK__QUERY_ROLE_CHECK (1u << 18)
/* A blocking command (a waiter's wake-up BLPOP) whose wait the call's
 * deadline may end WITHOUT dropping its connection: when it is alone in
 * its exchange and fully written, the deadline settles it WK_ETIMEDOUT
 * and its link owes the reply (wk__link.owed), which is read and dropped
 * before any other. For a command whose late reply changes nothing its
 * caller relies on — the attempt after a wake-up pop says whose the item
 * is — so the next wait needs no new connection (the server's own
 * timeout fires up to a timer tick late, so nearly every wait that times
 * out would otherwise cost one). */
#define WK__QUERY_ABANDON (1u << 19)

/* A cluster's TRYAGAIN is this query's reply (WK_EREDIS, the server's
 * message), not paused and sent again by the exchange: the event loop's
 * waits BLPOP (core/async_wait_cluster.c), whose waiters attempt again
 * instead — in a migration window no release pushes a wake-up. */
#define WK__QUERY_TRYAGAIN_FINAL (1u << 20)
/* Fill *q with that query: out = primary (true also when ROLE is
 * refused: an ACL; the connection still answered). */
void wk__role_query(wk_query *q, bool *primary);

/* The read-only loaded segments of the main program and of the object
 * holding the library (core/image.c): at most `max` into `out`; how many.
 * Bytes there never change while the process runs. */
typedef struct wk__range {
    uintptr_t lo, hi;
} wk__range;
size_t wk__readonly_image(wk__range *out, size_t max);

/* The upper bounds, in ns, of every latency histogram (queries, waits,
 * borrows): 50 µs … 10 s, as wakuwaku/metrics.h lists them (core/stats.c). */
extern const uint64_t wk__hist_bounds_ns[WK_STATS_BUCKETS];

/* Counting a handle's waits for leases (core/stats.c, wk_db_stats()): a
 * wait through `p` begins (returns its start, for wk__count_wait_end)
 * and ends with `rc`: acquired or not (WK_OK: the deadline passed), after
 * sleeping for a release or not. */
uint64_t wk__count_wait_begin(wk_processor *p);
void wk__count_wait_end(wk_processor *p, uint64_t start, int rc, bool acquired, bool slept);
int wk__lease_acknowledged(wk_diag *d, bool *held);

int wk__db_options_copy(wk_db_options *dst, const wk_db_options *src);

/* Free what wk__db_options_copy() made (the password zeroed first) and
 * clear those fields. NULL is a harmless no-op. */
void wk__db_options_free(wk_db_options *o);

/* An entity and one item name a helper keeps past the call: `entity` is a
 * copy of the caller's with `kind` (a static string) and `ns` (owned), and
 * `name` a copy whose bytes, if any, are owned (and NUL-terminated). */
typedef struct wk__held {
    wk_entity entity;
    wk_name name;
    char *ns;
    char *name_bytes;
} wk__held;

/* Fill `h` from `e` (checked by the caller) and `name`. WK_OK, or
 * WK_ENOMEM with nothing left to free. */
int wk__held_init(wk__held *h, const wk_entity *e, const char *kind, const wk_name *name);

/* Free the copies of wk__held_init(). NULL and a zeroed `h` are no-ops. */
void wk__held_free(wk__held *h);

/* A condition on CLOCK_MONOTONIC (the only clock a condition can share
 * with wk__cond_abstime()). WK_OK or WK_ENOMEM. */
int wk__cond_init_monotonic(pthread_cond_t *cond);

/* A mutex plus such a condition: WK_OK, or WK_ENOMEM with neither left. */
int wk__sync_init(pthread_mutex_t *mu, pthread_cond_t *cond);

/* Ask the node the handle talks to for its ROLE: *primary false when it
 * says replica. A refused ROLE (an ACL) counts as primary: the connection
 * still answered. WK_OK, or the failure of the query (core/db.c). */
int wk__db_still_primary(wk_db *db, bool *primary);
/* On a redis-sentinel:// handle whose node says it is a replica now:
 * drop the connection (the next query asks the sentinels for the
 * primary) and return true. False otherwise (other handles: no query). */
bool wk__db_left_replica(wk_db *db);

#endif /* WK_CORE_INTERNAL_H */
