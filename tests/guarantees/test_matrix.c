/*
 * tests/guarantees/test_matrix.c — the guarantee matrix: documented
 * guarantees × handle types × every built-in query of every kind (the
 * test-side registry, tests/kinds/kinds.h), so that a new handle type or a
 * new query gets every guarantee tested without anyone remembering to.
 *
 * Handle types (handle_types[] below): a plain handle, a pool (with one
 * of its handles borrowed elsewhere, so the pool must use another;
 * multiplexed, the default, and with multiplex off: "pool exclusive"), a
 * batch, the event-loop handle, a Sentinel URL, a Cluster seed list, the
 * event-loop handle on that seed list and a
 * pinned cluster handle (wk_db_cluster_primary). A cell that cannot hold
 * is refused by the API with WK_EINVAL, and says so in `refused` here.
 *
 * Guarantees (one Test each, every row × every handle type):
 *   capability    a read-only handle refuses every WRITE query with
 *                 WK_EDENIED, and runs every READ (that nothing is sent is
 *                 counted in tests/capability/, plain handle).
 *   acknowledged  on a handle with lease_replicas, every query that takes
 *                 or lengthens a lease (the rows marked WK_TEST_*_LEASE)
 *                 is followed by `WAIT <n> <ms>` on the same connection, as
 *                 the very next command the server sees from it (MONITOR
 *                 on the node); no other query is.
 *   unacknowledged  with fewer replicas than asked for, every query that takes a
 *                 lease answers WK_ENOTREPLICATED, and on an immediate
 *                 handle (not a batch or the event loop, where the release
 *                 is the caller's) nothing of it is left held.
 *
 * The topologies (wk_test_server processes) are started once for the
 * suite (PRE_ALL): a Sentinel
 * topology (a primary, its replica, three sentinels) whose primary also
 * serves the plain, pool, batch and event-loop handles, and a Redis
 * Cluster of three primaries with a replica each.
 */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include "support.h"
#include "tests/kinds/kinds.h"

/* ------------------------------------------------------------------------
 * The suite's servers
 * ---------------------------------------------------------------------- */

/* Started by the runner; each test (a process of its own) finds them
 * through the environment (ENV_SENTINELS: "<url> <primary port> <replica
 * pid>", ENV_CLUSTER: the cluster's directory). */
#define ENV_SENTINELS "WK_TEST_MATRIX_SENTINELS"
#define ENV_CLUSTER "WK_TEST_MATRIX_CLUSTER"
/* A test that stops the replica holds this file exclusively, the others
 * shared: the runner runs tests in parallel (--jobs), and a stopped
 * replica would fail another test's acknowledged cells. */
#define ENV_LOCK "WK_TEST_MATRIX_LOCK"
static wk_test_sentinels started;
static wk_test_cluster started_cluster;

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    if (wk_test_sentinels_start(&started, NULL, NULL) != 0) {
        fprintf(stderr, "cannot start the Sentinel topology\n");
        exit(1);
    }
    if (wk_test_cluster_start(&started_cluster) != 0) {
        wk_test_sentinels_stop(&started);
        fprintf(stderr, "cannot start a Redis Cluster\n");
        exit(1);
    }
    char env[256];
    snprintf(env, sizeof(env), "%s %d %d", started.url, started.primary.port,
             (int)started.replica.pid);
    setenv(ENV_SENTINELS, env, 1);
    setenv(ENV_CLUSTER, started_cluster.dir, 1);
    char lock[sizeof(started_cluster.dir) + 16];
    snprintf(lock, sizeof(lock), "%s/matrix.lock", started_cluster.dir);
    setenv(ENV_LOCK, lock, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    wk_test_cluster_stop(&started_cluster);
    wk_test_sentinels_stop(&started);
}

/* This test's view of them. */
static char sentinel_url[160];
static int primary_port;
static pid_t replica_pid;
static wk_test_cluster cluster;

static void attach_as(int how)
{
    const char *s = getenv(ENV_SENTINELS), *dir = getenv(ENV_CLUSTER), *lock = getenv(ENV_LOCK);
    cr_assert(s && dir && lock, "the topologies did not start");
    int fd = open(lock, O_RDWR | O_CREAT, 0600);
    cr_assert(fd >= 0);
    cr_assert_eq(flock(fd, how), 0); /* released when the test's process ends */
    int pid = 0;
    cr_assert_eq(sscanf(s, "%159s %d %d", sentinel_url, &primary_port, &pid), 3);
    replica_pid = (pid_t)pid;
    cr_assert_eq(wk_test_cluster_attach(&cluster, dir), 0);
    cr_assert_eq(wk_test_cluster_wait_settled(&cluster, 60000), 0, "%s",
                 wk_test_cluster_unsettled());
}

static void attach(void)
{
    attach_as(LOCK_SH);
}

static void attach_alone(void)
{
    attach_as(LOCK_EX);
}

#define ACK_TIMEOUT_MS 2000 /* long: a loaded machine acknowledges late */
#define SHORT_ACK_MS 200    /* with the replicas stopped: how long a WAIT waits */

/* ------------------------------------------------------------------------
 * Handle types
 * ---------------------------------------------------------------------- */

typedef enum {
    PLAIN,
    POOL,
    BATCH,
    EVENT_LOOP,
    SENTINEL,
    CLUSTER,
    PINNED,
    LOOP_CLUSTER,   /* the event-loop handle on the cluster's seed list */
    POOL_EXCLUSIVE, /* a pool with multiplex off: one query per connection at a time */
    LOOP_SENTINEL,  /* the event-loop handle on the Sentinel URL */
    POOL_SENTINEL,  /* a (multiplexed) pool on the Sentinel URL */
    NTYPES
} handle_type;

static const char *const type_names[NTYPES] = {
    "plain",   "pool",   "batch",  "event loop",        "sentinel",
    "cluster", "pinned", "event loop cluster", "pool exclusive", "event loop sentinel",
    "pool sentinel"};

/* One open handle of a type, and how to run a row on it. */
typedef struct handle {
    handle_type type;
    wk_db *db;       /* plain, batch's, sentinel, cluster, pinned's parent */
    wk_db *pinned;   /* wk_db_cluster_primary() */
    wk_pool *pool;
    wk_db *borrowed; /* the pool's handle held elsewhere */
    wk_batch *batch;
    wk_async *async;
    wk_processor *p;
    int async_status;
    bool async_done;
} handle;

/* WK_TEST_MATRIX_TYPE=<name> runs the cells of one handle type only
 * (to look at one column; every type runs by default). */
static bool skipped(handle_type t)
{
    const char *only = getenv("WK_TEST_MATRIX_TYPE");
    return only && strcmp(only, type_names[t]) != 0;
}

static bool on_cluster(handle_type t)
{
    return t == CLUSTER || t == PINNED || t == LOOP_CLUSTER;
}

/* A batch or an event loop: the outcome comes later. */
static bool deferred(handle_type t)
{
    return t == BATCH || t == EVENT_LOOP || t == LOOP_CLUSTER || t == LOOP_SENTINEL;
}

/* Whether a guarantee's cell runs on the type (the event-loop handle has
 * no cluster or sentinel variant to add here: it is its own type). */
static const char *url_of(handle_type t)
{
    if (t == SENTINEL || t == LOOP_SENTINEL || t == POOL_SENTINEL)
        return sentinel_url;
    if (on_cluster(t))
        return cluster.url;
    static char primary_url[64];
    snprintf(primary_url, sizeof(primary_url), "redis://127.0.0.1:%d", primary_port);
    return primary_url;
}

static void async_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    (void)msg;
    handle *h = arg;
    h->async_status = status;
    h->async_done = true;
}

static void handle_open(handle *h, handle_type t, const wk_cap *cap, int lease_replicas,
                        int ack_ms)
{
    memset(h, 0, sizeof(*h));
    h->type = t;
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url_of(t);
    o.capability = cap;
    o.command_timeout_ms = 5000;
    o.lease_replicas = lease_replicas;
    o.lease_ack_timeout_ms = ack_ms;
    char err[512];
    if (t == POOL || t == POOL_EXCLUSIVE || t == POOL_SENTINEL) {
        wk_pool_options po = WK_POOL_OPTIONS_INIT;
        po.db = &o;
        po.size = 2;
        po.multiplex = t != POOL_EXCLUSIVE; /* the default, or one query per connection */
        cr_assert_eq(wk_pool_open(&h->pool, &po, err, sizeof(err)), WK_OK, "%s", err);
        /* Another thread's borrow: the pool's queries go on the other
         * handle, and nothing may go out on this one. */
        cr_assert_eq(wk_pool_borrow(h->pool, &h->borrowed), WK_OK);
        h->p = wk_pool_processor(h->pool);
        return;
    }
    if (t == EVENT_LOOP || t == LOOP_CLUSTER || t == LOOP_SENTINEL) {
        cr_assert_eq(wk_async_open(&h->async, &o, err, sizeof(err)), WK_OK, "%s", err);
        h->p = wk_async_with(h->async, async_done, h);
        return;
    }
    cr_assert_eq(wk_db_open(&h->db, &o, err, sizeof(err)), WK_OK, "%s: %s", type_names[t], err);
    h->p = wk_db_processor(h->db);
    if (t == BATCH) {
        cr_assert_eq(wk_batch_open(&h->batch, h->db), WK_OK);
        h->p = wk_batch_processor(h->batch);
    } else if (t == PINNED) {
        cr_assert_eq(wk_db_cluster_primary(&h->pinned, h->db, 0), WK_OK, "%s",
                     wk_db_errmsg(h->db));
        h->p = wk_db_processor(h->pinned);
    }
}

static void handle_close(handle *h)
{
    if (h->pool) {
        wk_pool_return(h->pool, h->borrowed);
        wk_pool_close(h->pool);
    }
    wk_async_close(h->async);
    wk_batch_close(h->batch);
    wk_db_close(h->pinned);
    wk_db_close(h->db);
}

/*
 * A batch and the event loop run a query later, but a row's outcome
 * lives on its stack: this wrapper (a deferred processor itself, so the
 * library treats it as the batch or loop it wraps) queues each query on
 * the inner processor and runs it there and then — a batch of one, or
 * the loop turned until its completion — keeping the query's status.
 */
typedef struct flushing {
    wk_processor proc; /* first member */
    handle *h;
    wk_processor *inner;
    int status; /* the first failure of the row's queries, or WK_OK */
} flushing;

static int flush_process(wk_processor *self, wk_query *q)
{
    flushing *f = (flushing *)self;
    handle *h = f->h;
    int rc = wk_process(f->inner, q);
    if (rc) {
        if (h->batch) /* refused while queuing: the batch is refused as a whole */
            wk_batch_discard(h->batch);
        return rc;
    }
    int st;
    if (h->batch) {
        wk_batch_exec(h->batch);
        st = wk_batch_status(h->batch, 0);
    } else {
        h->async_done = false;
        int64_t until = wk_test_now_ms() + 20000;
        while (!h->async_done && wk_test_now_ms() < until)
            wk_test_async_turn(h->async);
        cr_assert(h->async_done, "%s: no completion on the event loop", q->name);
        st = h->async_status;
    }
    if (f->status == WK_OK)
        f->status = st;
    return WK_OK;
}

/* Runs the row on the handle: its outcome, whatever the handle's way of
 * delivering it. */
static int run_row(handle *h, const wk_test_query *row, const char *ns)
{
    if (!h->batch && !h->async)
        return row->run(h->p, ns);
    flushing f = {.proc = {.process = flush_process, .db = h->p->db, .flags = h->p->flags},
                  .h = h,
                  .inner = h->p,
                  .status = WK_OK};
    int rc = row->run(&f.proc, ns);
    return rc ? rc : f.status;
}

static const char *errmsg(const handle *h)
{
    if (h->async)
        return wk_async_errmsg(h->async);
    if (h->pool)
        return wk_pool_errmsg(h->pool);
    return wk_db_errmsg(h->pinned ? h->pinned : h->db);
}

/* A namespace of its own per cell (names stay short: ns + row index). */
static const char *cell_ns(const char *guarantee, handle_type t, size_t row)
{
    static char ns[64];
    snprintf(ns, sizeof(ns), "%s%d_%zu_%d", guarantee, (int)t, row, (int)getpid());
    return ns;
}

/* ------------------------------------------------------------------------
 * capability
 * ---------------------------------------------------------------------- */

Test(matrix, capability_read_only_refuses_every_write_on_every_handle_type, .init = attach, .timeout = 300)
{
    for (handle_type t = 0; t < NTYPES; t++) {
        if (skipped(t))
            continue;
        handle h;
        handle_open(&h, t, wk_cap_read_only(), 0, 1000);
        for (size_t i = 0; i < wk_test_nqueries(); i++) {
            const wk_test_query *row = wk_test_query_at(i);
            int rc = run_row(&h, row, cell_ns("cap", t, i));
            /* A deferred handle may refuse a query that needs its outcome
             * at once before it looks at the capability: refused too. */
            if (row->effect == WK_WRITE && deferred(t) && rc == WK_EINVAL)
                continue;
            if (row->effect == WK_WRITE)
                cr_assert_eq(rc, WK_EDENIED, "%s × %s: %s (%s)", type_names[t], row->name,
                             wk_err_name(rc), errmsg(&h));
            else
                cr_assert_neq(rc, WK_EDENIED, "%s × %s: a read refused (%s)", type_names[t],
                              row->name, errmsg(&h));
        }
        handle_close(&h);
    }
}

/* ------------------------------------------------------------------------
 * acknowledged: the WAIT rides behind the lease, on its connection
 * ---------------------------------------------------------------------- */

/* MONITOR on one node, and the lines it saw. */
typedef struct monitor {
    redisContext *c;
    int port;
} monitor;

static void monitor_start(monitor *m, int port)
{
    m->port = port;
    m->c = wk_test_raw_port(port, NULL);
    cr_assert(m->c, "no connection to %d", port);
    redisReply *r = redisCommand(m->c, "MONITOR");
    cr_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* The client address of a MONITOR line ("[0 127.0.0.1:5555]"), and where
 * its command starts. */
static bool line_client(const char *line, char *addr, size_t cap, const char **cmd)
{
    const char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
    if (!close || (size_t)(close - open) >= cap)
        return false;
    memcpy(addr, open + 1, (size_t)(close - open - 1));
    addr[close - open - 1] = '\0';
    *cmd = close + 2;
    return true;
}

/*
 * Reads the node's MONITOR lines up to the marker `ECHO <marker>` sent on
 * `raw`, and checks the rule for every command of a client that named
 * `ns`: it is followed, as that client's very next command, by WAIT (when
 * `acked`) — or by no WAIT at all (when not). Returns how many commands
 * naming ns it saw.
 */
static int monitor_check(monitor *m, const char *ns, const char *marker, bool acked,
                         const char *cell)
{
    redisContext *raw = wk_test_raw_port(m->port, NULL);
    freeReplyObject(redisCommand(raw, "ECHO %s", marker));
    redisFree(raw);
    enum { MAX = 256 };
    char *lines[MAX];
    int n = 0;
    for (;;) {
        redisReply *r = NULL;
        cr_assert_eq(redisGetReply(m->c, (void **)&r), REDIS_OK, "%s: MONITOR lost", cell);
        bool end = r->type == REDIS_REPLY_STATUS && strstr(r->str, marker) && strstr(r->str, "ECHO");
        if (!end && n < MAX)
            lines[n++] = strdup(r->str);
        freeReplyObject(r);
        if (end)
            break;
    }
    int seen = 0;
    for (int i = 0; i < n; i++) {
        char addr[64], next_addr[64];
        const char *cmd, *next_cmd = NULL;
        if (!line_client(lines[i], addr, sizeof(addr), &cmd) || strstr(addr, "lua") ||
            !strstr(cmd, ns))
            continue;
        seen++;
        for (int j = i + 1; j < n; j++) {
            if (line_client(lines[j], next_addr, sizeof(next_addr), &next_cmd) &&
                strcmp(next_addr, addr) == 0)
                break;
            next_cmd = NULL;
        }
        bool wait = next_cmd && strncmp(next_cmd, "\"WAIT\" ", 7) == 0;
        if (acked)
            cr_assert(wait, "%s: %s is not followed by its WAIT on its connection (next: %s)",
                      cell, cmd, next_cmd ? next_cmd : "nothing");
        else
            cr_assert_not(wait, "%s: %s is followed by a WAIT it does not need", cell, cmd);
    }
    for (int i = 0; i < n; i++)
        free(lines[i]);
    return seen;
}

/* The data nodes a handle type's queries may reach. */
static int data_ports(handle_type t, int ports[3])
{
    if (on_cluster(t))
        return wk_test_cluster_primaries(&cluster, ports);
    ports[0] = primary_port;
    return 1;
}

Test(matrix, acknowledged_every_lease_query_carries_its_wait_on_its_connection, .init = attach, .timeout = 300)
{
    for (handle_type t = 0; t < NTYPES; t++) {
        if (skipped(t))
            continue;
        handle h;
        handle_open(&h, t, wk_cap_read_write(), 1, ACK_TIMEOUT_MS);
        int ports[3];
        int nports = data_ports(t, ports);
        monitor mons[3];
        for (int k = 0; k < nports; k++)
            monitor_start(&mons[k], ports[k]);
        for (size_t i = 0; i < wk_test_nqueries(); i++) {
            const wk_test_query *row = wk_test_query_at(i);
            const char *ns = cell_ns("ack", t, i);
            char cell[160];
            snprintf(cell, sizeof(cell), "%s × %s", type_names[t], row->name);
            int rc = run_row(&h, row, ns);
            /* The replicas are in sync: every lease is acknowledged. */
            cr_assert(rc == WK_OK || (row->lease == 0 && rc != WK_ENOTREPLICATED), "%s: %s (%s)",
                      cell, wk_err_name(rc), errmsg(&h));
            char marker[96];
            snprintf(marker, sizeof(marker), "end-of-%s", ns);
            int seen = 0;
            for (int k = 0; k < nports; k++)
                seen += monitor_check(&mons[k], ns, marker, row->lease != 0, cell);
            if (row->lease)
                cr_assert_gt(seen, 0, "%s: the lease query never reached a node", cell);
        }
        for (int k = 0; k < nports; k++)
            redisFree(mons[k].c);
        handle_close(&h);
    }
}

/* ------------------------------------------------------------------------
 * unacknowledged: no replica answers, no lease is reported held
 * ---------------------------------------------------------------------- */

/* Fewer replicas acknowledge than the handle asks for: the single
 * server's replica is stopped (so an idle connection's WAIT would still
 * count it: the pool's old fault), and a cluster handle asks for two
 * replicas where each shard has one (stopping a cluster's replicas
 * unsettles the cluster for longer than the suite should wait). */
static int fewer_replicas_begin(handle_type t)
{
    if (on_cluster(t))
        return 2;
    kill(replica_pid, SIGSTOP);
    wk_test_sleep_ms(100); /* whatever was in flight to it is stuck now */
    return 1;
}

static void fewer_replicas_end(handle_type t)
{
    if (!on_cluster(t))
        kill(replica_pid, SIGCONT);
}

/* Keys of namespace ns on the type's data nodes, a FencedLock's fence
 * counter aside (it stays spent by design). */
static long long keys_left(handle_type t, const char *ns)
{
    int ports[3];
    int n = data_ports(t, ports);
    long long left = 0;
    for (int k = 0; k < n; k++) {
        redisContext *c = wk_test_raw_port(ports[k], NULL);
        redisReply *r = redisCommand(c, "KEYS *%s*", ns);
        for (size_t i = 0; r && i < r->elements; i++)
            left += strstr(r->element[i]->str, ":fence") == NULL;
        freeReplyObject(r);
        redisFree(c);
    }
    return left;
}

Test(matrix, unacknowledged_leases_are_never_reported_held, .init = attach_alone, .timeout = 300)
{
    for (handle_type t = 0; t < NTYPES; t++) {
        if (skipped(t))
            continue;
        handle h;
        handle_open(&h, t, wk_cap_read_write(), fewer_replicas_begin(t), SHORT_ACK_MS);
        for (size_t i = 0; i < wk_test_nqueries(); i++) {
            const wk_test_query *row = wk_test_query_at(i);
            if (!(row->lease & WK_TEST_TAKES_LEASE))
                continue;
            const char *ns = cell_ns("unack", t, i);
            int rc = run_row(&h, row, ns);
            cr_assert_eq(rc, WK_ENOTREPLICATED, "%s × %s: %s (%s)", type_names[t], row->name,
                         wk_err_name(rc), errmsg(&h));
            if (!deferred(t))
                cr_assert_eq(keys_left(t, ns), 0, "%s × %s: the unacknowledged lease was left held",
                             type_names[t], row->name);
        }
        fewer_replicas_end(t);
        handle_close(&h);
    }
}
