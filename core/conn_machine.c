/*
 * core/conn_machine.c — the set-up of a connection, one state machine for
 * every driver (core/conn_machine.h), and the judges of its replies.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/conn_machine.h"

enum phase { P_DIAL, P_TLS, P_TALK, P_NOTICE, P_PAUSE, P_DONE };

/* What each pipelined set-up command is, for its judge and messages. */
enum step {
    S_AUTH,
    S_HELLO,
    S_PING,
    S_SETNAME,
    S_SELECT,
    S_ROLE,            /* Sentinel: the node named must say it is the primary */
    S_SENTINEL_AUTH,   /* the sentinel's own AUTH */
    S_SENTINEL_MASTER, /* SENTINEL get-master-addr-by-name */
    S_SUBSCRIBE        /* the failover notice's +switch-master */
};
static const char *const step_name[] = {
    "AUTH",     "HELLO", "PING", "CLIENT SETNAME",
    "SELECT",   "ROLE",  "AUTH", "SENTINEL get-master-addr-by-name",
    "SUBSCRIBE"};

/* The oldest Redis that keeps the library's promises: HELLO (the open
 * check) and scripts whose writes replicate as effects after TIME (on by
 * default since 5.0, the only mode since 7.0). */
#define MIN_MAJOR 6
#define MIN_VERSION "6.0"

/* ---- the judges ----------------------------------------------------- */

/* An error reply to a set-up command is `refusal`. */
static int setup_judge(const redisReply *r, int refusal, const char *what, char *msg, size_t msglen)
{
    if (r->type == REDIS_REPLY_ERROR)
        return wk__errbuf_set(msg, msglen, refusal, "%s refused by the server: %.200s", what,
                              r->str);
    return WK_OK;
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

#define HELLO_FALLBACK 1

/*
 * The open check: HELLO 2 (with SETNAME when asked) fails at once for
 * what is not Redis, a missing password, or a Redis too old; or
 * HELLO_FALLBACK: the ACL forbids HELLO, use PING (and CLIENT SETNAME)
 * instead; the version is then not checked. *cluster: HELLO's "mode" is
 * "cluster".
 */
static int hello_judge(const redisReply *r, const char *addr, bool *cluster, char *msg,
                       size_t msglen)
{
    *cluster = false;
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOAUTH", 6) == 0)
            return wk__errbuf_set(msg, msglen, WK_EAUTH,
                                  "%s requires a password (%.200s); set it in the URL or in "
                                  "options.password",
                                  addr, r->str);
        if (strncmp(r->str, "NOPERM", 6) == 0)
            return HELLO_FALLBACK;
        if (strstr(r->str, "unknown command"))
            return wk__errbuf_set(msg, msglen, WK_EPROTO,
                                  "%s is older than Redis " MIN_VERSION
                                  " (it does not know HELLO); wakuwaku needs Redis >= " MIN_VERSION,
                                  addr);
        return wk__errbuf_set(msg, msglen, WK_EREDIS, "HELLO refused by the server: %.200s",
                              r->str);
    }
    const redisReply *v = hello_field(r, "version");
    if (!v || v->type != REDIS_REPLY_STRING)
        return wk__errbuf_set(msg, msglen, WK_EPROTO,
                              "%s is not a Redis server (HELLO answered without a version)", addr);
    if (atoi(v->str) < MIN_MAJOR)
        return wk__errbuf_set(msg, msglen, WK_EPROTO,
                              "%s runs Redis %.20s; wakuwaku needs Redis >= " MIN_VERSION
                              " (scripts that read TIME must replicate their effects)",
                              addr, v->str);
    const redisReply *mode = hello_field(r, "mode");
    if (mode && mode->type == REDIS_REPLY_STRING && strcmp(mode->str, "cluster") == 0)
        *cluster = true;
    return WK_OK;
}

/* SENTINEL get-master-addr-by-name's reply: the address into host and
 * *port; 1: this sentinel does not know `service`, ask the next. */
static int sentinel_master_judge(const redisReply *r, const char *addr, const char *service,
                                 char *host, size_t hostlen, int *port, char *msg, size_t msglen)
{
    if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0))
        return wk__errbuf_set(msg, msglen, 1, "%s does not know the service \"%.100s\"", addr,
                              service);
    if (r->type == REDIS_REPLY_ERROR)
        return wk__errbuf_set(msg, msglen,
                              r->str && strncmp(r->str, "NOAUTH", 6) == 0 ? WK_EAUTH : WK_EREDIS,
                              "%s refused SENTINEL get-master-addr-by-name: %.200s", addr, r->str);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[0]->len >= hostlen || atoi(r->element[1]->str) <= 0 ||
        atoi(r->element[1]->str) > 65535)
        return wk__errbuf_set(msg, msglen, WK_EPROTO,
                              "%s answered SENTINEL get-master-addr-by-name with no address", addr);
    memcpy(host, r->element[0]->str, r->element[0]->len + 1);
    *port = atoi(r->element[1]->str);
    return WK_OK;
}

/* ROLE's reply: WK_OK for the primary; 1 (with msg) for a replica or a
 * sentinel (not yet promoted); a failure otherwise. */
static int role_judge(const redisReply *r, const char *addr, char *msg, size_t msglen)
{
    if (r->type == REDIS_REPLY_ERROR)
        return wk__errbuf_set(msg, msglen, WK_EREDIS,
                              "ROLE refused by %s: %.200s (the data node's user needs +role)", addr,
                              r->str);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return wk__errbuf_set(msg, msglen, WK_EPROTO, "%s answered ROLE with no role", addr);
    if (strcmp(r->element[0]->str, "master") != 0)
        return wk__errbuf_set(msg, msglen, 1, "%s is a %.20s, not the primary (yet)", addr,
                              r->element[0]->str);
    return WK_OK;
}

/* What a failed set-up exchange (no reply to `what`) means at `addr`. */
static int exchange_failure(char *msg, size_t msglen, int rc, const char *what, const char *addr,
                            const wk__conn *conn, const wk__link *link)
{
    const char *err = link->ctx && link->ctx->errstr[0] ? link->ctx->errstr : "connection lost";
    /* A TLS port reached with redis:// answers plain text with a TLS
     * alert or hangs up: say what to try (never a silent fallback). */
    const char *hint = conn->tls ? "" : " (if it is a TLS port, use a rediss:// URL)";
    /* TLS 1.3: a server that wants a client certificate (tls-auth-clients)
     * says so after the handshake, in an alert on the first read. */
    if (conn->tls && rc == WK_EIO &&
        (wk__tls_lacks_client_cert(link) || (strstr(err, "alert") && strstr(err, "certificate"))))
        return wk__errbuf_set(msg, msglen, WK_EAUTH,
                              "TLS: %s refused the client certificate or its absence (%s); set "
                              "options.tls_cert_file and options.tls_key_file",
                              addr, err);
    if (rc == WK_EPROTO)
        return wk__errbuf_set(msg, msglen, rc, "%s is not a Redis server (%s answered: %s)%s", addr,
                              what, err, hint);
    if (rc == WK_ETIMEDOUT)
        return wk__errbuf_set(msg, msglen, rc,
                              "%s did not answer %s before the deadline (timed out: the server is "
                              "stalled, overloaded or does not speak Redis)",
                              addr, what);
    if (rc == WK_EIO)
        return wk__errbuf_set(msg, msglen, rc, "%s failed at %s: %s%s", what, addr, err, hint);
    return wk__errbuf_set(msg, msglen, rc, "%s failed at %s: %s", what, addr, err);
}

/* ---- sockets -------------------------------------------------------- */

static int64_t tv_ms(struct timeval tv)
{
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Close the socket being dialed or set up (the driver is told first). */
static void close_current(wk__setup *s)
{
    if ((s->dial.fd >= 0 || s->link.ctx) && s->closing)
        s->closing(s->closing_arg);
    wk__dial_end(&s->dial);
    wk__link_close(&s->link);
}

static void close_notice(wk__setup *s)
{
    if (s->phase == P_NOTICE && s->closing)
        s->closing(s->closing_arg);
    wk__link_close(&s->notice);
}

static void finish(wk__setup *s, int rc)
{
    s->rc = rc;
    if (rc) {
        close_current(s);
        close_notice(s);
    }
    s->phase = P_DONE;
}

/* Append one command (RESP) to the pipeline. */
static int add(wk__setup *s, unsigned char step, int argc, const char *const *argv)
{
    size_t need = 16;
    for (int i = 0; i < argc; i++)
        need += strlen(argv[i]) + 24;
    if (s->nsteps == (int)sizeof(s->steps) || wk__buf_reserve(&s->out, need))
        return WK_ENOMEM;
    char *p = s->out.data + s->out.len;
    size_t n = (size_t)snprintf(p, need, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(argv[i]);
        n += (size_t)snprintf(p + n, need - n, "$%zu\r\n", len);
        memcpy(p + n, argv[i], len);
        memcpy(p + n + len, "\r\n", 2);
        n += len + 2;
    }
    s->out.len += n;
    s->steps[s->nsteps++] = step;
    return WK_OK;
}

static void restart_pipeline(wk__setup *s)
{
    s->out.len = s->wpos = 0;
    s->nsteps = s->step = 0;
}

/* ---- the targets ---------------------------------------------------- */

static void target_failed(wk__setup *s, int rc);

/* A failure of the current target, message in s->msg. */
static void fail(wk__setup *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(wk__setup *s, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wk__errbuf_vset(s->msg, sizeof(s->msg), rc, fmt, ap);
    va_end(ap);
    target_failed(s, rc);
}

/* Start dialing s->at (addr already named). */
static void dial(wk__setup *s)
{
    char why[200];
    restart_pipeline(s);
    s->phase = P_DIAL;
    int rc = wk__dial_start(&s->dial, &s->at, why, sizeof(why));
    if (rc)
        fail(s, rc, "cannot connect to Redis at %s: %s", s->addr, why);
}

static void name_target(wk__setup *s, const char *prefix)
{
    if (s->at.path)
        snprintf(s->addr, sizeof(s->addr), "%sunix:%s", prefix, s->at.path);
    else
        snprintf(s->addr, sizeof(s->addr), "%s%s:%d", prefix, s->at.host, s->at.port);
}

/* Ask the sentinel s->target for the primary, within its share. */
static void ask_sentinel(wk__setup *s)
{
    const wk__conn *conn = s->conn;
    const wk_url_node *node = &conn->url.sentinels[s->target];
    /* Each sentinel gets its share of the search, so a stopped one
     * cannot spend the others' time. */
    int64_t share = s->budget / (int64_t)conn->url.nsentinels;
    s->step_by = wk__deadline_min(s->deadline, wk__add_ms(wk__boot_ms(), share));
    s->asking = true;
    s->at = (wk_url){.host = node->host, .port = node->port};
    name_target(s, "sentinel ");
    dial(s);
}

/* The Sentinel search: the next sentinel in turn; after the last, a
 * pause and a new round, until the search's deadline. */
static void next_sentinel(wk__setup *s)
{
    const wk__conn *conn = s->conn;
    if (++s->target < conn->url.nsentinels) {
        ask_sentinel(s);
        return;
    }
    int64_t left = s->deadline - wk__boot_ms();
    if (left <= 0 || atomic_load(&conn->interrupted)) {
        wk__errbuf_set(s->msg, sizeof(s->msg), s->last,
                       "no primary of service \"%.100s\" found through %zu sentinel(s) in %lld ms; "
                       "last: %s",
                       conn->url.service, conn->url.nsentinels, (long long)s->budget, s->why);
        finish(s, s->last);
        return;
    }
    s->phase = P_PAUSE;
    s->pause_until = wk__add_ms(
        wk__boot_ms(), left < WK__SENTINEL_ROUND_PAUSE_MS ? left : WK__SENTINEL_ROUND_PAUSE_MS);
}

/* The current target failed with rc (s->msg says why): the next sentinel
 * or seed, or the end. */
static void target_failed(wk__setup *s, int rc)
{
    const wk__conn *conn = s->conn;
    close_current(s);
    if (conn->url.service && !s->one_node) {
        /* A refused password at the primary would not change; out of
         * memory ends it too. */
        if (rc == WK_ENOMEM || (!s->asking && rc == WK_EAUTH)) {
            finish(s, rc);
            return;
        }
        /* The search's last failure — unless this is only the search's
         * deadline cutting a step short after a failure that says more
         * (a replica's ROLE, a refused password). */
        if (!(s->failed && rc == WK_ETIMEDOUT && wk__boot_ms() >= s->deadline)) {
            s->last = rc > 0 ? WK_EIO : rc;
            s->failed = true;
            wk__copy_text(s->why, sizeof(s->why), s->msg);
        }
        close_notice(s);
        next_sentinel(s);
        return;
    }
    if (!s->one_node && ++s->target < conn->url.nseeds) {
        /* redis:// with several hosts: the next seed, same deadline. */
        s->at = conn->url;
        s->at.host = conn->url.seeds[s->target].host;
        s->at.port = conn->url.seeds[s->target].port;
        name_target(s, "");
        dial(s);
        return;
    }
    finish(s, rc);
}

/* Queue the data node's set-up: AUTH, HELLO, SELECT, ROLE (Sentinel). */
static int queue_data_setup(wk__setup *s)
{
    const wk__conn *conn = s->conn;
    const wk_url *u = &conn->url;
    int rc = WK_OK;
    /* The password is sent, never printed: messages quote the server's
     * reply, which does not echo it. */
    const char *auth[3] = {"AUTH", u->username ? u->username : u->password, u->password};
    if (u->password)
        rc = add(s, S_AUTH, u->username ? 3 : 2, auth);
    const char *hello[4] = {"HELLO", "2", "SETNAME", conn->client_name};
    if (!rc)
        rc = add(s, S_HELLO, conn->client_name ? 4 : 2, hello);
    char num[16];
    snprintf(num, sizeof(num), "%d", u->database);
    const char *select[2] = {"SELECT", num};
    if (!rc && (s->flags & WK__SETUP_SELECT) && u->database)
        rc = add(s, S_SELECT, 2, select);
    const char *role[1] = {"ROLE"};
    if (!rc && u->service && !s->one_node)
        rc = add(s, S_ROLE, 1, role);
    return rc;
}

/* Queue the question to a sentinel (after its own AUTH). */
static int queue_sentinel_question(wk__setup *s)
{
    const wk__conn *conn = s->conn;
    int rc = WK_OK;
    const char *auth[3] = {
        "AUTH", conn->sentinel_username ? conn->sentinel_username : conn->sentinel_password,
        conn->sentinel_password};
    if (conn->sentinel_password)
        rc = add(s, S_SENTINEL_AUTH, conn->sentinel_username ? 3 : 2, auth);
    const char *ask[3] = {"SENTINEL", "get-master-addr-by-name", conn->url.service};
    if (!rc)
        rc = add(s, S_SENTINEL_MASTER, 3, ask);
    return rc;
}

/* The socket is up (and TLS, if any): send the set-up. */
static void talk_now(wk__setup *s)
{
    s->phase = P_TALK;
    int rc = s->asking ? queue_sentinel_question(s) : queue_data_setup(s);
    if (rc)
        fail(s, WK_ENOMEM, "out of memory formatting the connection set-up");
}

/* The dial completed: wrap the socket, start TLS (data nodes of
 * rediss://) or the set-up. */
static void connected(wk__setup *s)
{
    int fd = wk__dial_take(&s->dial);
    redisContext *c = redisConnectFd(fd);
    if (!c) {
        close(fd);
        fail(s, WK_ENOMEM, "out of memory connecting to Redis");
        return;
    }
    c->reader->fn = &wk__reply_functions;
    s->link = (wk__link){.ctx = c, .tx = &wk__plain_transport, .wake_fd = s->conn->wake_fd};
    if (s->asking || !s->conn->tls) {
        talk_now(s);
        return;
    }
    /* The certificate must name the host dialed: the URL's, a seed's, a
     * node's, or the primary a sentinel named. */
    int rc = wk__tls_start(s->conn->tls, &s->link, s->at.host, s->msg, sizeof(s->msg));
    if (rc) {
        target_failed(s, rc);
        return;
    }
    s->phase = P_TLS;
    s->tls_want = POLLOUT;
}

/* The data node is set up; the notice, if kept, is subscribed next. */
static void node_ready(wk__setup *s)
{
    if (!s->notice.ctx) {
        finish(s, WK_OK);
        return;
    }
    restart_pipeline(s);
    const char *sub[2] = {"SUBSCRIBE", "+switch-master"};
    if (add(s, S_SUBSCRIBE, 2, sub)) {
        close_notice(s);
        finish(s, WK_OK);
        return;
    }
    s->phase = P_NOTICE;
}

/* Judge one reply of the pipeline: false when the target failed. */
static bool judge(wk__setup *s, const redisReply *r)
{
    const wk__conn *conn = s->conn;
    int rc = WK_OK;
    switch (s->steps[s->step++]) {
    case S_AUTH:
    case S_SENTINEL_AUTH:
        rc = setup_judge(r, WK_EAUTH, "AUTH", s->msg, sizeof(s->msg));
        break;
    case S_HELLO:
        rc = hello_judge(r, s->addr, &s->cluster, s->msg, sizeof(s->msg));
        if (rc == HELLO_FALLBACK) {
            /* The ACL forbids HELLO: PING (and CLIENT SETNAME) instead. */
            const char *ping[1] = {"PING"};
            const char *name[3] = {"CLIENT", "SETNAME", conn->client_name};
            rc = add(s, S_PING, 1, ping);
            if (!rc && conn->client_name)
                rc = add(s, S_SETNAME, 3, name);
            if (rc)
                rc = wk__errbuf_set(s->msg, sizeof(s->msg), WK_ENOMEM,
                                    "out of memory formatting the connection set-up");
        }
        break;
    case S_PING:
    case S_SETNAME:
    case S_SELECT:
        rc = setup_judge(r, WK_EREDIS, step_name[s->steps[s->step - 1]], s->msg, sizeof(s->msg));
        break;
    case S_ROLE:
        rc = role_judge(r, s->addr, s->msg, sizeof(s->msg));
        break;
    case S_SENTINEL_MASTER:
        rc = sentinel_master_judge(r, s->addr, conn->url.service, s->host, sizeof(s->host),
                                   &s->at.port, s->msg, sizeof(s->msg));
        break;
    case S_SUBSCRIBE:
        if (r->type != REDIS_REPLY_ARRAY)
            close_notice(s);
        finish(s, WK_OK);
        return false;
    }
    if (rc) {
        target_failed(s, rc);
        return false;
    }
    return true;
}

/* Every reply judged: a sentinel named the primary (dial it, keeping the
 * sentinel for the notice when asked), or the node is ready. */
static void all_judged(wk__setup *s)
{
    if (!s->asking) {
        node_ready(s);
        return;
    }
    int port = s->at.port;
    if ((s->flags & WK__SETUP_NOTICE) && !s->notice.ctx) {
        s->notice = s->link; /* kept, not closed: no driver is told */
        s->link = (wk__link){0};
    } else
        close_current(s);
    s->asking = false;
    s->step_by = s->deadline;
    s->at = (wk_url){.host = s->host, .port = port};
    name_target(s, "");
    dial(s);
}

/* The command whose reply is awaited. */
static const char *awaited(const wk__setup *s)
{
    return step_name[s->steps[s->step < s->nsteps ? s->step : s->nsteps - 1]];
}

/* Write the pipeline and judge what came back, on `link`. */
static void talk(wk__setup *s, wk__link *link)
{
    int phase = s->phase;
    while (s->wpos < s->out.len) {
        short want = POLLOUT;
        ssize_t n = link->tx->send(link, s->out.data + s->wpos, s->out.len - s->wpos, &want);
        if (n == WK__TX_AGAIN)
            break;
        if (n <= 0) {
            if (phase == P_NOTICE) {
                close_notice(s);
                finish(s, WK_OK);
            } else
                target_failed(s, exchange_failure(s->msg, sizeof(s->msg), WK_EIO, awaited(s),
                                                  s->addr, s->conn, link));
            return;
        }
        s->wpos += (size_t)n;
    }
    /* Replies already read are judged before a failure to read more is:
     * a server may answer and hang up. */
    int received = wk__wire_receive(link), rc = WK_OK;
    while (s->step < s->nsteps) {
        redisReply *r;
        rc = wk__wire_take(link, &r);
        if (rc || !r)
            break;
        bool go_on = judge(s, r);
        freeReplyObject(r);
        if (!go_on)
            return;
    }
    if (s->step == s->nsteps) {
        all_judged(s);
        return;
    }
    if (!rc)
        rc = received;
    if (rc && phase == P_NOTICE) {
        close_notice(s);
        finish(s, WK_OK);
    } else if (rc)
        target_failed(
            s, exchange_failure(s->msg, sizeof(s->msg), rc, awaited(s), s->addr, s->conn, link));
}

/* The deadline of what is waited for now. */
static int64_t due(const wk__setup *s)
{
    return s->phase == P_PAUSE ? s->pause_until : s->phase == P_NOTICE ? s->deadline : s->step_by;
}

/* The deadline passed while waiting. */
static void timed_out(wk__setup *s)
{
    switch (s->phase) {
    case P_DIAL:
        fail(s, WK_ETIMEDOUT, "cannot connect to Redis at %s: timed out", s->addr);
        break;
    case P_TLS:
        fail(s, WK_ETIMEDOUT, "TLS handshake with %s did not complete in time (is it a TLS port?)",
             s->addr);
        break;
    case P_TALK:
        target_failed(s, exchange_failure(s->msg, sizeof(s->msg), WK_ETIMEDOUT, awaited(s), s->addr,
                                          s->conn, &s->link));
        break;
    case P_NOTICE: /* best effort: without it, a failover is seen when the node goes */
        close_notice(s);
        finish(s, WK_OK);
        break;
    case P_PAUSE:
        s->target = 0;
        ask_sentinel(s);
        break;
    }
}

/* ---- the machine ---------------------------------------------------- */

void wk__setup_begin(wk__setup *s, const wk__conn *conn, const char *host, int port, unsigned flags,
                     int64_t cap)
{
    memset(s, 0, sizeof(*s));
    s->conn = conn;
    s->flags = flags;
    s->dial.fd = -1;
    s->phase = -1; /* not started: the first step dials */
    s->last = WK_EIO;
    wk__copy_text(s->why, sizeof(s->why), "no sentinel answered");
    int64_t budget = tv_ms(conn->connect_timeout);
    if (host) {
        s->one_node = true;
        wk__copy_text(s->host, sizeof(s->host), host);
        s->at = (wk_url){.host = s->host, .port = port};
    } else if (conn->url.service) {
        /* The search: max(connect, command timeout) in all. */
        if (tv_ms(conn->command_timeout) > budget)
            budget = tv_ms(conn->command_timeout);
        s->budget = budget;
    } else
        s->at = conn->url;
    s->deadline = wk__deadline_min(wk__add_ms(wk__boot_ms(), budget), cap);
    s->step_by = s->deadline;
}

static wk__want wanted(wk__setup *s)
{
    wk__want w = {.fd = -1, .deadline = due(s)};
    switch (s->phase) {
    case P_DIAL:
        w.fd = s->dial.fd;
        w.events = POLLOUT;
        break;
    case P_TLS:
        w.fd = s->link.ctx->fd;
        w.events = s->tls_want;
        break;
    case P_TALK:
    case P_NOTICE: {
        const wk__link *l = s->phase == P_TALK ? &s->link : &s->notice;
        w.fd = l->ctx->fd;
        w.events = POLLIN;
        if (s->wpos < s->out.len || l->want == POLLOUT)
            w.events |= POLLOUT;
        break;
    }
    case P_DONE:
        w.done = true;
        break;
    }
    return w;
}

/* One move of the current phase; ready: what the socket is ready for. */
static void move(wk__setup *s, short ready)
{
    switch (s->phase) {
    case P_DIAL: {
        if (!s->dial.connected && !(ready & (POLLOUT | POLLERR | POLLHUP)))
            break;
        char why[200];
        const struct addrinfo *tried = s->dial.next;
        int rc = wk__dial_check(&s->dial, why, sizeof(why));
        if (rc == WK_OK)
            connected(s);
        else if (rc == 1 && s->dial.next != tried) {
            s->addresses++; /* the next address, on a new socket */
            if (s->closing)
                s->closing(s->closing_arg);
        } else if (rc < 0)
            fail(s, rc, "cannot connect to Redis at %s: %s", s->addr, why);
        break;
    }
    case P_TLS: {
        int rc = wk__tls_step(&s->link, &s->tls_want, s->addr, s->msg, sizeof(s->msg));
        if (rc == WK_OK)
            talk_now(s);
        else if (rc != WK__TLS_AGAIN)
            target_failed(s, rc);
        break;
    }
    case P_TALK:
        talk(s, &s->link);
        break;
    case P_NOTICE:
        talk(s, &s->notice);
        break;
    }
}

wk__want wk__setup_step(wk__setup *s, short ready)
{
    /* Was the deadline of what was waited for spent before this step?
     * It ends the wait after the moves: a spent deadline still looks once
     * (a refused connect says so at once, and is no timeout), and a wait
     * that just began gets its look (the driver polls without waiting
     * when the deadline is past) before it can time out. */
    bool expired = s->phase >= 0 && s->phase != P_DONE && wk__boot_ms() >= due(s);
    if (s->phase < 0) { /* the first step */
        if (s->conn->url.service && !s->one_node) {
            s->target = 0;
            ask_sentinel(s);
        } else {
            name_target(s, "");
            dial(s);
        }
    }
    if ((ready & WK__WOKEN) && s->phase != P_DONE) {
        /* A blocking handle's wake-up: nothing more is waited for. */
        wk__errbuf_set(s->msg, sizeof(s->msg), WK_EIO,
                       "connecting to %s: interrupted (wk__blocking_interrupt)", s->addr);
        finish(s, WK_EIO);
    }
    bool moved = false;
    /* Move while moves make progress without waiting (a phase that ends
     * starts the next, which may go on at once). */
    for (int guard = 0; guard < 16 && s->phase != P_DONE; guard++) {
        int before = s->phase;
        int step = s->step;
        size_t target = s->target, addresses = s->addresses;
        move(s, ready);
        ready = 0;
        if (s->phase == before && s->step == step && s->target == target &&
            s->addresses == addresses)
            break;
        moved = true;
    }
    if (s->phase != P_DONE && expired && !moved)
        timed_out(s);
    return wanted(s);
}

void wk__setup_abort(wk__setup *s, int rc, const char *why)
{
    wk__errbuf_set(s->msg, sizeof(s->msg), rc, "connecting to %s: %s", s->addr, why);
    finish(s, rc);
}

void wk__setup_take(wk__setup *s, wk__link *link, wk__link *notice)
{
    *link = s->link;
    s->link = (wk__link){0};
    if (notice) {
        *notice = s->notice;
        s->notice = (wk__link){0};
    }
}

void wk__setup_end(wk__setup *s)
{
    wk__dial_end(&s->dial);
    wk__link_close(&s->link);
    wk__link_close(&s->notice);
    free(s->out.data);
    s->out = (wk__buf){0};
}
