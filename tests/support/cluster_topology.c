/*
 * tests/support/cluster_topology.c — a Redis Cluster on 127.0.0.1 for the
 * tests, the soak and the benchmarks: six redis-server processes with
 * `cluster-enabled yes` (three primaries, one replica each), created by
 * `redis-cli --cluster create … --cluster-replicas 1 --cluster-yes`
 * (valkey-server and valkey-cli with WK_TEST_SERVER=valkey).
 *
 * Why a keeper process: the nodes are not children of the caller but of
 * a small process forked for them, which reaps them, restarts one when
 * asked (a line on a FIFO in the topology's directory) and stops them all
 * by pid. A criterion runner must not have children that die or stop
 * during the run (its child pump waits on every child), and a test
 * process that kills a node must not be the one that restarts it (the
 * node would die with the test). Every node dies with the keeper, and the
 * keeper with its starter (PR_SET_PDEATHSIG).
 *
 * The state lives in files any process can read (wk_test_cluster_attach):
 * <dir>/topology holds the keeper's pid, the ports and the nodes' current
 * pids (0: down). Roles and the slot map are always asked of the nodes.
 *
 * No criterion here: the soak and the benchmarks link this file too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

#define NODES WK_TEST_CLUSTER_NODES

/* ------------------------------------------------------------------------
 * Ports and raw connections
 * ---------------------------------------------------------------------- */

static bool can_bind(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* A port whose cluster bus port (+10000) is free too. Both are drawn below
 * the kernel's ephemeral range (32768 up), which the other suites' servers
 * and every outgoing connection use. */
static int pick_port(const int *taken, int ntaken)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int attempt = 0; attempt < 200; attempt++) {
        int port = 12000 + (int)(rand_r(&seed) % 10000);
        bool dup = false;
        for (int i = 0; i < ntaken; i++)
            dup |= taken[i] == port;
        if (!dup && can_bind(port) && can_bind(port + 10000))
            return port;
    }
    return -1;
}

redisContext *wk_test_cluster_raw(const wk_test_cluster *c, int port)
{
    (void)c;
    return wk_test_raw_port(port, NULL);
}

/* This process's connection to each node it asks, kept: waits for a
 * settled map ask every node several times every 50 ms, and a connection
 * per question would fill the loopback's ports with TIME_WAIT. */
static struct {
    int port;
    redisContext *ctx;
} kept[16];

static redisContext *kept_conn(int port, bool fresh)
{
    int at = -1;
    for (int i = 0; i < 16 && at < 0; i++)
        if (kept[i].port == port || !kept[i].ctx)
            at = i;
    if (at < 0)
        at = port % 16; /* more nodes than slots: share one */
    if (kept[at].ctx && (fresh || kept[at].port != port)) {
        redisFree(kept[at].ctx);
        kept[at].ctx = NULL;
    }
    if (!kept[at].ctx)
        kept[at].ctx = wk_test_raw_port(port, NULL);
    kept[at].port = port;
    return kept[at].ctx;
}

/* A raw command on the node at `port`: its reply, or NULL. A kept
 * connection that fails (the node restarted) is opened again, once. */
static redisReply *node_vcmd(int port, const char *fmt, va_list ap)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        redisContext *r = kept_conn(port, attempt > 0);
        if (!r)
            return NULL;
        va_list again;
        va_copy(again, ap);
        redisReply *rep = redisvCommand(r, fmt, again);
        va_end(again);
        if (rep)
            return rep;
    }
    return NULL;
}

/* A reply of type `type` to a raw command on the node at `port`, or NULL. */
static redisReply *node_cmd(int port, int type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = node_vcmd(port, fmt, ap);
    va_end(ap);
    if (rep && (int)rep->type != type) {
        freeReplyObject(rep);
        rep = NULL;
    }
    return rep;
}

long long wk_test_cluster_calls(const wk_test_cluster *c, int port, const char *cmd)
{
    (void)c;
    redisReply *r = node_cmd(port, REDIS_REPLY_STRING, "INFO commandstats");
    if (!r)
        return -1;
    char field[80];
    snprintf(field, sizeof(field), "cmdstat_%s:calls=", cmd);
    const char *at = strstr(r->str, field);
    long long n = at ? strtoll(at + strlen(field), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

static int node_index(const wk_test_cluster *c, int port)
{
    for (int i = 0; i < NODES; i++)
        if (c->port[i] == port)
            return i;
    return -1;
}

/* ------------------------------------------------------------------------
 * The nodes' view: CLUSTER NODES
 * ---------------------------------------------------------------------- */

typedef struct node_line {
    char id[48];
    int port;
    bool master, failed, myself;
    char master_id[48];
    char slots[256]; /* the slot ranges, migration markers left out */
} node_line;

/* Parse one node's CLUSTER NODES; how many lines (≤ max), -1 when it does
 * not answer. */
static int cluster_nodes(int port, node_line *out, int max)
{
    redisReply *r = node_cmd(port, REDIS_REPLY_STRING, "CLUSTER NODES");
    if (!r)
        return -1;
    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\n", &save); line && n < max;
         line = strtok_r(NULL, "\n", &save)) {
        node_line *l = &out[n];
        memset(l, 0, sizeof(*l));
        char addr[64], flags[96], master[48];
        int used = 0;
        if (sscanf(line, "%47s %63s %95s %47s %*s %*s %*s %*s%n", l->id, addr, flags, master,
                   &used) < 4)
            continue;
        const char *colon = strrchr(addr, ':');
        l->port = colon ? atoi(colon + 1) : 0;
        l->master = strstr(flags, "master") != NULL;
        l->failed = strstr(flags, "fail") != NULL; /* fail and fail? */
        l->myself = strstr(flags, "myself") != NULL;
        snprintf(l->master_id, sizeof(l->master_id), "%s", master);
        size_t at = 0;
        for (char *tok = strtok(line + used, " "); tok; tok = strtok(NULL, " ")) {
            if (tok[0] == '[')
                continue; /* [slot->-id] / [slot-<-id]: a migration */
            at += (size_t)snprintf(l->slots + at, sizeof(l->slots) - at, "%s ", tok);
            if (at >= sizeof(l->slots))
                break;
        }
        n++;
    }
    freeReplyObject(r);
    return n;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* What a node believes: "port:slots" of every primary serving slots, then
 * "replica>primary" of every replica, sorted and joined (empty when it
 * does not answer); returns how many primaries serve slots. */
static int slot_map_signature(int port, char *sig, size_t len)
{
    node_line lines[16];
    int n = cluster_nodes(port, lines, 16);
    char rows[16][280];
    int k = 0, primaries = 0;
    for (int i = 0; i < n; i++) {
        if (lines[i].failed)
            continue;
        if (lines[i].master && lines[i].slots[0]) {
            snprintf(rows[k++], sizeof(rows[0]), "%d:%s", lines[i].port, lines[i].slots);
            primaries++;
            continue;
        }
        for (int m = 0; !lines[i].master && m < n; m++)
            if (strcmp(lines[m].id, lines[i].master_id) == 0)
                snprintf(rows[k++], sizeof(rows[0]), "%d>%d", lines[i].port, lines[m].port);
    }
    qsort(rows, (size_t)k, sizeof(rows[0]), cmp_str);
    size_t at = 0;
    sig[0] = '\0';
    for (int i = 0; i < k && at < len; i++)
        at += (size_t)snprintf(sig + at, len - at, "%s|", rows[i]);
    return primaries;
}

/* Whether the reply of `cmd` ("CLUSTER INFO", "INFO replication") on the
 * node at `port` contains `what`. */
static bool info_has(int port, const char *cmd, const char *what)
{
    redisReply *r = node_cmd(port, REDIS_REPLY_STRING, cmd);
    bool yes = r && strstr(r->str, what);
    if (r)
        freeReplyObject(r);
    return yes;
}

/* Why the last wait for a settled map did not end (for messages). */
static char unsettled[600];

const char *wk_test_cluster_unsettled(void)
{
    return unsettled;
}

/* Every live node says cluster_state:ok and names the same primaries for
 * the same slots, three of them, and the same replicas; every live
 * replica's link is up. */
static bool settled(const wk_test_cluster *c)
{
    char first[1200] = "", sig[1200];
    int primaries = 0;
    for (int i = 0; i < NODES; i++) {
        if (c->pid[i] <= 0)
            continue;
        int port = c->port[i];
        if (!info_has(port, "CLUSTER INFO", "cluster_state:ok")) {
            snprintf(unsettled, sizeof(unsettled), "%d: cluster_state not ok", port);
            return false;
        }
        int n = slot_map_signature(port, sig, sizeof(sig));
        if (!first[0]) {
            memcpy(first, sig, sizeof(first));
            primaries = n;
        } else if (strcmp(first, sig) != 0) {
            snprintf(unsettled, sizeof(unsettled), "%d sees %.280s; another %.280s", port, sig,
                     first);
            return false;
        }
        if (info_has(port, "INFO replication", "role:slave") &&
            !info_has(port, "INFO replication", "master_link_status:up")) {
            snprintf(unsettled, sizeof(unsettled), "%d: replica not in sync", port);
            return false;
        }
    }
    if (primaries != 3)
        snprintf(unsettled, sizeof(unsettled), "%d primaries: %.500s", primaries, first);
    return primaries == 3;
}

int wk_test_cluster_wait_settled(const wk_test_cluster *c, int timeout_ms)
{
    int64_t end = wk_test_now_ms() + timeout_ms;
    while (wk_test_now_ms() < end) {
        if (settled(c))
            return 0;
        wk_test_sleep_ms(50);
    }
    return -1;
}

/* The first live node's port (asked for the slot map). */
static int any_live(const wk_test_cluster *c)
{
    for (int i = 0; i < NODES; i++)
        if (c->pid[i] > 0)
            return c->port[i];
    return -1;
}

int wk_test_cluster_primaries(const wk_test_cluster *c, int ports[3])
{
    node_line lines[16];
    int n = cluster_nodes(any_live(c), lines, 16), k = 0;
    for (int i = 0; i < n; i++)
        if (lines[i].master && !lines[i].failed && lines[i].slots[0] && k < 3)
            ports[k++] = lines[i].port;
    return k;
}

int wk_test_cluster_replica_of(const wk_test_cluster *c, int primary_port)
{
    node_line lines[16];
    int n = cluster_nodes(any_live(c), lines, 16);
    const char *id = NULL;
    for (int i = 0; i < n; i++)
        if (lines[i].port == primary_port)
            id = lines[i].id;
    for (int i = 0; id && i < n; i++) {
        int k = node_index(c, lines[i].port);
        if (!lines[i].master && !lines[i].failed && strcmp(lines[i].master_id, id) == 0 && k >= 0 &&
            c->pid[k] > 0)
            return lines[i].port;
    }
    return -1;
}

/* The node id of the node at `port`, as it says itself. */
static bool node_id(int port, char id[48])
{
    redisReply *r = node_cmd(port, REDIS_REPLY_STRING, "CLUSTER MYID");
    if (!r)
        return false;
    snprintf(id, 48, "%s", r->str);
    freeReplyObject(r);
    return true;
}

int wk_test_cluster_keyslot(const wk_test_cluster *c, const char *key, size_t len)
{
    redisReply *r = node_cmd(any_live(c), REDIS_REPLY_INTEGER, "CLUSTER KEYSLOT %b", key, len);
    int slot = r ? (int)r->integer : -1;
    if (r)
        freeReplyObject(r);
    return slot;
}

/* The primary of `slot` in the view of the node at `asked`. */
static int slot_port_seen_by(int asked, int slot)
{
    redisReply *r = node_cmd(asked, REDIS_REPLY_ARRAY, "CLUSTER SLOTS");
    int port = -1;
    for (size_t i = 0; r && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->elements >= 3 && slot >= e->element[0]->integer && slot <= e->element[1]->integer)
            port = (int)e->element[2]->element[1]->integer;
    }
    if (r)
        freeReplyObject(r);
    return port;
}

int wk_test_cluster_slot_table(const wk_test_cluster *c, int ports[16384])
{
    redisReply *r = node_cmd(any_live(c), REDIS_REPLY_ARRAY, "CLUSTER SLOTS");
    if (!r)
        return -1;
    for (int i = 0; i < 16384; i++)
        ports[i] = -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        for (long long s = e->element[0]->integer; e->elements >= 3 && s <= e->element[1]->integer;
             s++)
            ports[s] = (int)e->element[2]->element[1]->integer;
    }
    freeReplyObject(r);
    return 0;
}

int wk_test_cluster_slot_port(const wk_test_cluster *c, int slot)
{
    return slot_port_seen_by(any_live(c), slot);
}

int wk_test_cluster_key_port(const wk_test_cluster *c, const char *key, size_t len)
{
    int slot = wk_test_cluster_keyslot(c, key, len);
    return slot < 0 ? -1 : wk_test_cluster_slot_port(c, slot);
}

/* ------------------------------------------------------------------------
 * The state file
 * ---------------------------------------------------------------------- */

static void state_path(const wk_test_cluster *c, char *path, size_t len, const char *name)
{
    snprintf(path, len, "%s/%s", c->dir, name);
}

/* Written whole and renamed, so a reader never sees half of it. */
static void write_state(const wk_test_cluster *c)
{
    char path[160], tmp[170];
    state_path(c, path, sizeof(path), "topology");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "%d\n", (int)c->keeper);
    for (int i = 0; i < NODES; i++)
        fprintf(f, "%d %d\n", c->port[i], (int)c->pid[i]);
    fclose(f);
    rename(tmp, path);
}

static void make_url(wk_test_cluster *c)
{
    int n = snprintf(c->url, sizeof(c->url), "redis://");
    for (int i = 0; i < 3; i++)
        n += snprintf(c->url + n, sizeof(c->url) - (size_t)n, "%s127.0.0.1:%d", i ? "," : "",
                      c->port[i]);
}

int wk_test_cluster_attach(wk_test_cluster *c, const char *dir)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->dir, sizeof(c->dir), "%s", dir);
    char path[160];
    state_path(c, path, sizeof(path), "topology");
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int keeper = 0, ok = fscanf(f, "%d", &keeper) == 1;
    for (int i = 0; ok && i < NODES; i++) {
        int pid = 0;
        ok = fscanf(f, "%d %d", &c->port[i], &pid) == 2;
        c->pid[i] = pid;
    }
    fclose(f);
    c->keeper = keeper;
    c->owner = false;
    make_url(c);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------------
 * The keeper
 * ---------------------------------------------------------------------- */

static const char *const node_config[] = {
    "cluster-enabled yes", "cluster-config-file nodes.conf",
    /* Short, so a failure is noticed and a replica promoted in ~2 s. */
    "cluster-node-timeout 1500",
    /* A replica may always take over, however long since it heard. */
    "cluster-replica-validity-factor 0",
    /* Replicas stay where they are put (the tests choose). */
    "cluster-allow-replica-migration no", "repl-diskless-sync yes", "repl-diskless-sync-delay 0",
    NULL};

static void node_server(const wk_test_cluster *c, int i, wk_test_server *s)
{
    memset(s, 0, sizeof(*s));
    s->port = c->port[i];
    s->pid = c->pid[i];
    snprintf(s->dir, sizeof(s->dir), "%s/n%d", c->dir, i);
    snprintf(s->url, sizeof(s->url), "redis://127.0.0.1:%d", s->port);
}

static int start_node(wk_test_cluster *c, int i)
{
    wk_test_server s;
    node_server(c, i, &s);
    /* wk_test_server_restart() makes the directory and starts on s.port,
     * keeping nodes.conf from an earlier life. */
    if (wk_test_server_restart(&s, node_config) != 0)
        return -1;
    c->pid[i] = s.pid;
    return 0;
}

static void stop_node(wk_test_cluster *c, int i)
{
    wk_test_server s;
    node_server(c, i, &s);
    wk_test_server_stop(&s); /* by pid; removes dump.rdb */
    char path[200];
    snprintf(path, sizeof(path), "%s/nodes.conf", s.dir);
    unlink(path);
    rmdir(s.dir);
    c->pid[i] = 0;
}

/* redis-cli --cluster create over the six nodes. */
static int create_cluster(const wk_test_cluster *c)
{
    char addr[NODES][32];
    const char *argv[NODES + 8] = {wk_test_cli_binary(), "--cluster", "create"};
    int argc = 3;
    for (int i = 0; i < NODES; i++) {
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", c->port[i]);
        argv[argc++] = addr[i];
    }
    argv[argc++] = "--cluster-replicas";
    argv[argc++] = "1";
    argv[argc++] = "--cluster-yes";
    argv[argc] = NULL;
    pid_t pid = wk_test_spawn(argv);
    if (pid < 0)
        return -1;
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static volatile sig_atomic_t keeper_stop;

static void on_term(int sig)
{
    (void)sig;
    keeper_stop = 1;
}

/* The keeper's life: start the nodes, create the cluster, say so on
 * `ready`, then serve restart requests and reap until told to stop. */
static void keeper_main(wk_test_cluster *c, int ready, pid_t starter)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != starter)
        _exit(1);
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    c->keeper = getpid();
    char fifo[160];
    state_path(c, fifo, sizeof(fifo), "control");
    int ctl = mkfifo(fifo, 0600) == 0 ? open(fifo, O_RDWR | O_NONBLOCK) : -1;
    bool ok = ctl >= 0;
    for (int i = 0; ok && i < NODES; i++)
        ok = start_node(c, i) == 0;
    ok = ok && create_cluster(c) == 0;
    write_state(c);
    ok = ok && wk_test_cluster_wait_settled(c, 30000) == 0;
    /* redis-cli makes nodes 0..2 the primaries; say so if it did not. */
    int prim[3] = {0};
    ok = ok && wk_test_cluster_primaries(c, prim) == 3;
    for (int i = 0; ok && i < 3; i++)
        ok = node_index(c, prim[i]) >= 0 && node_index(c, prim[i]) < 3;
    if (write(ready, ok ? "1" : "0", 1) != 1)
        ok = false;
    close(ready);
    char buf[128];
    size_t have = 0;
    while (ok && !keeper_stop) {
        struct pollfd p = {.fd = ctl, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t n = read(ctl, buf + have, sizeof(buf) - 1 - have);
            have += n > 0 ? (size_t)n : 0;
            buf[have] = '\0';
            char *nl;
            while ((nl = strchr(buf, '\n'))) {
                *nl = '\0';
                int k;
                if (sscanf(buf, "restart %d", &k) == 1 && k >= 0 && k < NODES && c->pid[k] <= 0) {
                    start_node(c, k);
                    write_state(c);
                } else if (strcmp(buf, "stop") == 0) {
                    keeper_stop = 1;
                }
                have -= (size_t)(nl + 1 - buf);
                memmove(buf, nl + 1, have + 1);
            }
            if (have == sizeof(buf) - 1)
                have = 0; /* not a request */
        }
        int status;
        pid_t dead;
        while ((dead = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < NODES; i++)
                if (c->pid[i] == dead)
                    c->pid[i] = 0;
            write_state(c);
        }
    }
    for (int i = 0; i < NODES; i++)
        stop_node(c, i);
    if (ctl >= 0)
        close(ctl);
    /* Whatever else users of the topology left there (a test's lock file). */
    DIR *d = opendir(c->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[160 + 256];
        snprintf(path, sizeof(path), "%s/%s", c->dir, e->d_name);
        if (unlink(path) != 0)
            rmdir(path);
    }
    if (d)
        closedir(d);
    rmdir(c->dir);
    _exit(ok ? 0 : 1);
}

int wk_test_cluster_start(wk_test_cluster *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->dir, sizeof(c->dir), "/tmp/wk-test-cluster-XXXXXX");
    if (!mkdtemp(c->dir))
        return -1;
    for (int i = 0; i < NODES; i++)
        if ((c->port[i] = pick_port(c->port, i)) < 0)
            return -1;
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return -1;
    fflush(NULL); /* the keeper exits with _exit: nothing buffered twice */
    pid_t starter = getpid(), pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(pipefd[0]);
        keeper_main(c, pipefd[1], starter);
    }
    close(pipefd[1]);
    c->keeper = pid;
    c->owner = true;
    char ok = '0';
    struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
    if (poll(&p, 1, 60000) <= 0 || read(pipefd[0], &ok, 1) != 1)
        ok = '0';
    close(pipefd[0]);
    if (ok != '1') {
        wk_test_cluster_stop(c);
        return -1;
    }
    wk_test_cluster c2;
    if (wk_test_cluster_attach(&c2, c->dir) != 0) {
        wk_test_cluster_stop(c);
        return -1;
    }
    memcpy(c->pid, c2.pid, sizeof(c->pid));
    make_url(c);
    return 0;
}

void wk_test_cluster_stop(wk_test_cluster *c)
{
    if (!c->owner || c->keeper <= 0)
        return;
    kill(c->keeper, SIGTERM);
    waitpid(c->keeper, NULL, 0);
    c->keeper = 0;
    rmdir(c->dir); /* when the keeper failed early */
}

/* ------------------------------------------------------------------------
 * Slot migration, in steps
 * ---------------------------------------------------------------------- */

static bool status_ok(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = node_vcmd(port, fmt, ap);
    va_end(ap);
    bool ok = rep && rep->type == REDIS_REPLY_STATUS;
    if (rep)
        freeReplyObject(rep);
    return ok;
}

int wk_test_cluster_migrate_begin(const wk_test_cluster *c, wk_test_migration *m, int slot,
                                  int to_port)
{
    memset(m, 0, sizeof(*m));
    m->slot = slot;
    m->from = wk_test_cluster_slot_port(c, slot);
    m->to = to_port;
    char from_id[48], to_id[48];
    if (m->from < 0 || m->from == to_port || !node_id(m->from, from_id) || !node_id(to_port, to_id))
        return -1;
    /* Importing first, so that the source's ASK always finds a target
     * that accepts ASKING. */
    if (!status_ok(to_port, "CLUSTER SETSLOT %d IMPORTING %s", slot, from_id) ||
        !status_ok(m->from, "CLUSTER SETSLOT %d MIGRATING %s", slot, to_id))
        return -1;
    return 0;
}

int wk_test_cluster_migrate_keys(const wk_test_cluster *c, const wk_test_migration *m, int max)
{
    (void)c;
    redisContext *r = wk_test_cluster_raw(NULL, m->from);
    if (!r)
        return -1;
    redisReply *keys = redisCommand(r, "CLUSTER GETKEYSINSLOT %d %d", m->slot, max);
    int moved = -1;
    if (keys && keys->type == REDIS_REPLY_ARRAY) {
        moved = (int)keys->elements;
        if (moved > 0) {
            const char *argv[8 + 128];
            size_t lens[8 + 128];
            char port[16];
            snprintf(port, sizeof(port), "%d", m->to);
            const char *head[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"};
            int argc = 0;
            for (; argc < 7; argc++) {
                argv[argc] = head[argc];
                lens[argc] = strlen(head[argc]);
            }
            for (size_t i = 0; i < keys->elements && i < 128; i++, argc++) {
                argv[argc] = keys->element[i]->str;
                lens[argc] = keys->element[i]->len;
            }
            redisReply *rep = redisCommandArgv(r, argc, argv, lens);
            /* NOKEY: they expired in between; nothing left to move. */
            if (!rep || rep->type != REDIS_REPLY_STATUS)
                moved = -1;
            if (rep)
                freeReplyObject(rep);
        }
    }
    if (keys)
        freeReplyObject(keys);
    redisFree(r);
    return moved;
}

int wk_test_cluster_migrate_finish(const wk_test_cluster *c, const wk_test_migration *m)
{
    char to_id[48];
    if (!node_id(m->to, to_id))
        return -1;
    /* The target first, then the source, then every other primary. */
    if (!status_ok(m->to, "CLUSTER SETSLOT %d NODE %s", m->slot, to_id) ||
        !status_ok(m->from, "CLUSTER SETSLOT %d NODE %s", m->slot, to_id))
        return -1;
    int prim[3];
    int n = wk_test_cluster_primaries(c, prim);
    for (int i = 0; i < n; i++)
        if (prim[i] != m->to && prim[i] != m->from &&
            !status_ok(prim[i], "CLUSTER SETSLOT %d NODE %s", m->slot, to_id))
            return -1;
    /* Replicas learn it from the target's epoch bump. Until they have, a
     * later finish that bumps the source above the target would make them
     * refuse the target's claim for good, so wait for every node. */
    int64_t start = wk_test_now_ms(), end = start + 10000;
    bool bumped = false;
    for (int i = 0; i < NODES && wk_test_now_ms() < end; i++)
        while (c->pid[i] > 0 && slot_port_seen_by(c->port[i], m->slot) != m->to &&
               wk_test_now_ms() < end) {
            /* A node still on the old owner after a second (its gossip
             * lost the target's claim to an equal epoch, seen once on this
             * loaded box): a fresh epoch for the target makes it win. */
            if (!bumped && wk_test_now_ms() - start > 1000) {
                (void)status_ok(m->to, "CLUSTER BUMPEPOCH"); /* BUMPED / STILL */
                bumped = true;
            }
            wk_test_sleep_ms(10);
        }
    return wk_test_now_ms() < end ? 0 : -1;
}

/* ------------------------------------------------------------------------
 * Failover, kill, restart
 * ---------------------------------------------------------------------- */

/* Until `port` serves slots as a primary in every live node's view and
 * the map is settled. */
static int wait_primary(const wk_test_cluster *c, int port, int timeout_ms)
{
    int64_t end = wk_test_now_ms() + timeout_ms;
    while (wk_test_now_ms() < end) {
        bool all = settled(c);
        for (int i = 0; all && i < NODES; i++) {
            if (c->pid[i] <= 0)
                continue;
            node_line lines[16];
            int n = cluster_nodes(c->port[i], lines, 16);
            bool found = false;
            for (int k = 0; k < n; k++)
                found |= lines[k].port == port && lines[k].master && !lines[k].failed &&
                         lines[k].slots[0];
            all = found;
        }
        if (all)
            return 0;
        wk_test_sleep_ms(50);
    }
    return -1;
}

/* A manual failover that does not complete within Redis's own bound on
 * it (5 s: the primary slow to pause, or the primaries refusing their
 * votes because they voted for that shard within 2 node timeouts, after
 * an earlier test's failover) is dropped by the replica without a word:
 * ask again until `timeout_ms`. A replica that already took over answers
 * the next request with an error; then wait for the map to show it. */
#define MANUAL_FAILOVER_BOUND_MS 7000

int wk_test_cluster_failover(const wk_test_cluster *c, int replica_port, int timeout_ms)
{
    int64_t end = wk_test_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = end - wk_test_now_ms();
        if (left <= 0)
            return -1;
        if (!status_ok(replica_port, "CLUSTER FAILOVER"))
            return wait_primary(c, replica_port, (int)left);
        int wait = left < MANUAL_FAILOVER_BOUND_MS ? (int)left : MANUAL_FAILOVER_BOUND_MS;
        if (wait_primary(c, replica_port, wait) == 0)
            return 0;
    }
}

int wk_test_cluster_kill_primary(wk_test_cluster *c, int primary_port, int timeout_ms)
{
    int k = node_index(c, primary_port);
    if (k < 0 || c->pid[k] <= 0 || wk_test_cluster_wait_settled(c, timeout_ms) != 0)
        return -1;
    int replica = wk_test_cluster_replica_of(c, primary_port);
    if (replica < 0)
        return -1;
    kill(c->pid[k], SIGKILL); /* the keeper reaps it */
    c->pid[k] = 0;
    return wait_primary(c, replica, timeout_ms) == 0 ? replica : -1;
}

int wk_test_cluster_restart(wk_test_cluster *c, int port, int timeout_ms)
{
    int k = node_index(c, port);
    if (k < 0)
        return -1;
    char fifo[160], line[32];
    state_path(c, fifo, sizeof(fifo), "control");
    int n = snprintf(line, sizeof(line), "restart %d\n", k);
    int64_t end = wk_test_now_ms() + timeout_ms;
    /* The keeper may not have reaped it yet: it ignores a restart of a
     * node it still counts as running, so ask until it has. */
    while (wk_test_now_ms() < end) {
        int fd = open(fifo, O_WRONLY | O_NONBLOCK);
        if (fd < 0)
            return -1;
        ssize_t w = write(fd, line, (size_t)n);
        close(fd);
        if (w != n)
            return -1;
        wk_test_sleep_ms(100);
        wk_test_cluster now;
        if (wk_test_cluster_attach(&now, c->dir) == 0 && now.pid[k] > 0) {
            c->pid[k] = now.pid[k];
            break;
        }
    }
    if (c->pid[k] <= 0)
        return -1;
    /* Back as a replica of whoever took its slots, in sync. */
    int left = (int)(end - wk_test_now_ms());
    return wk_test_cluster_wait_settled(c, left > 0 ? left : 1);
}
