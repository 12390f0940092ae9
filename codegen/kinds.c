/*
 * codegen/kinds.c — the built-in kinds: one row each with everything the
 * generator knows about the kind (its names in schemas and C, its entity
 * macro and parameters, the wording of its header comment, whether it has
 * a body, a rule across its parameters) and its operations. The
 * operations are not written here: they are the kind header's op list
 * (WK_LOCK_OPS, … in include/wakuwaku/<kind>.h; wakuwaku/query.h,
 * "Operation lists"), where the compiler checks each row against the
 * runtime's prototype. Each becomes a typed accessor; its mode decides
 * which capability handles get it (tests/codegen checks the handles
 * against the runtime's own refusals).
 *
 * check.c, emit_header.c and emit_source.c read these rows and hold no
 * per-kind code. In an op's `params`/`args`, "BODY" stands for the
 * entity's body type and "CODEC" for its codec.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../collection/token_bucket_units.h"
#include "schema.h"

/* The kinds' headers, their entity parts alone: the op lists, and the
 * parameter rules the runtime applies (WK_SEMAPHORE_PERMITS_MAX …). */
#define WK__ENTITY_MACROS_ONLY
#include "../include/wakuwaku/lock.h"
#include "../include/wakuwaku/rwlock.h"
#include "../include/wakuwaku/cache.h"
#include "../include/wakuwaku/hashed_cache.h"
#include "../include/wakuwaku/token_bucket.h"
#include "../include/wakuwaku/settings.h"
#include "../include/wakuwaku/live_view.h"
#include "../include/wakuwaku/pipe.h"
#include "../include/wakuwaku/stream_buffer.h"
#include "../include/wakuwaku/fenced_lock.h"
#include "../include/wakuwaku/semaphore.h"

/* The parameters, shared by the kinds that take them. */
static const param_desc param_ttl = {"ttl", "ttl_ms", RULE_DURATION, true, 0, "a %s has no TTL"};
static const param_desc param_capacity = {"capacity", "capacity", RULE_POSITIVE, true, 0,
                                          "only a TokenBucket has capacity, rate and period"};
static const param_desc param_rate = {"rate", "rate", RULE_POSITIVE, true, 0,
                                      "only a TokenBucket has capacity, rate and period"};
static const param_desc param_permits = {"permits", "capacity", RULE_POSITIVE, true, 0,
                                         "only a Semaphore has permits"};
static const param_desc param_period = {"period", "period_ms", RULE_DURATION, false, 1000,
                                        "only a TokenBucket has capacity, rate and period"};

/* LiveView: max_diffs is a whole number (0, which the crate allows, is
 * written as the runtime macro's argument by hand: a schema gives >= 1). */
static const param_desc param_max_diffs = {"max_diffs", "capacity", RULE_POSITIVE, true, 0,
                                           "only a LiveView has max_diffs"};

/* The runtime's rule (wakuwaku/live_view.h), applied to the schema. */
static int live_view_check(const entity *e, char *why, size_t whylen)
{
    if (WK__LIVE_VIEW_MAX_DIFFS_OK(e->params[0].num))
        return -1;
    snprintf(why, whylen, WK__LIVE_VIEW_MAX_DIFFS_RULE " (got %s)", e->params[0].text);
    return 0;
}

/* TokenBucket: the limiter's exact arithmetic refuses what it cannot
 * represent (collection/token_bucket_units.h), so the generator does too. */
static int bucket_check(const entity *e, char *why, size_t whylen)
{
    wk__tb_units units;
    int bad = wk__tb_units_derive(e->params[0].num, e->params[1].num, e->params[2].ms, &units,
                                  why, whylen);
    return !bad ? -1 : bad == WK__TB_BAD_CAPACITY ? 0 : 1;
}

/* Semaphore: the runtime's rule on permits (wakuwaku/semaphore.h). */
static int semaphore_check(const entity *e, char *why, size_t whylen)
{
    if (WK__SEMAPHORE_PERMITS_OK(e->params[0].num))
        return -1;
    snprintf(why, whylen, WK__SEMAPHORE_PERMITS_RULE " (got %s)", WK_SEMAPHORE_PERMITS_MAX,
             e->params[0].text);
    return 0;
}

/* One op_desc per row of a header's list, as written; prepare() derives
 * the accessor's name, parameters and arguments from it. */
#define ROW(k, op_, mode, params, summary_)                                                        \
    {.op = #op_, .write = IS_WRITE_##mode, .runtime = "wk_" #k "_" #op_, .query = #k "." #op_,     \
     .row = #params, .summary = summary_},
#define IS_WRITE_READ false
#define IS_WRITE_WRITE true
#define ONE(k, op, mode, params, summary) +1
#define LIST(list) (op_desc[]){list(ROW)}, (0 list(ONE))
#define NO_LIST NULL, 0

/* The rows: one per kind, in the order schemas list them in messages. A
 * new kind is one row here and its header's include above. */
static const kind_desc kinds[] = {
    {"Lock", "WK_KIND_LOCK", "WK_LOCK_ENTITY", {&param_ttl, NULL}, ", lease {ttl}", false, NULL,
     LIST(WK_LOCK_OPS), NO_LIST, "WK_LOCK_FAIR_ENTITY"},
    {"RwLock", "WK_KIND_RWLOCK", "WK_RWLOCK_ENTITY", {&param_ttl, NULL}, ", lease {ttl}", false,
     NULL, LIST(WK_RWLOCK_OPS), NO_LIST, "WK_RWLOCK_FAIR_ENTITY"},
    {"Cache", "WK_KIND_CACHE", "WK_CACHE_ENTITY", {&param_ttl, NULL}, ", TTL {ttl}", true, NULL,
     LIST(WK_CACHE_OPS), LIST(WK_CACHE_TYPED_OPS), NULL},
    {"HashedCache", "WK_KIND_HASHED_CACHE", "WK_HASHED_CACHE_ENTITY", {&param_ttl, NULL},
     ", TTL {ttl}", true, NULL, LIST(WK_HASHED_CACHE_OPS), LIST(WK_HASHED_CACHE_TYPED_OPS), NULL},
    {"TokenBucket", "WK_KIND_TOKEN_BUCKET", "WK_TOKEN_BUCKET_ENTITY",
     {&param_capacity, &param_rate, &param_period, NULL},
     ", {capacity} tokens, refilled at {rate} per {period}", false, bucket_check,
     LIST(WK_TOKEN_BUCKET_OPS), NO_LIST, NULL},
    {"Settings", "WK_KIND_SETTINGS", "WK_SETTINGS_ENTITY", {NULL}, "", false, NULL,
     LIST(WK_SETTINGS_OPS), NO_LIST, NULL},
    {"LiveView", "WK_KIND_LIVE_VIEW", "WK_LIVE_VIEW_ENTITY", {&param_max_diffs, NULL},
     ", history of up to {max_diffs} diffs", true, live_view_check, LIST(WK_LIVE_VIEW_OPS),
     LIST(WK_LIVE_VIEW_TYPED_OPS), NULL},
    {"Pipe", "WK_KIND_PIPE", "WK_PIPE_ENTITY", {&param_ttl, NULL}, ", TTL {ttl}", true, NULL,
     LIST(WK_PIPE_OPS), LIST(WK_PIPE_TYPED_OPS), NULL},
    {"StreamBuffer", "WK_KIND_STREAM_BUFFER", "WK_STREAM_BUFFER_ENTITY", {&param_ttl, NULL},
     ", TTL {ttl}", true, NULL, LIST(WK_STREAM_BUFFER_OPS), LIST(WK_STREAM_BUFFER_TYPED_OPS),
     NULL},
    {"FencedLock", "WK_KIND_FENCED_LOCK", "WK_FENCED_LOCK_ENTITY", {&param_ttl, NULL},
     ", lease {ttl}, fenced", false, NULL, LIST(WK_FENCED_LOCK_OPS), NO_LIST, NULL},
    {"Semaphore", "WK_KIND_SEMAPHORE", "WK_SEMAPHORE_ENTITY", {&param_permits, &param_ttl, NULL},
     ", {permits} permits, lease {ttl}", false, semaphore_check, LIST(WK_SEMAPHORE_OPS), NO_LIST,
     NULL},
};

#define NKINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))
_Static_assert(NKINDS <= KIND_MAX, "raise KIND_MAX");

/* The last identifier of a parameter declaration ("known" of
 * "const uint8_t known[WK_HASH_LEN]"), n bytes long. */
static const char *param_name(const char *decl, size_t n, size_t *len)
{
    const char *end = memchr(decl, '[', n);
    end = end ? end : decl + n;
    while (end > decl && end[-1] == ' ')
        end--;
    const char *start = end;
    while (start > decl && (isalnum((unsigned char)start[-1]) || start[-1] == '_'))
        start--;
    *len = (size_t)(end - start);
    return start;
}

static void fail(const op_desc *o, const char *why)
{
    fprintf(stderr, "wk-codegen: the list row of %s %s\n", o->runtime, why);
    abort();
}

/* Appends ", " (unless dst is empty) and n bytes of s, without a space
 * after a '*' (a formatter may write "wk_token * token": the row's text
 * is stringified as spelled). */
static void append(char *dst, const char *s, size_t n)
{
    size_t at = strlen(dst);
    if (at)
        memcpy(dst + at, ", ", 2), at += 2;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == ' ' && i && s[i - 1] == '*'))
            dst[at++] = s[i];
    dst[at] = '\0';
}

/*
 * From the row as written, "(wk_name name, const wk_codec *codec, void
 * *value, bool *found)": the accessor's parameters after the name ("BODY
 * *body, bool *found": a typed function's codec and value become the body
 * record), the runtime call's arguments ("CODEC, body, found") and the
 * accessor's name (without "_typed").
 */
static void derive(op_desc *o)
{
    const char *p = o->row, *name = "(wk_name name";
    size_t len = strlen(p), nl = strlen(name);
    if (strncmp(p, name, nl) != 0 || (p[nl] != ',' && p[nl] != ')'))
        fail(o, "does not start with \"wk_name name\"");
    char *params = calloc(1, len + 16), *args = calloc(1, len + 16);
    if (!params || !args)
        fail(o, "is out of memory");
    bool codec = false;
    for (p += nl; *p == ',';) {
        while (*++p == ' ')
            ;
        size_t n = strcspn(p, ",)"), id_len;
        const char *id = param_name(p, n, &id_len);
        if (id_len == 5 && !strncmp(id, "codec", 5)) {
            append(args, "CODEC", 5);
            codec = true;
        } else if (codec && id_len == 5 && !strncmp(id, "value", 5)) {
            bool in = !strncmp(p, "const ", 6);
            append(params, in ? "const BODY *body" : "BODY *body", in ? 16 : 10);
            append(args, "body", 4);
        } else {
            append(params, p, n);
            append(args, id, id_len);
        }
        p += n;
    }
    o->params = params;
    o->args = args;
    size_t ol = strlen(o->op);
    if (ol > 6 && !strcmp(o->op + ol - 6, "_typed")) {
        char *op = calloc(1, ol);
        if (!op)
            fail(o, "is out of memory");
        o->op = memcpy(op, o->op, ol - 6);
    }
}

/* The accessors of each kind: its rows with a summary, and for an entity
 * with a body, each replaced by the typed row of the same accessor name. */
static struct accessors {
    op_desc *v;
    size_t n;
} bytes_acc[KIND_MAX], typed_acc[KIND_MAX];

static void prepare(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    for (int k = 0; k < NKINDS; k++) {
        const kind_desc *kd = &kinds[k];
        for (size_t i = 0; i < kd->nops; i++)
            derive(&kd->ops[i]);
        for (size_t i = 0; i < kd->ntyped_ops; i++)
            derive(&kd->typed_ops[i]);
        bytes_acc[k].v = calloc(kd->nops, sizeof(op_desc));
        typed_acc[k].v = calloc(kd->nops, sizeof(op_desc));
        if (!bytes_acc[k].v || !typed_acc[k].v)
            fail(kd->ops, "is out of memory");
        for (size_t i = 0; i < kd->nops; i++) {
            const op_desc *o = &kd->ops[i];
            if (!o->summary)
                continue;
            bytes_acc[k].v[bytes_acc[k].n++] = *o;
            for (size_t t = 0; t < kd->ntyped_ops; t++) {
                if (!strcmp(kd->typed_ops[t].op, o->op)) {
                    if (kd->typed_ops[t].write != o->write)
                        fail(&kd->typed_ops[t], "has another mode than the plain row");
                    o = &kd->typed_ops[t];
                }
            }
            typed_acc[k].v[typed_acc[k].n++] = *o;
        }
    }
}

int kind_count(void)
{
    return NKINDS;
}

const kind_desc *kind_info(kind k)
{
    prepare();
    return &kinds[k];
}

const param_desc *const *kind_all_params(void)
{
    static const param_desc *all[KIND_MAX * KIND_PARAMS_MAX + 1];
    static bool done;
    if (!done) {
        size_t n = 0;
        for (int k = 0; k < NKINDS; k++) {
            for (const param_desc *const *p = kinds[k].params; *p; p++) {
                bool seen = false;
                for (size_t i = 0; i < n; i++)
                    seen = seen || all[i] == *p;
                if (!seen)
                    all[n++] = *p;
            }
        }
        done = true;
    }
    return all;
}

const op_desc *kind_ops(const entity *e, size_t *count)
{
    prepare();
    const struct accessors *a = e->body && kinds[e->kind].typed_ops ? &typed_acc[e->kind]
                                                                      : &bytes_acc[e->kind];
    *count = a->n;
    return a->v;
}
