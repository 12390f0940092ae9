/*
 * core/metrics_text.c — the Prometheus text format's pieces
 * (core/metrics_text.h).
 */
#include <stdarg.h>
#include <string.h>

#include "core/metrics_text.h"

static const char *const bounds_text[WK_METRICS_BUCKETS] = {
    "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01",
    "0.025", "0.05",   "0.1",     "0.25",   "0.5",   "1",      "2.5",   "10"};

void wk__sink_put(wk__sink *o, const char *s, size_t n)
{
    if (o->f) {
        if (n && fwrite(s, 1, n, o->f) != n)
            o->failed = true;
    } else if (o->len < o->size) {
        size_t room = o->size - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

void wk__sink_puts(wk__sink *o, const char *s)
{
    wk__sink_put(o, s, strlen(s));
}

void wk__sink_printf(wk__sink *o, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        wk__sink_put(o, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

void wk__sink_value(wk__sink *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            wk__sink_puts(o, "\\\\");
        else if (*v == '"')
            wk__sink_puts(o, "\\\"");
        else if (*v == '\n')
            wk__sink_puts(o, "\\n");
        else
            wk__sink_put(o, v, 1);
    }
}

void wk__sink_family(wk__sink *o, const char *name, const char *type, const char *help)
{
    wk__sink_puts(o, "# HELP ");
    wk__sink_puts(o, name);
    wk__sink_puts(o, " ");
    wk__sink_puts(o, help);
    wk__sink_puts(o, "\n# TYPE ");
    wk__sink_puts(o, name);
    wk__sink_puts(o, " ");
    wk__sink_puts(o, type);
    wk__sink_puts(o, "\n");
}

/* name + suffix + "{" + labels (+ "," when more follow) */
static void open_series(wk__sink *o, const char *name, const char *suffix, const char *labels,
                        bool more)
{
    wk__sink_puts(o, name);
    wk__sink_puts(o, suffix);
    wk__sink_puts(o, "{");
    wk__sink_puts(o, labels);
    if (more && labels[0])
        wk__sink_puts(o, ",");
}

void wk__sink_histogram(wk__sink *o, const char *name, const char *labels, const uint64_t *counts,
                        uint64_t sum_ns)
{
    uint64_t cum = 0;
    for (int b = 0; b <= WK_METRICS_BUCKETS; b++) {
        cum += counts[b];
        open_series(o, name, "_bucket", labels, true);
        wk__sink_printf(o, "le=\"%s\"} %llu\n", b < WK_METRICS_BUCKETS ? bounds_text[b] : "+Inf",
                        (unsigned long long)cum);
    }
    open_series(o, name, "_sum", labels, false);
    wk__sink_printf(o, "} %llu.%09llu\n", (unsigned long long)(sum_ns / 1000000000u),
                    (unsigned long long)(sum_ns % 1000000000u));
    open_series(o, name, "_count", labels, false);
    wk__sink_printf(o, "} %llu\n", (unsigned long long)cum);
}
