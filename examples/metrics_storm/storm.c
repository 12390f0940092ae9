/*
 * examples/metrics_storm/storm.c — what an operator sees during a lock
 * storm and a Redis restart: eight threads fight over two locks through a
 * pool of four connections while a ninth scrapes the metrics text every
 * 100 ms and prints one line of the main series per scrape (TSV, for
 * scripts/metrics_picture.sh to plot).
 *
 *   wk_metrics_storm URL SECONDS > storm.tsv
 *
 * Columns: seconds since start, lock queries per second (ok), failed
 * queries per second, callers waiting for a lock, handoffs per second,
 * pool connections in use, reconnects so far, failed connects so far.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <wakuwaku/wakuwaku.h>

#define THREADS 8

static const wk_entity storm_lock = WK_LOCK_ENTITY("storm", 2000);

typedef struct shared {
    wk_processor *p; /* the pool's shared processor, counted */
    atomic_bool stop;
} shared;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Take one of two locks (waiting up to 300 ms), hold it 2 ms, release. */
static void *worker(void *arg)
{
    shared *s = arg;
    for (unsigned i = 0; !atomic_load(&s->stop); i++) {
        wk_token token;
        bool got = false;
        int rc = wk_lock_acquire(s->p, &storm_lock, wk_name_u64(i & 1), wk_deadline_in(300), NULL,
                                 &token, &got);
        if (rc == WK_OK && got) {
            sleep_ms(2);
            bool was = false;
            wk_lock_release(s->p, &storm_lock, wk_name_u64(i & 1), &token, &was);
        } else if (rc != WK_OK) {
            sleep_ms(20); /* the server is away: do not spin */
        }
    }
    return NULL;
}

/* The sum of every sample of `family` (with labels or not) in `text`
 * whose line also contains `with` (NULL: any). */
static double sum_of(const char *text, const char *family, const char *with)
{
    double sum = 0;
    size_t n = strlen(family);
    for (const char *line = text; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, family, n) || (line[n] != '{' && line[n] != ' '))
            continue;
        const char *end = strchr(line, '\n');
        const char *value = end ? end : line + strlen(line);
        while (value > line && value[-1] != ' ')
            value--;
        if (with) {
            const char *hit = strstr(line, with);
            if (!hit || (end && hit > end))
                continue;
        }
        sum += atof(value);
    }
    return sum;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s URL SECONDS\n", argv[0]);
        return 2;
    }
    wk_db_options db = WK_DB_OPTIONS_INIT;
    db.url = argv[1];
    db.capability = wk_cap_read_write();
    db.command_timeout_ms = 500;
    db.connect_timeout_ms = 200;
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &db;
    po.size = 4;
    po.wait_ms = 500;
    wk_pool *pool;
    char err[256];
    if (wk_pool_open(&pool, &po, err, sizeof(err)) != WK_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    wk_metrics *m;
    if (wk_metrics_open(&m, wk_pool_processor(pool)) != WK_OK ||
        wk_metrics_watch_pool(m, pool, "storm") != WK_OK)
        return 1;
    shared s = {.p = wk_metrics_processor(m)};
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, &s);

    size_t cap = 1 << 20;
    char *text = malloc(cap);
    double t0 = now_s(), prev_t = t0, prev_ok = 0, prev_failed = 0, prev_handoffs = 0;
    printf("# t\tok_per_s\tfailed_per_s\twaiting\thandoffs_per_s\tin_use\treconnects\t"
           "connect_failures\n");
    while (now_s() - t0 < atof(argv[2])) {
        sleep_ms(100);
        size_t len = 0;
        if (!text || wk_metrics_format_prometheus(m, text, cap, &len) != WK_OK)
            break;
        double t1 = now_s(), dt = t1 - prev_t;
        double ok = sum_of(text, "wk_queries_total", "outcome=\"ok\"");
        double failed = sum_of(text, "wk_queries_total", NULL) - ok;
        double handoffs = sum_of(text, "wk_lease_handoffs_total", NULL);
        printf("%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\n", t1 - t0, (ok - prev_ok) / dt,
               (failed - prev_failed) / dt, sum_of(text, "wk_lease_waiters", NULL),
               (handoffs - prev_handoffs) / dt, sum_of(text, "wk_pool_connections_in_use", NULL),
               sum_of(text, "wk_reconnects_total", NULL),
               sum_of(text, "wk_connect_failures_total", NULL));
        fflush(stdout);
        prev_t = t1, prev_ok = ok, prev_failed = failed, prev_handoffs = handoffs;
    }
    atomic_store(&s.stop, true);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    free(text);
    wk_metrics_unwatch(m, pool);
    wk_metrics_close(m);
    wk_pool_close(pool);
    return 0;
}
