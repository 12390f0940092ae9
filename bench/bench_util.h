/*
 * bench/bench_util.h — what the standalone benchmarks share: the clock
 * and the median's comparison (bench_codegen, bench_dynamic); with
 * BENCH_PROG defined (the program's name, for messages) before the
 * include, also the error exit, the checked raw hiredis command
 * (bench_settings, bench_dynamic) and the two connections a benchmark
 * opens to its server (bench_live_view, bench_lock_wait,
 * bench_near_cache); after wakuwaku/async.h, an event-loop handle and a
 * poll() turn around it (bench_async, bench_lock_wait); after hiredis,
 * a field of INFO commandstats (bench_lock_wait, bench_scripts); with
 * BENCH_PROG, a checked SCRIPT LOAD (bench_live_view, bench_lock_wait);
 * a process's CPU time from schedstat (bench_redis --tls and --pool).
 */
#ifndef WK_BENCH_UTIL_H
#define WK_BENCH_UTIL_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
__attribute__((unused)) static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* qsort() order of doubles, for medians. */
__attribute__((unused)) static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#include <stdio.h>

/* A thread's time on a CPU and waiting for one, in ns, from
 * /proc/<pid>/schedstat (a process's main thread: redis-server's does
 * its I/O and commands; -1: unknown, e.g. a server given by --url). */
__attribute__((unused)) static void bench_cpu_ns(long pid, long long out[2])
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/schedstat", pid);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    out[0] = out[1] = -1;
    if (f) {
        if (fscanf(f, "%lld %lld", &out[0], &out[1]) != 2)
            out[0] = out[1] = -1;
        fclose(f);
    }
}

#ifdef __HIREDIS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A field of `cmd`'s line in INFO commandstats ("calls", "usec",
 * "usec_per_call"), since the last CONFIG RESETSTAT: 0 when the command
 * has not run, -1 when INFO failed. (Include hiredis first.) */
__attribute__((unused)) static double bench_cmdstat(redisContext *c, const char *cmd,
                                                    const char *field)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    char line[64], name[64];
    snprintf(line, sizeof(line), "cmdstat_%s:", cmd);
    snprintf(name, sizeof(name), "%s=", field);
    const char *at = strstr(r->str, line);
    const char *end = at ? strchr(at, '\n') : NULL;
    const char *f = at ? strstr(at, name) : NULL;
    /* (Its own line only: "usec=" is also in a later line's text.) */
    double v = f && (!end || f < end) ? atof(f + strlen(name)) : 0;
    freeReplyObject(r);
    return v;
}
#endif

#ifdef WAKUWAKU_ASYNC_H
#include <poll.h>

/* An event-loop handle, read-write, on `url`; NULL with the reason in err. */
__attribute__((unused)) static wk_async *bench_async_open(const char *url, char *err, size_t len)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    wk_async *a = NULL;
    return wk_async_open(&a, &o, err, len) == WK_OK ? a : NULL;
}

/* One turn of a poll() loop around the handle, waiting at most cap_ms. */
__attribute__((unused)) static void bench_async_turn(wk_async *a, int cap_ms)
{
    unsigned ev = wk_async_events(a);
    int64_t t = wk_async_timeout_ms(a);
    struct pollfd p = {.fd = wk_async_fd(a),
                       .events = (short)((ev & WK_ASYNC_READ ? POLLIN : 0) |
                                         (ev & WK_ASYNC_WRITE ? POLLOUT : 0))};
    int n = poll(&p, p.fd >= 0 && ev ? 1 : 0, t < 0 || t > cap_ms ? cap_ms : (int)t);
    unsigned ready = 0;
    if (n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)))
        ready |= WK_ASYNC_READ;
    if (n > 0 && (p.revents & (POLLOUT | POLLHUP | POLLERR)))
        ready |= WK_ASYNC_WRITE;
    wk_async_process(a, ready);
}
#endif

#ifdef BENCH_PROG
#include <stdarg.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include <wakuwaku/db.h>

/* Print "<prog>: <what>: <detail>" and exit(1): a benchmark that cannot do
 * its work has nothing to report. noreturn: what a failed step leaves unset
 * is never read after it (clang's -Wsometimes-uninitialized). */
__attribute__((unused, noreturn)) static void die(const char *what, const char *detail)
{
    fprintf(stderr, "%s: %s: %s\n", BENCH_PROG, what, detail);
    exit(1);
}

/* A raw command whose failure or error reply ends the benchmark. */
__attribute__((unused)) static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r)
        die("raw command", c->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        die("raw command", r->str);
    return r;
}
/* A read-write library handle on `url`, or exit. */
__attribute__((unused)) static wk_db *bench_open_db(const char *url)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    wk_db *db = NULL;
    char err[256];
    if (wk_db_open(&db, &o, err, sizeof(err)) != WK_OK)
        die("wk_db_open", err);
    return db;
}

/* A raw hiredis connection to the server of `url` (TCP), or exit. */
__attribute__((unused)) static redisContext *bench_open_raw(const char *url)
{
    wk_url u;
    char err[256];
    if (wk_url_parse(&u, url, err, sizeof(err)) != WK_OK)
        die("url", err);
    redisContext *c = redisConnect(u.host ? u.host : "127.0.0.1", u.port);
    wk_url_free(&u);
    if (!c || c->err)
        die("raw connect", c ? c->errstr : "out of memory");
    return c;
}
/* SCRIPT LOAD `source` on c (exits on failure); its sha in sha. */
__attribute__((unused)) static void bench_script_load(redisContext *c, const char *source,
                                                      char sha[41])
{
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", source);
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40)
        die("SCRIPT LOAD", c->errstr);
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
}

#endif /* BENCH_PROG */

#endif /* WK_BENCH_UTIL_H */
