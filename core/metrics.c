/*
 * core/metrics.c — the metrics wrapper: counts every query by name, entity
 * and outcome, a latency histogram per series, and the Prometheus text
 * exposition of both (wakuwaku/metrics.h).
 *
 * The per-query path takes no lock and allocates nothing: the series is
 * found through an address cache (open addressing over the addresses of
 * the query name, kind and namespace strings) whose entry is then
 * confirmed by the bytes it copied, so a string freed and its address
 * reused with other bytes is never taken for the old one; then a few
 * relaxed atomic increments. A miss takes the mutex once to find or add
 * the series by its label text and to fill a cache slot.
 *
 * A series holds its labels as shown: bytes that are not UTF-8 become
 * U+FFFD when the series is made, so the exposition is valid UTF-8 and
 * two names that show the same are one series.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <wakuwaku/metrics.h>

#include "core/core_internal.h"
#include "core/metrics_text.h"
#include "core/metrics_watch.h"

/* ------------------------------------------------------------------------
 * The table
 * ---------------------------------------------------------------------- */

#define SLOTS 256   /* address cache slots, a power of two */
#define PROBES 8    /* slots tried per lookup before the slow path */
#define OUTCOMES 13 /* "ok", WK_EDENIED … WK_ENOTREPLICATED (-1 … -11), other */
#define OVERFLOW WK_METRICS_SERIES

_Static_assert(WK_METRICS_BUCKETS == WK_STATS_BUCKETS, "one set of histogram bounds");

typedef struct series {
    char query[WK_METRICS_LABEL_MAX];
    char kind[WK_METRICS_LABEL_MAX];
    char ns[WK_METRICS_LABEL_MAX];
    _Atomic uint64_t outcomes[OUTCOMES];
    _Atomic uint64_t buckets[WK_METRICS_BUCKETS + 1]; /* not cumulative; last: +Inf */
    _Atomic uint64_t sum_ns;
} series;

/* A cache entry: written once under the mutex, then published by `name`
 * (release) and never changed until reset, so readers need no lock. The
 * same addresses may own several entries (one per content seen there). */
typedef struct slot {
    const char *_Atomic name; /* NULL: free; published last (release) */
    const char *kind;
    const char *ns;
    int index;
    unsigned longs;                      /* bit i: label i too long to copy */
    bool op;                             /* made for a library operation's query (WK__QUERY_OP) */
    bool fixed; /* all three labels lie in the read-only image: the addresses suffice */
    char bytes[3][WK_METRICS_LABEL_MAX]; /* the raw labels when cached */
} slot;

struct wk_metrics {
    wk_processor base; /* first: the processor recovers the table from self */
    wk_processor *inner;
    pthread_mutex_t lock; /* adding a series or a slot */
    _Atomic int count;    /* series in use, not counting the overflow one */
    slot slots[SLOTS];
    series rows[WK_METRICS_SERIES + 1]; /* the last one: overflow ("other") */
    wk__watches watches;                /* under `lock` */
    /* The program's read-only image (core/image.c): a label there keeps
     * its bytes for good, so it is confirmed by its address alone. */
    wk__range image[8];
    size_t nimage;
};

static const char empty[] = "";

static size_t slot_hash(const char *name, const char *kind, const char *ns)
{
    uintptr_t h = (uintptr_t)name * 0x9E3779B97F4A7C15ull;
    h ^= (uintptr_t)kind * 0xC2B2AE3D27D4EB4Full;
    h ^= (uintptr_t)ns * 0x165667B19E3779F9ull;
    return (size_t)(h >> 32) & (SLOTS - 1);
}

/* The length (1..4) of the well-formed UTF-8 sequence at `s`, or 0 when
 * it is ill-formed; *bad then gets the length of its maximal subpart
 * (1..3), which one U+FFFD replaces (Unicode's recommended practice).
 * Ranges per the Unicode standard's table 3-7: no overlong forms, no
 * surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t *bad)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t n;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        *bad = 1;
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if (s[i] < lo || s[i] > hi) { /* the NUL ends a truncated one here */
            *bad = i;
            return 0;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return n;
}

/* `src` as valid UTF-8 into `dst`; false when the text shown would not
 * fit (the series is then the overflow one). */
static bool shown(char dst[WK_METRICS_LABEL_MAX], const char *src)
{
    static const char fffd[] = "\xEF\xBF\xBD";
    const unsigned char *p = (const unsigned char *)src;
    size_t len = 0;
    while (*p) {
        size_t bad = 0, n = utf8_seq(p, &bad);
        size_t k = n ? n : 3;
        if (len + k >= WK_METRICS_LABEL_MAX)
            return false;
        memcpy(dst + len, n ? (const char *)p : fffd, k);
        len += k;
        p += n ? n : bad;
    }
    dst[len] = '\0';
    return true;
}

/* Whether the label at `s` still has the bytes `held` copied (or is still
 * too long to copy: `too_long`): at once when it lies in the program's
 * read-only image (string literals, static descriptors), else by its
 * bytes. */
static bool in_image(const wk_metrics *m, const char *s)
{
    for (size_t i = 0; i < m->nimage; i++)
        if ((uintptr_t)s - m->image[i].lo < m->image[i].hi - m->image[i].lo)
            return true;
    return false;
}

static inline bool same_label(const wk_metrics *m, const char *held, bool too_long, const char *s)
{
    if (in_image(m, s))
        return true;
    return too_long ? strnlen(s, WK_METRICS_LABEL_MAX) == WK_METRICS_LABEL_MAX : !strcmp(held, s);
}

/* Whether cache entry `sl` was made for these label bytes (its addresses
 * already match). A library operation's query (WK__QUERY_OP) has a
 * static name, and the runner checked the entity's kind against that
 * operation's kind, so only its namespace can have other bytes now. */
static bool same_bytes(const wk_metrics *m, const slot *sl, bool op, const char *name,
                       const char *kind, const char *ns)
{
    if (!same_label(m, sl->bytes[2], sl->longs & 4u, ns))
        return false;
    if (op)
        return true;
    return same_label(m, sl->bytes[0], sl->longs & 1u, name) &&
           same_label(m, sl->bytes[1], sl->longs & 2u, kind);
}

/* The first of `n` series whose labels are shown as `t`, OVERFLOW if none. */
static int series_of(const wk_metrics *m, int n, char t[3][WK_METRICS_LABEL_MAX])
{
    for (int i = 0; i < n; i++) {
        const series *s = &m->rows[i];
        if (!strcmp(s->query, t[0]) && !strcmp(s->kind, t[1]) && !strcmp(s->ns, t[2]))
            return i;
    }
    return OVERFLOW;
}

/* The slow path, under the mutex: the series of these strings (found or
 * added, or the overflow one), and a cache slot for these addresses. */
static int find_slow(wk_metrics *m, bool op, const char *name, const char *kind, const char *ns,
                     size_t h)
{
    const char *labels[3] = {name, kind, ns};
    char t[3][WK_METRICS_LABEL_MAX];
    bool fit = shown(t[0], name) && shown(t[1], kind) && shown(t[2], ns);
    pthread_mutex_lock(&m->lock);
    int n = atomic_load_explicit(&m->count, memory_order_relaxed);
    int index = fit ? series_of(m, n, t) : OVERFLOW;
    if (fit && index == OVERFLOW && n < WK_METRICS_SERIES) {
        series *s = &m->rows[n];
        strcpy(s->query, t[0]);
        strcpy(s->kind, t[1]);
        strcpy(s->ns, t[2]);
        index = n;
        atomic_store_explicit(&m->count, n + 1, memory_order_release);
    }
    for (size_t p = 0; p < PROBES; p++) {
        slot *sl = &m->slots[(h + p) & (SLOTS - 1)];
        const char *held = atomic_load_explicit(&sl->name, memory_order_relaxed);
        if (held == name && sl->kind == kind && sl->ns == ns && sl->op == op &&
            same_bytes(m, sl, op, name, kind, ns))
            break; /* another thread cached it meanwhile */
        if (!held) {
            sl->kind = kind;
            sl->ns = ns;
            sl->index = index;
            sl->longs = 0;
            sl->op = op;
            sl->fixed = in_image(m, name) && in_image(m, kind) && in_image(m, ns);
            for (int i = 0; i < 3; i++) {
                size_t len = strnlen(labels[i], WK_METRICS_LABEL_MAX);
                if (len == WK_METRICS_LABEL_MAX) {
                    sl->longs |= 1u << i;
                    len = 0;
                }
                memcpy(sl->bytes[i], labels[i], len);
                sl->bytes[i][len] = '\0';
            }
            atomic_store_explicit(&sl->name, name, memory_order_release);
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return index;
}

static series *find(wk_metrics *m, const wk_query *q)
{
    const char *name = q->name ? q->name : "?";
    const char *kind = empty, *ns = empty;
    bool op = (q->flags & WK__QUERY_OP) != 0;
    if (q->effect.count && q->effect.accesses && q->effect.accesses[0].entity) {
        const wk_entity *e = q->effect.accesses[0].entity;
        kind = e->kind ? e->kind : empty;
        ns = e->ns ? e->ns : empty;
    }
    size_t h = slot_hash(name, kind, ns);
    for (size_t p = 0; p < PROBES; p++) {
        slot *sl = &m->slots[(h + p) & (SLOTS - 1)];
        const char *held = atomic_load_explicit(&sl->name, memory_order_acquire);
        if (!held)
            break;
        /* the addresses pick the entry, the bytes confirm it: a freed
         * string's address may now hold another entity's */
        if (held == name && sl->kind == kind && sl->ns == ns &&
            (sl->fixed || (sl->op == op && same_bytes(m, sl, op, name, kind, ns))))
            return &m->rows[sl->index];
    }
    return &m->rows[find_slow(m, op, name, kind, ns, h)];
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record(wk_metrics *m, const wk_query *q, int rc, uint64_t ns)
{
    series *s = find(m, q);
    int outcome = rc == 0 ? 0 : (rc < 0 && rc >= -11) ? -rc : OUTCOMES - 1;
    atomic_fetch_add_explicit(&s->outcomes[outcome], 1, memory_order_relaxed);
    int b = 0;
    while (b < WK_METRICS_BUCKETS && ns > wk__hist_bounds_ns[b])
        b++;
    atomic_fetch_add_explicit(&s->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->sum_ns, ns, memory_order_relaxed);
}

static int run(wk_metrics *m, wk_processor *inner, wk_query *q)
{
    uint64_t t0 = now_ns();
    int rc = wk_process(inner, q);
    uint64_t t1 = now_ns();
    record(m, q, rc, t1 - t0);
    return rc;
}

static int metrics_process(wk_processor *self, wk_query *query)
{
    wk_metrics *m = (wk_metrics *)self;
    return run(m, m->inner, query);
}

static int wrapper_process(wk_processor *self, wk_query *query)
{
    wk_metrics_wrapper *w = (wk_metrics_wrapper *)self;
    return run(w->metrics, w->inner, query);
}

int wk_metrics_open(wk_metrics **out, wk_processor *inner)
{
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    wk_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return WK_ENOMEM;
    if (pthread_mutex_init(&m->lock, NULL)) {
        free(m);
        return WK_ENOMEM;
    }
    m->base.process = metrics_process;
    m->nimage = wk__readonly_image(m->image, sizeof(m->image) / sizeof(m->image[0]));
    m->base.db = inner ? inner->db : NULL;
    m->base.flags = inner ? inner->flags : 0;
    m->inner = inner;
    series *o = &m->rows[OVERFLOW];
    strcpy(o->query, "other");
    strcpy(o->kind, "other");
    strcpy(o->ns, "other");
    *out = m;
    return WK_OK;
}

void wk_metrics_close(wk_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static int watch(wk_metrics *m, wk__watch_type type, void *object, const char *name)
{
    char text[WK_METRICS_LABEL_MAX];
    if (!m || !name || !name[0] || !shown(text, name))
        return WK_EINVAL;
    pthread_mutex_lock(&m->lock);
    int rc = wk__watch_add(&m->watches, type, object, text);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int wk_metrics_watch_db(wk_metrics *m, wk_db *db, const char *name)
{
    return watch(m, WK__WATCH_DB, db, name);
}

int wk_metrics_watch_pool(wk_metrics *m, wk_pool *pool, const char *name)
{
    return watch(m, WK__WATCH_POOL, pool, name);
}

int wk_metrics_watch_near_cache(wk_metrics *m, wk_near_cache *nc, const char *name)
{
    return watch(m, WK__WATCH_NEAR_CACHE, nc, name);
}

int wk_metrics_watch_settings_follower(wk_metrics *m, wk_settings_follower *f, const char *name)
{
    return watch(m, WK__WATCH_FOLLOWER, f, name);
}

int wk_metrics_unwatch(wk_metrics *m, const void *object)
{
    if (!m || !object)
        return WK_EINVAL;
    pthread_mutex_lock(&m->lock);
    int rc = wk__watch_remove(&m->watches, object);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

wk_processor *wk_metrics_processor(wk_metrics *m)
{
    return m ? &m->base : NULL;
}

int wk_metrics_wrap(wk_metrics_wrapper *w, wk_metrics *m, wk_processor *inner)
{
    if (!w || !m || !inner)
        return WK_EINVAL;
    w->base.process = wrapper_process;
    w->base.db = inner->db;
    w->base.flags = inner->flags;
    w->inner = inner;
    w->metrics = m;
    return WK_OK;
}

void wk_metrics_reset(wk_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < SLOTS; i++) {
        atomic_store(&m->slots[i].name, NULL);
        m->slots[i].kind = m->slots[i].ns = NULL;
        m->slots[i].index = 0;
        m->slots[i].longs = 0;
    }
    for (int i = 0; i <= WK_METRICS_SERIES; i++) {
        series *s = &m->rows[i];
        for (int k = 0; k < OUTCOMES; k++)
            atomic_store(&s->outcomes[k], 0);
        for (int k = 0; k <= WK_METRICS_BUCKETS; k++)
            atomic_store(&s->buckets[k], 0);
        atomic_store(&s->sum_ns, 0);
    }
    atomic_store(&m->count, 0);
    pthread_mutex_unlock(&m->lock);
}

/* The series of these labels, compared as shown (raw bytes that are not
 * UTF-8 find the series they were counted in). */
static const series *lookup(const wk_metrics *m, const char *query, const char *kind,
                            const char *ns)
{
    char t[3][WK_METRICS_LABEL_MAX];
    if (!shown(t[0], query) || !shown(t[1], kind) || !shown(t[2], ns))
        return NULL;
    int n = atomic_load_explicit(&((wk_metrics *)m)->count, memory_order_acquire);
    int i = series_of(m, n, t);
    if (i != OVERFLOW)
        return &m->rows[i];
    const series *o = &m->rows[OVERFLOW];
    bool other = !strcmp(o->query, t[0]) && !strcmp(o->kind, t[1]) && !strcmp(o->ns, t[2]);
    return other ? o : NULL;
}

uint64_t wk_metrics_count(const wk_metrics *m, const char *query, const char *kind, const char *ns,
                          int outcome)
{
    if (!m || !query || !kind || !ns)
        return 0;
    const series *s = lookup(m, query, kind, ns);
    if (!s)
        return 0;
    int k = outcome == 0 ? 0 : (outcome < 0 && outcome >= -11) ? -outcome : OUTCOMES - 1;
    return atomic_load_explicit(&((series *)s)->outcomes[k], memory_order_relaxed);
}

/* ------------------------------------------------------------------------
 * The Prometheus text exposition format
 * ---------------------------------------------------------------------- */

static void put_labels(wk__sink *o, const series *s)
{
    wk__sink_puts(o, "query=\"");
    wk__sink_value(o, s->query);
    wk__sink_puts(o, "\",kind=\"");
    wk__sink_value(o, s->kind);
    wk__sink_puts(o, "\",namespace=\"");
    wk__sink_value(o, s->ns);
    wk__sink_puts(o, "\"");
}

static const char *outcome_name(int k)
{
    if (k == 0)
        return "ok";
    if (k == OUTCOMES - 1)
        return "other";
    return wk_err_name(-k);
}

static uint64_t load(const _Atomic uint64_t *v)
{
    return atomic_load_explicit((_Atomic uint64_t *)v, memory_order_relaxed);
}

static void write_all(const wk_metrics *m, wk__sink *o)
{
    int n = atomic_load_explicit(&((wk_metrics *)m)->count, memory_order_acquire);
    wk__sink_family(o, "wk_queries_total", "counter",
                    "Queries processed, by name, entity and outcome.");
    for (int i = 0; i <= n; i++) {
        const series *s = &m->rows[i == n ? OVERFLOW : i];
        for (int k = 0; k < OUTCOMES; k++) {
            uint64_t c = load(&s->outcomes[k]);
            if (!c)
                continue;
            wk__sink_puts(o, "wk_queries_total{");
            put_labels(o, s);
            wk__sink_printf(o, ",outcome=\"%s\"} %llu\n", outcome_name(k), (unsigned long long)c);
        }
    }
    wk__sink_family(o, "wk_query_duration_seconds", "histogram",
                    "Query latency, by name and entity.");
    for (int i = 0; i <= n; i++) {
        const series *s = &m->rows[i == n ? OVERFLOW : i];
        uint64_t counts[WK_METRICS_BUCKETS + 1], total = 0;
        for (int b = 0; b <= WK_METRICS_BUCKETS; b++)
            total += counts[b] = load(&s->buckets[b]);
        if (i == n && !total)
            continue; /* the overflow series only once used */
        /* three labels of at most WK_METRICS_LABEL_MAX - 1 bytes, each
         * byte escaped to two at most */
        char labels[3 * 2 * WK_METRICS_LABEL_MAX + 64];
        wk__sink text = {.buf = labels, .size = sizeof(labels) - 1};
        put_labels(&text, s);
        labels[text.len < sizeof(labels) ? text.len : sizeof(labels) - 1] = '\0';
        wk__sink_histogram(o, "wk_query_duration_seconds", labels, counts, load(&s->sum_ns));
    }
    wk__watch_write(&((wk_metrics *)m)->watches, &((wk_metrics *)m)->lock, o);
}

int wk_metrics_write_prometheus(const wk_metrics *m, FILE *f)
{
    if (!m || !f)
        return WK_EINVAL;
    wk__sink o = {.f = f};
    write_all(m, &o);
    if (o.failed || fflush(f))
        return WK_EIO;
    return WK_OK;
}

int wk_metrics_format_prometheus(const wk_metrics *m, char *buf, size_t size, size_t *len)
{
    if (!m || (!buf && size))
        return WK_EINVAL;
    wk__sink o = {.buf = buf, .size = size};
    write_all(m, &o);
    if (len)
        *len = o.len;
    if (size)
        buf[o.len < size ? o.len : size - 1] = '\0';
    return o.len < size ? WK_OK : WK_EINVAL;
}
