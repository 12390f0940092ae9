/*
 * bench/bench_near_cache.c — the near cache (wakuwaku/near_cache.h):
 *
 *   1. a hit against the round trip it saves: wk_near_cache_get_into() on
 *      a verified entry vs wk_cache_get_into() of the same 100-byte body,
 *      alternating in the same run; the median ratio of 5 rounds;
 *   2. the invalidation delay: another connection puts a new body, and the
 *      time from the put's start until the local copy stops serving the
 *      old one (wk_near_cache_peek(), spun on), p50 and p99 of 2000, next
 *      to the put's own round trip.
 *
 *   bench_near_cache [--url URL]   (default: a redis-server of its own on
 *                                   a free loopback port)
 *   bench_near_cache --cluster     (a 3-primary Redis Cluster of its own,
 *                                   tests/support: one shard per primary)
 */
#define BENCH_PROG "bench_near_cache"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/wakuwaku.h>

#include "bench/bench_util.h"
#include "support.h"

#define ROUNDS 5
#define TRIPS 20000
#define HITS 2000000
#define SAMPLES 2000

static const wk_entity items = WK_CACHE_ENTITY("bench_near", 600000);

static void check(int rc, const char *what)
{
    if (rc != WK_OK)
        die(what, wk_err_name(rc));
}

/* Seconds per operation of `n` near-cache hits. */
static double time_hits(wk_near_cache *nc, long n)
{
    char buf[128];
    double t = now_s();
    for (long i = 0; i < n; i++) {
        wk_buffer b = {buf, sizeof(buf), 0, false};
        check(wk_near_cache_get_into(nc, &items, wk_name_str("body"), &b), "near get");
    }
    return (now_s() - t) / (double)n;
}

static double time_trips(wk_db *db, long n)
{
    char buf[128];
    double t = now_s();
    for (long i = 0; i < n; i++) {
        wk_buffer b = {buf, sizeof(buf), 0, false};
        check(wk_cache_get_into(wk_db_processor(db), &items, wk_name_str("body"), &b), "cache get");
    }
    return (now_s() - t) / (double)n;
}

static double pct(double *v, size_t n, double p)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return v[(size_t)(p * (double)(n - 1))];
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    bool cluster = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--cluster") == 0)
            cluster = true;
        else
            die("usage", "bench_near_cache [--url URL | --cluster]");
    }
    wk_test_server server = {0};
    wk_test_cluster topo = {0};
    if (cluster) {
        if (wk_test_cluster_start(&topo) != 0)
            die("redis cluster", "did not start");
        url = topo.url;
    } else if (!url) {
        if (wk_test_server_start(&server, NULL) != 0)
            die("redis-server", "did not start");
        url = server.url;
    }
    wk_db *db = bench_open_db(url), *writer = bench_open_db(url);
    char body[100];
    memset(body, 'n', sizeof(body));
    check(wk_cache_put(wk_db_processor(writer), &items, wk_name_str("body"), body, sizeof(body)),
          "put");

    const wk_entity *ents[] = {&items};
    wk_near_cache_options o = WK_NEAR_CACHE_OPTIONS_INIT;
    o.entities = ents;
    o.nentities = 1;
    char err[256];
    wk_near_cache *nc = NULL;
    if (wk_near_cache_open(&nc, db, &o, err, sizeof(err)) != WK_OK)
        die("wk_near_cache_open", err);

    /* 1. hit vs round trip */
    double hit[ROUNDS], trip[ROUNDS], ratio[ROUNDS];
    time_hits(nc, 1000); /* the first read, then warm */
    for (int r = 0; r < ROUNDS; r++) {
        trip[r] = time_trips(db, TRIPS);
        hit[r] = time_hits(nc, HITS);
        ratio[r] = trip[r] / hit[r];
    }
    wk_near_stats s;
    wk_near_cache_stats(nc, &s);
    printf("near-cache hit vs wk_cache_get_into round trip (100-byte body, %d rounds, median):\n",
           ROUNDS);
    printf("  hit        %10.1f ns/op\n", pct(hit, ROUNDS, 0.5) * 1e9);
    printf("  round trip %10.1f ns/op\n", pct(trip, ROUNDS, 0.5) * 1e9);
    printf("  ratio      %10.1f x   (hits %llu, reads %llu)\n", pct(ratio, ROUNDS, 0.5),
           (unsigned long long)s.hits, (unsigned long long)s.reads);

    /* 2. invalidation delay */
    static double delay[SAMPLES], put_rtt[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        char b[128];
        wk_buffer buf = {b, sizeof(b), 0, false};
        check(wk_near_cache_get_into(nc, &items, wk_name_str("body"), &buf), "near get");
        wk_near_state st;
        do { /* a fresh read is verified at once, unless a PING is late */
            check(wk_near_cache_peek(nc, &items, wk_name_str("body"), &st), "peek");
        } while (st != WK_NEAR_VERIFIED &&
                 wk_near_cache_get_into(nc, &items, wk_name_str("body"), &buf) == WK_OK);
        body[i % sizeof(body)]++;
        double t0 = now_s();
        check(
            wk_cache_put(wk_db_processor(writer), &items, wk_name_str("body"), body, sizeof(body)),
            "put");
        double t1 = now_s();
        do
            check(wk_near_cache_peek(nc, &items, wk_name_str("body"), &st), "peek");
        while (st == WK_NEAR_VERIFIED);
        delay[i] = now_s() - t0;
        put_rtt[i] = t1 - t0;
    }
    printf("invalidation delay, another connection's put -> entry no longer served (%d "
           "samples):\n",
           SAMPLES);
    printf("  delay      p50 %8.1f us   p99 %8.1f us\n", pct(delay, SAMPLES, 0.5) * 1e6,
           pct(delay, SAMPLES, 0.99) * 1e6);
    printf("  put round trip p50 %8.1f us   p99 %8.1f us\n", pct(put_rtt, SAMPLES, 0.5) * 1e6,
           pct(put_rtt, SAMPLES, 0.99) * 1e6);

    wk_near_cache_close(nc);
    wk_db_close(db);
    wk_db_close(writer);
    if (server.pid)
        wk_test_server_stop(&server);
    if (cluster)
        wk_test_cluster_stop(&topo);
    return 0;
}
