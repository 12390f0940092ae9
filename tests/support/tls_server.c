/*
 * tests/support/tls_server.c — a redis-server with a TLS port, and the
 * certificates it needs, made by the `openssl` command line in a
 * temporary directory: a CA, a server certificate for 127.0.0.1 and
 * localhost, a client certificate, and an unrelated CA; and a small
 * Redis Cluster over TLS whose nodes have certificates of their own.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static int make_certs(const char *dir)
{
    static const char script[] =
        "set -e; cd '%s'; EC='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
        "openssl req -x509 $EC -keyout ca.key -out ca.crt -days 2 -subj /CN=wk-test-ca;"
        "openssl req -x509 $EC -keyout other.key -out other.crt -days 2 -subj /CN=wk-other-ca;"
        "openssl req $EC -keyout server.key -out server.csr -subj /CN=localhost;"
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext;"
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
        " -out server.crt -days 2 -extfile server.ext;"
        "openssl req $EC -keyout client.key -out client.csr -subj /CN=wk-client;"
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
        " -out client.crt -days 2";
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "(%s) >/dev/null 2>&1", script);
    char full[2300];
    snprintf(full, sizeof(full), cmd, dir);
    return system(full) == 0 ? 0 : -1;
}

int wk_test_tls_start(wk_test_tls *t, bool auth_clients, const char *extra)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->certs, sizeof(t->certs), "/tmp/wk-test-tls-XXXXXX");
    if (!mkdtemp(t->certs) || make_certs(t->certs) != 0)
        return -1;
    snprintf(t->ca, sizeof(t->ca), "%s/ca.crt", t->certs);
    snprintf(t->other_ca, sizeof(t->other_ca), "%s/other.crt", t->certs);
    snprintf(t->client_crt, sizeof(t->client_crt), "%s/client.crt", t->certs);
    snprintf(t->client_key, sizeof(t->client_key), "%s/client.key", t->certs);
    char port[32], cert[160], key[160], ca[160], auth[64];
    t->tls_port = wk_test_free_port();
    if (t->tls_port <= 0)
        return -1;
    snprintf(port, sizeof(port), "tls-port %d", t->tls_port);
    snprintf(cert, sizeof(cert), "tls-cert-file %s/server.crt", t->certs);
    snprintf(key, sizeof(key), "tls-key-file %s/server.key", t->certs);
    snprintf(ca, sizeof(ca), "tls-ca-cert-file %s", t->ca);
    snprintf(auth, sizeof(auth), "tls-auth-clients %s", auth_clients ? "yes" : "no");
    const char *config[] = {port, cert, key, ca, auth, extra, NULL};
    if (wk_test_server_start(&t->s, config) != 0)
        return -1;
    snprintf(t->url, sizeof(t->url), "rediss://127.0.0.1:%d", t->tls_port);
    return 0;
}

void wk_test_tls_stop(wk_test_tls *t)
{
    wk_test_server_stop(&t->s);
    if (!t->certs[0])
        return;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->certs);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", t->certs);
}

wk_db_options wk_test_tls_options(const wk_test_tls *t)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = t->url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 2000;
    o.tls_ca_file = t->ca;
    return o;
}

/* ---- a small Redis Cluster over TLS, one certificate per node ---- */

/* The CA, and for node i the key and certificate n<i>.key / n<i>.crt
 * with subjectAltName san[i] (CN wk-node-<i>, never a name a client
 * looks for: only the SAN can match). */
static int make_node_certs(const char *dir, const char *const san[WK_TEST_TLS_NODES])
{
    char script[4096];
    int n =
        snprintf(script, sizeof(script),
                 "set -e; cd '%s'; EC='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
                 "openssl req -x509 $EC -keyout ca.key -out ca.crt -days 2 -subj /CN=wk-test-ca;",
                 dir);
    for (int i = 0; i < WK_TEST_TLS_NODES; i++)
        n += snprintf(script + n, sizeof(script) - (size_t)n,
                      "openssl req $EC -keyout n%d.key -out n%d.csr -subj /CN=wk-node-%d;"
                      "printf 'subjectAltName=%s\\n' > n%d.ext;"
                      "openssl x509 -req -in n%d.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
                      " -out n%d.crt -days 2 -extfile n%d.ext;",
                      i, i, i, san[i], i, i, i, i);
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "(%s) >/dev/null 2>&1", script);
    return system(cmd) == 0 ? 0 : -1;
}

static redisReply *node_cmd(const wk_test_server *s, const char *fmt, ...)
{
    redisContext *c = wk_test_raw_port(s->port, NULL);
    if (!c)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

/* A command whose reply must be +OK. */
static bool node_ok(const wk_test_server *s, const char *fmt, ...)
{
    redisContext *c = wk_test_raw_port(s->port, NULL);
    if (!c)
        return false;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* The first slot of node i's third of the map. */
static int slot_lo(int i)
{
    return i * 16384 / WK_TEST_TLS_NODES;
}

/* Every node says cluster_state:ok and names three slot ranges. */
static bool cluster_settled(const wk_test_tls_cluster *c)
{
    for (int i = 0; i < WK_TEST_TLS_NODES; i++) {
        redisReply *r = node_cmd(&c->node[i], "CLUSTER INFO");
        bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
        if (r)
            freeReplyObject(r);
        r = ok ? node_cmd(&c->node[i], "CLUSTER SLOTS") : NULL;
        ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == WK_TEST_TLS_NODES;
        if (r)
            freeReplyObject(r);
        if (!ok)
            return false;
    }
    return true;
}

int wk_test_tls_cluster_start(wk_test_tls_cluster *c, const char *const announce[WK_TEST_TLS_NODES],
                              const char *const san[WK_TEST_TLS_NODES])
{
    memset(c, 0, sizeof(*c));
    snprintf(c->certs, sizeof(c->certs), "/tmp/wk-test-tlsc-XXXXXX");
    if (!mkdtemp(c->certs)) {
        c->certs[0] = '\0';
        return -1;
    }
    if (make_node_certs(c->certs, san) != 0)
        goto fail;
    snprintf(c->ca, sizeof(c->ca), "%s/ca.crt", c->certs);
    int bus[WK_TEST_TLS_NODES];
    for (int i = 0; i < WK_TEST_TLS_NODES; i++) {
        c->tls_port[i] = wk_test_free_port();
        bus[i] = wk_test_free_port();
        if (c->tls_port[i] <= 0 || bus[i] <= 0 || bus[i] == c->tls_port[i])
            goto fail;
        char lines[11][128];
        snprintf(lines[0], 128, "tls-port %d", c->tls_port[i]);
        snprintf(lines[1], 128, "tls-cert-file %s/n%d.crt", c->certs, i);
        snprintf(lines[2], 128, "tls-key-file %s/n%d.key", c->certs, i);
        snprintf(lines[3], 128, "tls-ca-cert-file %s/ca.crt", c->certs);
        /* Clients need no certificate; the bus (TLS too, so that CLUSTER
         * SLOTS over TLS names the TLS ports) always asks for one, and
         * each node presents its own. */
        snprintf(lines[4], 128, "tls-auth-clients no");
        snprintf(lines[5], 128, "tls-cluster yes");
        snprintf(lines[6], 128, "cluster-enabled yes");
        snprintf(lines[7], 128, "cluster-port %d", bus[i]);
        snprintf(lines[8], 128, "cluster-config-file %s/nodes-%d.conf", c->certs, i);
        /* CLUSTER SLOTS and MOVED name each node by the name it
         * announces, which is the name its certificate is checked for. */
        snprintf(lines[9], 128, "cluster-announce-hostname %s", announce[i]);
        snprintf(lines[10], 128, "cluster-preferred-endpoint-type hostname");
        const char *config[12];
        for (int k = 0; k < 11; k++)
            config[k] = lines[k];
        config[11] = NULL;
        if (wk_test_server_start(&c->node[i], config) != 0)
            goto fail;
    }
    for (int i = 1; i < WK_TEST_TLS_NODES; i++)
        if (!node_ok(&c->node[0], "CLUSTER MEET 127.0.0.1 %d %d", c->tls_port[i], bus[i]))
            goto fail;
    /* Three primaries, a third of the slots each, no replicas. */
    for (int i = 0; i < WK_TEST_TLS_NODES; i++) {
        if (!node_ok(&c->node[i], "CLUSTER ADDSLOTSRANGE %d %d", slot_lo(i), slot_lo(i + 1) - 1))
            goto fail;
    }
    for (int waited = 0; !cluster_settled(c); waited += 50) {
        if (waited > 30000)
            goto fail;
        wk_test_sleep_ms(50);
    }
    snprintf(c->url, sizeof(c->url), "rediss://%s:%d", announce[0], c->tls_port[0]);
    return 0;
fail:
    wk_test_tls_cluster_stop(c);
    return -1;
}

void wk_test_tls_cluster_stop(wk_test_tls_cluster *c)
{
    for (int i = 0; i < WK_TEST_TLS_NODES; i++)
        wk_test_server_stop(&c->node[i]);
    if (!c->certs[0])
        return;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->certs);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", c->certs);
    c->certs[0] = '\0';
}

int wk_test_tls_cluster_node_of(const wk_test_tls_cluster *c, const char *key, size_t len)
{
    redisReply *r = node_cmd(&c->node[0], "CLUSTER KEYSLOT %b", key, len);
    int slot = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    if (r)
        freeReplyObject(r);
    int node = -1;
    for (int i = 0; slot >= 0 && i < WK_TEST_TLS_NODES; i++)
        if (slot >= slot_lo(i))
            node = i;
    return node;
}
