/*
 * bench/bench_util.h — the error exit and the checked raw command of the
 * standalone benchmarks (bench_settings, bench_dynamic). Define BENCH_PROG
 * (the program's name, for messages) before including it.
 */
#ifndef WK_BENCH_UTIL_H
#define WK_BENCH_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#ifndef BENCH_PROG
#error "define BENCH_PROG before including bench/bench_util.h"
#endif

/* Print "<prog>: <what>: <detail>" and exit(1): a benchmark that cannot do
 * its work has nothing to report. */
__attribute__((unused)) static void die(const char *what, const char *detail)
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

#endif /* WK_BENCH_UTIL_H */
