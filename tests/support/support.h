/*
 * tests/support/support.h — helpers for the criterion suites: a real
 * redis-server on a free 127.0.0.1 port, handles, and raw commands to
 * check what actually reached Redis.
 */
#ifndef WK_TEST_SUPPORT_H
#define WK_TEST_SUPPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>
#include <wakuwaku/wakuwaku.h>

/* A redis-server child process, stopped by pid. */
typedef struct wk_test_server {
    pid_t pid;
    int port;
    char url[64];
    char dir[128];
} wk_test_server;

/* Start redis-server on a free loopback port with optional extra config
 * lines ("maxmemory 1mb", NULL-terminated list). Waits until it answers
 * PING. Returns 0 or -1. */
int wk_test_server_start(wk_test_server *s, const char *const *config);
/* SIGTERM, wait, remove its directory. Safe on a stopped server. */
void wk_test_server_stop(wk_test_server *s);
/* A free loopback TCP port (for a second listener: "tls-port N"). */
int wk_test_free_port(void);
/* Fork and exec argv (argv[0] looked up in PATH) with stdout and stderr
 * on /dev/null, the child dying with the calling thread
 * (PR_SET_PDEATHSIG). Its pid, or -1. */
pid_t wk_test_spawn(const char *const *argv);
/* A raw connection to 127.0.0.1:port (2 s timeouts), AUTH'd when
 * `password` is set; NULL when it does not answer or refuses. */
redisContext *wk_test_raw_port(int port, const char *password);
/* Restart on the same port (after stop). */
int wk_test_server_restart(wk_test_server *s, const char *const *config);

/* The server the tests run against, from $WK_TEST_SERVER: "redis" (unset
 * or empty: the default) runs redis-server and redis-cli, "valkey"
 * valkey-server and valkey-cli. Any other value stops the program with a
 * message (a typo must not test Redis while saying Valkey). Every server,
 * sentinel and cluster of tests/support is started through these. */
const char *wk_test_server_binary(void);
const char *wk_test_cli_binary(void);

/* The suite's shared server URL: WK_TEST_REDIS_URL, set by the PRE_ALL hook
 * of tests/support/redis_fixture.h. */
const char *wk_test_url(void);

/* Open a handle on the shared server with a capability (NULL = read-write),
 * failing the test on error. */
wk_db *wk_test_open(const wk_cap *cap);
wk_db *wk_test_open_url(const char *url, const wk_cap *cap);
/* A pool of `size` connections to `url` (cap NULL = read-write; client_name
 * may be NULL), failing the test on error. */
wk_pool *wk_test_open_pool(const char *url, const wk_cap *cap, int size, int wait_ms,
                           const char *client_name);

/* A raw hiredis connection to `url`'s server, for checking state. */
redisContext *wk_test_raw(const char *url);
/* Run a raw command and return the reply (caller frees). */
redisReply *wk_test_cmd(redisContext *c, const char *fmt, ...);
/* Total `calls` in INFO commandstats (all commands), from a raw connection. */
long long wk_test_total_calls(redisContext *c);
/* calls of one command ("set", "evalsha"), 0 if never run. */
long long wk_test_cmd_calls(redisContext *c, const char *cmd);
/* Scripts the server ran: EVALSHA and EVAL calls that did not fail (an
 * EVALSHA answered NOSCRIPT, then sent as EVAL, counts once). */
long long wk_test_scripts_run(redisContext *c);
/* INFO persistence rdb_changes_since_last_save: every write bumps it (use
 * a server of the test's own: other tests write too). */
long long wk_test_dirty(redisContext *c);
/* A handle on the suite's server with a capability (NULL = read-write), a
 * client name (NULL: none) and a database (-1: the default). NULL on
 * failure, without asserting: forked children may call it. */
wk_db *wk_test_open_as(const wk_cap *cap, const char *client_name, int database);
/* CLIENT KILL ID, through `c`, of every connection whose client name is
 * `name` (CLIENT LIST TYPE normal); returns how many were killed. */
int wk_test_kill_clients_named(redisContext *c, const char *name);
/* The same for the clients of `type` (CLIENT LIST TYPE: "normal",
 * "pubsub", …). */
int wk_test_kill_clients_of_type(redisContext *c, const char *type, const char *name);
/* A thread killing the connections named `name` on the suite's server
 * every 2 ms until stopped; stop joins it and returns how many it killed. */
typedef struct wk_test_killer wk_test_killer;
wk_test_killer *wk_test_killer_start(const char *name);
int wk_test_killer_stop(wk_test_killer *k);

/* Kill the server's side of the connection whose local socket is `fd`
 * (CLIENT KILL ADDR, so no other client of a shared server is touched).
 * 0, or -1 if fd is not a TCP socket or the server refused. */
int wk_test_kill_client_fd(const char *url, int fd);

/* The server's count of writes since its last save (INFO persistence,
 * rdb_changes_since_last_save; the test servers never save): a read-only
 * query leaves it unchanged. -1 if it cannot be read. Counts every
 * client's writes: use a private server. */
long long wk_test_changes(redisContext *c);
/* A number of INFO `section` ("stats", …): field "total_connections_received"
 * and the like; -1 if it cannot be read. */
long long wk_test_info(redisContext *c, const char *section, const char *field);
/* `n` acquires of item `name` of Lock `lock`, held by another token,
 * through p: each times out at 60 ms (WK_OK, not acquired, or the test
 * fails), then 150 ms pass — past the server's late BLPOP timeout, so
 * the reply of each pop the deadline abandoned has come before the next
 * wait. */
void wk_test_time_out_waits(wk_processor *p, const wk_entity *lock, const char *name, int n);

/* A read-write handle on the shared server for a forked child, which
 * reports failure by exit status rather than criterion: NULL when it does
 * not open. */
wk_db *wk_test_open_child(void);

/* A redis-server of the test's own, for counters no other test may move:
 * `.init = wk_test_private_start, .fini = wk_test_private_stop`, then
 * wk_test_private_url(). Fails the test if it does not start. */
void wk_test_private_start(void);
void wk_test_private_stop(void);
const char *wk_test_private_url(void);

/* A namespace unique to this test process, so parallel tests never share
 * keys: "<prefix>-<pid>-<counter>". Returns a static buffer per call slot
 * (up to 16 live). */
const char *wk_test_ns(const char *prefix);

/* A loopback TCP proxy in front of a redis-server (tests/support/proxy.c),
 * to lose a reply at an exact point. */
typedef struct wk_test_proxy wk_test_proxy;
/* Start a proxy to 127.0.0.1:target_port on a free port; 0 or -1. */
int wk_test_proxy_start(wk_test_proxy **out, int target_port);
void wk_test_proxy_stop(wk_test_proxy *p);
/* "redis://127.0.0.1:<proxy port>" */
const char *wk_test_proxy_url(const wk_test_proxy *p);
/* The next bytes the server sends (a reply to a command that reached it
 * and ran) are discarded; then on_drop(arg) runs (may be NULL) on the
 * proxy's thread, and that connection is closed on both sides. */
void wk_test_proxy_drop_next_reply(wk_test_proxy *p, void (*on_drop)(void *), void *arg);
/* How many replies were dropped so far. */
int wk_test_proxy_drops(const wk_test_proxy *p);
/* How many connections it accepted (each one to the server) so far. */
int wk_test_proxy_accepted(const wk_test_proxy *p);
/* While frozen, nothing is forwarded either way and every session stays
 * open: a network that silently stops delivering (no FIN, no RST). New
 * connections are accepted and wait too. */
void wk_test_proxy_freeze(wk_test_proxy *p, bool frozen);
/* From now on the server's bytes reach the client `bytes` at a time, a
 * millisecond apart (0: as they come): a reply arrives in pieces, a TLS
 * record split across reads. */
void wk_test_proxy_slice(wk_test_proxy *p, size_t bytes);

/* A lateness and fault injector (tests/support/fault.c): a processor
 * wrapper whose faults hit the queries named `step` (a wk_query name:
 * "lock.acquire", "lock.leave", "rwlock.acquire_write",
 * "semaphore.acquire", "fenced_lock.acquire", …; NULL: every query),
 * only those sent at or after `from_ms` (wk_monotonic_ms(); 0: any), at
 * most `times` of them (0: every one). Give wk_test_fault_processor(f)
 * to the code under test; `inner` and `step` must outlive it. A BLPOP of
 * a waiting acquire runs on the handle's blocking connection, not through
 * the processor: lose its reply with the proxy below. Through a deferred
 * processor (a batch, the event loop) only the queueing is seen. */
typedef enum wk_test_fault_kind {
    WK_TEST_FAULT_NONE,        /* forward only */
    WK_TEST_FAULT_LATE,        /* the reply came; the client sees it `ms` later (descheduled) */
    WK_TEST_FAULT_STALL,       /* the client sends `ms` late */
    WK_TEST_FAULT_KILL_BEFORE, /* raise(SIGKILL) before sending: it never reaches Redis */
    WK_TEST_FAULT_KILL_AFTER,  /* raise(SIGKILL) once the reply came: it ran, nobody saw it */
    WK_TEST_FAULT_LOSE_REPLY   /* forwarded and run, then WK_EUNKNOWN with a message, as if
                                * the connection dropped after sending (the parser may have
                                * written the OUT parameters already) */
} wk_test_fault_kind;
typedef struct wk_test_fault {
    wk_processor proc; /* first member (wakuwaku/query.h): db and flags are the inner's */
    wk_processor *inner;
    const char *step;
    wk_test_fault_kind kind;
    int ms;
    int64_t from_ms;
    int times;
    atomic_int seen; /* queries of the step sent from from_ms on */
    atomic_int hit;  /* of them, the ones the fault hit */
} wk_test_fault;
/* Set up `f` over `inner` (the fields after `ms` zero: set them next).
 * The KILL kinds are for a forked child: they kill the calling process. */
void wk_test_fault_init(wk_test_fault *f, wk_processor *inner, const char *step,
                        wk_test_fault_kind kind, int ms);
wk_processor *wk_test_fault_processor(wk_test_fault *f);

/* A fake peer that is not Redis (tests/support/fake_peer.c): the first
 * command read gets `first` (NULL: `reply`), every later one `reply`. */
typedef struct wk_test_peer {
    int listen_fd;
    int port;
    char url[64];
    const char *first, *reply;
    size_t first_len, reply_len;
    /* wk_test_peer_script(): the replies in turn (the last one repeats);
     * NULL: first / reply above. Read after each command arrives, so a
     * test may fill them in after start (once it knows the port). */
    const char *const *script;
    size_t nscript;
    _Atomic int commands; /* reads answered so far */
    /* After each reply (not the first), `flood` bytes of filler ('x')
     * more, as a client would read them (0: none); `flooded` counts those
     * the client took before it closed the connection (then `hung_up`).
     * Set before the first command. */
    size_t flood;
    _Atomic size_t flooded;
    _Atomic bool hung_up; /* the client closed the connection mid-flood */
    bool many;            /* serves every connection at once (start_many) */
    _Atomic bool stop;
    pthread_t thread;
} wk_test_peer;
int wk_test_peer_start(wk_test_peer *p, const char *first, size_t first_len, const char *reply,
                       size_t reply_len);
/* wk_test_peer_start(); `many`: serve every connection at once, each
 * one's first read answered with `first` (a script counts the reads of
 * all of them), until wk_test_peer_stop(). */
int wk_test_peer_start_many(wk_test_peer *p, const char *first, size_t first_len, const char *reply,
                            size_t reply_len, bool many);
void wk_test_peer_stop(wk_test_peer *p);
/* Set the peer's replies: command k (one read) gets script[min(k, n-1)]
 * (NUL-terminated RESP). The array must outlive the peer. */
void wk_test_peer_script(wk_test_peer *p, const char *const *script, size_t n);
/* A slow server (tests/support/trickle_server.c): every reply goes out
 * one byte per interval_ms; AFTER_HELLO answers each connection's first
 * read (the handshake) at once with WK_TEST_HELLO_REPLY; SILENT accepts
 * and never answers. Connections are served one at a time. */
#define WK_TEST_TRICKLE_ALL 0
#define WK_TEST_TRICKLE_AFTER_HELLO 1
#define WK_TEST_TRICKLE_SILENT 2
typedef struct wk_test_trickle {
    int listen_fd, port, mode, interval_ms;
    char url[64];
    _Atomic bool stop;
    _Atomic int accepted, reads; /* connections and reads so far */
    pthread_t thread;
} wk_test_trickle;
int wk_test_trickle_start(wk_test_trickle *t, int mode, int interval_ms);
void wk_test_trickle_stop(wk_test_trickle *t);
/* What Redis 7.0 answers to HELLO 2: the handshake of wk_db_open. */
#define WK_TEST_HELLO_REPLY                                                                        \
    "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n"                      \
    "$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"                   \
    "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"

/* A redis-server with a plain port (s.port) and a TLS port, and its
 * certificates (tests/support/tls_server.c). */
typedef struct wk_test_tls {
    wk_test_server s;
    int tls_port;
    char certs[64]; /* the certificates' directory */
    char ca[128], other_ca[128], client_crt[128], client_key[128];
    char url[96]; /* rediss://127.0.0.1:<tls_port> */
} wk_test_tls;
/* Start it; `extra` (may be NULL) is one more config line. 0 or -1. */
int wk_test_tls_start(wk_test_tls *t, bool auth_clients, const char *extra);
/* Stop the server and remove the certificates. */
void wk_test_tls_stop(wk_test_tls *t);
/* Options for its TLS URL trusting its CA (read-write, short timeouts). */
wk_db_options wk_test_tls_options(const wk_test_tls *t);

/* A Redis Cluster over TLS (tests/support/tls_server.c): three primaries,
 * no replicas, on 127.0.0.1, each node with a certificate of its own from
 * one CA (the bus is TLS too). Node i announces the name announce[i]
 * (cluster-announce-hostname, preferred endpoint "hostname": CLUSTER
 * SLOTS and MOVED give it) and holds slots [i*16384/3, (i+1)*16384/3);
 * its certificate's only name is san[i] ("DNS:localhost",
 * "IP:127.0.0.1"). Stopped by pid. */
#define WK_TEST_TLS_NODES 3
typedef struct wk_test_tls_cluster {
    wk_test_server node[WK_TEST_TLS_NODES]; /* .port: the plain port, for raw commands */
    int tls_port[WK_TEST_TLS_NODES];
    char certs[64]; /* the certificates' (and nodes.conf files') directory */
    char ca[128];
    char url[160]; /* rediss://<announce[0]>:<tls_port[0]> */
} wk_test_tls_cluster;
/* Start it and wait until every node says cluster_state:ok with the
 * three nodes' slots. 0 or -1 (nothing left running). */
int wk_test_tls_cluster_start(wk_test_tls_cluster *c, const char *const announce[WK_TEST_TLS_NODES],
                              const char *const san[WK_TEST_TLS_NODES]);
void wk_test_tls_cluster_stop(wk_test_tls_cluster *c);
/* The node (0..2) whose slots hold `key`; -1 if it cannot be asked. */
int wk_test_tls_cluster_node_of(const wk_test_tls_cluster *c, const char *key, size_t len);

/* A Sentinel topology (tests/support/sentinel_topology.c): a primary, a
 * replica of it and three sentinels watching it as `service`, all on
 * 127.0.0.1 free ports, stopped by pid. */
typedef struct wk_test_sentinels {
    wk_test_server primary, replica; /* as started: roles change on failover */
    wk_test_server sentinel[3];
    char sentinel_conf[3][160]; /* their config files */
    char service[32];
    const char *data_password;     /* requirepass / masterauth; NULL: none */
    const char *sentinel_password; /* the sentinels' requirepass; NULL: none */
    char url[160];                 /* redis-sentinel://…/<service> */
} wk_test_sentinels;
/* Start it and wait until the replica is in sync and each sentinel knows
 * the replica and the other two. The password strings must outlive it.
 * 0 or -1 (nothing left running). */
int wk_test_sentinels_start(wk_test_sentinels *t, const char *data_password,
                            const char *sentinel_password);
void wk_test_sentinels_stop(wk_test_sentinels *t);
/* The primary's port according to sentinel i (0..2); -1: no answer. */
int wk_test_sentinels_primary_port(const wk_test_sentinels *t, int i);
/* SENTINEL FAILOVER on sentinel 0, then wait until all three name a new
 * primary that says ROLE master. Its port, or -1 after timeout_ms. */
int wk_test_sentinels_failover(wk_test_sentinels *t, int timeout_ms);
/* Whether the data node on `port` says ROLE slave. */
bool wk_test_sentinels_is_replica(const wk_test_sentinels *t, int port);
/* A raw connection to a node or sentinel of the topology, AUTH'd. */
redisContext *wk_test_sentinels_raw(const wk_test_sentinels *t, int port);

/* A Redis Cluster (tests/support/cluster_topology.c): six redis-server
 * processes with cluster-enabled on 127.0.0.1 free ports (and their bus
 * ports, +10000), three primaries with one replica each, made by
 * `redis-cli --cluster create`. The nodes belong to a keeper process of
 * their own, which reaps them, restarts one on request and stops them by
 * pid; any process can attach to a running topology by its directory. */
#define WK_TEST_CLUSTER_NODES 6
typedef struct wk_test_cluster {
    char dir[64];                     /* its directory: node dirs n0..n5, state, control FIFO */
    pid_t keeper;                     /* the process owning the nodes */
    bool owner;                       /* started here (stop stops it) rather than attached */
    int port[WK_TEST_CLUSTER_NODES];  /* nodes 0..2 start as primaries */
    pid_t pid[WK_TEST_CLUSTER_NODES]; /* 0: down */
    char url[160];                    /* redis://127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2 */
} wk_test_cluster;
/* Start it and wait until every node says cluster_state:ok, all agree on
 * the slot map and every replica is in sync. 0 or -1 (nothing left
 * running). */
int wk_test_cluster_start(wk_test_cluster *c);
/* Stop every node (by pid) and remove the directory; only the starter
 * stops it (a no-op on an attached one). */
void wk_test_cluster_stop(wk_test_cluster *c);
/* Fill `c` from a running topology's directory (current pids). 0 or -1. */
int wk_test_cluster_attach(wk_test_cluster *c, const char *dir);
/* Until the live nodes are settled as after start (cluster_state:ok, one
 * slot map, three primaries, replicas in sync): 0, or -1 after timeout_ms. */
int wk_test_cluster_wait_settled(const wk_test_cluster *c, int timeout_ms);
/* What was not settled yet when the last wait gave up (for messages). */
const char *wk_test_cluster_unsettled(void);
/* A raw connection (2 s timeouts) to a node; NULL when it does not answer. */
redisContext *wk_test_cluster_raw(const wk_test_cluster *c, int port);
/* `calls` of one command in a node's INFO commandstats (0 if never run,
 * -1 if it does not answer). */
long long wk_test_cluster_calls(const wk_test_cluster *c, int port, const char *cmd);
/* The current primaries serving slots (up to 3); how many. */
int wk_test_cluster_primaries(const wk_test_cluster *c, int ports[3]);
/* A live replica of the primary on `primary_port`, -1 if none. */
int wk_test_cluster_replica_of(const wk_test_cluster *c, int primary_port);
/* CLUSTER KEYSLOT of a key; the primary serving a slot / a key (-1). */
int wk_test_cluster_keyslot(const wk_test_cluster *c, const char *key, size_t len);
int wk_test_cluster_slot_port(const wk_test_cluster *c, int slot);
int wk_test_cluster_key_port(const wk_test_cluster *c, const char *key, size_t len);
/* The whole map at once: ports[slot] = its primary's port (-1: none).
 * 0 or -1. */
int wk_test_cluster_slot_table(const wk_test_cluster *c, int ports[16384]);
/* A slot migration in three steps, so that traffic runs in between (the
 * ASK window): begin (SETSLOT IMPORTING on the target, then MIGRATING on
 * the source), move keys (GETKEYSINSLOT up to `max` + one MIGRATE; how
 * many moved, -1 on error: call until 0), finish (SETSLOT NODE on the
 * target, the source, then the other primaries, and wait until every live
 * node names the target). 0 or -1. */
typedef struct wk_test_migration {
    int slot, from, to; /* ports */
} wk_test_migration;
int wk_test_cluster_migrate_begin(const wk_test_cluster *c, wk_test_migration *m, int slot,
                                  int to_port);
int wk_test_cluster_migrate_keys(const wk_test_cluster *c, const wk_test_migration *m, int max);
int wk_test_cluster_migrate_finish(const wk_test_cluster *c, const wk_test_migration *m);
/* CLUSTER FAILOVER on a replica, then wait until every live node has it as
 * a primary and the map is settled. 0 or -1. */
int wk_test_cluster_failover(const wk_test_cluster *c, int replica_port, int timeout_ms);
/* SIGKILL the primary on `primary_port` and wait until its replica is
 * promoted everywhere; the replica's port, or -1. */
int wk_test_cluster_kill_primary(wk_test_cluster *c, int primary_port, int timeout_ms);
/* Have the keeper start a stopped node again (same port, same nodes.conf:
 * it rejoins as a replica) and wait until settled. 0 or -1. */
int wk_test_cluster_restart(wk_test_cluster *c, int port, int timeout_ms);

/* An event-loop handle on `url` (cap NULL = read-write; connect timeout
 * 1 s, command timeout as given), failing the test on error. */
wk_async *wk_test_open_async(const char *url, const wk_cap *cap, int command_timeout_ms);

/* One waiting acquire through an event-loop handle, as its callback
 * (wk_test_on_wait, the acquire's completion: arg is the request) saw
 * it. Optional: `seq`, a counter shared by requests, gives each its
 * `order` (atomically: blocking waiters on other threads may count too);
 * `flag`, what *flag was then; `release_e`, the lock (release_e,
 * release_name) is released at once through the loop when acquired (a
 * chain; `released` is set when that release completes). */
typedef struct wk_test_waitreq {
    int calls, status, order;
    bool acquired;
    wk_token token;
    wk_fenced_lease lease;
    char msg[256];
    int64_t at; /* wk_monotonic_ms() when called */
    int *seq;
    const bool *flag;
    bool flag_then;
    const wk_entity *release_e;
    const char *release_name;
    bool released;
} wk_test_waitreq;
void wk_test_on_wait(wk_async *a, int status, const char *msg, void *arg);
/* One turn of a poll() loop driving an event-loop handle (waits at most
 * 200 ms), and turns until nothing is pending (bounded by the suite's
 * timeout). */
void wk_test_async_turn(wk_async *a);
void wk_test_async_drain(wk_async *a);

/* A pipe followed through an event-loop handle by chained receives:
 * start with wk_pipe_recv_async(f->r, &f->m, wk_test_follow_pipe, f);
 * each message's bytes are appended to `got` (up to 64) and the next
 * receive started, until the end, another outcome or a failure (ended;
 * status and m.got say which). */
typedef struct wk_test_follower {
    wk_pipe_receiver *r;
    wk_pipe_message m;
    char got[64];
    size_t n;
    int status;
    bool ended;
} wk_test_follower;
void wk_test_follow_pipe(wk_async *a, int status, const char *msg, void *arg);

/* A completion as its callback saw it: wk_test_on_done(a, status, msg,
 * &done) counts the calls and keeps the last status and message. */
typedef struct wk_test_done {
    int calls, status;
    char msg[256];
} wk_test_done;
void wk_test_on_done(wk_async *a, int status, const char *msg, void *arg);
/* A near-cache get of `name` through the loop `a` (wk_near_cache_get_async
 * into *body, completed into *d), the loop turned until its callback ran;
 * asserts that it was queued and did not complete inside the call.
 * Returns its status. */
int wk_test_near_get_loop(wk_async *a, wk_near_cache *nc, const wk_entity *e, const char *name,
                          wk_body *body, wk_test_done *d);

/* Sleep for ms milliseconds. */
void wk_test_sleep_ms(int ms);
int64_t wk_test_now_ms(void);

#endif /* WK_TEST_SUPPORT_H */
