/*
 * tests/core/test_metrics.c — the metrics wrapper: counts by name, entity
 * and outcome (reads and writes), the overflow series, the histogram, and
 * the Prometheus text exposition, checked line by line by a small parser of
 * the format's rules written here.
 */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include <jansson.h>
#include <pthread.h>

#include <wakuwaku/metrics.h>

#include "redis_fixture.h"

TestSuite(metrics, .timeout = 60);

/* ---- a stub inner processor: returns the status the test asks for */

typedef struct stub {
    wk_processor base;
    int status;
    int calls;
} stub;

static int stub_process(wk_processor *self, wk_query *q)
{
    (void)q;
    stub *s = (stub *)self;
    s->calls++;
    return s->status;
}

static stub stub_new(int status)
{
    stub s = {{stub_process, NULL, 0}, status, 0};
    return s;
}

static int run_query(wk_processor *p, const char *name, const wk_entity *e, wk_mode mode)
{
    wk_access a = {e, mode};
    wk_query q = {.name = name, .effect = {&a, e ? 1 : 0}};
    return wk_process(p, &q);
}

static char *format(const wk_metrics *m)
{
    size_t len = 0;
    cr_assert_eq(wk_metrics_format_prometheus(m, NULL, 0, &len), WK_EINVAL);
    char *buf = malloc(len + 1);
    cr_assert(buf);
    size_t len2 = 0;
    cr_assert_eq(wk_metrics_format_prometheus(m, buf, len + 1, &len2), WK_OK);
    cr_assert_eq(len2, len);
    cr_assert_eq(strlen(buf), len);
    return buf;
}

/* ---- a checker of the Prometheus text format (version 0.0.4) */

#define MAX_FAMILIES 64

typedef struct checker {
    char help[MAX_FAMILIES][64];
    char type[MAX_FAMILIES][64];
    char type_of[MAX_FAMILIES][16];
    int nhelp, ntype;
    /* the histogram series being read: its labels without le */
    char hist_labels[1024];
    double last_le, last_bucket;
    bool in_hist, saw_inf, saw_sum;
    double inf_value;
    int samples;
} checker;

static bool name_char(int c, bool first)
{
    return isalpha(c) || c == '_' || c == ':' || (!first && isdigit(c));
}

/* Metric name at *p; advances. */
static size_t read_name(const char **p, char *out, size_t cap, bool label)
{
    size_t n = 0;
    while (name_char((unsigned char)**p, n == 0) && !(label && **p == ':')) {
        cr_assert_lt(n + 1, cap);
        out[n++] = *(*p)++;
    }
    out[n] = '\0';
    return n;
}

static int family_of(const checker *c, const char *metric)
{
    for (int i = 0; i < c->ntype; i++) {
        size_t n = strlen(c->type[i]);
        if (strncmp(metric, c->type[i], n))
            continue;
        const char *rest = metric + n;
        if (!*rest)
            return i;
        if (!strcmp(c->type_of[i], "histogram") &&
            (!strcmp(rest, "_bucket") || !strcmp(rest, "_sum") || !strcmp(rest, "_count")))
            return i;
    }
    return -1;
}

static void check_line(checker *c, const char *line)
{
    if (line[0] == '#') {
        char word[8], name[64];
        const char *p = line + 1;
        cr_assert_eq(*p++, ' ', "comment without a space: %s", line);
        size_t w = 0;
        while (*p && *p != ' ' && w < sizeof(word) - 1)
            word[w++] = *p++;
        word[w] = '\0';
        cr_assert_eq(*p++, ' ', "%s", line);
        cr_assert(read_name(&p, name, sizeof(name), false) > 0, "%s", line);
        cr_assert_eq(*p++, ' ', "%s", line);
        if (!strcmp(word, "HELP")) {
            for (int i = 0; i < c->nhelp; i++)
                cr_assert_str_neq(c->help[i], name, "HELP twice for %s", name);
            cr_assert(*p, "HELP without text");
            strcpy(c->help[c->nhelp++], name);
        } else if (!strcmp(word, "TYPE")) {
            for (int i = 0; i < c->ntype; i++)
                cr_assert_str_neq(c->type[i], name, "TYPE twice for %s", name);
            cr_assert(!strcmp(p, "counter") || !strcmp(p, "gauge") || !strcmp(p, "histogram") ||
                          !strcmp(p, "summary") || !strcmp(p, "untyped"),
                      "bad type %s", p);
            strcpy(c->type[c->ntype], name);
            strcpy(c->type_of[c->ntype++], p);
        }
        return;
    }
    char metric[128], labels[1024] = "", le[32] = "";
    const char *p = line;
    cr_assert(read_name(&p, metric, sizeof(metric), false) > 0, "no metric name: %s", line);
    int fam = family_of(c, metric);
    cr_assert_geq(fam, 0, "sample before its TYPE line: %s", line);
    size_t lp = 0;
    if (*p == '{') {
        p++;
        bool firstlabel = true;
        while (*p != '}') {
            if (!firstlabel)
                cr_assert_eq(*p++, ',', "labels not comma separated: %s", line);
            firstlabel = false;
            char lname[64], value[512];
            cr_assert(read_name(&p, lname, sizeof(lname), true) > 0, "bad label: %s", line);
            cr_assert_eq(*p++, '=', "%s", line);
            cr_assert_eq(*p++, '"', "%s", line);
            size_t v = 0;
            while (*p != '"') {
                cr_assert(*p && *p != '\n', "unterminated value: %s", line);
                if (*p == '\\') {
                    p++;
                    cr_assert(*p == '\\' || *p == '"' || *p == 'n', "bad escape in %s", line);
                }
                value[v++] = *p++;
            }
            value[v] = '\0';
            p++;
            if (!strcmp(lname, "le"))
                strcpy(le, value);
            else
                lp += (size_t)snprintf(labels + lp, sizeof(labels) - lp, "%s=%s;", lname, value);
        }
        p++;
    }
    cr_assert_eq(*p++, ' ', "no space before the value: %s", line);
    char *end;
    double value = strtod(p, &end);
    cr_assert(end != p && *end == '\0', "bad value in %s", line);
    cr_assert(value >= 0 && isfinite(value), "%s", line);
    c->samples++;

    const char *suffix = metric + strlen(c->type[fam]);
    if (strcmp(c->type_of[fam], "histogram"))
        return;
    if (!strcmp(suffix, "_bucket")) {
        cr_assert(le[0], "bucket without le: %s", line);
        double bound = !strcmp(le, "+Inf") ? INFINITY : strtod(le, NULL);
        if (!c->in_hist || strcmp(c->hist_labels, labels)) {
            cr_assert(!c->in_hist, "series ended without _sum/_count");
            c->in_hist = true;
            c->saw_inf = c->saw_sum = false;
            strcpy(c->hist_labels, labels);
            c->last_le = -1;
            c->last_bucket = 0;
        }
        cr_assert(!c->saw_inf, "bucket after +Inf: %s", line);
        cr_assert_gt(bound, c->last_le, "le not increasing: %s", line);
        cr_assert_geq(value, c->last_bucket, "buckets not cumulative: %s", line);
        c->last_le = bound;
        c->last_bucket = value;
        if (isinf(bound)) {
            c->saw_inf = true;
            c->inf_value = value;
        }
    } else if (!strcmp(suffix, "_sum")) {
        cr_assert(c->in_hist && c->saw_inf && !strcmp(c->hist_labels, labels),
                  "_sum without its +Inf bucket: %s", line);
        c->saw_sum = true;
    } else {
        cr_assert(c->in_hist && c->saw_sum && !strcmp(c->hist_labels, labels),
                  "_count without _sum: %s", line);
        cr_assert_eq(value, c->inf_value, "_count differs from +Inf: %s", line);
        c->in_hist = false;
    }
}

/* Whether `s` is valid UTF-8, decoded to code points here (not with the
 * library's own rule): no overlong forms, no surrogates, none above
 * U+10FFFF, no truncated sequence. */
static bool valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int more = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2
                              : (c & 0xF8) == 0xF0 ? 3 : -1;
        if (more < 0)
            return false;
        unsigned long cp = more == 0 ? c : more == 1 ? c & 0x1F : more == 2 ? c & 0x0F : c & 0x07;
        for (int i = 1; i <= more; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        static const unsigned long min[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        p += more + 1;
    }
    return true;
}

/* Check all of `text`; returns the number of samples. */
static int check_prometheus(const char *text)
{
    checker c;
    memset(&c, 0, sizeof(c));
    cr_assert(valid_utf8(text), "the text is not valid UTF-8: %s", text);
    size_t n = strlen(text);
    cr_assert(n == 0 || text[n - 1] == '\n', "text does not end with a newline");
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        char line[2048];
        size_t len = (size_t)(nl - p);
        cr_assert_lt(len, sizeof(line));
        memcpy(line, p, len);
        line[len] = '\0';
        cr_assert(len > 0, "empty line");
        check_line(&c, line);
        p = nl + 1;
    }
    cr_assert(!c.in_hist, "a histogram series without _count");
    return c.samples;
}

/* ---- tests */

static const wk_entity reports = WK_CUSTOM_ENTITY("Report", "monthly");
static const wk_entity other_ns = WK_CUSTOM_ENTITY("Report", "weekly");

Test(metrics, counts_by_name_entity_and_outcome)
{
    stub s = stub_new(WK_OK);
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, &s.base), WK_OK);
    wk_processor *p = wk_metrics_processor(m);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(run_query(p, "report.get", &reports, WK_READ), WK_OK);
    cr_assert_eq(run_query(p, "report.put", &reports, WK_WRITE), WK_OK);
    cr_assert_eq(run_query(p, "report.get", &other_ns, WK_READ), WK_OK);
    s.status = WK_EDENIED;
    cr_assert_eq(run_query(p, "report.put", &reports, WK_WRITE), WK_EDENIED);
    s.status = -99;
    cr_assert_eq(run_query(p, "report.put", &reports, WK_WRITE), -99);
    cr_assert_eq(s.calls, 7);
    cr_assert_eq(wk_metrics_count(m, "report.get", "Report", "monthly", WK_OK), 3);
    cr_assert_eq(wk_metrics_count(m, "report.get", "Report", "weekly", WK_OK), 1);
    cr_assert_eq(wk_metrics_count(m, "report.put", "Report", "monthly", WK_OK), 1);
    cr_assert_eq(wk_metrics_count(m, "report.put", "Report", "monthly", WK_EDENIED), 1);
    cr_assert_eq(wk_metrics_count(m, "report.put", "Report", "monthly", -99), 1);
    cr_assert_eq(wk_metrics_count(m, "report.del", "Report", "monthly", WK_OK), 0);

    /* the same strings at other addresses are the same series */
    char name[] = "report.get", kind[] = "Report", ns[] = "monthly";
    wk_entity copy = WK_CUSTOM_ENTITY(kind, ns);
    s.status = WK_OK;
    cr_assert_eq(run_query(p, name, &copy, WK_READ), WK_OK);
    cr_assert_eq(wk_metrics_count(m, "report.get", "Report", "monthly", WK_OK), 4);

    char *text = format(m);
    cr_assert(strstr(text, "wk_queries_total{query=\"report.get\",kind=\"Report\","
                           "namespace=\"monthly\",outcome=\"ok\"} 4\n"),
              "%s", text);
    cr_assert(strstr(text, "outcome=\"WK_EDENIED\"} 1\n"), "%s", text);
    cr_assert(strstr(text, "outcome=\"other\"} 1\n"), "%s", text);
    cr_assert(strstr(text, "wk_query_duration_seconds_count{query=\"report.get\",kind=\"Report\","
                           "namespace=\"monthly\"} 4\n"),
              "%s", text);
    cr_assert_gt(check_prometheus(text), 0);
    free(text);
    wk_metrics_reset(m);
    cr_assert_eq(wk_metrics_count(m, "report.get", "Report", "monthly", WK_OK), 0);
    wk_metrics_close(m);
    wk_metrics_close(NULL);
}

Test(metrics, overflow_series_and_queries_without_entity)
{
    stub s = stub_new(WK_OK);
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, &s.base), WK_OK);
    static char names[WK_METRICS_SERIES + 10][16];
    for (int i = 0; i < WK_METRICS_SERIES + 10; i++) {
        snprintf(names[i], sizeof(names[i]), "q.%d", i);
        cr_assert_eq(run_query(wk_metrics_processor(m), names[i], &reports, WK_READ), WK_OK);
    }
    cr_assert_eq(run_query(wk_metrics_processor(m), "ping", NULL, WK_READ), WK_OK);
    cr_assert_eq(wk_metrics_count(m, "q.0", "Report", "monthly", WK_OK), 1);
    cr_assert_eq(wk_metrics_count(m, "q.63", "Report", "monthly", WK_OK), 1);
    cr_assert_eq(wk_metrics_count(m, "q.64", "Report", "monthly", WK_OK), 0);
    cr_assert_eq(wk_metrics_count(m, "other", "other", "other", WK_OK), 11);
    char *text = format(m);
    cr_assert(strstr(text, "query=\"other\",kind=\"other\",namespace=\"other\",le=\"+Inf\"} 11\n"),
              "%s", text);
    check_prometheus(text);
    free(text);
    wk_metrics_close(m);
}

Test(metrics, label_values_are_escaped)
{
    stub s = stub_new(WK_OK);
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, &s.base), WK_OK);
    /* a custom query name may hold anything (kinds and namespaces are
     * checked by dispatch, the wrapper sits before it) */
    cr_assert_eq(run_query(wk_metrics_processor(m), "odd\\\"name\nx", &reports, WK_READ), WK_OK);
    char *text = format(m);
    cr_assert(strstr(text, "query=\"odd\\\\\\\"name\\nx\""), "%s", text);
    check_prometheus(text);
    free(text);
    wk_metrics_close(m);
}

/* Label bytes that are not UTF-8 come out as U+FFFD, one per maximal
 * ill-formed subpart (Unicode's recommended practice); valid ones as they
 * are. Labels are compared as the text shown, so two names that show the
 * same are one series, and the raw bytes still find it. */
Test(metrics, label_values_are_made_valid_utf8)
{
    stub s = stub_new(WK_OK);
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, &s.base), WK_OK);
    wk_processor *p = wk_metrics_processor(m);
    static const struct {
        const char *raw, *shown;
    } cases[] = {
        {"bad\xff\xfe", "bad\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"cut\xe2\x82", "cut\xEF\xBF\xBD"},                   /* truncated: one subpart */
        {"over\xc0\xaf", "over\xEF\xBF\xBD\xEF\xBF\xBD"},     /* overlong "/" */
        {"sur\xed\xa0\x80", "sur\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* U+D800 */
        {"big\xf4\x90\x80\x80",
         "big\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* above U+10FFFF */
        {"mid\xe2\x82x\x80y", "mid\xEF\xBF\xBDx\xEF\xBF\xBDy"},
        {"ok\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e", "ok\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e"},
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(run_query(p, cases[i].raw, &reports, WK_READ), WK_OK);
    char bad_ns[] = "n\xff";
    wk_entity odd = WK_CUSTOM_ENTITY("Report", bad_ns);
    cr_assert_eq(run_query(p, "report.get", &odd, WK_READ), WK_OK);
    cr_assert_eq(run_query(p, "bad\xfe\xff", &reports, WK_READ), WK_OK); /* shows as cases[0] */

    char *text = format(m);
    check_prometheus(text);
    for (size_t i = 0; i < n; i++) {
        char want[256];
        snprintf(want, sizeof(want), "wk_queries_total{query=\"%s\",kind=\"Report\",", cases[i].shown);
        cr_assert(strstr(text, want), "no %s in\n%s", want, text);
    }
    cr_assert(strstr(text, "namespace=\"n\xEF\xBF\xBD\",outcome=\"ok\"} 1\n"), "%s", text);
    cr_assert(strstr(text, "wk_query_duration_seconds_count{query=\"bad\xEF\xBF\xBD\xEF\xBF\xBD\","
                           "kind=\"Report\",namespace=\"monthly\"} 2\n"),
              "%s", text);
    free(text);
    cr_assert_eq(wk_metrics_count(m, "bad\xff\xfe", "Report", "monthly", WK_OK), 2);
    cr_assert_eq(wk_metrics_count(m, cases[0].shown, "Report", "monthly", WK_OK), 2);
    wk_metrics_close(m);
}

/* A label string freed and its address reused by another entity's (here:
 * one buffer rewritten in place) counts into the series of the bytes it
 * holds now, however often the address is reused. */
Test(metrics, a_reused_label_address_counts_into_its_own_series)
{
    stub s = stub_new(WK_OK);
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, &s.base), WK_OK);
    wk_processor *p = wk_metrics_processor(m);
    char name[WK_METRICS_LABEL_MAX + 8], kind[16] = "Report", ns[16] = "alpha";
    wk_entity e = WK_CUSTOM_ENTITY(kind, ns);
    strcpy(name, "report.get");
    cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
    strcpy(ns, "bravo");
    cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
    cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
    strcpy(kind, "Other");
    cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
    strcpy(name, "report.put");
    cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
    strcpy(kind, "Report");
    strcpy(ns, "alpha");
    strcpy(name, "report.get");
    cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
    uint64_t alpha = wk_metrics_count(m, "report.get", "Report", "alpha", WK_OK);
    uint64_t bravo = wk_metrics_count(m, "report.get", "Report", "bravo", WK_OK);
    cr_assert(alpha == 2 && bravo == 2, "alpha %llu, bravo %llu (want 2 and 2)",
              (unsigned long long)alpha, (unsigned long long)bravo);
    cr_assert_eq(wk_metrics_count(m, "report.get", "Other", "bravo", WK_OK), 1);
    cr_assert_eq(wk_metrics_count(m, "report.put", "Other", "bravo", WK_OK), 1);

    /* more reuses of one address than the cache keeps entries near it */
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 20; i++) {
            snprintf(ns, sizeof(ns), "ns%d", i);
            cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
        }
    for (int i = 0; i < 20; i++) {
        char want[16];
        snprintf(want, sizeof(want), "ns%d", i);
        cr_assert_eq(wk_metrics_count(m, "report.get", "Report", want, WK_OK), 3, "%s", want);
    }

    /* a name too long for a series, then a short one at its address */
    memset(name, 'x', WK_METRICS_LABEL_MAX);
    name[WK_METRICS_LABEL_MAX] = '\0';
    cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
    cr_assert_eq(wk_metrics_count(m, "other", "other", "other", WK_OK), 1);
    name[5] = '\0';
    cr_assert_eq(run_query(p, name, &e, WK_READ), WK_OK);
    cr_assert_eq(wk_metrics_count(m, "xxxxx", "Report", "ns19", WK_OK), 1);
    cr_assert_eq(wk_metrics_count(m, "other", "other", "other", WK_OK), 1);
    wk_metrics_close(m);
}

/* The same for a library operation's queries, which the wrapper confirms
 * by the namespace only (their name is static and their kind checked by
 * the runner): a rewritten namespace still gets its own series. */
Test(metrics, a_reused_namespace_address_counts_library_operations_into_their_own_series)
{
    stub s = stub_new(WK_OK);
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, &s.base), WK_OK);
    wk_processor *p = wk_metrics_processor(m);
    char ns[16] = "alpha";
    wk_entity lock = WK_LOCK_ENTITY(ns, 30000);
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_u64(1), &st), WK_OK);
    strcpy(ns, "bravo");
    for (int i = 0; i < 2; i++)
        cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_u64(1), &st), WK_OK);
    strcpy(ns, "alpha");
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_u64(1), &st), WK_OK);
    uint64_t alpha = wk_metrics_count(m, "lock.inspect", "Lock", "alpha", WK_OK);
    uint64_t bravo = wk_metrics_count(m, "lock.inspect", "Lock", "bravo", WK_OK);
    cr_assert(alpha == 2 && bravo == 2, "alpha %llu, bravo %llu (want 2 and 2)",
              (unsigned long long)alpha, (unsigned long long)bravo);
    wk_metrics_close(m);
}

Test(metrics, latency_lands_in_buckets_and_sum)
{
    stub s = stub_new(WK_OK);
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, &s.base), WK_OK);
    for (int i = 0; i < 10; i++)
        run_query(wk_metrics_processor(m), "report.get", &reports, WK_READ);
    char *text = format(m);
    /* +Inf holds all ten; the sum is a number of seconds ≥ 0 */
    cr_assert(strstr(text, "le=\"+Inf\"} 10\n"), "%s", text);
    cr_assert(strstr(text, "wk_query_duration_seconds_sum{query=\"report.get\""), "%s", text);
    check_prometheus(text);
    free(text);

    /* the buffer variant truncates, NUL-terminated, and says how much */
    char small[40];
    size_t len = 0;
    cr_assert_eq(wk_metrics_format_prometheus(m, small, sizeof(small), &len), WK_EINVAL);
    cr_assert_gt(len, sizeof(small));
    cr_assert_eq(strlen(small), sizeof(small) - 1);

    FILE *f = tmpfile();
    cr_assert(f);
    cr_assert_eq(wk_metrics_write_prometheus(m, f), WK_OK);
    cr_assert_eq((size_t)ftell(f), len);
    fclose(f);
    cr_assert_eq(wk_metrics_write_prometheus(NULL, stdout), WK_EINVAL);
    wk_metrics_close(m);
}

enum { THREADS = 4, PER_THREAD = 5000 };

static void *hammer(void *arg)
{
    wk_processor *p = arg;
    for (int i = 0; i < PER_THREAD; i++)
        run_query(p, (i & 1) ? "report.put" : "report.get", &reports, WK_READ);
    return NULL;
}

Test(metrics, wrappers_feed_one_table_from_threads)
{
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, NULL), WK_OK);
    cr_assert_eq(run_query(wk_metrics_processor(m), "x", &reports, WK_READ), WK_EINVAL);
    stub stubs[THREADS];
    wk_metrics_wrapper w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        stubs[i] = stub_new(WK_OK);
        cr_assert_eq(wk_metrics_wrap(&w[i], m, &stubs[i].base), WK_OK);
    }
    cr_assert_eq(wk_metrics_wrap(&w[0], m, NULL), WK_EINVAL);
    cr_assert_eq(wk_metrics_wrap(&w[0], m, &stubs[0].base), WK_OK);
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, hammer, &w[i].base), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(wk_metrics_count(m, "report.get", "Report", "monthly", WK_OK),
                 THREADS * PER_THREAD / 2);
    cr_assert_eq(wk_metrics_count(m, "report.put", "Report", "monthly", WK_OK),
                 THREADS * PER_THREAD / 2);
    char *text = format(m);
    check_prometheus(text);
    free(text);
    wk_metrics_close(m);
}

/* Through a real handle: reads and writes both, refusals by capability
 * counted with their status. */
Test(metrics, counts_real_reads_writes_and_refusals)
{
    const char *ns = wk_test_ns("metrics");
    wk_entity lock = WK_LOCK_ENTITY(ns, 5000);
    wk_entity cache = WK_CACHE_ENTITY(ns, 5000);
    wk_db *db = wk_test_open(NULL);
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, wk_db_processor(db)), WK_OK);
    wk_processor *p = wk_metrics_processor(m);
    cr_assert_eq(p->db, db);
    wk_token token;
    bool got = false;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_u64(42), &token, &got), WK_OK);
    cr_assert(got);
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_u64(42), &token, &got), WK_OK);
    cr_assert_eq(wk_metrics_count(m, "lock.try", "Lock", ns, WK_OK), 1);
    cr_assert_eq(wk_metrics_count(m, "lock.release", "Lock", ns, WK_OK), 1);

    wk_body body = WK_BODY_INIT;
    cr_assert_eq(wk_cache_get(p, &cache, wk_name_str("absent"), &body), WK_OK);
    cr_assert(!body.found);
    wk_body_free(&body);
    cr_assert_eq(wk_metrics_count(m, "cache.get", "Cache", ns, WK_OK), 1);

    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_metrics_wrapper w;
    cr_assert_eq(wk_metrics_wrap(&w, m, wk_db_processor(ro)), WK_OK);
    cr_assert_eq(wk_lock_try(&w.base, &lock, wk_name_u64(42), &token, &got), WK_EDENIED);
    cr_assert_eq(wk_metrics_count(m, "lock.try", "Lock", ns, WK_EDENIED), 1);
    char *text = format(m);
    check_prometheus(text);
    free(text);
    wk_metrics_close(m);
    wk_db_close(ro);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Watched objects: handles, pools, near caches, settings followers
 * ---------------------------------------------------------------------- */

/* The value of the series whose line starts with `series` ("name{labels}"),
 * or -1 when there is none. */
static long long series_value(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (!strncmp(line, series, n) && line[n] == ' ')
            return atoll(line + n + 1);
    return -1;
}

typedef struct holder_args {
    wk_db *db;
    const wk_entity *lock;
    wk_token token;
} holder_args;

static void *release_later(void *arg)
{
    holder_args *h = arg;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    bool was = false;
    wk_lock_release(wk_db_processor(h->db), h->lock, wk_name_u64(7), &h->token, &was);
    return NULL;
}

/* One object of each watched kind, watched by a table of its own. */
typedef struct watched_set {
    const char *ns;
    wk_entity lock, cache, settings;
    wk_metrics *m;
    wk_db *db, *other;
    wk_pool *pool;
    wk_near_cache *nc;
    wk_settings_follower *f;
    int64_t version;
    char client[64]; /* db's client name, its own (suites run in parallel) */
} watched_set;

static void watched_open(watched_set *w)
{
    w->ns = wk_test_ns("metrics-watch");
    w->lock = (wk_entity)WK_LOCK_ENTITY(w->ns, 10000);
    w->cache = (wk_entity)WK_CACHE_ENTITY(w->ns, 60000);
    w->settings = (wk_entity)WK_SETTINGS_ENTITY(w->ns);
    cr_assert_eq(wk_metrics_open(&w->m, NULL), WK_OK);
    snprintf(w->client, sizeof(w->client), "db-%s", w->ns);
    w->db = wk_test_open_as(wk_cap_read_write(), w->client, 0);
    w->other = wk_test_open(NULL);
    w->pool = wk_test_open_pool(wk_test_url(), NULL, 1, 0, NULL);
    cr_assert(w->db && w->other && w->pool);
    const wk_entity *served[1] = {&w->cache};
    wk_near_cache_options no = WK_NEAR_CACHE_OPTIONS_INIT;
    no.entities = served;
    no.nentities = 1;
    char err[256];
    cr_assert_eq(wk_near_cache_open(&w->nc, w->other, &no, err, sizeof(err)), WK_OK, "%s", err);
    cr_assert_eq(wk_settings_put(wk_db_processor(w->other), &w->settings, wk_name_str("app"), "k",
                                 1, "v", 1, &w->version),
                 WK_OK);
    wk_db_options dbo = WK_DB_OPTIONS_INIT;
    dbo.url = wk_test_url();
    dbo.capability = wk_cap_read_write();
    wk_settings_follower_options fo = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    fo.db = &dbo;
    fo.settings = &w->settings;
    fo.name = wk_name_str("app");
    cr_assert_eq(wk_settings_follower_start(&w->f, &fo, err, sizeof(err)), WK_OK, "%s", err);
    cr_assert_eq(wk_metrics_watch_db(w->m, w->db, "api"), WK_OK);
    cr_assert_eq(wk_metrics_watch_pool(w->m, w->pool, "workers"), WK_OK);
    cr_assert_eq(wk_metrics_watch_near_cache(w->m, w->nc, "profiles"), WK_OK);
    cr_assert_eq(wk_metrics_watch_settings_follower(w->m, w->f, "app"), WK_OK);
}

static void watched_close(watched_set *w)
{
    wk_metrics_close(w->m);
    wk_settings_follower_halt(w->f);
    wk_settings_follower_free(w->f);
    wk_near_cache_close(w->nc);
    wk_pool_close(w->pool);
    wk_db_close(w->other);
    wk_db_close(w->db);
}

/* Every family of every kind of watched object is written, passes the
 * format check, and its counters follow what the objects did: a
 * reconnect, a wait that ran out, a wait handed the lock on release, a
 * pool borrow that timed out, near-cache hits, a follower's version. */
Test(metrics, watched_objects_write_their_families_and_count_what_happened)
{
    watched_set w;
    watched_open(&w);
    wk_metrics *m = w.m;
    wk_db *db = w.db, *other = w.other;
    wk_pool *pool = w.pool;
    wk_near_cache *nc = w.nc;
    wk_entity lock = w.lock, cache = w.cache;
    int64_t version = w.version;
    cr_assert_eq(wk_metrics_watch_db(m, db, "again"), WK_EINVAL);
    cr_assert_eq(wk_metrics_watch_db(m, other, ""), WK_EINVAL);

    /* a reconnect */
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_u64(7), &st), WK_OK);
    redisContext *raw = wk_test_raw(wk_test_url());
    cr_assert_eq(wk_test_kill_clients_named(raw, w.client), 1);
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_u64(7), &st), WK_OK);
    wk_handle_stats hs;
    cr_assert_eq(wk_db_stats(db, &hs), WK_OK);
    cr_assert_eq(hs.reconnects, 1);
    /* a wait that runs out, then one handed the lock by a release */
    holder_args h = {.db = other, .lock = &lock};
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(other), &lock, wk_name_u64(7), &h.token, &got), WK_OK);
    cr_assert(got);
    wk_token mine;
    cr_assert_eq(wk_lock_acquire(wk_db_processor(db), &lock, wk_name_u64(7), wk_deadline_in(100),
                                 NULL, &mine, &got),
                 WK_OK);
    cr_assert(!got);
    pthread_t t;
    pthread_create(&t, NULL, release_later, &h);
    cr_assert_eq(wk_lock_acquire(wk_db_processor(db), &lock, wk_name_u64(7), wk_deadline_in(5000),
                                 NULL, &mine, &got),
                 WK_OK);
    pthread_join(t, NULL);
    cr_assert(got);
    /* a pool borrow that times out (one connection, no wait) */
    wk_db *borrowed;
    cr_assert_eq(wk_pool_borrow(pool, &borrowed), WK_OK);
    cr_assert_eq(wk_lock_inspect(wk_pool_processor(pool), &lock, wk_name_u64(7), &st), WK_ETIMEDOUT);
    /* near-cache hits */
    cr_assert_eq(wk_cache_put(wk_db_processor(other), &cache, wk_name_str("p"), "body", 4), WK_OK);
    for (int i = 0; i < 3; i++) {
        wk_body body = WK_BODY_INIT;
        cr_assert_eq(wk_near_cache_get(nc, &cache, wk_name_str("p"), &body), WK_OK);
        wk_body_free(&body);
    }

    char *text = format(m);
    check_prometheus(text);
    static const char *const families[] = {
        "wk_reconnects_total", "wk_connect_failures_total", "wk_redirects_total",
        "wk_sentinel_discoveries_total", "wk_lease_not_replicated_total", "wk_lease_waiters",
        "wk_lease_waits_total", "wk_lease_handoffs_total", "wk_lease_wait_seconds",
        "wk_pool_connections", "wk_pool_connections_in_use", "wk_pool_waiting_borrowers",
        "wk_pool_borrows_total", "wk_pool_borrow_timeouts_total", "wk_pool_borrow_wait_seconds",
        "wk_near_cache_hits_total", "wk_near_cache_misses_total",
        "wk_near_cache_revalidations_total", "wk_near_cache_invalidations_total",
        "wk_near_cache_evictions_total", "wk_near_cache_entries",
        "wk_near_cache_unverified_entries", "wk_near_cache_bytes", "wk_settings_version",
        "wk_settings_version_lag", "wk_settings_synced", "wk_settings_reloads_total",
        "wk_settings_applied_total", "wk_settings_reconnects_total"};
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char help[128];
        snprintf(help, sizeof(help), "# TYPE %s ", families[i]);
        cr_assert(strstr(text, help), "no family %s in:\n%s", families[i], text);
    }
    /* (a wait cut by its deadline drops its blocking connection: the
     * next wait reconnects it, counted on the handle) */
    cr_assert_geq(series_value(text, "wk_reconnects_total{handle=\"api\"}"), 1, "%s", text);
    cr_assert_eq(series_value(text, "wk_lease_waits_total{handle=\"api\",outcome=\"deadline\"}"), 1,
                 "%s", text);
    cr_assert_eq(series_value(text, "wk_lease_waits_total{handle=\"api\",outcome=\"acquired\"}"), 1,
                 "%s", text);
    cr_assert_eq(series_value(text, "wk_lease_handoffs_total{handle=\"api\"}"), 1, "%s", text);
    cr_assert_eq(series_value(text, "wk_lease_waiters{handle=\"api\"}"), 0, "%s", text);
    cr_assert_eq(series_value(text, "wk_lease_wait_seconds_count{handle=\"api\"}"), 2, "%s", text);
    cr_assert_eq(series_value(text, "wk_pool_connections_in_use{pool=\"workers\"}"), 1, "%s", text);
    cr_assert_eq(series_value(text, "wk_pool_borrow_timeouts_total{pool=\"workers\"}"), 1, "%s",
                 text);
    cr_assert_eq(series_value(text, "wk_pool_borrows_total{pool=\"workers\"}"), 1, "%s", text);
    cr_assert_geq(series_value(text, "wk_near_cache_hits_total{cache=\"profiles\"}"), 1, "%s", text);
    cr_assert_eq(series_value(text, "wk_settings_version{follower=\"app\"}"), version, "%s", text);
    cr_assert_eq(series_value(text, "wk_settings_synced{follower=\"app\"}"), 1, "%s", text);
    free(text);

    /* unwatched: no longer read, its families gone */
    cr_assert_eq(wk_metrics_unwatch(m, pool), WK_OK);
    cr_assert_eq(wk_metrics_unwatch(m, pool), WK_EINVAL);
    text = format(m);
    cr_assert(!strstr(text, "wk_pool_connections"), "%s", text);
    check_prometheus(text);
    free(text);

    wk_pool_return(pool, borrowed);
    redisFree(raw);
    watched_close(&w);
}

/* Whether `name` is a sample name in the exposition `text`. */
static bool exported(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *line = text; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (line[0] != '#' && !strncmp(line, name, n) && (line[n] == '{' || line[n] == ' '))
            return true;
    return false;
}

/* Every wk_ name in the expressions of `node` (a JSON value, walked
 * whole) is exported; `checked` counts the names seen. */
static void check_exprs(const json_t *node, const char *text, int *checked)
{
    if (json_is_object(node)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)node, key, v) {
            if (!strcmp(key, "expr") && json_is_string(v)) {
                const char *e = json_string_value(v);
                for (const char *p = strstr(e, "wk_"); p; p = strstr(p, "wk_")) {
                    char name[128];
                    size_t len = 0;
                    while ((isalnum((unsigned char)p[len]) || p[len] == '_') && len < sizeof(name) - 1)
                        name[len] = p[len], len++;
                    name[len] = '\0';
                    cr_assert(exported(text, name), "the dashboard names %s, which is not exported",
                              name);
                    (*checked)++;
                    p += len;
                }
            } else {
                check_exprs(v, text, checked);
            }
        }
    } else if (json_is_array(node)) {
        size_t i;
        json_t *v;
        json_array_foreach((json_t *)node, i, v) check_exprs(v, text, checked);
    }
}

/* examples/grafana/wakuwaku.json loads and names only series the library
 * writes (with one object of each kind watched and a query counted). */
Test(metrics, the_grafana_dashboard_names_only_exported_series)
{
    watched_set w;
    watched_open(&w);
    wk_metrics_wrapper wrap;
    cr_assert_eq(wk_metrics_wrap(&wrap, w.m, wk_db_processor(w.db)), WK_OK);
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(&wrap.base, &w.lock, wk_name_u64(1), &st), WK_OK);
    char *text = format(w.m);
    char path[4096];
    const char *src = getenv("WK_TEST_SOURCE_DIR");
    cr_assert(src, "WK_TEST_SOURCE_DIR is not set (ctest sets it)");
    snprintf(path, sizeof(path), "%s/examples/grafana/wakuwaku.json", src);
    json_error_t jerr;
    json_t *dash = json_load_file(path, 0, &jerr);
    cr_assert(dash, "%s: %s (line %d)", path, jerr.text, jerr.line);
    cr_assert(json_array_size(json_object_get(dash, "panels")) >= 8);
    int checked = 0;
    check_exprs(dash, text, &checked);
    cr_assert_geq(checked, 20, "only %d names checked", checked);
    json_decref(dash);
    free(text);
    watched_close(&w);
}

/* A table watches at most WK_METRICS_WATCHES objects. */
Test(metrics, watches_are_bounded)
{
    wk_metrics *m;
    cr_assert_eq(wk_metrics_open(&m, NULL), WK_OK);
    static char objects[WK_METRICS_WATCHES + 1];
    for (int i = 0; i < WK_METRICS_WATCHES; i++)
        cr_assert_eq(wk_metrics_watch_db(m, (wk_db *)&objects[i], "h"), WK_OK);
    cr_assert_eq(wk_metrics_watch_db(m, (wk_db *)&objects[WK_METRICS_WATCHES], "h"), WK_ENOMEM);
    for (int i = 0; i < WK_METRICS_WATCHES; i++)
        cr_assert_eq(wk_metrics_unwatch(m, &objects[i]), WK_OK);
    wk_metrics_close(m);
}
