/*
 * tests/support/support.c — handles, raw commands and names for tests.
 */
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "support.h"

const char *wk_test_url(void)
{
    const char *url = getenv("WK_TEST_REDIS_URL");
    cr_assert(url, "WK_TEST_REDIS_URL is not set: include redis_fixture.h in this suite");
    return url;
}

wk_db *wk_test_open_url(const char *url, const wk_cap *cap)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = cap ? cap : wk_cap_read_write();
    wk_db *db = NULL;
    char err[256];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "wk_db_open(%s): %s: %s", url, wk_err_name(rc), err);
    return db;
}

wk_db *wk_test_open_as(const wk_cap *cap, const char *client_name, int database)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = cap ? cap : wk_cap_read_write();
    o.client_name = client_name;
    o.database = database;
    wk_db *db = NULL;
    return wk_db_open(&db, &o, NULL, 0) == WK_OK ? db : NULL;
}

wk_db *wk_test_open(const wk_cap *cap)
{
    return wk_test_open_url(wk_test_url(), cap);
}

wk_pool *wk_test_open_pool(const char *url, const wk_cap *cap, int size, int wait_ms,
                           const char *client_name)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = cap ? cap : wk_cap_read_write();
    o.client_name = client_name;
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &o;
    po.size = size;
    po.wait_ms = wait_ms;
    wk_pool *pool = NULL;
    char err[512];
    int rc = wk_pool_open(&pool, &po, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "wk_pool_open(%s): %s: %s", url, wk_err_name(rc), err);
    return pool;
}

redisContext *wk_test_raw(const char *url)
{
    wk_url u;
    cr_assert_eq(wk_url_parse(&u, url, NULL, 0), WK_OK);
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(u.host, u.port, tv);
    wk_url_free(&u);
    cr_assert(c && !c->err, "raw connect to %s failed", url);
    return c;
}

redisReply *wk_test_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    cr_assert(r, "raw command failed: %s", c->errstr);
    return r;
}

static long long stat_calls(redisContext *c, const char *only)
{
    redisReply *r = wk_test_cmd(c, "INFO commandstats");
    long long total = 0;
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        char name[64];
        long long calls;
        if (sscanf(line, "cmdstat_%63[^:]:calls=%lld", name, &calls) != 2)
            continue;
        if (only ? strcmp(name, only) == 0 : strcmp(name, "info") != 0)
            total += calls;
    }
    freeReplyObject(r);
    return total;
}

long long wk_test_total_calls(redisContext *c)
{
    return stat_calls(c, NULL);
}

long long wk_test_cmd_calls(redisContext *c, const char *cmd)
{
    return stat_calls(c, cmd);
}

long long wk_test_scripts_run(redisContext *c)
{
    redisReply *r = wk_test_cmd(c, "INFO commandstats");
    long long total = 0;
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        char name[64];
        long long calls, failed;
        const char *f = strstr(line, "failed_calls=");
        if (sscanf(line, "cmdstat_%63[^:]:calls=%lld", name, &calls) != 2 || !f ||
            sscanf(f, "failed_calls=%lld", &failed) != 1)
            continue;
        if (strcmp(name, "evalsha") == 0 || strcmp(name, "eval") == 0)
            total += calls - failed;
    }
    freeReplyObject(r);
    return total;
}

long long wk_test_dirty(redisContext *c)
{
    redisReply *r = wk_test_cmd(c, "INFO persistence");
    const char *p = strstr(r->str, "rdb_changes_since_last_save:");
    cr_assert(p, "INFO persistence has no rdb_changes_since_last_save");
    long long v = atoll(p + strlen("rdb_changes_since_last_save:"));
    freeReplyObject(r);
    return v;
}

int wk_test_kill_clients_named(redisContext *c, const char *name)
{
    return wk_test_kill_clients_of_type(c, "normal", name);
}

int wk_test_kill_clients_of_type(redisContext *c, const char *type, const char *name)
{
    char field[96];
    snprintf(field, sizeof(field), " name=%s ", name);
    redisReply *list = wk_test_cmd(c, "CLIENT LIST TYPE %s", type);
    int killed = 0;
    char *save = NULL;
    for (char *line = strtok_r(list->str, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        long long id;
        if (!strstr(line, field) || sscanf(line, "id=%lld", &id) != 1)
            continue;
        redisReply *k = wk_test_cmd(c, "CLIENT KILL ID %lld", id);
        killed += k->type == REDIS_REPLY_INTEGER ? (int)k->integer : 0;
        freeReplyObject(k);
    }
    freeReplyObject(list);
    return killed;
}

struct wk_test_killer {
    pthread_t thread;
    const char *name;
    atomic_bool stop;
    int kills;
};

static void *killer_main(void *arg)
{
    wk_test_killer *k = arg;
    redisContext *raw = wk_test_raw(wk_test_url());
    while (!atomic_load(&k->stop)) {
        k->kills += wk_test_kill_clients_named(raw, k->name);
        wk_test_sleep_ms(2);
    }
    redisFree(raw);
    return NULL;
}

wk_test_killer *wk_test_killer_start(const char *name)
{
    wk_test_killer *k = calloc(1, sizeof(*k));
    cr_assert(k);
    k->name = name;
    atomic_init(&k->stop, false);
    cr_assert_eq(pthread_create(&k->thread, NULL, killer_main, k), 0);
    return k;
}

int wk_test_killer_stop(wk_test_killer *k)
{
    atomic_store(&k->stop, true);
    pthread_join(k->thread, NULL);
    int kills = k->kills;
    free(k);
    return kills;
}

long long wk_test_info(redisContext *c, const char *section, const char *field)
{
    redisReply *r = wk_test_cmd(c, "INFO %s", section);
    char name[128];
    snprintf(name, sizeof(name), "\n%s:", field);
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, name) : NULL;
    long long v = p ? atoll(p + strlen(name)) : -1;
    freeReplyObject(r);
    return v;
}

void wk_test_time_out_waits(wk_processor *p, const wk_entity *lock, const char *name, int n)
{
    for (int i = 0; i < n; i++) {
        wk_token t;
        bool got = true;
        int rc = wk_lock_acquire(p, lock, wk_name_str(name), wk_deadline_in(60), NULL, &t, &got);
        cr_assert_eq(rc, WK_OK, "wait %d: %s", i, wk_err_name(rc));
        cr_assert_not(got, "wait %d: a held lock was acquired", i);
        wk_test_sleep_ms(150);
    }
}

long long wk_test_changes(redisContext *c)
{
    return wk_test_info(c, "persistence", "rdb_changes_since_last_save");
}

wk_db *wk_test_open_child(void)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_db *db = NULL;
    return wk_db_open(&db, &o, NULL, 0) == WK_OK ? db : NULL;
}

static wk_test_server private_server;

void wk_test_private_start(void)
{
    cr_assert_eq(wk_test_server_start(&private_server, NULL), 0, "redis-server did not start");
}

void wk_test_private_stop(void)
{
    wk_test_server_stop(&private_server);
}

const char *wk_test_private_url(void)
{
    return private_server.url;
}

const char *wk_test_ns(const char *prefix)
{
    static char slots[16][96];
    static int next;
    char *s = slots[next++ % 16];
    snprintf(s, sizeof(slots[0]), "%s-%d-%d", prefix, (int)getpid(), next);
    return s;
}

int wk_test_kill_client_fd(const char *url, int fd)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0 || sa.sin_family != AF_INET)
        return -1;
    char ip[INET_ADDRSTRLEN];
    if (!inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip)))
        return -1;
    redisContext *raw = wk_test_raw(url);
    redisReply *r = wk_test_cmd(raw, "CLIENT KILL ADDR %s:%d", ip, (int)ntohs(sa.sin_port));
    int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1 ? 0 : -1;
    freeReplyObject(r);
    redisFree(raw);
    return ok;
}

wk_async *wk_test_open_async(const char *url, const wk_cap *cap, int command_timeout_ms)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = cap ? cap : wk_cap_read_write();
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = command_timeout_ms;
    wk_async *a = NULL;
    char err[256];
    int rc = wk_async_open(&a, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    return a;
}

void wk_test_async_turn(wk_async *a)
{
    int fd = wk_async_fd(a);
    unsigned ev = wk_async_events(a);
    int64_t t = wk_async_timeout_ms(a);
    struct pollfd p = {
        .fd = fd,
        .events = (short)((ev & WK_ASYNC_READ ? POLLIN : 0) | (ev & WK_ASYNC_WRITE ? POLLOUT : 0))};
    int n = poll(&p, fd >= 0 && ev ? 1 : 0, t < 0 || t > 200 ? 200 : (int)t);
    unsigned ready = 0;
    if (n > 0) {
        if (p.revents & (POLLIN | POLLHUP | POLLERR))
            ready |= WK_ASYNC_READ;
        if (p.revents & (POLLOUT | POLLHUP | POLLERR))
            ready |= WK_ASYNC_WRITE;
    }
    wk_async_process(a, ready);
}

void wk_test_on_wait(wk_async *a, int status, const char *msg, void *arg)
{
    wk_test_waitreq *r = arg;
    r->calls++;
    r->status = status;
    r->at = wk_monotonic_ms();
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
    if (r->seq)
        r->order = __atomic_fetch_add(r->seq, 1, __ATOMIC_SEQ_CST);
    if (r->flag)
        r->flag_then = *r->flag;
    if (r->release_e && status == WK_OK && r->acquired)
        wk_lock_release(wk_async_with(a, NULL, NULL), r->release_e, wk_name_str(r->release_name),
                        &r->token, &r->released);
}

void wk_test_async_drain(wk_async *a)
{
    while (wk_async_pending(a))
        wk_test_async_turn(a);
}

void wk_test_on_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    wk_test_done *d = arg;
    d->calls++;
    d->status = status;
    snprintf(d->msg, sizeof(d->msg), "%s", msg);
}

int wk_test_near_get_loop(wk_async *a, wk_near_cache *nc, const wk_entity *e, const char *name,
                          wk_body *body, wk_test_done *d)
{
    int before = d->calls;
    int rc = wk_near_cache_get_async(nc, a, e, wk_name_str(name), body, wk_test_on_done, d);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_near_cache_errmsg());
    cr_assert_eq(d->calls, before, "the callback ran inside the call");
    while (d->calls == before)
        wk_test_async_turn(a);
    cr_assert_eq(d->calls, before + 1);
    return d->status;
}

void wk_test_follow_pipe(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a, (void)msg;
    wk_test_follower *f = arg;
    f->status = status;
    if (status != WK_OK || f->m.got != WK_PIPE_MESSAGE || f->n + f->m.len > sizeof(f->got)) {
        f->ended = true;
        return;
    }
    memcpy(f->got + f->n, f->m.body, f->m.len);
    f->n += f->m.len;
    if (wk_pipe_recv_async(f->r, &f->m, wk_test_follow_pipe, f) != WK_OK)
        f->ended = true;
}
