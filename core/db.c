/*
 * core/db.c — opening, narrowing and closing handles; where a blocking
 * handle's connection is set up to and what becomes of it (the exchange
 * machine sets it up, core/engine_conn.c: wk__conn_setup_begin / _done),
 * and its check before a query; the detail message.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include <wakuwaku/clock.h>

#include "core/cluster.h"
#include "core/db_internal.h"
#include "core/conn_machine.h"
#include "core/core_internal.h"

int wk__db_vfail(wk_db *db, int status, const char *fmt, va_list ap)
{
    if (db)
        vsnprintf(wk__db_msg(db), WK__ERRMSG_MAX, fmt, ap);
    return status;
}

int wk__db_fail(wk_db *db, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wk__db_vfail(db, status, fmt, ap);
    va_end(ap);
    return status;
}

int wk_diag_fail(wk_diag *diag, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (diag && diag->db) {
        char text[WK__ERRMSG_MAX / 2];
        vsnprintf(text, sizeof(text), fmt, ap);
        const char *name = diag->query && diag->query->name ? diag->query->name : "query";
        snprintf(wk__db_msg(diag->db), WK__ERRMSG_MAX, "%s: %s", name, text);
    }
    va_end(ap);
    return status;
}

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

int wk__conn_error_status(const redisContext *ctx)
{
    if (!ctx)
        return WK_EIO;
    if (ctx->err == REDIS_ERR_IO &&
        (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ||
         strcmp(ctx->errstr, strerror(EAGAIN)) == 0 || strstr(ctx->errstr, "timed out")))
        return WK_ETIMEDOUT;
    if (ctx->err == REDIS_ERR_OOM)
        return WK_ENOMEM;
    if (ctx->err == REDIS_ERR_PROTOCOL)
        return WK_EPROTO;
    return WK_EIO;
}

void wk__conn_drop(wk__conn *conn)
{
    wk__link_close(&conn->link);
    for (size_t i = 0; conn->cluster && i < conn->cluster->nnodes; i++)
        wk__link_close(&conn->cluster->nodes[i]->link);
}

bool wk__failover_noticed(const char *service, wk__link *link)
{
    bool switched = false;
    int rc = wk__wire_receive(link);
    for (;;) {
        redisReply *r = NULL;
        if (rc || (rc = wk__wire_take(link, &r)) || !r)
            break;
        /* ["message", "+switch-master", "<service> <old ip> <old port> <new ip> <new port>"] */
        size_t n = strlen(service);
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            r->element[2]->type == REDIS_REPLY_STRING && r->element[2]->len > n &&
            memcmp(r->element[2]->str, service, n) == 0 && r->element[2]->str[n] == ' ')
            switched = true;
        freeReplyObject(r);
    }
    if (rc)
        wk__link_close(link);
    return switched;
}

/* ------------------------------------------------------------------------
 * A connection is set up by the exchange machine (core/engine_conn.c) —
 * a handle's open is an exchange of no query (wk__conn_open, in
 * core/exchange.c) — with the two hooks below.
 * ---------------------------------------------------------------------- */

void wk__conn_lend(wk__conn *lent, const wk__conn *conn, wk__link *link, int64_t last_io_ms)
{
    memset(lent, 0, sizeof(*lent));
    atomic_init(&lent->refs, 1);
    atomic_init(&lent->interrupted, atomic_load(&conn->interrupted));
    lent->link = *link;
    memset(link, 0, sizeof(*link));
    lent->last_io_ms = last_io_ms;
    /* Borrowed, never freed through it. */
    lent->url = conn->url;
    lent->tls = conn->tls;
    lent->settings = conn->settings;
    lent->client_name = conn->client_name;
    lent->counters = conn->counters;
    lent->connect_timeout = conn->connect_timeout;
    lent->command_timeout = conn->command_timeout;
    lent->call_deadline = conn->call_deadline;
    lent->wake_fd = conn->wake_fd;
    lent->wake_signal_fd = -1;
}

int64_t wk__conn_lent_back(wk__conn *lent, wk__conn *conn, wk__link *link)
{
    *link = lent->link;
    conn->reconnects += lent->reconnects;
    wk__lane_end_setup(&lent->lane);
    free(lent->lane.out.data);
    return lent->last_io_ms;
}

void wk__conn_setup_begin(wk__conn *conn, wk__setup *s, int64_t cap)
{
    wk__link_close(&conn->notice); /* a new one comes with the primary */
    wk__setup_begin(s, conn, NULL, 0, WK__SETUP_SELECT | WK__SETUP_NOTICE, cap);
}

int wk__conn_setup_done(wk_db *db, wk__setup *s, char *msg, size_t msglen)
{
    wk__conn *conn = db->conn;
    int rc = s->rc;
    if (rc) { /* (the whole message on the handle too: an open keeps it) */
        wk__copy_text(msg, msglen, s->msg);
        return wk__db_fail(db, rc, "%s", s->msg);
    }
    wk__setup_take(s, &conn->link, &conn->notice);
    if (s->cluster && !conn->url.service) {
        /* A cluster's discovery within what is left of the set-up's
         * deadline. */
        int64_t outer = conn->call_deadline;
        conn->call_deadline = s->deadline;
        size_t seed = s->target;
        rc = wk__cluster_discover(
            conn, conn->url.nseeds ? conn->url.seeds[seed].host : conn->url.host,
            conn->url.nseeds ? conn->url.seeds[seed].port : conn->url.port, msg, msglen);
        conn->call_deadline = outer;
    } else if (conn->url.nseeds > 1)
        rc = wk__errbuf_set(msg, msglen, WK_EINVAL,
                            "the URL names %zu hosts (a cluster's seeds), but %s:%d is not a "
                            "cluster node",
                            conn->url.nseeds, conn->url.host, conn->url.port);
    if (rc)
        wk__link_close(&conn->link);
    else
        conn->last_io_ms = wk_monotonic_ms();
    return rc;
}

bool wk__conn_check(wk__conn *conn)
{
    wk__link *link = &conn->link;
    /* Broken; replaced (the sentinels switched the primary); or, idle for
     * a while, closed by the server (after a restart the old socket reads
     * EOF: finding that now lets the query go to a fresh connection
     * instead of failing with an unknown outcome; wk__link_idle_alive
     * drops owed replies first). TLS peeks through the session (a ticket
     * sent after the handshake is no stray reply). */
    if (!link->ctx)
        return false;
    if (link->ctx->err ||
        (conn->notice.ctx && wk__failover_noticed(conn->url.service, &conn->notice)) ||
        (wk_monotonic_ms() - conn->last_io_ms >= WK__IDLE_PROBE_MS &&
         !wk__link_idle_alive(link))) {
        wk__conn_drop(conn);
        return true;
    }
    return false;
}

void wk__conn_release(wk__conn *conn)
{
    if (!conn || atomic_fetch_sub(&conn->refs, 1) != 1)
        return;
    wk__conn_drop(conn);
    wk__counters_release(conn->counters);
    wk__cluster_free(conn->cluster);
    wk__link_close(&conn->notice);
    if (conn->settings)
        wk__conn_release(conn->settings); /* the TLS settings were borrowed */
    else
        wk__tls_config_free(conn->tls);
    wk_url_free(&conn->url);
    free(conn->client_name);
    free(conn->sentinel_username);
    if (conn->sentinel_password) {
        sodium_memzero(conn->sentinel_password, strlen(conn->sentinel_password));
        free(conn->sentinel_password);
    }
    wk__lane_end_setup(&conn->lane);
    free(conn->lane.out.data);
    if (conn->wake_fd >= 0)
        close(conn->wake_fd);
    if (conn->wake_signal_fd >= 0)
        close(conn->wake_signal_fd);
    free(conn);
}

static int copy_error(char *err, size_t errlen, const char *msg, int rc)
{
    return wk__errbuf_set(err, errlen, rc, "%s", msg[0] ? msg : wk_strerror(rc));
}

static int set_text(char **dst, const char *src)
{
    if (!src)
        return WK_OK;
    free(*dst);
    *dst = strdup(src);
    return *dst ? WK_OK : WK_ENOMEM;
}

/*
 * TLS iff the URL is rediss://. TLS options with another URL are refused
 * rather than ignored: whoever set a CA expects it to be used.
 */
static int tls_setup(wk__conn *conn, const wk_db_options *opts, char *msg, size_t msglen)
{
    const char *set = opts->tls_ca_file       ? "tls_ca_file"
                      : opts->tls_ca_dir      ? "tls_ca_dir"
                      : opts->tls_cert_file   ? "tls_cert_file"
                      : opts->tls_key_file    ? "tls_key_file"
                      : opts->tls_server_name ? "tls_server_name"
                                              : NULL;
    if (!conn->url.tls) {
        if (set)
            return wk__errbuf_set(msg, msglen, WK_EINVAL,
                                  "options.%s is set but the URL is not rediss:// (TLS is used "
                                  "iff the URL is rediss://)",
                                  set);
        return WK_OK;
    }
    /* No tls_server_name: each server is checked against the host it is
     * reached by (a cluster's nodes each against their own). */
    wk__tls_options t = {.ca_file = opts->tls_ca_file,
                         .ca_dir = opts->tls_ca_dir,
                         .cert_file = opts->tls_cert_file,
                         .key_file = opts->tls_key_file,
                         .server_name = opts->tls_server_name};
    return wk__tls_config_new(&conn->tls, &t, msg, msglen);
}

/* Sentinel credentials (only with redis-sentinel://) and acknowledged
 * leases. */
static int sentinel_setup(wk__conn *conn, const wk_db_options *opts, char *msg, size_t msglen)
{
    if (!conn->url.service && (opts->sentinel_username || opts->sentinel_password))
        return wk__errbuf_set(msg, msglen, WK_EINVAL,
                              "options.sentinel_%s is set but the URL is not redis-sentinel://",
                              opts->sentinel_password ? "password" : "username");
    if (opts->sentinel_username && !opts->sentinel_password)
        return wk__errbuf_set(msg, msglen, WK_EINVAL,
                              "options.sentinel_username needs options.sentinel_password");
    if (opts->lease_replicas < 0 || (opts->lease_replicas > 0 && opts->lease_ack_timeout_ms <= 0))
        return wk__errbuf_set(msg, msglen, WK_EINVAL,
                              "options.lease_replicas must be >= 0, with lease_ack_timeout_ms > 0");
    conn->lease_replicas = opts->lease_replicas;
    conn->lease_ack_timeout_ms = opts->lease_ack_timeout_ms;
    int rc = set_text(&conn->sentinel_username, opts->sentinel_username);
    if (!rc)
        rc = set_text(&conn->sentinel_password, opts->sentinel_password);
    return rc;
}

int wk__db_new(wk_db **out, const wk_db_options *opts, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return copy_error(err, errlen, "out is NULL", WK_EINVAL);
    *out = NULL;
    if (!opts)
        return copy_error(err, errlen, "options are NULL", WK_EINVAL);
    if (!opts->capability)
        return copy_error(err, errlen,
                          "options.capability is required (wk_cap_read_write() grants everything)",
                          WK_EINVAL);
    if (opts->connect_timeout_ms <= 0 || opts->command_timeout_ms <= 0)
        return copy_error(err, errlen, "timeouts must be > 0 ms", WK_EINVAL);
    if (sodium_init() < 0)
        return copy_error(err, errlen, "libsodium failed to initialise", WK_EIO);

    wk_db *db = calloc(1, sizeof(*db));
    wk__conn *conn = calloc(1, sizeof(*conn));
    wk__conn_counters *counters = wk__counters_new();
    if (!db || !conn || !counters) {
        free(db);
        free(conn);
        wk__counters_release(counters);
        return copy_error(err, errlen, "out of memory", WK_ENOMEM);
    }
    conn->counters = counters;
    atomic_init(&conn->refs, 1);
    conn->wake_fd = conn->wake_signal_fd = -1;
    db->conn = conn;
    db->proc.process = wk__db_process;
    db->proc.db = db;
    conn->connect_timeout = ms_to_tv(opts->connect_timeout_ms);
    conn->command_timeout = ms_to_tv(opts->command_timeout_ms);

    int rc = wk_url_parse(&conn->url, opts->url, db->errmsg, sizeof(db->errmsg));
    if (!rc)
        rc = set_text(&conn->url.username, opts->username);
    if (!rc)
        rc = set_text(&conn->url.password, opts->password);
    if (!rc)
        rc = set_text(&conn->client_name, opts->client_name);
    if (!rc && opts->database >= 0)
        conn->url.database = opts->database;
    if (!rc)
        rc = sentinel_setup(conn, opts, db->errmsg, sizeof(db->errmsg));
    if (!rc)
        rc = tls_setup(conn, opts, db->errmsg, sizeof(db->errmsg));
    if (!rc)
        rc = wk_cap_intersect(&db->cap, opts->capability, opts->capability, NULL);
    if (rc) {
        copy_error(err, errlen, db->errmsg, rc);
        wk_db_close(db);
        return rc;
    }
    *out = db;
    return WK_OK;
}

int wk_db_open(wk_db **out, const wk_db_options *opts, char *err, size_t errlen)
{
    int rc = wk__db_new(out, opts, err, errlen);
    if (rc)
        return rc;
    rc = wk__conn_open(*out);
    if (rc) {
        copy_error(err, errlen, (*out)->errmsg, rc);
        wk_db_close(*out);
        *out = NULL;
    }
    return rc;
}

int wk__db_pin_node(wk_db **out, wk_db *db, uint16_t node)
{
    int rc = wk_db_narrow(out, db, db->cap, NULL);
    if (rc)
        return rc;
    (*out)->pinned = true;
    (*out)->pin_node = node;
    return WK_OK;
}

int wk_db_cluster_primary(wk_db **out, wk_db *db, size_t i)
{
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!db)
        return WK_EINVAL;
    wk__cluster *c = db->conn ? db->conn->cluster : NULL;
    if (!c || db->pool)
        return wk__db_fail(db, WK_EINVAL, "cluster primary: %s",
                           db->pool ? "a pool's shared processor has no map of its own"
                                    : "the handle is not a cluster handle");
    size_t seen = 0;
    for (size_t n = 0; n < c->nnodes; n++) {
        if (!c->nodes[n]->primary || seen++ != i)
            continue;
        return wk__db_pin_node(out, db, (uint16_t)n);
    }
    return wk__db_fail(db, WK_EINVAL, "cluster primary %zu: the map has %zu primaries", i,
                       c->primaries);
}

int wk_db_narrow(wk_db **out, wk_db *db, const wk_cap *cap, const char *name)
{
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!db || !cap)
        return WK_EINVAL;
    if (db->pool)
        return wk__db_fail(db, WK_EINVAL,
                           "a pool's shared processor cannot be narrowed; narrow a handle");
    wk_db *view = calloc(1, sizeof(*view));
    if (!view)
        return WK_ENOMEM;
    int rc = wk_cap_intersect(&view->cap, db->cap, cap, name);
    if (rc) {
        free(view);
        return wk__db_fail(db, rc, "cannot narrow the capability: %s", wk_strerror(rc));
    }
    view->proc.process = wk__db_process;
    view->proc.db = view;
    view->conn = db->conn;
    atomic_fetch_add(&db->conn->refs, 1);
    *out = view;
    return WK_OK;
}

int64_t wk__db_call_deadline(const wk_db *db)
{
    return wk__deadline_after(db->conn->command_timeout);
}

int64_t wk__db_bound(wk_db *db, int64_t deadline)
{
    if (!db)
        return 0;
    if (db->pool) /* no connection of its own: the calling thread's bound */
        return wk__pool_bound(deadline);
    int64_t prev = db->conn->call_deadline;
    db->conn->call_deadline = deadline;
    return prev;
}

void wk_db_close(wk_db *db)
{
    /* A pool's shared handle belongs to the pool (wk_pool_close). */
    if (!db || db->pool)
        return;
    wk_db_close(db->blocking);
    wk__conn_release(db->conn);
    wk_cap_free(db->cap);
    free(db);
}

wk_processor *wk_db_processor(wk_db *db)
{
    return db ? &db->proc : NULL;
}

const wk_cap *wk_db_capability(const wk_db *db)
{
    return db ? db->cap : NULL;
}

const char *wk_db_errmsg(const wk_db *db)
{
    return db ? wk__db_msg(db) : "no handle";
}

const char *wk_processor_errmsg(const wk_processor *processor)
{
    return processor && processor->db ? wk__db_msg(processor->db) : "no handle";
}

size_t wk_db_cluster_primaries(const wk_db *db)
{
    return db && db->conn && db->conn->cluster ? db->conn->cluster->primaries : 0;
}

bool wk_is_connection_error(int status)
{
    return status == WK_EIO || status == WK_ETIMEDOUT || status == WK_EUNKNOWN;
}

static int parse_pong(const wk_query *q, const wk_reply *reply, wk_diag *diag)
{
    (void)q;
    size_t len;
    const char *s = wk_reply_str(reply, &len);
    if (wk_reply_get_type(reply) != WK_REPLY_STATUS || len != 4 || memcmp(s, "PONG", 4) != 0)
        return wk_diag_fail(diag, WK_EPROTO, "expected PONG");
    return WK_OK;
}

int wk_db_ping(wk_db *db)
{
    if (!db)
        return WK_EINVAL;
    static const char *const argv[] = {"PING"};
    static const size_t argvlen[] = {4};
    wk_query q = {.name = "db.ping",
                  .flags = WK_QUERY_RETRY_SAFE,
                  .argc = 1,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_pong};
    /* A pool's shared handle has no connection: its processor borrows one. */
    return db->pool ? wk_process(&db->proc, &q) : wk__db_process(&db->proc, &q);
}

/* ROLE's first element: whether the node is a primary; an error reply
 * (ROLE refused by an ACL) leaves *out true: the connection answered. */
static int parse_role(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    (void)d;
    size_t len = 0;
    const char *role = wk_reply_count(r) ? wk_reply_str(wk_reply_at(r, 0), &len) : NULL;
    *(bool *)q->out = role && len == 6 && memcmp(role, "master", 6) == 0;
    return WK_OK;
}

void wk__role_query(wk_query *q, bool *primary)
{
    static const char *const argv[] = {"ROLE"};
    static const size_t argvlen[] = {4};
    *primary = true;
    *q = (wk_query){.name = "db.role",
                    .flags = WK_QUERY_RETRY_SAFE | WK__QUERY_ROLE_CHECK,
                    .argc = 1,
                    .argv = argv,
                    .argvlen = argvlen,
                    .parse = parse_role,
                    .out = primary};
}

int wk__db_still_primary(wk_db *db, bool *primary)
{
    wk_query q;
    wk__role_query(&q, primary);
    int rc = wk_process(wk_db_processor(db), &q);
    if (rc == WK_EREDIS)
        *primary = true; /* ROLE refused (an ACL): the connection still answered */
    return rc == WK_EREDIS ? WK_OK : rc;
}

bool wk__db_left_replica(wk_db *db)
{
    bool primary = true; /* a replica's reply dropped the connection (WK__QUERY_ROLE_CHECK) */
    return db->conn->url.service && wk__db_still_primary(db, &primary) == WK_OK && !primary;
}

int wk__processor_fail(wk_processor *p, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (p && p->db)
        wk__db_vfail(p->db, status, fmt, ap);
    va_end(ap);
    return status;
}
