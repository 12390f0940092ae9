/*
 * wakuwaku/db.h — the handle: one connection to Redis plus the capability
 * that bounds what may be sent over it.
 *
 * THREADS: a wk_db (and every handle narrowed from it, which shares its
 * connection) is used by one thread at a time, like a hiredis context.
 * Give each thread its own wk_db_open(); helpers that need a thread of their
 * own open their own connection from the same options. A handle whose
 * waiting acquire (wk_lock_acquire …) has had to wait also keeps a second
 * connection for those waits, opened with its options and capability the
 * first time, closed by wk_db_close() (each narrowed handle has its own).
 *
 * CONNECTIONS: wk_db_open() connects at once and checks the server in the
 * same step (HELLO, after AUTH; SELECT after it): a port that is not Redis,
 * a server that wants a password you did not give, or a Redis older than
 * 6.0 fails the open, not your first query. A connection that breaks (I/O
 * error, timeout, server restart) is closed, and the next query reconnects
 * (with AUTH, HELLO and SELECT again). A connection idle for a second or
 * more is probed before use, so a server restart between queries costs a
 * reconnect, not a failed query.
 *
 * OUTCOMES — what a failed call means for your write (single queries and
 * batches alike; docs/GUARANTEES.md, "Outcomes"):
 *   WK_OK          it ran; OUT parameters hold its outcome.
 *   WK_EUNKNOWN    a WRITE was sent and its reply never came (the
 *                  connection dropped, or the server did not answer within
 *                  command_timeout_ms): it may or may not have run, and
 *                  nothing was re-sent. Treat it as possibly done: a lock
 *                  acquire may hold the lock with the token it wrote to
 *                  your OUT parameter (release with that token once the
 *                  connection is back, or let the lease run out); a
 *                  limiter acquire may have spent its tokens; a put may
 *                  have replaced the body.
 *   WK_EIO, WK_ETIMEDOUT
 *                  for a WRITE: it was not sent (or met NOSCRIPT and was
 *                  cut off before its re-send), so it did not run. For a
 *                  READ: no result (the read may have been sent).
 *   other codes    the server answered: WK_EREDIS (an error reply),
 *                  WK_ECORRUPT / WK_EPROTO (a reply that does not parse).
 * Re-sending: a query answered NOSCRIPT did not run and is re-sent as EVAL;
 * a retry-safe query (WK_QUERY_RETRY_SAFE: pure reads) whose reply was lost
 * to a dropped connection is re-sent once on a new connection; writes are
 * never re-sent, because a second execution could undo what another client
 * wrote in between.
 */
#ifndef WAKUWAKU_DB_H
#define WAKUWAKU_DB_H

#include <wakuwaku/capability.h>
#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Options of wk_db_open(). Start from WK_DB_OPTIONS_INIT and set what you
 * need. Strings are copied; nothing is kept after wk_db_open() returns.
 *
 *   url                 "redis://[user:password@]host[:port][/db]" (user and
 *                       password percent-decoded; host may be "[::1]"),
 *                       "rediss://…" (the same, over TLS; default port
 *                       6379 too), or "unix:///path/to/socket[?db=N]".
 *                       NULL means "redis://127.0.0.1:6379".
 *   connect_timeout_ms  > 0; one deadline for the whole open (dial, TLS,
 *                       AUTH, HELLO, SELECT): connecting gives up after it.
 *                       A reconnect inside a query also ends by the
 *                       query's deadline.
 *   command_timeout_ms  > 0; one deadline per query or batch, fixed when
 *                       it starts (however slowly the reply trickles in):
 *                       a reply not complete by then fails the query with
 *                       WK_ETIMEDOUT and drops the connection.
 *   username, password  override the URL's (AUTH [user] pass). NULL: keep.
 *   database            SELECT this db; -1 keeps the URL's (default 0).
 *   capability          required: what the handle may do. Copied.
 *   client_name         CLIENT SETNAME after connecting; NULL: none.
 *
 * TLS — used iff the URL is rediss:// (never negotiated, never dropped:
 * there is no fallback to plain text). The tls_* options below with any
 * other URL fail the open with WK_EINVAL rather than being ignored.
 * The server's certificate is always verified: its chain against the CA
 * below, and its name (subjectAltName DNS or IP) against the host the
 * connection was made to, or tls_server_name when set.
 *   tls_ca_file         PEM file of CA certificates to trust; with
 *   tls_ca_dir          a directory of hashed CA certificates (c_rehash),
 *                       or both. Neither: the system's default CA paths.
 *   tls_cert_file       PEM client certificate (chain), for servers with
 *   tls_key_file        tls-auth-clients; give both or neither. The key
 *                       file must not be encrypted.
 *   tls_server_name     NULL (default): every connection checks the
 *                       certificate against the host it was made to —
 *                       the URL's host, a cluster seed's, or the
 *                       endpoint CLUSTER SLOTS, MOVED or ASK named — and
 *                       sends that host as SNI when it is a DNS name (an
 *                       IP literal is checked as an IP address, no SNI).
 *                       Set: this one name is sent as SNI (unless an IP
 *                       address) and required in the certificate of EVERY
 *                       server the handle connects to, all cluster nodes
 *                       included, whatever host they are reached by.
 * All TLS settings are read once at open (one OpenSSL context per handle,
 * shared by its reconnects, its subscriber connections and a cluster's
 * nodes; the name to check is set per connection); the files are not
 * read again on reconnect.
 *
 * SENTINEL — url "redis-sentinel://[user:password@]h1[:p1][,h2[:p2]…]/
 * service[/db]" (default sentinel port 26379). Every connection (the
 * first, each reconnect, subscriber and blocking connections) asks the
 * sentinels in the order given, first that answers, for the primary of
 * `service` (SENTINEL get-master-addr-by-name), connects to it, checks
 * that ROLE says master, then does the usual AUTH / HELLO / SELECT. A
 * sentinel that does not answer, does not know the service, or names a
 * node that is down or not a primary (yet) sends the search on to the
 * next one, round after round, for up to max(connect_timeout_ms,
 * command_timeout_ms); then the connect fails (WK_EIO, or WK_ETIMEDOUT,
 * with the last reason). Credentials: the URL's user and password (or
 * options.username / options.password, which override them as for
 * redis://) are the DATA NODES' ones; the sentinels get
 *   sentinel_username   AUTH [user] password sent to each sentinel;
 *   sentinel_password   NULL (both): the sentinels are asked without AUTH.
 * Re-discovery: a dropped connection (the sentinels close clients of a
 * node they reconfigure, so a failover reaches the handle this way) makes
 * the next query's reconnect ask the sentinels again. A READONLY error
 * reply (the node turned replica) means the command did not run: the
 * connection is dropped and the query is sent again, once, on the primary
 * found anew — a write answered READONLY is never WK_EUNKNOWN; the same
 * for a blocking command (a waiter's BLPOP, a receiver's BLMOVE or XREAD
 * BLOCK) answered UNBLOCKED when its node turned replica, so a waiter
 * parked on the old primary goes on waiting on the new one; if no
 * primary is found in time it fails as not sent (WK_EIO / WK_ETIMEDOUT).
 * A write sent whose reply was lost is WK_EUNKNOWN as usual. The
 * event-loop handle (wk_async_open) asks the sentinels the same way, in
 * non-blocking steps, and re-sends a READONLY write once; it keeps no
 * failover notice. No TLS to sentinels or data nodes (tls_* are refused).
 *
 * CLUSTER — url "redis://[user:password@]h1[:p1][,h2[:p2]…]" (or
 * rediss://): the hosts are seeds, tried in order until one accepts; one
 * host works too. A node whose HELLO says mode "cluster" makes the handle
 * a cluster handle (a user whose ACL forbids HELLO cannot be told, and
 * gets a one-server handle): it reads the slot map (CLUSTER SLOTS), keeps one
 * connection per primary (opened on first use) and sends every query to
 * the primary of its key's hash slot (CRC16 of the key, or of its {hash
 * tag}): a script's first key, a command's first argument. A query that
 * names no entity (PING, WAIT) goes where the previous query went. The
 * keys of one script query must share a slot (every built-in's do; a
 * custom script query that spans slots is refused with WK_EINVAL naming
 * two of its keys, before anything is sent). A MOVED reply updates the
 * map (and the whole map is asked anew before the next query); ASK sends
 * that one command to the importing node after ASKING; TRYAGAIN and
 * CLUSTERDOWN are sent again after a pause (10 ms, doubling to 100 ms)
 * until the command timeout, then fail as not run (WK_ETIMEDOUT); a lease
 * release or acquire answered TRYAGAIN (its keys split by a slot
 * migration) is sent at once in a form naming one item key only, which
 * wakes no waiter, and an RwLock or FencedLock take then goes on in
 * single-key steps (docs/connections.md, Redis Cluster). None of
 * these replies means the command ran, so writes too are re-sent. A node
 * that drops or refuses its connection fails what was sent to it by the
 * usual outcome rules (a write WK_EUNKNOWN); what was not sent yet goes
 * once more after the map is asked anew (a failover moves slots). A batch
 * is split by node: commands are written to every node before any reply
 * is read, and each query keeps its own status. Scripts are loaded per
 * node (NOSCRIPT on one node sends EVAL there). Only database 0 exists
 * in a cluster (another is refused). Several hosts that are not cluster
 * nodes fail the open with WK_EINVAL. Blocking handles, helpers, batches
 * and pools work unchanged, and so does the event-loop handle
 * (wakuwaku/async.h, SEMANTICS 9: routed by the same rules, waiting
 * acquires included, one waits connection per slot in use). A settings
 * follower subscribes on the primary of its settings' slot and follows
 * the slot to its new owner (wakuwaku/settings.h, REDIS CLUSTER); a near
 * cache keeps a subscriber per primary (wakuwaku/near_cache.h). Over rediss://
 * each node's certificate is checked against the host it was reached by:
 * a seed's host as written in the URL, or the endpoint (hostname or IP)
 * that CLUSTER SLOTS, MOVED or ASK named for it — so a node showing a
 * certificate for another node's name, the seed's included, is refused
 * (WK_EAUTH, the message naming the node's address and the name
 * required). tls_server_name, when set, is required of every node instead.
 *
 * ACKNOWLEDGED LEASES — what every query that takes or lengthens a lease
 * (the try, acquire and extend of Lock, fair Lock, both RwLock sides,
 * FencedLock and Semaphore; the lease keeper's and cron's extensions)
 * waits for on this handle:
 *   lease_replicas        0 (default): nothing. N > 0: `WAIT N
 *                         lease_ack_timeout_ms` is written right behind
 *                         the query, in the same send on the same
 *                         connection, on every path (this handle, a pool,
 *                         a pinned or cluster handle, Sentinel, a batch,
 *                         the event loop), so it counts the replicas that
 *                         have that very write. Fewer than N (or a failed
 *                         WAIT): the lease is not reported held —
 *                         *acquired / *extended false, WK_ENOTREPLICATED
 *                         with the count in the message. A try or acquire
 *                         called on a handle or pool then releases the
 *                         lease with its token ("…; released"; WK_EUNKNOWN
 *                         if that release fails too); through a batch or
 *                         the event loop the release is yours (the token
 *                         is written before the query is sent). An extend
 *                         releases nothing: the lease stays held until its
 *                         previous, acknowledged expiry. A connection lost
 *                         before the WAIT's reply leaves the query's
 *                         outcome WK_EUNKNOWN, never held.
 *   lease_ack_timeout_ms  > 0 when lease_replicas > 0; the longest WAIT
 *                         blocks (the reply is awaited for this plus
 *                         command_timeout_ms).
 * docs/GUARANTEES.md says what an acknowledged lease buys.
 */
typedef struct wk_db_options {
    const char *url;
    int connect_timeout_ms;
    int command_timeout_ms;
    const char *username;
    const char *password;
    int database;
    const wk_cap *capability;
    const char *client_name;
    const char *tls_ca_file;
    const char *tls_ca_dir;
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_server_name;
    const char *sentinel_username;
    const char *sentinel_password;
    int lease_replicas;
    int lease_ack_timeout_ms;
} wk_db_options;

#define WK_DB_OPTIONS_INIT                                                                  \
    {.url = NULL, .connect_timeout_ms = 2000, .command_timeout_ms = 2000, .username = NULL, \
     .password = NULL, .database = -1, .capability = NULL, .client_name = NULL,             \
     .tls_ca_file = NULL, .tls_ca_dir = NULL, .tls_cert_file = NULL, .tls_key_file = NULL,  \
     .tls_server_name = NULL, .sentinel_username = NULL, .sentinel_password = NULL,           \
     .lease_replicas = 0, .lease_ack_timeout_ms = 1000}

/*
 * wk_db_open — connect and return a handle.
 *
 *   out   OUT: the handle; set to NULL on failure.
 *   opts  the options (NULL is WK_EINVAL: a capability is required).
 *   err   OUT, may be NULL: on failure, a message is copied here
 *         (at most errlen bytes, NUL-terminated). Passwords never appear.
 *
 * Returns WK_OK; WK_EINVAL (bad URL or option, a tls_* option without
 * rediss://, an unreadable CA, certificate or key file), WK_EIO (cannot
 * connect; or the TLS handshake failed: not a TLS port, connection closed,
 * protocol error — the message gives OpenSSL's reason), WK_ETIMEDOUT
 * (connected, but no answer — or no completed TLS handshake — in time),
 * WK_EAUTH (AUTH refused, or the server requires a password and none was
 * given; or TLS certificate verification failed: unknown CA, wrong name,
 * expired… — the message names the reason; or the server refused the
 * client certificate or its absence), WK_EPROTO (the
 * peer is not a Redis server, or runs Redis older than 6.0 — the message
 * names the version), WK_EREDIS (SELECT or CLIENT SETNAME refused),
 * WK_ENOMEM. A user whose ACL forbids HELLO is checked with PING instead
 * (its server's version is then not checked). Close the handle with
 * wk_db_close().
 */
WK_API int wk_db_open(wk_db **out, const wk_db_options *opts, char *err, size_t errlen);

/*
 * wk_db_narrow — a second handle on the same connection whose capability
 * is the intersection of `db`'s and `cap` (never wider than either); hand
 * it to a module that should do only that much. `name` names the result in
 * messages (NULL: `cap`'s name). The new handle shares `db`'s connection
 * (same one-thread-at-a-time rule for both) and stays valid after `db` is
 * closed; close each with wk_db_close(). Returns WK_OK, WK_EINVAL,
 * WK_ENOMEM; *out is NULL on failure.
 */
WK_API int wk_db_narrow(wk_db **out, wk_db *db, const wk_cap *cap, const char *name);

/*
 * wk_db_open_granted — wk_db_open() with opts' capability replaced by the
 * one `grants` describes (built for the call and freed before it returns;
 * the handle keeps its own copy).
 *
 * wk_db_narrow_granted — wk_db_narrow(out, db, <that capability>, NULL).
 *
 *   out   OUT: the handle; NULL on failure. Close it with wk_db_close().
 *   proc  OUT, may be NULL: wk_db_processor(*out), NULL on failure.
 *
 * The generated typed handles (codegen/SCHEMA.md) open and narrow through
 * these. Returns as wk_db_open() / wk_db_narrow(), or WK_EINVAL for NULL
 * out, opts or grants, or WK_ENOMEM.
 */
WK_API int wk_db_open_granted(wk_db **out, wk_processor **proc, const wk_db_options *opts,
                              const wk_cap_table *grants, char *err, size_t errlen);
WK_API int wk_db_narrow_granted(wk_db **out, wk_processor **proc, wk_db *db,
                                const wk_cap_table *grants);

/* wk_db_close — close the handle (and the connection when no narrowed
 * handle shares it). NULL is a harmless no-op. */
WK_API void wk_db_close(wk_db *db);

/* wk_db_processor — the handle's processor: the end of every processor
 * chain. Borrowed; valid until wk_db_close(). */
WK_API wk_processor *wk_db_processor(wk_db *db);

/* wk_db_capability — the handle's capability (borrowed; never NULL for a
 * valid handle). */
WK_API const wk_cap *wk_db_capability(const wk_db *db);

/* wk_db_errmsg — detail of the last failure on this handle: which query,
 * key, capability or server message. Borrowed until the next call on the
 * handle; "" when there was none. Never NULL. */
WK_API const char *wk_db_errmsg(const wk_db *db);

/*
 * Counters of a handle since it was opened (wk_db_stats()): its
 * connection's life, and the waits for leases made through it.
 * Counters only grow; `waiting` is how many calls wait now.
 */
#define WK_STATS_REASONS 5 /* connect failures: WK_EIO, WK_ETIMEDOUT, WK_EAUTH, WK_EPROTO, other */
#define WK_STATS_BUCKETS 16 /* wait-time bounds: as WK_METRICS_BUCKETS (wakuwaku/metrics.h) */
typedef struct wk_handle_stats {
    uint64_t reconnects; /* connections made after the first (cluster nodes included) */
    /* connection attempts that failed, by status, in WK_STATS_REASONS order */
    uint64_t connect_failures[WK_STATS_REASONS];
    uint64_t moved, asked;          /* cluster redirections followed */
    uint64_t sentinel_discoveries;  /* primaries looked up through the sentinels */
    uint64_t not_replicated;        /* acknowledged leases short of replicas (WK_ENOTREPLICATED) */
    uint64_t waiting;               /* calls waiting for a lease now */
    /* waits that ended, failures included: waiting acquires whose first
     * try did not get the lease, so that they queued on the server (on
     * the event loop: from their first sleep); one whose first try got it
     * is not a wait. How many wait for one item, from every replica: the
     * kind's inspect (wk_lock_state.waiting, …) */
    uint64_t waits;
    uint64_t wait_acquired;         /* … with the lease */
    uint64_t wait_handoffs;         /* … with the lease, after sleeping for a release */
    uint64_t wait_deadlines;        /* … without it: the deadline passed */
    /* how long each ended wait took, per bucket (not cumulative; the last
     * one is above the last bound), and their sum in nanoseconds */
    uint64_t wait_buckets[WK_STATS_BUCKETS + 1];
    uint64_t wait_ns;
} wk_handle_stats;

/*
 * wk_db_stats — copy the handle's counters into *out: its connection's
 * (shared with the handles narrowed from it, and including its blocking
 * connection for waits) and its own waits. Thread-safe: another thread
 * (a metrics scrape) may read while the handle's thread works; each
 * counter is some recent value. WK_OK, or WK_EINVAL (NULL argument).
 */
WK_API int wk_db_stats(wk_db *db, wk_handle_stats *out);

/* wk_db_ping — a round trip (PING) outside capability checks, since it
 * touches no entity. Useful for health checks. */
WK_API int wk_db_ping(wk_db *db);

/* wk_db_cluster_primaries — the number of primaries in a cluster handle's
 * slot map (see CLUSTER at wk_db_options); 0 when the handle talks to
 * one server. */
WK_API size_t wk_db_cluster_primaries(const wk_db *db);

/* wk_db_cluster_primary — a handle that sends every query to primary `i`
 * (0 .. wk_db_cluster_primaries() - 1, in the map's order at this call)
 * of db's cluster, whatever its key: for the commands that work per node
 * (SCAN, DBSIZE, INFO). It shares db's connections and capability (as
 * wk_db_narrow() does: close it with wk_db_close(), before or after db).
 * A query on a key the node does not serve is answered MOVED and goes to
 * the right node as usual. WK_EINVAL when db is not a cluster handle or i
 * is out of range (message on db). */
WK_API int wk_db_cluster_primary(wk_db **out, wk_db *db, size_t i);

/* wk_is_connection_error — true for WK_EIO, WK_ETIMEDOUT and WK_EUNKNOWN:
 * the failures after which the next query reconnects. */
WK_API bool wk_is_connection_error(int status);

/* ------------------------------------------------------------------------
 * URL parsing (exposed for tools and tests)
 * ---------------------------------------------------------------------- */

/* One host and port (a sentinel's or a cluster seed's address). */
typedef struct wk_url_node {
    char *host;
    int port;
} wk_url_node;

/* A parsed URL; wk_url_free() releases its strings. */
typedef struct wk_url {
    char *host;      /* TCP host, NULL for unix sockets */
    int port;        /* TCP port */
    char *path;      /* unix socket path, NULL for TCP */
    char *username;  /* NULL if absent */
    char *password;  /* NULL if absent */
    int database;    /* 0 if absent */
    bool tls;        /* rediss:// */
    /* redis-sentinel:// only (NULL / 0 otherwise); host and port then
     * hold the first sentinel's address. */
    char *service;          /* the service (primary) name */
    wk_url_node *sentinels; /* the sentinels, in the URL's order */
    size_t nsentinels;
    /* redis:// or rediss:// with several hosts ("h1:p1,h2:p2"): all of
     * them in order, a cluster's seeds (NULL / 0 for one host); host and
     * port then hold the first. */
    wk_url_node *seeds;
    size_t nseeds;
} wk_url;

/*
 * wk_url_parse — parse a redis://, rediss://, unix:// or redis-sentinel://
 * URL (see wk_db_options).
 * Returns WK_OK, WK_EINVAL (message in `err` if not NULL — never
 * containing the password) or WK_ENOMEM. On failure `url` holds nothing
 * to free.
 */
WK_API int wk_url_parse(wk_url *url, const char *text, char *err, size_t errlen);
WK_API void wk_url_free(wk_url *url);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_DB_H */
