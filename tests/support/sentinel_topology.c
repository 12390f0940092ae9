/*
 * tests/support/sentinel_topology.c — a Sentinel topology on 127.0.0.1 for
 * the tests: a primary, one replica of it and three sentinels
 * (`redis-server <conf> --sentinel`, valkey-server with WK_TEST_SERVER=
 * valkey; there is no redis-sentinel binary here) watching it as one
 * service. Every process is a child stopped by its pid, never by name,
 * and dies with the test (PR_SET_PDEATHSIG).
 * Sentinel timeouts are short (down after 1 s, failover timeout 3 s) so
 * that a failover takes a second or two.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

redisContext *wk_test_sentinels_raw(const wk_test_sentinels *t, int port)
{
    bool sentinel = false;
    for (int i = 0; i < 3; i++)
        sentinel |= t->sentinel[i].port == port;
    return wk_test_raw_port(port, sentinel ? t->sentinel_password : t->data_password);
}

/* The primary's port as sentinel i reports it; -1 if it does not answer. */
int wk_test_sentinels_primary_port(const wk_test_sentinels *t, int i)
{
    redisContext *c = wk_test_raw_port(t->sentinel[i].port, t->sentinel_password);
    if (!c)
        return -1;
    redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", t->service);
    int port = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        port = atoi(r->element[1]->str);
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return port;
}

/* How many entries sentinel i lists for `what` ("replicas", "sentinels")
 * whose flags are exactly `flags` (NULL: any). */
static int sentinel_count(const wk_test_sentinels *t, int i, const char *what, const char *flags)
{
    redisContext *c = wk_test_raw_port(t->sentinel[i].port, t->sentinel_password);
    if (!c)
        return -1;
    redisReply *r = redisCommand(c, "SENTINEL %s %s", what, t->service);
    int n = 0;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        const redisReply *e = r->element[k];
        bool match = !flags;
        for (size_t f = 0; flags && e->type == REDIS_REPLY_ARRAY && f + 1 < e->elements; f += 2)
            if (strcmp(e->element[f]->str, "flags") == 0)
                match = strcmp(e->element[f + 1]->str, flags) == 0;
        n += match;
    }
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return n;
}

/* Whether the data node on `port` says ROLE `role`. */
static bool role_is(const wk_test_sentinels *t, int port, const char *role)
{
    redisContext *c = wk_test_raw_port(port, t->data_password);
    if (!c)
        return false;
    redisReply *r = redisCommand(c, "ROLE");
    bool yes = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
               strcmp(r->element[0]->str, role) == 0;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return yes;
}

bool wk_test_sentinels_is_replica(const wk_test_sentinels *t, int port)
{
    return role_is(t, port, "slave");
}

/* Whether the replica's link to its primary is up. */
static bool replica_synced(const wk_test_sentinels *t, int port)
{
    redisContext *c = wk_test_raw_port(port, t->data_password);
    if (!c)
        return false;
    redisReply *r = redisCommand(c, "INFO replication");
    bool yes = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return yes;
}

static int start_sentinel(wk_test_sentinels *t, int i)
{
    wk_test_server *s = &t->sentinel[i];
    snprintf(s->dir, sizeof(s->dir), "/tmp/wk-test-sentinel-XXXXXX");
    if (!mkdtemp(s->dir))
        return -1;
    s->port = wk_test_free_port();
    /* The config beside the directory, not in it: the sentinel rewrites
     * it while it runs, and wk_test_server_stop() removes the (empty)
     * directory. */
    char *conf = t->sentinel_conf[i];
    snprintf(conf, sizeof(t->sentinel_conf[i]), "%s.conf", s->dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndaemonize no\nloglevel warning\nlogfile \"\"\ndir %s\n"
            "sentinel monitor %s 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds %s 1000\n"
            "sentinel failover-timeout %s 3000\n"
            "sentinel parallel-syncs %s 1\n",
            s->port, s->dir, t->service, t->primary.port, t->service, t->service, t->service);
    if (t->data_password)
        fprintf(f, "sentinel auth-pass %s %s\n", t->service, t->data_password);
    if (t->sentinel_password)
        fprintf(f, "requirepass %s\nsentinel sentinel-pass %s\n", t->sentinel_password,
                t->sentinel_password);
    fclose(f);
    const char *argv[] = {wk_test_server_binary(), conf, "--sentinel", NULL};
    pid_t pid = wk_test_spawn(argv);
    if (pid < 0)
        return -1;
    s->pid = pid;
    for (int k = 0; k < 250; k++) {
        if (wk_test_sentinels_primary_port(t, i) > 0)
            return 0;
        wk_test_sleep_ms(20);
    }
    return -1;
}

int wk_test_sentinels_start(wk_test_sentinels *t, const char *data_password,
                            const char *sentinel_password)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->service, sizeof(t->service), "svc%d", (int)getpid());
    t->data_password = data_password;
    t->sentinel_password = sentinel_password;
    char pass[2][96];
    const char *config[4] = {NULL};
    if (data_password) {
        snprintf(pass[0], sizeof(pass[0]), "requirepass %s", data_password);
        snprintf(pass[1], sizeof(pass[1]), "masterauth %s", data_password);
        config[0] = pass[0];
        config[1] = pass[1];
    }
    if (wk_test_server_start(&t->primary, config) != 0)
        return -1;
    char replicaof[64];
    snprintf(replicaof, sizeof(replicaof), "replicaof 127.0.0.1 %d", t->primary.port);
    config[data_password ? 2 : 0] = replicaof;
    if (wk_test_server_start(&t->replica, config) != 0)
        goto fail;
    for (int i = 0; i < 3; i++)
        if (start_sentinel(t, i) != 0)
            goto fail;
    /* Ready: the replica is in sync, and every sentinel knows it and the
     * two other sentinels (so that a failover reaches all three). */
    for (int k = 0; k < 500; k++) {
        bool ready = replica_synced(t, t->replica.port);
        for (int i = 0; ready && i < 3; i++)
            ready = sentinel_count(t, i, "replicas", "slave") == 1 &&
                    sentinel_count(t, i, "sentinels", NULL) == 2;
        if (ready) {
            int n = snprintf(t->url, sizeof(t->url), "redis-sentinel://");
            for (int i = 0; i < 3; i++)
                n += snprintf(t->url + n, sizeof(t->url) - (size_t)n, "%s127.0.0.1:%d",
                              i ? "," : "", t->sentinel[i].port);
            snprintf(t->url + n, sizeof(t->url) - (size_t)n, "/%s", t->service);
            return 0;
        }
        wk_test_sleep_ms(20);
    }
fail:
    wk_test_sentinels_stop(t);
    return -1;
}

void wk_test_sentinels_stop(wk_test_sentinels *t)
{
    for (int i = 0; i < 3; i++) {
        wk_test_server_stop(&t->sentinel[i]); /* by pid */
        if (t->sentinel_conf[i][0])
            unlink(t->sentinel_conf[i]);
        t->sentinel_conf[i][0] = '\0';
    }
    wk_test_server_stop(&t->replica);
    wk_test_server_stop(&t->primary);
}

int wk_test_sentinels_failover(wk_test_sentinels *t, int timeout_ms)
{
    int old = wk_test_sentinels_primary_port(t, 0);
    redisContext *c = wk_test_raw_port(t->sentinel[0].port, t->sentinel_password);
    if (!c)
        return -1;
    redisReply *r = redisCommand(c, "SENTINEL FAILOVER %s", t->service);
    bool started = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    if (!started)
        return -1;
    int64_t end = wk_test_now_ms() + timeout_ms;
    while (wk_test_now_ms() < end) {
        int now = wk_test_sentinels_primary_port(t, 0);
        bool all = now > 0 && now != old && role_is(t, now, "master");
        for (int i = 1; all && i < 3; i++)
            all = wk_test_sentinels_primary_port(t, i) == now;
        if (all)
            return now;
        wk_test_sleep_ms(20);
    }
    return -1;
}
