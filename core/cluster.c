/*
 * core/cluster.c — the slot map of a cluster handle (core/cluster.h):
 * learning it from CLUSTER SLOTS, the node table, routing a query to a
 * node, and reading redirections.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <wakuwaku/clock.h>

#include "core/cluster.h"
#include "core/core_internal.h"
#include "core/exchange.h"

/* A MOVED asks for a refresh; refreshes come at most this often. */
#define REFRESH_MIN_INTERVAL_MS 100

static void set_msg(char *msg, size_t msglen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_msg(char *msg, size_t msglen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wk__errbuf_vset(msg, msglen, 0, fmt, ap);
    va_end(ap);
}

/* The index of the node at host:port, added if new; WK__NO_NODE when out
 * of memory or the table is full. */
static uint16_t node_of(wk__cluster *c, const char *host, size_t host_len, int port)
{
    for (size_t i = 0; i < c->nnodes; i++) {
        const wk__node *n = c->nodes[i];
        if (n->port == port && strlen(n->host) == host_len && memcmp(n->host, host, host_len) == 0)
            return (uint16_t)i;
    }
    if (c->nnodes >= WK__NO_NODE ||
        wk__grow_array((void **)&c->nodes, &c->cap, c->nnodes + 1, sizeof(wk__node *)))
        return WK__NO_NODE;
    wk__node *n = malloc(sizeof(*n));
    char *copy = strndup(host, host_len);
    if (!n || !copy) {
        free(n);
        free(copy);
        return WK__NO_NODE;
    }
    *n = (wk__node){.host = copy, .port = port, .link.wake_fd = -1};
    c->nodes[c->nnodes] = n;
    return (uint16_t)c->nnodes++;
}

static void node_drop(wk__node *n)
{
    wk__link_close(&n->link);
}

void wk__cluster_free(wk__cluster *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nnodes; i++) {
        node_drop(c->nodes[i]);
        free(c->nodes[i]->host);
        wk__lane_end_setup(&c->nodes[i]->lane);
        free(c->nodes[i]->lane.out.data);
        free(c->nodes[i]);
    }
    free(c->nodes);
    free(c);
}

static wk__cluster *cluster_new(void)
{
    wk__cluster *c = calloc(1, sizeof(*c));
    if (c) {
        for (size_t s = 0; s < WK__CLUSTER_SLOTS; s++)
            c->slot_node[s] = WK__NO_NODE;
        c->last = WK__NO_NODE;
    }
    return c;
}

int wk__cluster_clone(wk__cluster **out, const wk__cluster *src)
{
    *out = NULL;
    wk__cluster *c = cluster_new();
    if (!c)
        return WK_ENOMEM;
    for (size_t i = 0; i < src->nnodes; i++) {
        const wk__node *n = src->nodes[i];
        if (node_of(c, n->host, strlen(n->host), n->port) == WK__NO_NODE) {
            wk__cluster_free(c);
            return WK_ENOMEM;
        }
        c->nodes[i]->primary = n->primary;
    }
    memcpy(c->slot_node, src->slot_node, sizeof(c->slot_node));
    c->primaries = src->primaries;
    c->refreshed_ms = src->refreshed_ms;
    c->last = src->last;
    *out = c;
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * The map: CLUSTER SLOTS
 * ---------------------------------------------------------------------- */

/* Whether `r` is a CLUSTER SLOTS reply we can read: an array of
 * [start, end, [host, port, …], replicas…]. */
static bool slots_reply_ok(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return false;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            return false;
        const redisReply *p = e->element[2];
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        if (p->element[0]->type != REDIS_REPLY_STRING ||
            p->element[1]->type != REDIS_REPLY_INTEGER || lo < 0 || hi >= WK__CLUSTER_SLOTS ||
            lo > hi || p->element[1]->integer < 1 || p->element[1]->integer > 65535)
            return false;
    }
    return true;
}

/* Replace the map with a CLUSTER SLOTS reply given by the node at
 * `asked_host` (the host of an entry that has none). */
static int apply_slots(wk__cluster *c, const redisReply *r, const char *asked_host, bool keep_links)
{
    if (!slots_reply_ok(r))
        return WK_EPROTO;
    uint16_t *map = malloc(sizeof(c->slot_node));
    if (!map)
        return WK_ENOMEM;
    for (size_t s = 0; s < WK__CLUSTER_SLOTS; s++)
        map[s] = WK__NO_NODE;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *p = e->element[2];
        /* An empty or "?" endpoint means "the address you reached me on". */
        const char *host = p->element[0]->str;
        size_t host_len = p->element[0]->len;
        if (host_len == 0 || (host_len == 1 && host[0] == '?')) {
            host = asked_host;
            host_len = strlen(asked_host);
        }
        uint16_t n = node_of(c, host, host_len, (int)p->element[1]->integer);
        if (n == WK__NO_NODE) {
            free(map);
            return WK_ENOMEM;
        }
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
            map[s] = n;
    }
    if (memcmp(c->slot_node, map, sizeof(c->slot_node)) != 0)
        c->epoch++;
    memcpy(c->slot_node, map, sizeof(c->slot_node));
    free(map);
    c->primaries = 0;
    for (size_t i = 0; i < c->nnodes; i++)
        c->nodes[i]->primary = false;
    for (size_t s = 0; s < WK__CLUSTER_SLOTS; s++) {
        if (c->slot_node[s] != WK__NO_NODE && !c->nodes[c->slot_node[s]]->primary) {
            c->nodes[c->slot_node[s]]->primary = true;
            c->primaries++;
        }
    }
    /* A node that serves no slot any more (a primary turned replica) would
     * only redirect: its connection goes. */
    for (size_t i = 0; !keep_links && i < c->nnodes; i++)
        if (!c->nodes[i]->primary)
            node_drop(c->nodes[i]);
    c->stale = false;
    c->refreshed_ms = wk_monotonic_ms();
    return WK_OK;
}

/* CLUSTER SLOTS of one node, as any query is run. */
typedef struct slots_ask {
    wk__cluster *c;
    const char *host;
    int port;
    char msg[WK__ERRMSG_MAX / 2]; /* the reply's failure ("" : none, or not read) */
} slots_ask;

static int parse_slots(const wk_query *q, const wk_reply *reply, wk_diag *d)
{
    slots_ask *a = q->out;
    int rc = wk__cluster_apply(a->c, (const redisReply *)reply, a->host, a->port, false, a->msg,
                               sizeof(a->msg));
    return rc ? wk_diag_fail(d, rc, "%s", a->msg) : WK_OK;
}

/* CLUSTER SLOTS asked of host:port, applied to the map. It runs as every
 * query does — an exchange of one (core/exchange.c), polled by the
 * blocking driver, by the running call's deadline, ended by the handle's
 * wake-up descriptor — on a plain handle made for it from conn's
 * settings, whose connection is *link lent (moved there and back; its
 * last reply's time in *last_io) or, when *link has none, one set up to
 * host:port and left in *link. */
static int ask_slots(wk__cluster *c, wk__conn *conn, wk__link *link, int64_t *last_io,
                     const char *host, int port, char *msg, size_t msglen)
{
    wk__conn lent;
    wk__conn_lend(&lent, conn, link, *last_io);
    wk_db db = {.conn = &lent, .proc = {.process = wk__db_process, .db = &db}};
    slots_ask a = {.c = c, .host = host, .port = port};
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    size_t lens[2] = {7, 5};
    /* (A refusal is judged by wk__cluster_apply, which names the node.) */
    wk_query q = {.name = "cluster.slots",
                  .flags = WK_QUERY_RETRY_SAFE | WK_QUERY_PARSE_ERRORS,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = lens,
                  .parse = parse_slots,
                  .out = &a};
    int rc = wk__exchange_run_one(&db, &q, host, port);
    *last_io = wk__conn_lent_back(&lent, conn, link);
    if (rc && a.msg[0])
        set_msg(msg, msglen, "%s", a.msg);
    else if (rc)
        set_msg(msg, msglen, "CLUSTER SLOTS failed at %s:%d: %s", host, port, db.errmsg);
    return rc;
}

int wk__cluster_apply(wk__cluster *c, const redisReply *r, const char *host, int port,
                      bool keep_links, char *msg, size_t msglen)
{
    int rc;
    if (r->type == REDIS_REPLY_ERROR) {
        set_msg(msg, msglen, "CLUSTER SLOTS refused by %s:%d: %.200s", host, port, r->str);
        rc = WK_EREDIS;
    } else {
        rc = apply_slots(c, r, host, keep_links);
        if (rc == WK_EPROTO)
            set_msg(msg, msglen, "%s:%d answered CLUSTER SLOTS with something unreadable", host,
                    port);
        else if (rc)
            set_msg(msg, msglen, "out of memory reading the cluster's slot map");
    }
    return rc;
}

wk__cluster *wk__cluster_empty(void)
{
    return cluster_new();
}

int wk__cluster_discover(wk__conn *conn, const char *host, int port, char *msg, size_t msglen)
{
    if (conn->url.database != 0) {
        set_msg(msg, msglen,
                "%s:%d is a cluster node, and a cluster has only database 0 (the URL or "
                "options ask for %d)",
                host, port, conn->url.database);
        return WK_EINVAL;
    }
    wk__cluster *c = cluster_new();
    if (!c) {
        set_msg(msg, msglen, "out of memory");
        return WK_ENOMEM;
    }
    int rc = ask_slots(c, conn, &conn->link, &conn->last_io_ms, host, port, msg, msglen);
    if (rc) {
        wk__cluster_free(c);
        return rc;
    }
    if (c->primaries == 0) {
        wk__cluster_free(c);
        set_msg(msg, msglen, "%s:%d is a cluster node, but no slot is assigned yet", host, port);
        return WK_EIO;
    }
    /* The connection already open serves the node it reached, if that
     * one is in the map under the same address; otherwise it goes. */
    uint16_t self = WK__NO_NODE;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->port == port && strcmp(c->nodes[i]->host, host) == 0)
            self = (uint16_t)i;
    if (self != WK__NO_NODE && c->nodes[self]->primary) {
        c->nodes[self]->link = conn->link;
        c->nodes[self]->last_io_ms = wk_monotonic_ms();
        memset(&conn->link, 0, sizeof(conn->link));
    } else {
        wk__link_close(&conn->link);
    }
    conn->cluster = c;
    return WK_OK;
}

/* The next node to ask for the map: a connected one first, the one
 * heard from last first (it answered a moment ago: say, the MOVED that
 * made the map stale), before one that may have stalled since; then the
 * others. WK__NO_NODE when every node was asked. */
static uint16_t next_to_ask(const wk__cluster *c, const unsigned char *asked)
{
    uint16_t pick = WK__NO_NODE;
    for (size_t i = 0; i < c->nnodes; i++) {
        const wk__node *n = c->nodes[i], *p = pick == WK__NO_NODE ? NULL : c->nodes[pick];
        if (asked[i / 8] & (1u << (i % 8)))
            continue;
        if (!p || (n->link.ctx && !p->link.ctx) ||
            (!n->link.ctx == !p->link.ctx && n->last_io_ms > p->last_io_ms))
            pick = (uint16_t)i;
    }
    return pick;
}

int wk__cluster_refresh(wk__conn *conn, char *msg, size_t msglen)
{
    wk__cluster *c = conn->cluster;
    char why[WK__ERRMSG_MAX / 2] = "no node to ask";
    int rc = WK_EIO;
    unsigned char *asked = calloc(c->nnodes / 8 + 1, 1);
    if (!asked) {
        set_msg(msg, msglen, "cluster: out of memory asking for the slot map");
        return WK_ENOMEM;
    }
    for (uint16_t i; (i = next_to_ask(c, asked)) != WK__NO_NODE;) {
        asked[i / 8] |= (unsigned char)(1u << (i % 8));
        wk__node *n = c->nodes[i];
        rc = ask_slots(c, conn, &n->link, &n->last_io_ms, n->host, n->port, why, sizeof(why));
        /* A node that failed, or serves no slot now (its connection was
         * out while the map was applied), keeps no connection. */
        if ((rc && rc != WK_EREDIS) || (!rc && !n->primary))
            node_drop(n);
        if (rc == WK_OK)
            break;
    }
    free(asked);
    if (rc == WK_OK)
        return WK_OK;
    size_t nseeds = conn->url.nseeds ? conn->url.nseeds : 1;
    for (size_t i = 0; i < nseeds; i++) {
        const char *host = conn->url.nseeds ? conn->url.seeds[i].host : conn->url.host;
        int port = conn->url.nseeds ? conn->url.seeds[i].port : conn->url.port;
        wk__link link = {0};
        int64_t last_io = 0;
        rc = ask_slots(c, conn, &link, &last_io, host, port, why, sizeof(why));
        wk__link_close(&link);
        if (rc == WK_OK)
            return WK_OK;
    }
    set_msg(msg, msglen, "cluster: cannot learn the slot map: %s", why);
    return rc ? rc : WK_EIO;
}

void wk__cluster_node_check(wk__conn *conn, uint16_t i)
{
    wk__node *n = conn->cluster->nodes[i];
    if (n->link.ctx && n->link.ctx->err)
        node_drop(n);
    /* After a node restart the old socket reads EOF: find that now, so
     * the query goes on a fresh connection instead of being lost. */
    if (n->link.ctx && wk_monotonic_ms() - n->last_io_ms >= WK__IDLE_PROBE_MS &&
        !wk__link_idle_alive(&n->link))
        node_drop(n);
}

/* ------------------------------------------------------------------------
 * Routing
 * ---------------------------------------------------------------------- */

/* Any primary: where a query goes when its slot has no owner in the map
 * (it will be redirected) — the previous query's node if it is one. */
static uint16_t any_primary(const wk__cluster *c)
{
    if (c->last != WK__NO_NODE && c->nodes[c->last]->primary)
        return c->last;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->primary)
            return (uint16_t)i;
    return c->nnodes ? 0 : WK__NO_NODE;
}

uint16_t wk__cluster_route(wk__cluster *c, const wk_query *q, bool keyless)
{
    int key = -1;
    if (q->script)
        key = q->nkeys >= 1 ? 0 : -1;
    else if (!keyless && q->argc >= 2)
        key = 1;
    /* XREAD [COUNT n] [BLOCK ms] STREAMS key… id…: the key follows STREAMS. */
    if (key == 1 && q->argvlen[0] == 5 && strncasecmp(q->argv[0], "XREAD", 5) == 0)
        for (int i = 1; i + 1 < q->argc; i++)
            if (q->argvlen[i] == 7 && strncasecmp(q->argv[i], "STREAMS", 7) == 0) {
                key = i + 1;
                break;
            }
    if (key < 0)
        return any_primary(c);
    uint16_t n = c->slot_node[wk__key_slot(q->argv[key], q->argvlen[key])];
    return n != WK__NO_NODE ? n : any_primary(c);
}

int wk__cluster_check_keys(wk_db *db, const wk_query *q)
{
    if (!q->script || q->nkeys < 2)
        return WK_OK;
    /* Keys whose hashed bytes (the tag, or the whole key) are the same are
     * in one slot with no CRC to compute: the usual case, a lease's item
     * and its companion keys "{item}:q" … (core/key.c). */
    const char *h0, *h;
    size_t n0, n;
    wk__key_hashed(q->argv[0], q->argvlen[0], &h0, &n0);
    for (int k = 1; k < q->nkeys; k++) {
        wk__key_hashed(q->argv[k], q->argvlen[k], &h, &n);
        if (n == n0 && memcmp(h, h0, n) == 0)
            continue;
        unsigned first = wk__key_slot(q->argv[0], q->argvlen[0]);
        unsigned slot = wk__key_slot(q->argv[k], q->argvlen[k]);
        if (slot == first)
            continue;
        char a[120], b[120];
        wk__render_key(a, sizeof(a), q->argv[0], q->argvlen[0]);
        wk__render_key(b, sizeof(b), q->argv[k], q->argvlen[k]);
        return wk__db_fail(db, WK_EINVAL,
                           "%s: keys \"%s\" (slot %u) and \"%s\" (slot %u) are in different "
                           "cluster slots; the keys of one query must share a slot (a hash tag "
                           "{…} does that)",
                           q->name, a, first, b, slot);
    }
    return WK_OK;
}

/* "<slot> <host>:<port>" after MOVED / ASK: the node it names. */
static bool parse_target(const char *s, size_t len, unsigned *slot, const char **host,
                         size_t *host_len, int *port)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s || *end != ' ' || v >= WK__CLUSTER_SLOTS)
        return false;
    const char *h = end + 1, *stop = s + len;
    const char *colon = NULL;
    for (const char *p = h; p < stop; p++)
        if (*p == ':')
            colon = p; /* the last one: an IPv6 host has colons of its own */
    if (!colon || colon == h)
        return false;
    long p = strtol(colon + 1, &end, 10);
    if (end != stop || p < 1 || p > 65535)
        return false;
    *slot = (unsigned)v;
    *host = h;
    *host_len = (size_t)(colon - h);
    *port = (int)p;
    return true;
}

wk__redirect wk__cluster_redirect(wk__cluster *c, const redisReply *r, uint16_t *node)
{
    if (r->type != REDIS_REPLY_ERROR || !r->str)
        return WK__REPLY_FINAL;
    bool moved = strncmp(r->str, "MOVED ", 6) == 0, ask = strncmp(r->str, "ASK ", 4) == 0;
    /* UNBLOCKED: a blocking command cut off because its primary became a
     * replica (a failover); it did not run, and sent again it meets MOVED. */
    if (!moved && !ask) {
        if (strncmp(r->str, "TRYAGAIN", 8) == 0)
            return WK__SLOT_UNSTABLE;
        return strncmp(r->str, "CLUSTERDOWN", 11) == 0 || strncmp(r->str, "UNBLOCKED", 9) == 0
                   ? WK__TRY_LATER
                   : WK__REPLY_FINAL;
    }
    size_t skip = moved ? 6 : 4;
    unsigned slot;
    const char *host;
    size_t host_len;
    int port;
    if (!parse_target(r->str + skip, r->len - skip, &slot, &host, &host_len, &port))
        return WK__REPLY_FINAL; /* unreadable: the caller sees the error */
    uint16_t n = node_of(c, host, host_len, port);
    if (n == WK__NO_NODE)
        return WK__REPLY_FINAL;
    *node = n;
    if (moved) {
        if (c->slot_node[slot] != n)
            c->epoch++;
        c->slot_node[slot] = n;
        if (!c->nodes[n]->primary) {
            c->nodes[n]->primary = true;
            c->primaries++;
        }
        c->stale = true;
        return WK__MOVED;
    }
    return WK__ASK;
}

bool wk__cluster_wants_refresh(const wk__cluster *c)
{
    return c->stale && wk_monotonic_ms() - c->refreshed_ms >= REFRESH_MIN_INTERVAL_MS;
}

uint64_t wk__cluster_epoch(const wk_db *db)
{
    const wk__cluster *c = db && db->conn ? db->conn->cluster : NULL;
    return c ? c->epoch + 1 : 0;
}

size_t wk__cluster_primary_nodes(const wk_db *db, uint16_t *nodes, size_t cap)
{
    const wk__cluster *c = db && db->conn ? db->conn->cluster : NULL;
    size_t n = 0;
    for (size_t i = 0; c && i < c->nnodes; i++) {
        if (!c->nodes[i]->primary)
            continue;
        if (n < cap)
            nodes[n] = (uint16_t)i;
        n++;
    }
    return n;
}

const char *wk__cluster_node_host(const wk_db *db, uint16_t i, int *port)
{
    const wk__cluster *c = db && db->conn ? db->conn->cluster : NULL;
    if (!c || i >= c->nnodes)
        return NULL;
    *port = c->nodes[i]->port;
    return c->nodes[i]->host;
}

void wk__cluster_mark_stale(wk_db *db)
{
    wk__cluster *c = db && db->conn ? db->conn->cluster : NULL;
    if (c)
        c->stale = true;
}
