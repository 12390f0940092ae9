/*
 * core/metrics_text.h — writing the Prometheus text exposition format
 * (version 0.0.4) to a FILE or a buffer: shared by the query families
 * (core/metrics.c) and the watched objects' (core/metrics_watch.c). Not
 * installed.
 */
#ifndef WK_CORE_METRICS_TEXT_H
#define WK_CORE_METRICS_TEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <wakuwaku/metrics.h>

/* Output to a FILE or to a buffer, counting every byte either way. */
typedef struct wk__sink {
    FILE *f;
    char *buf;
    size_t size, len;
    bool failed;
} wk__sink;

void wk__sink_put(wk__sink *o, const char *s, size_t n);
void wk__sink_puts(wk__sink *o, const char *s);
__attribute__((format(printf, 2, 3))) void wk__sink_printf(wk__sink *o, const char *fmt, ...);
/* A label value (valid UTF-8 already) with \, " and newline escaped. */
void wk__sink_value(wk__sink *o, const char *v);
/* A family's HELP and TYPE lines. */
void wk__sink_family(wk__sink *o, const char *name, const char *type, const char *help);
/* One series of a histogram family `name` with WK_METRICS_BUCKETS bounds:
 * `labels` its label pairs as written ("" for none), `counts` per bucket
 * (not cumulative; the last above the last bound), `sum_ns` their sum. */
void wk__sink_histogram(wk__sink *o, const char *name, const char *labels, const uint64_t *counts,
                        uint64_t sum_ns);

#endif
