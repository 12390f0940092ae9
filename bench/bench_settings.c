/*
 * bench/bench_settings.c — how long a Settings snapshot holds the server
 * up: the whole-map read of old (one script around HGETALL) against the
 * chunked read of wk_settings_snapshot() and of a follower's load, on a map
 * of N keys (default 1,000,000) in a redis-server this program starts.
 *
 *   bench_settings                       # start a redis-server, 1M keys
 *   bench_settings --keys 200000         # another size
 *   bench_settings --url redis://…       # a running server (its SLOWLOG
 *                                        # settings are changed and reset)
 *
 * For each read it reports, from the server's own accounts: the longest,
 * 99th-percentile and median command the client sent (SLOWLOG with
 * slowlog-log-slower-than 0, in µs; a script's entry includes the commands
 * it ran), how many it sent, the HSCAN calls (INFO commandstats), and the
 * client's wall time for the whole read (for wk_settings_snapshot() this
 * includes sorting the copy). The longest command is what every other
 * client of the server may have to wait behind. Each read runs --reps
 * times (default 3); every row is printed.
 *
 * Not a test: the machine is shared and noisy; times vary between runs.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include <wakuwaku/wakuwaku.h>

#define BENCH_PROG "bench_settings"
#include "bench_util.h"

#include "support.h" /* tests/support: a private redis-server */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* What the server says about the commands since the last reset. */
typedef struct served {
    long long longest_us; /* the longest single command */
    long long p99_us;     /* 99th percentile of the client's commands */
    long long median_us;
    long long commands;   /* the client's commands (scripts count once) */
    long long hscans;     /* HSCAN calls (inside scripts included) */
} served;

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static void reset_accounts(redisContext *c)
{
    freeReplyObject(cmd(c, "SLOWLOG RESET"));
    freeReplyObject(cmd(c, "CONFIG RESETSTAT"));
}

static long long stat_calls(redisContext *c, const char *name)
{
    redisReply *r = cmd(c, "INFO commandstats");
    char want[64];
    snprintf(want, sizeof(want), "cmdstat_%s:calls=", name);
    const char *p = strstr(r->str, want);
    long long n = p ? atoll(p + strlen(want)) : 0;
    freeReplyObject(r);
    return n;
}

/* Redis 7 also logs the commands a script runs, each in its own entry;
 * a script's own entry (EVAL/EVALSHA) includes them. Only what a client
 * sent counts here: the scripts, and commands outside scripts. */
static bool inner_command(const char *name)
{
    static const char *const inner[] = {"type", "hmget", "hscan", "hgetall", "hget", "hlen"};
    for (size_t i = 0; i < sizeof(inner) / sizeof(inner[0]); i++) {
        if (strcasecmp(name, inner[i]) == 0)
            return true;
    }
    return false;
}

static served accounts(redisContext *c)
{
    served s = {0, 0, 0, 0, stat_calls(c, "hscan")};
    redisReply *r = cmd(c, "SLOWLOG GET -1");
    long long *us = calloc(r->elements + 1, sizeof(*us));
    if (!us)
        die("accounts", "out of memory");
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4)
            continue;
        const redisReply *args = e->element[3];
        if (args->type != REDIS_REPLY_ARRAY || args->elements == 0)
            continue;
        const char *name = args->element[0]->str;
        /* Our own SLOWLOG / INFO / CONFIG calls do not count. */
        if (strcasecmp(name, "slowlog") == 0 || strcasecmp(name, "info") == 0 ||
            strcasecmp(name, "config") == 0 || inner_command(name))
            continue;
        us[s.commands++] = e->element[2]->integer;
    }
    if (s.commands) {
        qsort(us, (size_t)s.commands, sizeof(*us), cmp_ll);
        s.longest_us = us[s.commands - 1];
        s.p99_us = us[(s.commands - 1) * 99 / 100];
        s.median_us = us[(s.commands - 1) / 2];
    }
    free(us);
    freeReplyObject(r);
    return s;
}

static void row(const char *what, served s, double ms, size_t entries)
{
    printf("| %-31s | %10lld | %8lld | %8lld | %8lld | %6lld | %9.1f | %8zu |\n", what,
           s.longest_us, s.p99_us, s.median_us, s.commands, s.hscans, ms, entries);
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    long keys = 1000000;
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--keys") == 0 && i + 1 < argc)
            keys = atol(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else
            die("usage", "bench_settings [--url redis://…] [--keys N] [--reps N]");
    }
    if (keys < 1 || reps < 1)
        die("usage", "--keys and --reps must be ≥ 1");
    wk_test_server server = {0};
    if (!url) {
        if (wk_test_server_start(&server, NULL) != 0)
            die("redis-server", "did not start");
        url = server.url;
    }
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 60000; /* the old whole-map read takes long */
    wk_db *db;
    char err[256];
    if (wk_db_open(&db, &o, err, sizeof(err)) != WK_OK)
        die("connect", err);
    wk_url u;
    if (wk_url_parse(&u, url, err, sizeof(err)) != WK_OK)
        die("url", err);
    redisContext *raw = redisConnect(u.host ? u.host : "127.0.0.1", u.port);
    wk_url_free(&u);
    if (!raw || raw->err)
        die("raw connect", raw ? raw->errstr : "out of memory");

    static const wk_entity e = WK_SETTINGS_ENTITY("bench");
    const wk_name name = wk_name_str("big");
    char map[WK_KEY_MAX], ver[WK_KEY_MAX];
    size_t map_len, ver_len;
    if (wk_key_build(map, sizeof(map), &map_len, &e, &name, ":map") != WK_OK ||
        wk_key_build(ver, sizeof(ver), &ver_len, &e, &name, ":version") != WK_OK)
        die("keys", "cannot build");
    freeReplyObject(cmd(raw, "DEL %b %b", map, map_len, ver, ver_len));

    /* The map: HSET with 1000 fields per command, pipelined, then one put
     * through the library (which makes the version and epoch). */
    double t0 = now_ms();
    enum { PER = 1000 };
    static const char *av[2 + 2 * PER];
    static size_t al[2 + 2 * PER];
    static char fields[PER][24], values[PER][24];
    long sent = 0;
    for (long i = 0; i < keys; i += PER) {
        int n = 0;
        av[0] = "HSET";
        al[0] = 4;
        av[1] = map;
        al[1] = map_len;
        for (long j = i; j < keys && j < i + PER; j++, n++) {
            al[2 + 2 * n] = (size_t)snprintf(fields[n], sizeof(fields[n]), "key:%ld", j);
            al[3 + 2 * n] = (size_t)snprintf(values[n], sizeof(values[n]), "value-%ld", j * 7);
            av[2 + 2 * n] = fields[n];
            av[3 + 2 * n] = values[n];
        }
        redisAppendCommandArgv(raw, 2 + 2 * n, av, al);
        sent++;
        if (sent == 50 || i + PER >= keys) {
            for (; sent > 0; sent--) {
                redisReply *r;
                if (redisGetReply(raw, (void **)&r) != REDIS_OK)
                    die("fill", raw->errstr);
                freeReplyObject(r);
            }
        }
    }
    int64_t v;
    if (wk_settings_put(wk_db_processor(db), &e, name, "key:0", 5, "value-0", 7, &v) != WK_OK)
        die("put", wk_db_errmsg(db));
    printf("map of %ld keys filled in %.0f ms (redis %s)\n\n", keys, now_ms() - t0, url);

    freeReplyObject(cmd(raw, "CONFIG SET slowlog-log-slower-than 0"));
    freeReplyObject(cmd(raw, "CONFIG SET slowlog-max-len 100000"));
    printf("| %-31s | %10s | %8s | %8s | %8s | %6s | %9s | %8s |\n", "read", "longest µs",
           "p99 µs", "median µs", "commands", "HSCANs", "total ms", "entries");
    printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", "---------------------------------", "------------",
           "----------", "-----------", "----------", "--------", "-----------", "----------");

    for (int rep_i = 0; rep_i < reps; rep_i++) {
        /* Before: the snapshot script of the previous version (shape check,
         * then HGETALL in the script), by EVAL. */
        static const char old_script[] =
            "local t = redis.call('TYPE', KEYS[1]).ok\n"
            "if t ~= 'none' and t ~= 'hash' then return redis.error_reply('not a hash') end\n"
            "return {redis.call('HGET', KEYS[2], 'version'), redis.call('HGETALL', KEYS[1])}\n";
        reset_accounts(raw);
        t0 = now_ms();
        redisReply *r = cmd(raw, "EVAL %s 2 %b %b", old_script, map, map_len, ver, ver_len);
        double ms = now_ms() - t0;
        size_t n_old = r->elements == 2 ? r->element[1]->elements / 2 : 0;
        freeReplyObject(r);
        row("one script, HGETALL (before)", accounts(raw), ms, n_old);

        /* (The whole-map script left a million Lua strings to collect;
         * Redis collects them in steps after later scripts, which would
         * be charged to the chunks below.) */
        freeReplyObject(cmd(raw, "SCRIPT FLUSH"));

        /* After: wk_settings_snapshot through a handle. */
        reset_accounts(raw);
        t0 = now_ms();
        wk_settings_map *m = NULL;
        if (wk_settings_snapshot(wk_db_processor(db), &e, name, &m) != WK_OK)
            die("snapshot", wk_db_errmsg(db));
        ms = now_ms() - t0;
        row("wk_settings_snapshot (chunks)", accounts(raw), ms, m->count);
        wk_settings_map_free(m);

        /* A follower's start: connect, subscribe, load. */
        reset_accounts(raw);
        wk_settings_follower_options fo = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
        fo.db = &o;
        fo.settings = &e;
        fo.name = name;
        wk_settings_follower *f;
        t0 = now_ms();
        if (wk_settings_follower_start(&f, &fo, err, sizeof(err)) != WK_OK)
            die("follower", err);
        ms = now_ms() - t0;
        wk_settings_map *mine = NULL;
        wk_settings_follower_snapshot(f, &mine);
        row("follower start (chunks)", accounts(raw), ms, mine ? mine->count : 0);
        wk_settings_map_free(mine);
        wk_settings_follower_stop(f);
    }

    freeReplyObject(cmd(raw, "CONFIG SET slowlog-log-slower-than 10000"));
    freeReplyObject(cmd(raw, "CONFIG SET slowlog-max-len 128"));
    freeReplyObject(cmd(raw, "DEL %b %b", map, map_len, ver, ver_len));
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&server);
    return 0;
}
