/*
 * collection/live_view.c — LiveView: a head hash (v, b) and a history
 * stream of <version>-0 entries, byte-compatible with the Rust crate
 * (specs/rust-dynamic-structures.md); subscriptions read the stream with
 * XREAD BLOCK on a blocking handle of their own (core/blocking.h).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#include <wakuwaku/live_view.h>

#include "collection/cache_internal.h"
#include "collection/live_view_scripts.h"
#include "collection/op.h"
#include "collection/receiver.h"
#include "entity/kind.h"

/* max_diffs lives in `capacity`: a whole number the scripts read exactly. */
static int check_params(const wk_entity *e, char *msg, size_t len)
{
    /* The rule of wakuwaku/live_view.h, which wk-codegen applies too. */
    if (!WK__LIVE_VIEW_MAX_DIFFS_OK(e->capacity))
        return wk__entity_fail(msg, len, WK__LIVE_VIEW_MAX_DIFFS_RULE " (got %g)", e->capacity);
    return WK_OK;
}

WK__KIND(live_view) = {WK_KIND_LIVE_VIEW, check_params};

/* ------------------------------------------------------------------------
 * Scripts: the crate's steps (KEYS head, log), written here.
 *
 * The generation: a view created here has a third head field, `g`, random
 * and taken at creation, and every entry written here repeats it after
 * the crate's fields (the crate looks fields up by name and ignores it).
 * A commit copies the head's `g`, so a commit after the crate's still
 * carries it; a view the crate created has none and gets none, and its
 * entries stay exactly the crate's. Removal deletes the head and the log
 * together, and creation starts a new log: one log object only ever holds
 * the entries of one view, and a subscription that meets another `g` (or
 * a head with another) knows the view was removed and re-created.
 * ---------------------------------------------------------------------- */

/* ARGV: body, generation. 1 created, 0 it existed. */
static const wk_script create_script = {
    "live_view.create", "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
                        "redis.call('HSET', KEYS[1], 'v', '1', 'b', ARGV[1], 'g', ARGV[2])\n"
                        "redis.call('DEL', KEYS[2])\n"
                        "redis.call('XADD', KEYS[2], '1-0', 'base', ARGV[1], 'g', ARGV[2])\n"
                        "return 1\n"};

/* ARGV: parent, diff, body, max_diffs. {0} absent, {1, head} conflict,
 * {2, version} committed. The parent is compared as text, like the crate;
 * the entry gets the head's generation when it has one. */
const wk_script wk__live_view_commit_script = {
    "live_view.commit", "local head = redis.call('HMGET', KEYS[1], 'v', 'g')\n"
                        "local v, g = head[1], head[2]\n"
                        "if not v then return {0} end\n"
                        "if v ~= ARGV[1] then return {1, tonumber(v)} end\n"
                        "local next = string.format('%d', tonumber(v) + 1)\n"
                        "redis.call('HSET', KEYS[1], 'v', next, 'b', ARGV[3])\n"
                        "local fields = {'diff', ARGV[2]}\n"
                        "if redis.call('XLEN', KEYS[2]) > tonumber(ARGV[4]) then\n"
                        "  redis.call('XTRIM', KEYS[2], 'MAXLEN', 0)\n"
                        "  fields = {'base', ARGV[3], 'diff', ARGV[2]}\n"
                        "end\n"
                        "if g then fields[#fields + 1] = 'g'; fields[#fields + 1] = g end\n"
                        "redis.call('XADD', KEYS[2], next .. '-0', unpack(fields))\n"
                        "return {2, tonumber(next)}\n"};

/* Hex digits of a generation this library makes (8 random bytes). */
#define GEN_LEN 16
/* The bytes of a generation kept and compared: a longer `g` (never one of
 * ours) is told by its length and these first bytes. */
#define GEN_KEPT 64

static void new_generation(char out[GEN_LEN + 1])
{
    unsigned char raw[GEN_LEN / 2];
    randombytes_buf(raw, sizeof(raw)); /* sodium_init: wk_db_open */
    sodium_bin2hex(out, GEN_LEN + 1, raw, sizeof(raw));
}

/* The generation a subscription follows: not known yet (resume), none (the
 * crate created the view), or `v`. */
typedef struct generation {
    enum { GEN_UNSEEN, GEN_NONE, GEN_SEEN } state;
    size_t len;
    char v[GEN_KEPT];
} generation;

/* Whether `g` (`len` bytes; NULL: an entry or head without one) is the
 * generation `gen` follows, adopting it when none was known yet. */
static bool gen_follow(generation *gen, const char *g, size_t len)
{
    size_t kept = len < GEN_KEPT ? len : GEN_KEPT;
    if (gen->state == GEN_UNSEEN) {
        gen->state = g ? GEN_SEEN : GEN_NONE;
        gen->len = g ? len : 0;
        if (g)
            memcpy(gen->v, g, kept);
        return true;
    }
    if (!g)
        return gen->state == GEN_NONE;
    return gen->state == GEN_SEEN && len == gen->len && memcmp(g, gen->v, kept) == 0;
}

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */

/* A version or an ID part, as the scripts and Redis write them. */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
    return wk__parse_decimal(s, len, UINT64_MAX, out);
}

static size_t fmt_u64(char *buf, uint64_t v)
{
    return (size_t)snprintf(buf, 24, "%llu", (unsigned long long)v);
}

void wk_live_view_body_free(wk_live_view_body *body)
{
    if (!body)
        return;
    free(body->data);
    *body = (wk_live_view_body)WK_LIVE_VIEW_BODY_INIT;
}

void wk_live_view_log_free(wk_live_view_log *h)
{
    if (!h)
        return;
    wk_live_view_body_free(&h->base);
    for (size_t i = 0; i < h->ndiffs; i++)
        free(h->diffs[i].data);
    free(h->diffs);
    *h = (wk_live_view_log)WK_LIVE_VIEW_LOG_INIT;
}

/* ------------------------------------------------------------------------
 * create, commit, remove
 * ---------------------------------------------------------------------- */

/* The writes name the head and the log (KEYS of their scripts). A WRITE
 * is never retry-safe. */
#define WRITE_OP(op, s, parser)                                                                    \
    {WK__OP_OF(live_view, op), .kind = WK_KIND_LIVE_VIEW, .script = s,                             \
     .suffix = {":h", ":l"}, .parse = parser}
static const wk__op create_op = WRITE_OP(create, &create_script, wk__parse_bool_int);

int wk_live_view_create(wk_processor *p, const wk_entity *view, wk_name name, const void *body,
                        size_t len, bool *created)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &create_op, view, name, created);
    if (rc)
        return rc;
    if (!created || (!body && len) || len > WK_BODY_MAX)
        return wk__op_fail(&c, WK_EINVAL, "created is required, body only NULL when empty, at "
                                          "most WK_BODY_MAX bytes");
    *created = false;
    char gen[GEN_LEN + 1];
    new_generation(gen);
    const char *args[2] = {body ? (const char *)body : "", gen};
    size_t lens[2] = {len, GEN_LEN};
    return wk__op_send(&c, args, lens, 2);
}

static int parse_commit(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_live_view_commit_outcome *out = q->out;
    size_t n = wk_reply_count(r);
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY || n < 1 || n > 2)
        return wk_diag_fail(d, WK_ECORRUPT, "unexpected live view commit reply");
    long long v[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        const wk_reply *e = wk_reply_at(r, i);
        if (wk_reply_get_type(e) != WK_REPLY_INTEGER || wk_reply_integer(e) < 0)
            return wk_diag_fail(d, WK_ECORRUPT, "unexpected live view commit reply");
        v[i] = wk_reply_integer(e);
    }
    if (n == 1 && v[0] == 0) {
        out->result = WK_LIVE_VIEW_ABSENT;
        out->version = 0;
    } else if (n == 2 && (v[0] == 1 || v[0] == 2)) {
        out->result = v[0] == 1 ? WK_LIVE_VIEW_CONFLICT : WK_LIVE_VIEW_COMMITTED;
        out->version = (uint64_t)v[1];
    } else {
        return wk_diag_fail(d, WK_ECORRUPT, "unexpected live view commit reply");
    }
    return WK_OK;
}

static const wk__op commit_op = WRITE_OP(commit, &wk__live_view_commit_script, parse_commit);

int wk_live_view_commit(wk_processor *p, const wk_entity *view, wk_name name, uint64_t parent,
                        const void *diff, size_t diff_len, const void *body, size_t body_len,
                        wk_live_view_commit_outcome *outcome)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &commit_op, view, name, outcome);
    if (rc)
        return rc;
    if (!outcome || (!diff && diff_len) || (!body && body_len) || diff_len > WK_BODY_MAX ||
        body_len > WK_BODY_MAX)
        return wk__op_fail(&c, WK_EINVAL, "outcome is required; diff and body only NULL when "
                                          "empty, at most WK_BODY_MAX bytes");
    if (parent < 1 || parent >= WK_LIVE_VIEW_VERSION_MAX)
        return wk__op_fail(&c, WK_EINVAL, "parent must be 1..2^53-1 (got %llu)",
                           (unsigned long long)parent);
    outcome->result = WK_LIVE_VIEW_ABSENT;
    outcome->version = 0;
    char par[24], max[24];
    const char *args[4] = {par, diff ? (const char *)diff : "", body ? (const char *)body : "",
                           max};
    size_t lens[4] = {fmt_u64(par, parent), diff_len, body_len,
                      fmt_u64(max, (uint64_t)view->capacity)};
    return wk__op_send(&c, args, lens, 4);
}

/* UNLINK head log: `removed` may be NULL (then any integer reply is
 * success). */
static const wk__op remove_op = {WK__OP_OF(live_view, remove), .kind = WK_KIND_LIVE_VIEW,
                                  .command = "UNLINK", .suffix = {":h", ":l"},
                                 .parse = wk__parse_removed, .out_size = sizeof(bool)};

int wk_live_view_remove(wk_processor *p, const wk_entity *view, wk_name name, bool *removed)
{
    return wk__op_run(p, &remove_op, view, name, NULL, NULL, 0, removed);
}

/* ------------------------------------------------------------------------
 * get, version
 * ---------------------------------------------------------------------- */

/* HMGET h v b [g]: `nfields` values, the first two into `out`. */
static int parse_head_fields(const wk_query *q, const wk_reply *r, wk_diag *d,
                             wk_live_view_body *out, size_t nfields)
{
    char key[WK__KEY_TEXT_MAX];
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return wk__parse_error_reply(q, r, d, "a LiveView head hash");
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY || wk_reply_count(r) != nfields)
        return wk_diag_fail(d, WK_EPROTO, "expected %zu values from HMGET", nfields);
    const wk_reply *v = wk_reply_at(r, 0), *b = wk_reply_at(r, 1);
    bool has_v = wk_reply_get_type(v) == WK_REPLY_STRING;
    bool has_b = wk_reply_get_type(b) == WK_REPLY_STRING;
    if (!has_v && !has_b && wk_reply_get_type(v) == WK_REPLY_NIL &&
        wk_reply_get_type(b) == WK_REPLY_NIL)
        return WK_OK;
    wk__query_key(q, key, sizeof(key));
    size_t vlen, blen;
    const char *vs = wk_reply_str(v, &vlen), *bs = wk_reply_str(b, &blen);
    uint64_t version;
    if (!has_v || !has_b)
        return wk_diag_fail(d, WK_ECORRUPT, "live view head \"%s\" lacks its version or body", key);
    if (!parse_u64(vs, vlen, &version))
        return wk_diag_fail(d, WK_ECORRUPT,
                            "live view head \"%s\" has a version that is not a "
                            "decimal u64",
                            key);
    if (wk__bytes_copy(&out->data, &out->len, bs, blen) != WK_OK)
        return wk_diag_fail(d, WK_ENOMEM, "no memory for a body of %zu bytes", blen);
    out->version = version;
    out->found = true;
    return WK_OK;
}

static int parse_head(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    return parse_head_fields(q, r, d, q->out, 2);
}

/* What subscribe reads in one HMGET: the head and its generation. */
typedef struct head_and_gen {
    wk_live_view_body *body;
    generation *gen;
} head_and_gen;

static int parse_head_gen(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const head_and_gen *out = q->out;
    int rc = parse_head_fields(q, r, d, out->body, 3);
    if (rc || !out->body->found)
        return rc;
    size_t len = 0;
    const wk_reply *g = wk_reply_at(r, 2);
    const char *s = wk_reply_get_type(g) == WK_REPLY_STRING ? wk_reply_str(g, &len) : NULL;
    gen_follow(out->gen, s, len); /* unseen until now: adopted */
    return WK_OK;
}

/* The reads: pure, so retry-safe, and their error replies go to the
 * parser (a key of another type is corruption). Each names one key. */
#define READ_OP(op, cmd, key, parser, out)                                                         \
    {.name = "live_view." op, .kind = WK_KIND_LIVE_VIEW, .mode = WK_READ,                          \
     .flags = WK_QUERY_RETRY_SAFE | WK_QUERY_PARSE_ERRORS, .command = cmd, .suffix = {key},        \
     .parse = parser, .out_name = out}
static const wk__op get_op = READ_OP("get", "HMGET", ":h", parse_head, "out");

/* The head's fields, in the order HMGET asks for them. */
static const char *const head_fields[3] = {"v", "b", "g"};
static const size_t head_field_lens[3] = {1, 1, 1};

/* HMGET head v b [g] (the first `nfields`) into `body`, freed first. */
static int send_head(const wk__call *c, wk_live_view_body *body, int nfields)
{
    wk_live_view_body_free(body);
    return wk__op_send(c, head_fields, head_field_lens, nfields);
}

int wk_live_view_get(wk_processor *p, const wk_entity *view, wk_name name, wk_live_view_body *out)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &get_op, view, name, out);
    return rc ? rc : send_head(&c, out, 2);
}

/* What HGET head v found. */
typedef struct version_out {
    uint64_t *version;
    bool *found;
} version_out;

static int parse_version(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const version_out *out = q->out;
    size_t len;
    const char *s;
    char key[WK__KEY_TEXT_MAX];
    switch (wk_reply_get_type(r)) {
    case WK_REPLY_NIL:
        return WK_OK;
    case WK_REPLY_STRING:
        s = wk_reply_str(r, &len);
        if (!parse_u64(s, len, out->version)) {
            wk__query_key(q, key, sizeof(key));
            return wk_diag_fail(d, WK_ECORRUPT,
                                "live view head \"%s\" has a version that is not a decimal u64",
                                key);
        }
        *out->found = true;
        return WK_OK;
    case WK_REPLY_ERROR:
        return wk__parse_error_reply(q, r, d, "a LiveView head hash");
    default:
        return wk_diag_fail(d, WK_EPROTO, "expected a string or nil reply to HGET");
    }
}

static const wk__op version_op = READ_OP("version", "HGET", ":h", parse_version, NULL);

int wk_live_view_version(wk_processor *p, const wk_entity *view, wk_name name, uint64_t *version,
                         bool *found)
{
    /* The parser's pair of pointers lives on this stack. */
    version_out out = {version, found};
    wk__call c;
    int rc = wk__op_begin(&c, p, &version_op, view, name, &out);
    if (rc)
        return rc;
    if (!version || !found)
        return wk__op_fail(&c, WK_EINVAL, "version and found are required");
    if ((rc = wk__no_deferred(p, version_op.name)))
        return rc;
    *found = false;
    *version = 0;
    return wk__op_send(&c, head_fields, head_field_lens, 1);
}

/* ------------------------------------------------------------------------
 * Stream entries (XRANGE and XREAD replies)
 * ---------------------------------------------------------------------- */

/* One entry, its values copied into the owner's byte store. `why` is NULL
 * for a well-formed entry, else what is wrong with it. */
typedef struct entry {
    uint64_t ms, seq;
    bool has_id, has_base, has_diff, has_gen;
    size_t base_off, base_len, diff_off, diff_len, gen_off, gen_len;
    const char *why;
} entry;

/* Entries of one reply: an array of entries and the bytes they point at,
 * both reused from reply to reply. */
typedef struct entries {
    entry *v;
    size_t n, cap, next;
    uint8_t *bytes;
    size_t used, bytes_cap;
} entries;

static void entries_clear(entries *es)
{
    es->n = es->next = es->used = 0;
}

static void entries_free(entries *es)
{
    free(es->v);
    free(es->bytes);
    memset(es, 0, sizeof(*es));
}

/* Copies the text of `field` into es->bytes (NUL-terminated) and notes
 * where: its offset, its length, and that the entry has it. */
static int store(entries *es, const wk_reply *field, size_t *off, size_t *field_len, bool *has)
{
    size_t len;
    const char *s = wk_reply_str(field, &len);
    if (wk__grow_array_from(&es->bytes, &es->bytes_cap, es->used + len + 1, 1, 4096))
        return WK_ENOMEM;
    if (len)
        memcpy(es->bytes + es->used, s, len);
    es->bytes[es->used + len] = '\0';
    *off = es->used;
    es->used += len + 1;
    *field_len = len;
    *has = true;
    return WK_OK;
}

static bool parse_id(const wk_reply *r, uint64_t *ms, uint64_t *seq)
{
    wk_reply_type t = wk_reply_get_type(r);
    size_t len;
    const char *s = wk_reply_str(r, &len);
    if ((t != WK_REPLY_STRING && t != WK_REPLY_STATUS) || !s)
        return false;
    const char *dash = memchr(s, '-', len);
    return dash && parse_u64(s, (size_t)(dash - s), ms) &&
           parse_u64(dash + 1, len - (size_t)(dash - s) - 1, seq);
}

/* The values of an entry's fields: of each name, the first pair whose
 * value is a string (the crate's lookup), in one pass. */
typedef struct fields_of {
    const wk_reply *base, *diff, *gen;
} fields_of;

static fields_of find_fields(const wk_reply *fields)
{
    fields_of out = {NULL, NULL, NULL};
    for (size_t i = 0; i + 1 < wk_reply_count(fields); i += 2) {
        size_t len;
        const wk_reply *f = wk_reply_at(fields, i), *v = wk_reply_at(fields, i + 1);
        const char *s = wk_reply_str(f, &len);
        if (wk_reply_get_type(f) != WK_REPLY_STRING || wk_reply_get_type(v) != WK_REPLY_STRING)
            continue;
        const wk_reply **slot = len == 4 && memcmp(s, "base", 4) == 0   ? &out.base
                                : len == 4 && memcmp(s, "diff", 4) == 0 ? &out.diff
                                : len == 1 && s[0] == 'g'               ? &out.gen
                                                                        : NULL;
        if (slot && !*slot)
            *slot = v;
    }
    return out;
}

/* Append the entries of an array reply (XRANGE, or one stream of XREAD).
 * A malformed entry is kept, marked, so the reader reports it in its turn
 * rather than failing the entries around it. */
static int entries_add(entries *es, const wk_reply *list)
{
    size_t n = wk_reply_count(list);
    if (wk__grow_array(&es->v, &es->cap, es->n + n, sizeof(*es->v)))
        return WK_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const wk_reply *e = wk_reply_at(list, i);
        entry *out = &es->v[es->n++];
        memset(out, 0, sizeof(*out));
        const wk_reply *fields = wk_reply_at(e, 1);
        if (wk_reply_get_type(e) != WK_REPLY_ARRAY || wk_reply_count(e) != 2) {
            out->why = "stream entry is not an ID and its fields";
            continue;
        }
        if (!parse_id(wk_reply_at(e, 0), &out->ms, &out->seq)) {
            out->why = "malformed stream entry ID";
            continue;
        }
        out->has_id = true;
        if (wk_reply_get_type(fields) != WK_REPLY_ARRAY || wk_reply_count(fields) % 2) {
            out->why = "stream entry fields are not name-value pairs";
            continue;
        }
        fields_of fv = find_fields(fields);
        if ((fv.gen && store(es, fv.gen, &out->gen_off, &out->gen_len, &out->has_gen)) ||
            (fv.base && store(es, fv.base, &out->base_off, &out->base_len, &out->has_base)) ||
            (fv.diff && store(es, fv.diff, &out->diff_off, &out->diff_len, &out->has_diff)))
            return WK_ENOMEM;
    }
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * history
 * ---------------------------------------------------------------------- */

static int parse_range(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    entries *es = q->out;
    switch (wk_reply_get_type(r)) {
    case WK_REPLY_NIL:
        return WK_OK;
    case WK_REPLY_ARRAY:
        if (entries_add(es, r))
            return wk_diag_fail(d, WK_ENOMEM, "no memory for the history");
        return WK_OK;
    case WK_REPLY_ERROR:
        return wk__parse_error_reply(q, r, d, "a LiveView history stream");
    default:
        return wk_diag_fail(d, WK_ECORRUPT, "XRANGE reply is not an array");
    }
}

/* The history in `es` as `out`; WK_ECORRUPT (message on the handle) for
 * the shapes the crate rejects. */
static int build_history(const wk__call *c, const entries *es, wk_live_view_log *out)
{
    char key[WK__KEY_TEXT_MAX];
    wk__render_key(key, sizeof(key), c->key[0], c->key_len[0]);
    if (es->n == 0)
        return WK_OK;
    const entry *first = &es->v[0];
    if (first->why)
        return wk__op_fail(c, WK_ECORRUPT, "\"%s\": %s", key, first->why);
    if (!first->has_base)
        return wk__op_fail(c, WK_ECORRUPT, "\"%s\" doesn't start with a base", key);
    if (first->seq != 0)
        return wk__op_fail(c, WK_ECORRUPT, "\"%s\": entry ID is not <version>-0", key);
    out->diffs = calloc(es->n > 1 ? es->n - 1 : 1, sizeof(*out->diffs));
    if (!out->diffs || wk__bytes_copy(&out->base.data, &out->base.len, es->bytes + first->base_off,
                                      first->base_len))
        return wk__op_fail(c, WK_ENOMEM, "out of memory");
    out->base.version = first->ms;
    out->base.found = true;
    uint64_t version = first->ms;
    for (size_t i = 1; i < es->n; i++) {
        const entry *e = &es->v[i];
        if (e->why)
            return wk__op_fail(c, WK_ECORRUPT, "\"%s\": %s", key, e->why);
        if (e->seq != 0)
            return wk__op_fail(c, WK_ECORRUPT, "\"%s\": entry ID is not <version>-0", key);
        if (version == UINT64_MAX || e->ms != version + 1 || !e->has_diff)
            return wk__op_fail(c, WK_ECORRUPT,
                               "\"%s\": entry %llu-0 is not a diff to the next version", key,
                               (unsigned long long)e->ms);
        wk_live_view_diff *dst = &out->diffs[out->ndiffs];
        if (wk__bytes_copy(&dst->data, &dst->len, es->bytes + e->diff_off, e->diff_len))
            return wk__op_fail(c, WK_ENOMEM, "out of memory");
        out->ndiffs++;
        version = e->ms;
    }
    return WK_OK;
}

static const wk__op history_op = READ_OP("history", "XRANGE", ":l", parse_range, NULL);

int wk_live_view_history(wk_processor *p, const wk_entity *view, wk_name name,
                         wk_live_view_log *out)
{
    entries es = {0};
    wk__call c;
    int rc = wk__op_begin(&c, p, &history_op, view, name, &es);
    if (rc)
        return rc;
    if (!out)
        return wk__op_fail(&c, WK_EINVAL, "out is required");
    wk_live_view_log_free(out);
    if ((rc = wk__no_deferred(p, history_op.name)))
        return rc;
    static const char *const all[2] = {"-", "+"};
    static const size_t all_lens[2] = {1, 1};
    rc = wk__op_send(&c, all, all_lens, 2);
    if (rc == WK_OK)
        rc = build_history(&c, &es, out);
    if (rc)
        wk_live_view_log_free(out);
    entries_free(&es);
    return rc;
}

/* apply() of `diff` to `body` into `out` (replaced only on success). */
static int apply_one(wk_live_view_apply_fn apply, void *arg, wk_live_view_body *out,
                     const uint8_t *diff, size_t diff_len)
{
    uint8_t *next = NULL;
    size_t next_len = 0;
    int rc = apply(arg, out->data, out->len, diff, diff_len, &next, &next_len);
    if (rc) {
        free(next);
        return rc;
    }
    uint8_t *copy;
    size_t copy_len;
    /* Keep the NUL-terminated form the other bodies have. */
    rc = wk__bytes_copy(&copy, &copy_len, next ? next : (const uint8_t *)"", next ? next_len : 0);
    free(next);
    if (rc)
        return rc;
    free(out->data);
    out->data = copy;
    out->len = copy_len;
    return WK_OK;
}

int wk_live_view_log_latest(const wk_live_view_log *h, wk_live_view_apply_fn apply, void *arg,
                            wk_live_view_body *out)
{
    if (!h || !apply || !out || !h->base.found)
        return WK_EINVAL;
    wk_live_view_body_free(out);
    int rc = wk__bytes_copy(&out->data, &out->len, h->base.data, h->base.len);
    if (rc)
        return rc;
    out->version = h->base.version;
    out->found = true;
    for (size_t i = 0; i < h->ndiffs && rc == WK_OK; i++) {
        rc = apply_one(apply, arg, out, h->diffs[i].data, h->diffs[i].len);
        out->version++;
    }
    if (rc)
        wk_live_view_body_free(out);
    return rc;
}

int wk_live_view_update(wk_live_view_body *view, const wk_live_view_event *ev,
                        wk_live_view_apply_fn apply, void *arg)
{
    if (!view || !ev)
        return WK_EINVAL;
    if (ev->type == WK_LIVE_VIEW_SNAPSHOT) {
        uint8_t *copy;
        size_t len;
        if (wk__bytes_copy(&copy, &len, ev->data ? ev->data : (const uint8_t *)"", ev->len))
            return WK_ENOMEM;
        free(view->data);
        view->data = copy;
        view->len = len;
        view->version = ev->version;
        view->found = true;
        return WK_OK;
    }
    if (ev->type != WK_LIVE_VIEW_DIFF || !apply || !view->found || ev->version != view->version + 1)
        return WK_EINVAL;
    int rc = apply_one(apply, arg, view, ev->data, ev->len);
    if (rc == WK_OK)
        view->version = ev->version;
    return rc;
}

/* ------------------------------------------------------------------------
 * Subscriptions
 * ---------------------------------------------------------------------- */

/* What HMGET h v g found: the version (found: there is one) and the
 * generation (has_gen), kept up to GEN_KEPT bytes. */
typedef struct probe {
    bool found, has_gen;
    uint64_t version;
    size_t gen_len;
    char gen[GEN_KEPT];
} probe;

struct wk_live_view_sub {
    wk__receiver rx; /* the blocking handle, the entity and name, the stop */
    char log[WK_KEY_MAX];
    size_t log_len;
    uint64_t version;             /* c: the version of the last event */
    uint64_t after_ms, after_seq; /* the XREAD cursor */
    int64_t poll_ms;
    generation gen; /* of the view followed */
    bool gone;      /* GONE once the queue is empty */
    entries pending;
    bool timed_out; /* the last XREAD returned nil */
    /* Through the loop (wk_live_view_recv_async): whether the head was
     * read (subscribe; resume: at once), the receive's output, the open's
     * head read, a probe's answer and the batch's entries kept meanwhile. */
    bool opened;
    wk_live_view_event *out;
    head_and_gen hg;
    probe pr;
    size_t keep;
};

/* The query in flight through the loop (rx.inflight): an XREAD, the probe
 * after a quiet poll, the probe that judges a batch. */
enum { IDLE, READING, PROBING_IDLE, PROBING_BATCH };

static const wk__receiver_loop loop_fns; /* below: the subscription through the loop */

/* The subscription of call `c` (begun and checked) from `version`. */
static int open_sub(const wk__call *c, const wk_name *name, uint64_t version, const generation *gen,
                    const wk_live_view_sub_options *opts, wk_live_view_sub **out)
{
    wk_live_view_sub_options o =
        opts ? *opts : (wk_live_view_sub_options)WK_LIVE_VIEW_SUB_OPTIONS_INIT;
    if (o.poll_ms < 1)
        return wk__op_fail(c, WK_EINVAL, "poll_ms must be >= 1 (got %lld)", (long long)o.poll_ms);
    wk_live_view_sub *s = calloc(1, sizeof(*s));
    /* The log key is as long as the one wk__op_begin() built: only memory
     * can fail here. */
    if (!s || wk__key_build_checked(s->log, WK_KEY_MAX, &s->log_len, c->e, name, ":l")) {
        free(s);
        return wk__op_fail(c, WK_ENOMEM, "out of memory");
    }
    char err[256];
    int rc =
        wk__receiver_is_loop(c->p)
            ? wk__receiver_open_loop(&s->rx, c->p, c->e, WK_KIND_LIVE_VIEW, name, &loop_fns, s, err,
                                     sizeof(err))
            : wk__receiver_open(&s->rx, c->p->db, c->e, WK_KIND_LIVE_VIEW, name, err, sizeof(err));
    if (rc) {
        wk_live_view_sub_close(s);
        return wk__op_fail(c, rc, "cannot open the subscription's connection: %s", err);
    }
    s->gen = *gen;
    s->version = s->after_ms = version;
    s->poll_ms = o.poll_ms;
    s->opened = true;
    *out = s;
    return WK_OK;
}

static int sub_args(const wk__call *c, wk_live_view_sub **sub)
{
    if (!sub)
        return wk__op_fail(c, WK_EINVAL, "sub is required");
    *sub = NULL;
    if (!c->p->db)
        return wk__op_fail(c, WK_EINVAL, "the processor has no handle");
    return wk__receiver_is_loop(c->p) ? WK_OK : wk__no_deferred(c->p, c->op->name);
}

/* The head and its generation, read by one HMGET. */
static const wk__op subscribe_op = READ_OP("subscribe", "HMGET", ":h", parse_head_gen, NULL);

/* Through the loop: the head read into the subscription's `hg`, which
 * then follows the versions after it. */
static int parse_head_sub(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_live_view_sub *s =
        (wk_live_view_sub *)(void *)((char *)q->out - offsetof(wk_live_view_sub, hg));
    int rc = parse_head_gen(q, r, d);
    if (rc == WK_OK && s->hg.body->found) {
        s->version = s->after_ms = s->hg.body->version;
        s->opened = true;
    }
    return rc;
}
static const wk__op subscribe_loop_op = READ_OP("subscribe", "HMGET", ":h", parse_head_sub, NULL);

int wk_live_view_subscribe(wk_processor *p, const wk_entity *view, wk_name name,
                           const wk_live_view_sub_options *opts, wk_live_view_body *head,
                           wk_live_view_sub **sub)
{
    /* The generation of the head read is the one followed. */
    generation gen = {.state = GEN_UNSEEN};
    head_and_gen hg = {head, &gen};
    bool loop = wk__receiver_is_loop(p);
    wk__call c;
    int rc = wk__op_begin(&c, p, loop ? &subscribe_loop_op : &subscribe_op, view, name, &hg);
    if (rc)
        return rc;
    if (!head)
        return wk__op_fail(&c, WK_EINVAL, "head is required");
    if ((rc = sub_args(&c, sub)))
        return rc;
    if (loop) {
        /* Through the loop: the subscription at once, following the
         * versions after the head its open reads (opened then). */
        if ((rc = open_sub(&c, &name, 0, &gen, opts, sub)))
            return rc;
        wk_live_view_sub *s = *sub;
        s->opened = false;
        s->hg = (head_and_gen){head, &s->gen};
        c.out = &s->hg;
        if ((rc = send_head(&c, head, 3))) {
            wk_live_view_sub_close(s);
            *sub = NULL;
        }
        return rc;
    }
    rc = send_head(&c, head, 3);
    if (rc || !head->found)
        return rc;
    rc = open_sub(&c, &name, head->version, &gen, opts, sub);
    if (rc)
        wk_live_view_body_free(head);
    return rc;
}

/* Sends nothing: its begin checks the arguments and builds the head key. */
static const wk__op resume_op = READ_OP("resume", NULL, ":h", NULL, NULL);

int wk_live_view_resume(wk_processor *p, const wk_entity *view, wk_name name, uint64_t version,
                        const wk_live_view_sub_options *opts, wk_live_view_sub **sub)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &resume_op, view, name, NULL);
    if (rc)
        return rc;
    if ((rc = sub_args(&c, sub)))
        return rc;
    /* Nothing is sent here, so the check dispatch makes is made here. */
    wk_access access = {view, WK_READ};
    const wk_cap *cap = wk_db_capability(p->db);
    if (!wk_cap_allows(cap, &access))
        return wk__processor_fail(p, WK_EDENIED,
                                  "capability \"%s\" may not READ %s:%s (live_view.resume)",
                                  wk_cap_name(cap), view->kind, view->ns);
    /* The generation is that of the first entry or head read. */
    generation gen = {.state = GEN_UNSEEN};
    return open_sub(&c, &name, version, &gen, opts, sub);
}

uint64_t wk_live_view_sub_version(const wk_live_view_sub *sub)
{
    return sub ? sub->version : 0;
}

const char *wk_live_view_sub_errmsg(const wk_live_view_sub *sub)
{
    return sub ? wk__receiver_errmsg(&sub->rx) : "";
}

void wk_live_view_sub_stop(wk_live_view_sub *sub)
{
    if (!sub)
        return;
    wk__receiver_stop(&sub->rx);
    if (sub->rx.sub && sub->rx.busy) /* through the loop: at the next turn */
        wk__receiver_kick(&sub->rx);
}

void wk_live_view_sub_close(wk_live_view_sub *sub)
{
    if (!sub)
        return;
    wk__receiver_close(&sub->rx);
    entries_free(&sub->pending);
    free(sub);
}

/* XREAD: nil is a timeout; RESP2 [[key, entries]] (a RESP3 map never
 * comes: handles speak RESP2). */
static int parse_read(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_live_view_sub *s = q->out;
    if (wk_reply_get_type(r) == WK_REPLY_NIL) {
        s->timed_out = true;
        return WK_OK;
    }
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return wk__parse_error_reply(q, r, d, "a LiveView history stream");
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_ECORRUPT, "XREAD reply is neither nil nor an array");
    if (wk_reply_count(r) == 0)
        return WK_OK;
    const wk_reply *stream = wk_reply_at(r, 0);
    if (wk_reply_get_type(stream) != WK_REPLY_ARRAY || wk_reply_count(stream) < 2)
        return wk_diag_fail(d, WK_ECORRUPT, "XREAD stream is not a key and its entries");
    const wk_reply *list = wk_reply_at(stream, 1);
    if (wk_reply_get_type(list) == WK_REPLY_NIL)
        return WK_OK;
    if (wk_reply_get_type(list) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_ECORRUPT, "XREAD entries are not an array");
    if (entries_add(&s->pending, list))
        return wk_diag_fail(d, WK_ENOMEM, "no memory for %zu entries", wk_reply_count(list));
    return WK_OK;
}

static int xread(void *self)
{
    wk_live_view_sub *s = self;
    entries_clear(&s->pending);
    s->timed_out = false;
    int rc = wk__receiver_xread(&s->rx, "live_view.recv", s->log, s->log_len, s->after_ms,
                                s->after_seq, s->poll_ms, parse_read, s);
    if (rc)
        entries_clear(&s->pending);
    return rc;
}

static int parse_probe(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    probe *out = q->out;
    char key[WK__KEY_TEXT_MAX];
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return wk__parse_error_reply(q, r, d, "a LiveView head hash");
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY || wk_reply_count(r) != 2)
        return wk_diag_fail(d, WK_EPROTO, "expected two values from HMGET");
    const wk_reply *v = wk_reply_at(r, 0), *g = wk_reply_at(r, 1);
    size_t len;
    const char *str;
    if (wk_reply_get_type(v) != WK_REPLY_STRING)
        return WK_OK; /* no version: no view (a crate commit answers absent) */
    str = wk_reply_str(v, &len);
    if (!parse_u64(str, len, &out->version)) {
        wk__query_key(q, key, sizeof(key));
        return wk_diag_fail(d, WK_ECORRUPT,
                            "live view head \"%s\" has a version that is not a decimal u64", key);
    }
    out->found = true;
    if (wk_reply_get_type(g) == WK_REPLY_STRING) {
        str = wk_reply_str(g, &out->gen_len);
        memcpy(out->gen, str, out->gen_len < GEN_KEPT ? out->gen_len : GEN_KEPT);
        out->has_gen = true;
    }
    return WK_OK;
}

/* HMGET head v g on the subscription's connection. */
static const wk__op probe_op = READ_OP("recv", "HMGET", ":h", parse_probe, NULL);

/* Is the view followed still there, at or past our version? Its head must
 * exist and have the generation followed (adopted if none was known). */
static int send_probe(wk_live_view_sub *s, probe *pr)
{
    static const char *const fields[2] = {"v", "g"};
    static const size_t lens[2] = {1, 1};
    *pr = (probe){0};
    return wk__receiver_run(&s->rx, &probe_op, fields, lens, 2, pr);
}

static bool probe_there(wk_live_view_sub *s, const probe *pr)
{
    return pr->found && pr->version >= s->version &&
           gen_follow(&s->gen, pr->has_gen ? pr->gen : NULL, pr->gen_len);
}

static int still_there(wk_live_view_sub *s, bool *there)
{
    probe pr;
    int rc = send_probe(s, &pr);
    *there = rc == WK_OK && probe_there(s, &pr);
    return rc;
}

/*
 * Which entries of the batch just read are the followed view's. The log
 * holds one view's entries (see the scripts), so the first entry carrying
 * a generation decides for the whole batch: ours, or another view's (the
 * batch is dropped: GONE). A later entry with yet another generation
 * (only hand-written data) ends the batch there. A batch without any is a
 * crate's commits: ours if the view has no generation (or none is known
 * yet); else the head decides (a crate commit leaves its `g`, a view the
 * crate re-created has none). The cursor then moves past the entries
 * kept.
 */
/* The batch's generations: the entries kept (*keep), and whether the head
 * must decide (true: a crate batch of a view with a generation). */
static bool judge_gens(wk_live_view_sub *s, size_t *keep_out)
{
    entries *es = &s->pending;
    size_t keep = es->n;
    bool decided = false;
    for (size_t i = 0; i < es->n; i++) {
        const entry *e = &es->v[i];
        if (!e->has_gen)
            continue;
        if (!gen_follow(&s->gen, (const char *)es->bytes + e->gen_off, e->gen_len)) {
            keep = decided ? i : 0;
            break;
        }
        decided = true;
    }
    *keep_out = keep;
    return !decided && keep && s->gen.state == GEN_SEEN;
}

/* Keep the first `keep` entries of the batch (GONE after them if not
 * all) and move the cursor past them. */
static void judge_keep(wk_live_view_sub *s, size_t keep)
{
    entries *es = &s->pending;
    if (keep < es->n) {
        es->n = keep;
        s->gone = true; /* after the entries kept */
    }
    /* The cursor moves past every entry kept whose ID could be read. */
    for (size_t i = 0; i < keep; i++) {
        const entry *e = &es->v[i];
        if (!e->has_id)
            continue;
        s->after_ms = e->ms;
        s->after_seq = e->seq;
    }
}

static int judge_batch(wk_live_view_sub *s)
{
    size_t keep;
    if (judge_gens(s, &keep)) {
        bool there;
        int rc = still_there(s, &there);
        if (rc)
            return rc;
        if (!there)
            keep = 0;
    }
    judge_keep(s, keep);
    return WK_OK;
}

/* Why entry `e` cannot be an event: WK_ECORRUPT naming the log. */
static int corrupt_entry(wk_live_view_sub *s, const entry *e, const char *why)
{
    char key[WK__KEY_TEXT_MAX];
    wk__render_key(key, sizeof(key), s->log, s->log_len);
    if (!e->has_id)
        return wk__receiver_fail(&s->rx, WK_ECORRUPT, "live_view.recv: \"%s\": %s", key, why);
    return wk__receiver_fail(
        &s->rx, WK_ECORRUPT, "live_view.recv: \"%s\": entry %llu-%llu: %s (at version %llu)", key,
        (unsigned long long)e->ms, (unsigned long long)e->seq, why, (unsigned long long)s->version);
}

/* The event of entry `e` seen from version c (the crate's rule). */
static int event_of(wk_live_view_sub *s, const entry *e, wk_live_view_event *ev)
{
    if (e->why)
        return corrupt_entry(s, e, e->why);
    if (e->seq != 0)
        return corrupt_entry(s, e, "ID is not <version>-0");
    bool next = s->version != UINT64_MAX && e->ms == s->version + 1;
    if (next && e->has_diff) {
        ev->type = WK_LIVE_VIEW_DIFF;
        ev->data = s->pending.bytes + e->diff_off; /* NUL-terminated by store() */
        ev->len = e->diff_len;
    } else if (e->has_base) {
        ev->type = WK_LIVE_VIEW_SNAPSHOT;
        ev->data = s->pending.bytes + e->base_off;
        ev->len = e->base_len;
    } else {
        return corrupt_entry(s, e, "diff doesn't follow the previous version");
    }
    ev->version = e->ms;
    s->version = e->ms;
    return WK_OK;
}

/* Whether recv decides without a query: the stop, an entry read, GONE. */
static bool decided(const void *self)
{
    const wk_live_view_sub *s = self;
    return wk__receiver_stopped(&s->rx) || s->pending.next < s->pending.n || s->gone;
}

/* What recv decides without a query (decided(s)). */
static int recv_local(void *self)
{
    wk_live_view_sub *s = self;
    wk_live_view_event *ev = s->out;
    if (wk__receiver_stopped(&s->rx)) {
        ev->type = WK_LIVE_VIEW_STOPPED;
        return WK_OK;
    }
    if (s->pending.next < s->pending.n) {
        /* The entry leaves the queue before it is judged, as in the
         * crate: a bad one is reported once, then passed over. */
        const entry *e = &s->pending.v[s->pending.next++];
        return event_of(s, e, ev);
    }
    ev->type = WK_LIVE_VIEW_GONE;
    return WK_OK;
}

int wk_live_view_recv(wk_live_view_sub *s, wk_live_view_event *ev)
{
    if (!s || !ev || s->rx.sub) /* through the loop: wk_live_view_recv_async */
        return WK_EINVAL;
    *ev = (wk_live_view_event)WK_LIVE_VIEW_EVENT_INIT;
    s->out = ev;
    for (;;) {
        if (decided(s))
            return recv_local(s);
        int rc = xread(s);
        if (rc == WK_OK && s->timed_out) {
            bool there;
            rc = still_there(s, &there);
            if (rc == WK_OK && !there)
                s->gone = true;
        } else if (rc == WK_OK) {
            rc = judge_batch(s);
            if (rc) /* read again from the same cursor */
                entries_clear(&s->pending);
        }
        if (rc && wk__receiver_stopped(&s->rx))
            continue; /* the interrupt's own failure: report the stop */
        if (rc)
            return rc;
    }
}

/* ------------------------------------------------------------------------
 * The subscription through the loop: wk_live_view_recv()'s steps, each
 * query's reply deciding the next (XREAD; a quiet poll: the probe; a
 * crate batch: the probe that judges it; XREAD …).
 * ---------------------------------------------------------------------- */

/* The receive ends: with what is decided (WK_OK), or a failure. */
static void loop_deliver(wk_live_view_sub *s, int status, const char *why)
{
    if (status == WK_OK)
        status = recv_local(s);
    wk__receiver_deliver(&s->rx, status, why ? why : s->rx.msg);
}

/* Send `query` (READING, or a probe), or deliver what is decided. */
static void loop_send(wk_live_view_sub *s, int query)
{
    if (decided(s)) {
        loop_deliver(s, WK_OK, NULL);
        return;
    }
    int rc = query == READING ? xread(s) : send_probe(s, &s->pr);
    if (rc)
        loop_deliver(s, rc, NULL);
    else
        s->rx.inflight = query;
}

static void loop_reply(void *self, int was, int status, const char *msg)
{
    wk_live_view_sub *s = self;
    if (status) {
        entries_clear(&s->pending); /* read again from the same cursor */
        if (wk__receiver_stopped(&s->rx))
            loop_deliver(s, WK_OK, NULL);
        else
            loop_deliver(s, status, msg);
        return;
    }
    if (was == READING && !s->timed_out) {
        if (judge_gens(s, &s->keep)) {
            loop_send(s, PROBING_BATCH);
            return;
        }
        judge_keep(s, s->keep);
    } else if (was == READING) {
        loop_send(s, PROBING_IDLE);
        return;
    } else if (was == PROBING_BATCH) {
        judge_keep(s, probe_there(s, &s->pr) ? s->keep : 0);
    } else if (!probe_there(s, &s->pr)) {
        s->gone = true;
    }
    loop_send(s, READING);
}

static const wk__receiver_loop loop_fns = {
    .reply = loop_reply, .decided = decided, .local = recv_local, .first = xread};

int wk_live_view_recv_async(wk_live_view_sub *s, wk_live_view_event *ev, wk_async_done_fn done,
                            void *arg)
{
    if (!s || !ev)
        return WK_EINVAL;
    int rc = wk__receiver_begin(&s->rx, "live_view.recv", s->opened, done, arg);
    if (rc)
        return rc;
    *ev = (wk_live_view_event)WK_LIVE_VIEW_EVENT_INIT;
    s->out = ev;
    return wk__receiver_first(&s->rx, s, READING);
}

/* ------------------------------------------------------------------------
 * Typed bodies
 * ---------------------------------------------------------------------- */

int wk_live_view_create_typed(wk_processor *p, const wk_entity *view, wk_name name,
                              const wk_codec *codec, const void *value, bool *created)
{
    uint8_t *bytes;
    size_t len;
    int rc = wk__typed_encode(p, create_op.name, codec, value, &bytes, &len);
    if (rc)
        return rc;
    rc = wk_live_view_create(p, view, name, bytes, len, created);
    wk__typed_free(codec, bytes);
    return rc;
}

int wk_live_view_commit_typed(wk_processor *p, const wk_entity *view, wk_name name, uint64_t parent,
                              const void *diff, size_t diff_len, const wk_codec *codec,
                              const void *value, wk_live_view_commit_outcome *outcome)
{
    uint8_t *bytes;
    size_t len;
    int rc = wk__typed_encode(p, commit_op.name, codec, value, &bytes, &len);
    if (rc)
        return rc;
    rc = wk_live_view_commit(p, view, name, parent, diff, diff_len, bytes, len, outcome);
    wk__typed_free(codec, bytes);
    return rc;
}

int wk_live_view_get_typed(wk_processor *p, const wk_entity *view, wk_name name,
                           const wk_codec *codec, void *value, uint64_t *version, bool *found)
{
    if (found)
        *found = false;
    wk_live_view_body head = WK_LIVE_VIEW_BODY_INIT;
    wk__call c;
    int rc = wk__op_begin(&c, p, &get_op, view, name, &head);
    if (rc)
        return rc;
    if (!wk__codec_ok(codec) || !value || !version || !found)
        return wk__op_fail(&c, WK_EINVAL, "a codec with encode and decode, value, version and "
                                          "found are required");
    if ((rc = wk__no_deferred(p, "live_view.get (typed)")))
        return rc;
    rc = send_head(&c, &head, 2);
    if (rc == WK_OK && head.found)
        rc = wk__codec_decode(p, get_op.name, codec, c.key[0], c.key_len[0], head.data, head.len,
                              value);
    if (rc == WK_OK && head.found) {
        *version = head.version;
        *found = true;
    }
    wk_live_view_body_free(&head);
    return rc;
}
