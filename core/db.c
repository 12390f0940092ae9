/*
 * core/db.c — opening, narrowing and closing handles; connecting and
 * reconnecting (AUTH, SELECT, CLIENT SETNAME); the detail message.
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
#include "core/dial.h"
#include "core/private.h"

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

const char *wk__conn_where(const wk__conn *conn, char *buf, size_t len)
{
    if (conn->url.path)
        snprintf(buf, len, "unix:%s", conn->url.path);
    else
        snprintf(buf, len, "%s:%d", conn->url.host, conn->url.port);
    return buf;
}

/* Write a message to msg (msglen bytes); returns `status`. */
static int msg_fail(char *msg, size_t msglen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int msg_fail(char *msg, size_t msglen, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wk__errbuf_vset(msg, msglen, status, fmt, ap);
    va_end(ap);
    return status;
}

/* The oldest Redis that keeps the library's promises: HELLO (the open
 * check below) and scripts whose writes replicate as effects after TIME
 * (on by default since 5.0, the only mode since 7.0). */
#define MIN_MAJOR 6
#define MIN_VERSION "6.0"

/* Send one set-up command and read its reply through the same socket
 * code as queries (core/wire.c). */
int wk__link_round_trip_until(wk__link *c, int64_t deadline, int argc, const char **argv,
                              redisReply **reply)
{
    size_t lens[8];
    for (int i = 0; i < argc && i < 8; i++)
        lens[i] = strlen(argv[i]);
    int rc = wk__wire_command(c, deadline, argc, argv, lens);
    if (!rc)
        rc = wk__wire_read(c, deadline, reply);
    return rc;
}

int wk__link_round_trip(wk__link *c, const wk__conn *conn, int argc, const char **argv,
                        redisReply **reply)
{
    /* Inside an open or a query (a cluster's CLUSTER SLOTS), no later
     * than that call's deadline. */
    int64_t deadline =
        wk__deadline_min(wk__deadline_after(conn->command_timeout), conn->call_deadline);
    return wk__link_round_trip_until(c, deadline, argc, argv, reply);
}

/* What a failed set-up round trip means at `addr`. */
static int setup_failure(char *msg, size_t msglen, int rc, const char *what, const char *addr,
                         const wk__conn *conn, const wk__link *link)
{
    const redisContext *c = link->ctx;
    /* A TLS port reached with redis:// answers plain text with a TLS
     * alert or hangs up: say what to try (never a silent fallback). */
    const char *hint = conn->tls ? "" : " (if it is a TLS port, use a rediss:// URL)";
    /* TLS 1.3: a server that wants a client certificate (tls-auth-clients)
     * says so after the handshake, in an alert on the first read. */
    if (conn->tls && rc == WK_EIO &&
        (wk__tls_lacks_client_cert(link) ||
         (strstr(c->errstr, "alert") && strstr(c->errstr, "certificate"))))
        return msg_fail(msg, msglen, WK_EAUTH,
                        "TLS: %s refused the client certificate or its absence (%s); set "
                        "options.tls_cert_file and options.tls_key_file",
                        addr, c->errstr);
    if (rc == WK_EPROTO)
        return msg_fail(msg, msglen, rc, "%s is not a Redis server (%s answered: %s)%s", addr, what,
                        c->errstr, hint);
    if (rc == WK_ETIMEDOUT)
        return msg_fail(msg, msglen, rc,
                        "%s did not answer %s before the deadline (timed out: the server is "
                        "stalled, overloaded or does not speak Redis)",
                        addr, what);
    if (rc == WK_EIO)
        return msg_fail(msg, msglen, rc, "%s failed at %s: %s%s", what, addr, c->errstr, hint);
    return msg_fail(msg, msglen, rc, "%s failed at %s: %s", what, addr, c->errstr);
}

int wk__setup_judge(const redisReply *r, int refusal, const char *what, char *msg, size_t msglen)
{
    if (r->type == REDIS_REPLY_ERROR)
        return msg_fail(msg, msglen, refusal, "%s refused by the server: %.200s", what, r->str);
    return WK_OK;
}

/* Run one set-up command; a Redis error becomes `refusal`. */
static int setup_command(wk__link *c, const wk__conn *conn, int64_t deadline, const char *addr,
                         char *msg, size_t msglen, int refusal, const char *what, int argc,
                         const char **argv)
{
    redisReply *r;
    int rc = wk__link_round_trip_until(c, deadline, argc, argv, &r);
    if (rc)
        return setup_failure(msg, msglen, rc, what, addr, conn, c);
    rc = wk__setup_judge(r, refusal, what, msg, msglen);
    freeReplyObject(r);
    return rc;
}

/* The value after `field` in a HELLO reply (RESP2: field, value, …). */
static const redisReply *hello_field(const redisReply *r, const char *field)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, field) == 0)
            return r->element[i + 1];
    }
    return NULL;
}

int wk__hello_judge(const redisReply *r, const char *addr, bool *cluster, char *msg, size_t msglen)
{
    if (cluster)
        *cluster = false;
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOAUTH", 6) == 0)
            return msg_fail(msg, msglen, WK_EAUTH,
                            "%s requires a password (%.200s); set it in the URL or in "
                            "options.password",
                            addr, r->str);
        if (strncmp(r->str, "NOPERM", 6) == 0)
            return WK__HELLO_FALLBACK;
        if (strstr(r->str, "unknown command"))
            return msg_fail(msg, msglen, WK_EPROTO,
                            "%s is older than Redis " MIN_VERSION
                            " (it does not know HELLO); wakuwaku needs Redis >= " MIN_VERSION,
                            addr);
        return msg_fail(msg, msglen, WK_EREDIS, "HELLO refused by the server: %.200s", r->str);
    }
    const redisReply *v = hello_field(r, "version");
    if (!v || v->type != REDIS_REPLY_STRING)
        return msg_fail(msg, msglen, WK_EPROTO,
                        "%s is not a Redis server (HELLO answered without a version)", addr);
    if (atoi(v->str) < MIN_MAJOR)
        return msg_fail(msg, msglen, WK_EPROTO,
                        "%s runs Redis %.20s; wakuwaku needs Redis >= " MIN_VERSION
                        " (scripts that read TIME must replicate their effects)",
                        addr, v->str);
    const redisReply *mode = hello_field(r, "mode");
    if (cluster && mode && mode->type == REDIS_REPLY_STRING && strcmp(mode->str, "cluster") == 0)
        *cluster = true;
    return WK_OK;
}

/*
 * The open check: one round trip (HELLO 2, with SETNAME when asked) that
 * fails at once for what is not Redis, a missing password, or a Redis too
 * old. A user whose ACL forbids HELLO gets PING (and CLIENT SETNAME)
 * instead; the version is then not checked.
 */
static int check_server(wk__link *c, const wk__conn *conn, int64_t deadline, const char *addr,
                        bool *cluster, char *msg, size_t msglen)
{
    const char *argv[4] = {"HELLO", "2", "SETNAME", conn->client_name};
    redisReply *r;
    int rc = wk__link_round_trip_until(c, deadline, conn->client_name ? 4 : 2, argv, &r);
    if (rc)
        return setup_failure(msg, msglen, rc, "HELLO", addr, conn, c);
    rc = wk__hello_judge(r, addr, cluster, msg, msglen);
    freeReplyObject(r);
    if (rc != WK__HELLO_FALLBACK)
        return rc;
    const char *ping[1] = {"PING"};
    rc = setup_command(c, conn, deadline, addr, msg, msglen, WK_EREDIS, "PING", 1, ping);
    if (!rc && conn->client_name) {
        const char *name[3] = {"CLIENT", "SETNAME", conn->client_name};
        rc = setup_command(c, conn, deadline, addr, msg, msglen, WK_EREDIS, "CLIENT SETNAME", 3, name);
    }
    return rc;
}

/* Connect the socket to `at` by the open's deadline (core/dial.c); a
 * hiredis context around it holds the reply reader and the error text. */
static int dial_blocking(const wk_url *at, const char *addr, int64_t deadline, redisContext **out,
                         char *msg, size_t msglen)
{
    *out = NULL;
    char why[200];
    wk__dial d;
    int rc = wk__dial_start(&d, at, why, sizeof(why));
    if (rc)
        return msg_fail(msg, msglen, rc, "cannot connect to Redis at %s: %s", addr, why);
    while (!d.connected) {
        int64_t left = deadline - wk_monotonic_ms();
        struct pollfd p = {.fd = d.fd, .events = POLLOUT};
        /* A spent deadline still looks once: a refused connect says so
         * at once, and is no timeout. */
        int n = poll(&p, 1, left > 0 ? (int)left : 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            wk__dial_end(&d);
            return msg_fail(msg, msglen, n == 0 ? WK_ETIMEDOUT : WK_EIO,
                            "cannot connect to Redis at %s: %s", addr,
                            n == 0 ? "timed out" : strerror(errno));
        }
        rc = wk__dial_check(&d, why, sizeof(why));
        if (rc < 0)
            return msg_fail(msg, msglen, rc, "cannot connect to Redis at %s: %s", addr, why);
    }
    int fd = wk__dial_take(&d);
    redisContext *c = redisConnectFd(fd);
    if (!c) {
        close(fd);
        return msg_fail(msg, msglen, WK_ENOMEM, "out of memory connecting to Redis");
    }
    *out = c;
    return WK_OK;
}

/* Connect to the data node at `at` (conn->url itself, or a primary the
 * sentinels named) with conn's credentials and settings. */
static int connect_node(const wk__conn *conn, const wk_url *at, bool select_db, int64_t deadline,
                        wk__link *out, bool *cluster, char *msg, size_t msglen)
{
    char addr[300];
    if (at->path)
        snprintf(addr, sizeof(addr), "unix:%s", at->path);
    else
        snprintf(addr, sizeof(addr), "%s:%d", at->host, at->port);
    memset(out, 0, sizeof(*out));
    redisContext *c;
    int dialed = dial_blocking(at, addr, deadline, &c, msg, msglen);
    if (dialed)
        return dialed;
    c->reader->fn = &wk__reply_functions;
    wk__link link = {.ctx = c, .tx = &wk__plain_transport, .wake_fd = conn->wake_fd};
    int rc = WK_OK;
    if (conn->tls) /* what is left of the open's deadline */
        rc = wk__tls_handshake(conn->tls, &link, at->host, deadline, addr, msg, msglen);
    if (!rc && conn->url.password) {
        /* The password is sent, never printed: messages quote the server's
         * reply, which does not echo it. */
        const char *argv[3] = {"AUTH", conn->url.username, conn->url.password};
        if (conn->url.username)
            rc = setup_command(&link, conn, deadline, addr, msg, msglen, WK_EAUTH, "AUTH", 3, argv);
        else {
            argv[1] = conn->url.password;
            rc = setup_command(&link, conn, deadline, addr, msg, msglen, WK_EAUTH, "AUTH", 2, argv);
        }
    }
    if (!rc)
        rc = check_server(&link, conn, deadline, addr, cluster, msg, msglen);
    if (!rc && select_db && conn->url.database) {
        char num[16];
        snprintf(num, sizeof(num), "%d", conn->url.database);
        const char *argv[2] = {"SELECT", num};
        rc = setup_command(&link, conn, deadline, addr, msg, msglen, WK_EREDIS, "SELECT", 2, argv);
    }
    if (rc) {
        wk__link_close(&link);
        return rc;
    }
    *out = link;
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * Sentinel: which node is the primary of the service
 * ---------------------------------------------------------------------- */

/* Ask one sentinel for the primary of conn's service: its address in
 * host (hostlen bytes) and *port. WK_OK, or a failure with msg (1: the
 * sentinel does not know the service). */
int wk__sentinel_master_judge(const redisReply *r, const char *addr, const char *service,
                              char *host, size_t hostlen, int *port, char *msg, size_t msglen)
{
    if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0))
        return msg_fail(msg, msglen, 1, "%s does not know the service \"%.100s\"", addr, service);
    if (r->type == REDIS_REPLY_ERROR)
        return msg_fail(msg, msglen,
                        r->str && strncmp(r->str, "NOAUTH", 6) == 0 ? WK_EAUTH : WK_EREDIS,
                        "%s refused SENTINEL get-master-addr-by-name: %.200s", addr, r->str);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[0]->len >= hostlen || atoi(r->element[1]->str) <= 0 ||
        atoi(r->element[1]->str) > 65535)
        return msg_fail(msg, msglen, WK_EPROTO,
                        "%s answered SENTINEL get-master-addr-by-name with no address", addr);
    memcpy(host, r->element[0]->str, r->element[0]->len + 1);
    *port = atoi(r->element[1]->str);
    return WK_OK;
}

static int ask_sentinel(const wk__conn *conn, const wk_url_node *node, int64_t deadline,
                        char *host, size_t hostlen, int *port, wk__link *keep, char *msg,
                        size_t msglen)
{
    char addr[300];
    snprintf(addr, sizeof(addr), "sentinel %s:%d", node->host, node->port);
    wk_url at = {.host = node->host, .port = node->port};
    redisContext *c;
    int rc = dial_blocking(&at, addr, deadline, &c, msg, msglen);
    if (rc)
        return rc;
    c->reader->fn = &wk__reply_functions;
    wk__link link = {.ctx = c, .tx = &wk__plain_transport, .wake_fd = conn->wake_fd};
    if (conn->sentinel_password) {
        const char *argv[3] = {"AUTH", conn->sentinel_username, conn->sentinel_password};
        if (conn->sentinel_username)
            rc = setup_command(&link, conn, deadline, addr, msg, msglen, WK_EAUTH, "AUTH", 3, argv);
        else {
            argv[1] = conn->sentinel_password;
            rc = setup_command(&link, conn, deadline, addr, msg, msglen, WK_EAUTH, "AUTH", 2, argv);
        }
    }
    redisReply *r = NULL;
    if (!rc) {
        const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", conn->url.service};
        rc = wk__link_round_trip_until(&link, deadline, 3, argv, &r);
        if (rc)
            rc = setup_failure(msg, msglen, rc, "SENTINEL get-master-addr-by-name", addr, conn,
                               &link);
    }
    if (!rc)
        rc =
            wk__sentinel_master_judge(r, addr, conn->url.service, host, hostlen, port, msg, msglen);
    if (r)
        freeReplyObject(r);
    if (!rc && keep)
        *keep = link;
    else
        wk__link_close(&link);
    return rc;
}

/* Subscribe the sentinel connection to +switch-master: the failover
 * notice. Best effort: on failure the link is closed (a failover then
 * reaches the handle when the sentinels close its connection). */
static void subscribe_notice(int64_t deadline, wk__link *link)
{
    const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
    redisReply *r = NULL;
    if (wk__link_round_trip_until(link, deadline, 2, argv, &r) || r->type != REDIS_REPLY_ARRAY)
        wk__link_close(link);
    if (r)
        freeReplyObject(r);
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

/* Whether the node on `link` says it is a primary (ROLE). WK_OK; 1 (with
 * msg) for a replica or sentinel; a failure otherwise. */
int wk__role_judge(const redisReply *r, const char *addr, char *msg, size_t msglen)
{
    if (r->type == REDIS_REPLY_ERROR)
        return msg_fail(msg, msglen, WK_EREDIS,
                        "ROLE refused by %s: %.200s (the data node's user needs +role)", addr,
                        r->str);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return msg_fail(msg, msglen, WK_EPROTO, "%s answered ROLE with no role", addr);
    if (strcmp(r->element[0]->str, "master") != 0)
        return msg_fail(msg, msglen, 1, "%s is a %.20s, not the primary (yet)", addr,
                        r->element[0]->str);
    return WK_OK;
}

static int check_role(wk__link *link, const wk__conn *conn, int64_t deadline, const char *addr,
                      char *msg, size_t msglen)
{
    const char *argv[1] = {"ROLE"};
    redisReply *r;
    int rc = wk__link_round_trip_until(link, deadline, 1, argv, &r);
    if (rc)
        return setup_failure(msg, msglen, rc, "ROLE", addr, conn, link);
    rc = wk__role_judge(r, addr, msg, msglen);
    freeReplyObject(r);
    return rc;
}

/* Pause ms milliseconds (a wake-up of a blocking handle ends it early). */
static void pause_ms(const wk__conn *conn, int64_t ms)
{
    struct pollfd p = {.fd = conn->wake_fd, .events = POLLIN};
    if (ms > 0)
        (void)poll(&p, conn->wake_fd >= 0 ? 1 : 0, (int)ms);
}

/* One step of the Sentinel search failed with rc (message `got`): it
 * becomes the search's last failure — unless it is only the search's
 * deadline cutting a step short after a failure that says more (a
 * replica's ROLE, a refused password). */
static void search_failed(int *last, bool *failed, char *why, size_t whylen, int rc,
                          const char *got, int64_t deadline)
{
    if (*failed && rc == WK_ETIMEDOUT && wk__boot_ms() >= deadline)
        return;
    *last = rc > 0 ? WK_EIO : rc;
    *failed = true;
    wk__copy_text(why, whylen, got);
}

/*
 * The primary of conn's service, connected: rounds over the sentinels in
 * order until one names a node that accepts the connection and says it
 * is the primary, or max(connect, command timeout) has passed — one
 * deadline for the whole search (never later than `cap`, the call's; 0:
 * none), of which each sentinel's question gets an equal share. A refused
 * password at the primary ends the search at once (it would not change).
 */
static int connect_sentinel(const wk__conn *conn, bool select_db, int64_t cap, wk__link *out,
                            wk__link *notice, char *msg, size_t msglen)
{
    int64_t budget =
        (int64_t)conn->connect_timeout.tv_sec * 1000 + conn->connect_timeout.tv_usec / 1000;
    int64_t command =
        (int64_t)conn->command_timeout.tv_sec * 1000 + conn->command_timeout.tv_usec / 1000;
    if (command > budget)
        budget = command;
    /* One deadline for the whole search, within the call's (`cap`). */
    int64_t deadline = wk__deadline_min(wk__add_ms(wk__boot_ms(), budget), cap);
    int last = WK_EIO;
    bool failed = false;
    char why[WK__ERRMSG_MAX / 2] = "no sentinel answered", got[sizeof(why)];
    for (;;) {
        for (size_t i = 0; i < conn->url.nsentinels; i++) {
            char host[256];
            int port = 0;
            wk__link kept = {0};
            /* Each sentinel gets its share of the search, so a stopped
             * one cannot spend the others' time. */
            int64_t share = budget / (int64_t)conn->url.nsentinels;
            int64_t ask_by = wk__deadline_min(deadline, wk__add_ms(wk__boot_ms(), share));
            int rc = ask_sentinel(conn, &conn->url.sentinels[i], ask_by, host, sizeof(host), &port,
                                  notice ? &kept : NULL, got, sizeof(got));
            if (rc == WK_ENOMEM)
                return msg_fail(msg, msglen, rc, "%s", got);
            if (rc) {
                search_failed(&last, &failed, why, sizeof(why), rc, got, deadline);
                continue;
            }
            wk_url at = {.host = host, .port = port};
            rc = connect_node(conn, &at, select_db, deadline, out, NULL, got, sizeof(got));
            if (!rc) {
                char addr[300];
                snprintf(addr, sizeof(addr), "%s:%d", host, port);
                rc = check_role(out, conn, deadline, addr, got, sizeof(got));
                if (rc)
                    wk__link_close(out);
            }
            if (!rc && kept.ctx) {
                subscribe_notice(deadline, &kept);
                *notice = kept;
                return WK_OK;
            }
            wk__link_close(&kept);
            if (!rc)
                return WK_OK;
            if (rc == WK_EAUTH || rc == WK_ENOMEM)
                return msg_fail(msg, msglen, rc, "%s", got);
            search_failed(&last, &failed, why, sizeof(why), rc, got, deadline);
        }
        int64_t left = deadline - wk__boot_ms();
        if (left <= 0 || atomic_load(&conn->interrupted))
            break;
        pause_ms(conn, left < WK__SENTINEL_ROUND_PAUSE_MS ? left : WK__SENTINEL_ROUND_PAUSE_MS);
    }
    return msg_fail(msg, msglen, last,
                    "no primary of service \"%.100s\" found through %zu sentinel(s) in %lld ms; "
                    "last: %s",
                    conn->url.service, conn->url.nsentinels, (long long)budget, why);
}

int wk__connect_node(const wk__conn *conn, const char *host, int port, wk__link *out, bool *cluster,
                     char *msg, size_t msglen)
{
    wk_url at = {.host = (char *)host, .port = port};
    int64_t deadline =
        wk__deadline_min(wk__deadline_after(conn->connect_timeout), conn->call_deadline);
    return connect_node(conn, &at, false, deadline, out, cluster, msg, msglen);
}

/* redis:// with several hosts (a cluster's seeds): the first that
 * accepts, in the URL's order; one host: that one. */
static int connect_seeds(const wk__conn *conn, bool select_db, int64_t deadline, wk__link *out,
                         bool *cluster, size_t *reached, char *msg, size_t msglen)
{
    int rc = connect_node(conn, &conn->url, select_db, deadline, out, cluster, msg, msglen);
    size_t i = 0;
    while (rc && ++i < conn->url.nseeds) {
        wk_url at = conn->url;
        at.host = conn->url.seeds[i].host;
        at.port = conn->url.seeds[i].port;
        rc = connect_node(conn, &at, select_db, deadline, out, cluster, msg, msglen);
    }
    if (reached)
        *reached = i;
    return rc;
}

int wk__connect(const wk__conn *conn, bool select_db, wk__link *out, char *msg, size_t msglen)
{
    return wk__connect_noticed(conn, select_db, out, NULL, msg, msglen);
}

int wk__connect_noticed(const wk__conn *conn, bool select_db, wk__link *out, wk__link *notice,
                        char *msg, size_t msglen)
{
    /* A connection of its own (a subscriber's, maybe on another thread):
     * its own deadline, never the handle's call's. */
    if (conn->url.service)
        return connect_sentinel(conn, select_db, 0, out, notice, msg, msglen);
    return connect_seeds(conn, select_db && !conn->cluster, wk__deadline_after(conn->connect_timeout),
                         out, NULL, NULL, msg, msglen);
}

int wk__conn_open(wk_db *db)
{
    wk__conn *conn = db->conn;
    int rc;
    if (conn->cluster)
        return WK_OK; /* nodes are connected as queries need them */
    /* One deadline for the whole open — dial, TLS, AUTH, HELLO, SELECT, a
     * cluster's discovery — and, for a reconnect inside a query, no later
     * than the query's own. */
    int64_t outer = conn->call_deadline;
    if (conn->url.service) {
        wk__link_close(&conn->notice); /* a new one comes with the primary */
        rc = connect_sentinel(conn, true, outer, &conn->link, &conn->notice, db->errmsg,
                              sizeof(db->errmsg));
    } else {
        bool cluster = false;
        size_t seed = 0;
        conn->call_deadline =
            wk__deadline_min(wk__deadline_after(conn->connect_timeout), outer);
        rc = connect_seeds(conn, true, conn->call_deadline, &conn->link, &cluster, &seed,
                           db->errmsg, sizeof(db->errmsg));
        if (!rc && cluster)
            rc = wk__cluster_discover(
                conn, conn->url.nseeds ? conn->url.seeds[seed].host : conn->url.host,
                conn->url.nseeds ? conn->url.seeds[seed].port : conn->url.port, db->errmsg,
                sizeof(db->errmsg));
        else if (!rc && conn->url.nseeds > 1)
            rc = wk__db_fail(db, WK_EINVAL,
                             "the URL names %zu hosts (a cluster's seeds), but %s:%d is not a "
                             "cluster node",
                             conn->url.nseeds, conn->url.host, conn->url.port);
        if (rc)
            wk__link_close(&conn->link);
        conn->call_deadline = outer;
    }
    if (rc == WK_OK)
        conn->last_io_ms = wk_monotonic_ms();
    return rc;
}

/*
 * Whether an idle connection is still usable. After a server restart the
 * old socket reads EOF; finding that now lets the query go to a fresh
 * connection instead of failing with an unknown outcome.
 */
static bool idle_conn_alive(wk__link *link)
{
    /* Plain: peek at the socket. TLS: peek through it (a session ticket
     * the server sent after the handshake is not a stray reply). */
    return link->tx->idle_alive(link);
}

int wk__conn_ensure(wk_db *db)
{
    wk__conn *conn = db->conn;
    if (conn->link.ctx && conn->link.ctx->err)
        wk__conn_drop(conn);
    if (conn->link.ctx && conn->notice.ctx &&
        wk__failover_noticed(conn->url.service, &conn->notice))
        wk__conn_drop(conn); /* the sentinels switched the primary */
    if (conn->link.ctx && wk_monotonic_ms() - conn->last_io_ms >= WK__IDLE_PROBE_MS &&
        !idle_conn_alive(&conn->link))
        wk__conn_drop(conn);
    if (conn->link.ctx)
        return WK_OK;
    int rc = wk__conn_open(db);
    if (rc == WK_OK)
        conn->reconnects++;
    return rc;
}

void wk__conn_release(wk__conn *conn)
{
    if (!conn || atomic_fetch_sub(&conn->refs, 1) != 1)
        return;
    wk__conn_drop(conn);
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
    free(conn->out.data);
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
            return msg_fail(msg, msglen, WK_EINVAL,
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
        return msg_fail(msg, msglen, WK_EINVAL,
                        "options.sentinel_%s is set but the URL is not redis-sentinel://",
                        opts->sentinel_password ? "password" : "username");
    if (opts->sentinel_username && !opts->sentinel_password)
        return msg_fail(msg, msglen, WK_EINVAL,
                        "options.sentinel_username needs options.sentinel_password");
    if (opts->lease_replicas < 0 || (opts->lease_replicas > 0 && opts->lease_ack_timeout_ms <= 0))
        return msg_fail(msg, msglen, WK_EINVAL,
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
    if (!db || !conn) {
        free(db);
        free(conn);
        return copy_error(err, errlen, "out of memory", WK_ENOMEM);
    }
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
        int rc = wk_db_narrow(out, db, db->cap, NULL);
        if (rc)
            return rc;
        (*out)->pinned = true;
        (*out)->pin_node = (uint16_t)n;
        return WK_OK;
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

int wk__processor_fail(wk_processor *p, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (p && p->db)
        wk__db_vfail(p->db, status, fmt, ap);
    va_end(ap);
    return status;
}

