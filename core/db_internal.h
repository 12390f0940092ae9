/*
 * core/db_internal.h — the handle and its connection, shared by the files
 * of core/ (db.c, dispatch.c, batch code). Not installed.
 */
#ifndef WK_CORE_DB_INTERNAL_H
#define WK_CORE_DB_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include <wakuwaku/db.h>

#include "core/core_internal.h"
#include "core/transport.h"

#define WK__ERRMSG_MAX 512
/* A connection idle this long is probed before use (see wk__conn_check). */
#define WK__IDLE_PROBE_MS 1000

/* Redis Cluster: the slot map and the nodes' connections (core/cluster.h). */
typedef struct wk__cluster wk__cluster;
#define WK__SCRIPT_CACHE 32

/* A growable byte buffer (RESP output), reused across queries. */
typedef struct wk__buf {
    char *data;
    size_t len, cap;
} wk__buf;

/* A connection's queries in flight (core/exchange.c): the bytes being
 * written, and the slots staged on it in the order their replies come
 * (linked through wk__slot.next). Kept with the connection, so an
 * exchange allocates nothing once the buffer has grown. */
typedef struct wk__lane {
    wk__buf out;      /* commands formatted here */
    const char *data; /* the bytes being written: out's, or a batch's own */
    size_t len, wpos;
    size_t head, tail, unsent; /* staged slots; the first not written whole */
    void *held;                /* the head's reply while its WAIT's is awaited */
    short want;                /* what the last write waited for */
    short ready;               /* poll events seen on the socket (the driver's) */
    bool ensured;              /* this round's connection check was made */
    bool failed;               /* … and failed: nothing is staged here this round */
    bool draining;             /* a READONLY reply came: drop once the replies are in */
    struct wk__lane_setup *setup; /* its connection being set up by the exchange
                                     machine (core/engine_conn.c), or NULL */
} wk__lane;

/* End a set-up the lane still holds (its connection or handle goes). */
void wk__lane_end_setup(wk__lane *q);

/* Where one argument of a formatted command sits in a wk__buf. */
typedef struct wk__span {
    size_t off, len;
} wk__span;

/* SHA-1 of a script, cached per connection. */
typedef struct wk__script_slot {
    const wk_script *script;
    char sha[41];
} wk__script_slot;

/* The connection's counters behind wk_db_stats() (core/stats.c): bumped
 * by whichever thread uses the connection, read by any (relaxed). Shared
 * by a connection and its handle's blocking connection, which may outlive
 * it (a near cache's): freed with the last of them. */
typedef struct wk__conn_counters {
    atomic_int refs;
    _Atomic uint64_t reconnects;
    _Atomic uint64_t connect_failures[WK_STATS_REASONS];
    _Atomic uint64_t moved, asked, discoveries, not_replicated;
} wk__conn_counters;

/* A handle's waits for leases (collection/wake.c through core/stats.c). */
typedef struct wk__wait_counters {
    _Atomic uint64_t waiting, waits, acquired, handoffs, deadlines;
    _Atomic uint64_t buckets[WK_STATS_BUCKETS + 1];
    _Atomic uint64_t ns;
} wk__wait_counters;

/*
 * The connection: shared by a handle and the handles narrowed from it,
 * freed when the last of them closes.
 */
typedef struct wk__conn {
    atomic_int refs;
    wk__link link;       /* link.ctx NULL while disconnected */
    wk_url url;          /* where to (re)connect, with credentials */
    wk__tls_config *tls; /* rediss://: TLS settings; NULL: plain */
    char *client_name;
    struct timeval connect_timeout;
    struct timeval command_timeout;
    int64_t last_io_ms; /* wk_monotonic_ms() of the last reply */
    /* The deadline of the call running on this connection (wk__boot_ms();
     * 0: none), owned by wk__exchange_run(): a reconnect inside the call
     * (wk__conn_open) spends what is left of it. Same thread rule as the
     * handle. */
    int64_t call_deadline;
    /* A blocking handle's (core/blocking.c): the wait for a reply lasts
     * this much longer than the command timeout (the server-side block
     * time of the query being run), and ends at once when wake_fd (the
     * read end of a pipe; -1: none) becomes readable. */
    int64_t extra_wait_ms;
    int wake_fd;
    int wake_signal_fd; /* the pipe's write end (-1: none) */
    atomic_bool interrupted;
    struct wk__conn *settings; /* a blocking handle's: the connection whose
                                  TLS settings it borrows (one reference) */
    uint64_t reconnects;        /* connections opened after the first */
    /* the same and more, for wk_db_stats(); a blocking connection's are
     * its handle's (core/blocking.c). NULL only while the handle is made. */
    wk__conn_counters *counters;
    /* redis-sentinel:// (url.service set): the sentinels' credentials
     * (NULL: no AUTH to sentinels). */
    char *sentinel_username, *sentinel_password;
    /* The failover notice: a connection to the sentinel that named the
     * primary, subscribed to +switch-master (ctx NULL: none). Read
     * without waiting before each query; a switch of this service drops
     * the data connection, so the query goes to the new primary. */
    wk__link notice;
    /* Acknowledged leases: WAIT lease_replicas lease_ack_timeout_ms after
     * a lease is taken (0: no WAIT). */
    int lease_replicas, lease_ack_timeout_ms;
    /* A cluster handle's map and node connections (NULL: one server, on
     * `link`). Shared, like the rest, by the handles narrowed from it. */
    wk__cluster *cluster;

    wk__lane lane; /* queries on `link` (core/exchange.c) */

    wk__script_slot scripts[WK__SCRIPT_CACHE];
    size_t nscripts;     /* slots in use (filled in order 0, 1, …) */
    size_t script_evict; /* once full: the oldest slot, next to reuse */
} wk__conn;

struct wk_db {
    wk_processor proc; /* first member: &db->proc is the handle's processor */
    wk__conn *conn;
    wk_cap *cap;
    wk_db *blocking; /* wk__blocking_of(): opened on first use, closed with the handle */
    char errmsg[WK__ERRMSG_MAX];
    /* Non-NULL: this is a pool's shared handle (core/pool.c), the `db` of
     * a processor many threads call at once. It does no I/O itself: conn
     * is its first connection's, read only for settings (the database),
     * and the pool owns and frees it. */
    struct wk_pool *pool;
    /* wk_db_cluster_primary(): every query goes to this node of the
     * cluster map (when `pinned`), whatever its key. */
    bool pinned;
    uint16_t pin_node;
    wk__wait_counters waits; /* waits for leases made through this handle */
    /* The event-loop handle this db is a lane of (core/async_internal.h),
     * or NULL: a waiting acquire finds its loop through it. */
    struct wk_async *loop;
};

/* Counting (core/stats.c). */
static inline wk__conn_counters *wk__counters(wk__conn *conn)
{
    return conn->counters;
}
/* New counters (one reference), or NULL; one more reference; one less. */
wk__conn_counters *wk__counters_new(void);
wk__conn_counters *wk__counters_ref(wk__conn_counters *c);
void wk__counters_release(wk__conn_counters *c);
static inline void wk__bump(_Atomic uint64_t *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}
/* A reconnect of `conn` ended with `rc`: a reconnect, or a failure by
 * its status; through the sentinels, a discovery either way. */
void wk__count_connect(wk__conn *conn, int rc);
/* CLOCK_MONOTONIC in ns; one more time `ns` into a histogram of
 * WK_STATS_BUCKETS bounds (those of wakuwaku/metrics.h) and its sum; the
 * same histogram read (not cumulative). */
uint64_t wk__now_ns(void);
void wk__hist_add(_Atomic uint64_t *buckets, _Atomic uint64_t *sum, uint64_t ns);
void wk__hist_read(uint64_t *buckets, uint64_t *sum, const _Atomic uint64_t *from,
                   const _Atomic uint64_t *from_sum);
/* Add db's counters (its connection's unless a pool's front, which
 * shares its first handle's; its waits) to *out. */
void wk__stats_add(wk_handle_stats *out, const wk_db *db);

/* The calling thread's message buffer (WK__ERRMSG_MAX bytes) for queries
 * through a pool's shared handle (core/pool.c). */
char *wk__pool_thread_msg(void);
/* wk__db_bound() on a pool's shared handle: the calling thread's bound on
 * its queries through any pool's shared processor (core/pool.c); returns
 * the previous one. */
int64_t wk__pool_bound(int64_t deadline);
/* A blocking handle a wait through the pool's shared processor left (core/
 * blocking.c), or NULL; and giving one back when a wait ends: kept for
 * the next wait (up to the pool's size), else closed. Thread-safe. */
wk_db *wk__pool_take_wait_handle(struct wk_pool *pool);
void wk__pool_keep_wait_handle(struct wk_pool *pool, wk_db *b);

/* Where db's detail message lives: its own buffer, or for a pool's shared
 * handle the calling thread's, since many threads fail through it at once. */
static inline char *wk__db_msg(const wk_db *db)
{
    return db->pool ? wk__pool_thread_msg() : (char *)db->errmsg;
}

/* A call's deadline: `tv` from now, on wk__boot_ms()'s clock (core/clock.c). */
int64_t wk__deadline_after(struct timeval tv);
/* The earlier of two deadlines, 0 meaning none. */
static inline int64_t wk__deadline_min(int64_t a, int64_t b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

/* The parser's view of where to put its message. */
struct wk_diag {
    wk_db *db;
    const wk_query *query;
    /* The reply to the WAIT sent behind a lease query (wk__query_acked),
     * read before the query's own reply is parsed; NULL: none was sent. */
    const redisReply *ack;
};

/* Whether `q` is sent with a WAIT right behind it: a query that takes or
 * lengthens a lease (WK__QUERY_LEASE) on a handle with lease_replicas.
 * Decided the same way where the command is formatted and where its
 * replies are read, so both agree on how many replies it has. */
static inline bool wk__query_acked(const struct wk__conn *conn, const wk_query *q)
{
    return (q->flags & WK__QUERY_LEASE) && conn && conn->lease_replicas > 0;
}

/* Copy a NUL-terminated message, truncating to fit `cap`. */
static inline void wk__copy_text(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Set the handle's detail message; returns `status`. */
int wk__db_fail(wk_db *db, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int wk__db_vfail(wk_db *db, int status, const char *fmt, va_list ap);

/* Whether the failover notice connection `link` (conn->notice) brought
 * a switch of `service`; reads without waiting. A broken notice
 * connection is closed (and says nothing). */
bool wk__failover_noticed(const char *service, wk__link *link);

/* Between two rounds over the sentinels. */
#define WK__SENTINEL_ROUND_PAUSE_MS 50
/* A handle with opts' settings and capability, not connected yet (what
 * wk_db_open() does before connecting). On failure *out is NULL and the
 * message is in err. */
int wk__db_new(wk_db **out, const wk_db_options *opts, char *err, size_t errlen);

/* A plain connection made for one exchange (a cluster node's CLUSTER
 * SLOTS, core/cluster.c) from conn's settings, borrowed, not copied: it
 * takes *link (emptied; none: the exchange sets one up) and the time of
 * its last reply. wk__conn_lent_back() gives the connection back to
 * *link (none if it was lost), counts its reconnects on conn, frees what
 * the exchange allocated and returns the time of the last reply. */
void wk__conn_lend(wk__conn *lent, const wk__conn *conn, wk__link *link, int64_t last_io_ms);
int64_t wk__conn_lent_back(wk__conn *lent, wk__conn *conn, wk__link *link);

/* Open the connection of a new handle (`db->conn` filled in): the check
 * wk_db_open() makes — an exchange of no query (core/exchange.c): the
 * machine's set-up alone, by the connect timeout and call_deadline. */
int wk__conn_open(wk_db *db);
/* Release one reference to a connection; the last frees it. */
void wk__conn_release(wk__conn *conn);

/* A copy of a parsed URL (sentinel list included); WK_ENOMEM leaves dst
 * empty. */
int wk__url_copy(wk_url *dst, const wk_url *src);
/* Whether a reply says the node is a replica now and the command did not
 * run: a READONLY error, or a blocking command's UNBLOCKED. */
bool wk__reply_node_demoted(const redisReply *reply);
/* Whether a ROLE reply names another role than master (replica, sentinel). */
bool wk__reply_role_not_master(const redisReply *reply);

/* The check before a query, without waiting: drop the connection when it
 * is broken, the failover notice says its node was replaced, or it was
 * idle for a while and reads EOF. True when it was dropped. */
bool wk__conn_check(wk__conn *conn);
/* Close the connection after a failure; the next query reconnects. */
void wk__conn_drop(wk__conn *conn);
/* Status for the context's current error (WK_EIO / WK_ETIMEDOUT / …). */
int wk__conn_error_status(const redisContext *ctx);

/* Replies are built by these (core/reply_objects.c): hiredis's objects,
 * but an array reply longer than this is refused, not allocated. */
#define WK__REPLY_MAX_ELEMENTS (4 * 1024 * 1024)
/* The count of the last array refused for its length on this thread (0:
 * none): hiredis reports the refusal as out of memory, and
 * wk__wire_take() reads (and clears) this to say what it was. */
extern _Thread_local long long wk__refused_elements;
/* The longest bulk string a reply may announce: Redis's limit for one
 * string value, WK_BODY_MAX (core/wire.c refuses a longer one at its
 * header instead of reading it). */
#define WK__REPLY_MAX_BULK ((size_t)512 * 1024 * 1024)
extern redisReplyObjectFunctions wk__reply_functions;

/* The query dispatcher: the handle's process(). */
int wk__db_process(wk_processor *self, wk_query *query);

/* Checks a query's shape and capability; WK_OK or a failure with message. */
int wk__db_admit(wk_db *db, const wk_query *query);

/* Append one query's command as RESP to `buf` (scripts as EVALSHA, or
 * EVAL when `as_eval`), and behind it its WAIT when wk__query_acked().
 * When `spans` is not NULL it receives where each of the query's own
 * arguments landed (argc entries); `command_end` (may be NULL) where the
 * command itself ends, before the WAIT: a query whose command the kernel
 * took whole was sent, whether or not its WAIT went out too. */
int wk__format_query(wk_db *db, wk__buf *buf, const wk_query *query, bool as_eval, wk__span *spans,
                     size_t *command_end);
/* Make room for `more` bytes in `buf`. */
int wk__buf_reserve(wk__buf *buf, size_t more);
/*
 * The connection's bytes (core/wire.c, through the link's transport): the
 * only reader of replies (the exchange machine, core/exchange.c, is the
 * only writer of commands). Nothing here waits: the drivers poll.
 */
/* The one wait of every blocking driver (the exchange's, the set-up's,
 * the subscriber's): poll() until `deadline` (wk__boot_ms(); a spent one
 * still looks once), what is left re-read after EINTR. Returns poll's
 * count, 0 on timeout, -1 with errno. */
struct pollfd;
int wk__poll_until(struct pollfd *p, unsigned long n, int64_t deadline);
/* For the exchange machine, whose drivers poll: take a reply
 * already read (*reply NULL if none), and receive what the socket has now
 * into the reader without waiting (and all the transport has decoded, so
 * that polling the socket afterwards is right). */
int wk__wire_take(wk__link *link, redisReply **reply);
int wk__wire_receive(wk__link *link);
/* Whether an idle connection is still usable (looked at before a query
 * goes on a connection idle for a while): replies owed to abandoned
 * queries that came are read and dropped first; while one is still on
 * its way the bytes behind it cannot be judged, and the connection is
 * taken as usable unless it read EOF. Otherwise the transport's look (a
 * server that closed it, or bytes nobody asked for: not usable). */
bool wk__link_idle_alive(wk__link *link);
/* Every byte fed to the reader is parsed already: wk__wire_take() would
 * find no reply (the common look before a reply came, made cheap). */
static inline bool wk__wire_all_taken(const wk__link *link)
{
    const redisReader *r = link->ctx->reader;
    return !r->err && r->pos >= r->len;
}
/* Whether `reply` is a push — a reply nobody asked for: a Pub/Sub message
 * on a subscribed RESP2 connection ("message", "pmessage"), or a RESP3
 * push (the exchange's push mode, core/exchange.h). */
bool wk__reply_is_push(const redisReply *reply);
/* Parse a reply for a query: error replies, NOSCRIPT aside, go to
 * WK_EREDIS unless the query wants them. `ack`: the reply to its WAIT
 * (wk__query_acked), or NULL; its parser judges it with
 * wk__lease_acknowledged(). */
int wk__parse_reply(wk_db *db, const wk_query *query, const redisReply *reply,
                    const redisReply *ack);
bool wk__reply_is_noscript(const redisReply *reply);

/* The SHA-1 (hex) of a script, computed once per connection. */
const char *wk__script_sha(wk__conn *conn, const wk_script *script);

/* Hex SHA-1 of `len` bytes into out[41]. */
void wk__sha1_hex(const void *data, size_t len, char out[41]);

#endif /* WK_CORE_DB_INTERNAL_H */
