/*
 * collection/stream_buffer.c — StreamBuffer (wakuwaku/stream_buffer.h):
 * append and finish scripts on one stream with explicit IDs 0-(i+1),
 * XRANGE reads, and subscriptions that XREAD BLOCK on a blocking handle of
 * their own (core/blocking.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include <sodium.h>
#include <wakuwaku/stream_buffer.h>

#include "collection/dynamic_internal.h"
#include "collection/op.h"
#include "collection/receiver.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(stream_buffer) = {WK_KIND_STREAM_BUFFER, wk__entity_check_ttl};

/* Both scripts: a buffer is finished when its newest entry's first field
 * is `end` (the crate's test); the next entry is 0-(XLEN+1).
 *
 * The generation: every entry this library writes carries `g`, the
 * buffer's generation, after the crate's field (the crate reads the first
 * `b` or `end` and ignores the rest). A buffer's generation is the `g` of
 * its first entry: a new buffer takes the client's random one (the last
 * ARGV); an append copies it (from the newest entry, or the first when the
 * crate wrote the newest); a buffer the crate created has none and gets
 * none, so its entries stay exactly the crate's. A subscription that sees
 * another generation knows the buffer was removed and re-created. */
#define FINISHED_TEST                                                                              \
    "local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)\n"                      \
    "local done = newest[1] ~= nil and newest[1][2][1] == 'end'\n"
#define GENERATION                                                                                 \
    "local function gen_of(e)\n"                                                                   \
    "  for i = 1, #e[2], 2 do if e[2][i] == 'g' then return e[2][i + 1] end end\n"                  \
    "end\n"                                                                                        \
    "local n = redis.call('XLEN', KEYS[1])\n"                                                      \
    "local g = ARGV[#ARGV]\n"                                                                      \
    "if n > 0 then\n"                                                                              \
    "  g = gen_of(newest[1]) or gen_of(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1])\n"  \
    "end\n"                                                                                        \
    "local id = '0-' .. string.format('%d', n + 1)\n"

static const wk_script append_script = {
    "stream_buffer.append",
    FINISHED_TEST "if done then return -1 end\n" GENERATION
                  "if g then redis.call('XADD', KEYS[1], id, 'b', ARGV[1], 'g', g)\n"
                  "else redis.call('XADD', KEYS[1], id, 'b', ARGV[1]) end\n"
                  "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                  "return n\n"};

static const wk_script finish_script = {
    "stream_buffer.finish",
    FINISHED_TEST "if done then return 0 end\n" GENERATION
                  "if g then redis.call('XADD', KEYS[1], id, 'end', '', 'g', g)\n"
                  "else redis.call('XADD', KEYS[1], id, 'end', '') end\n"
                  "redis.call('PEXPIRE', KEYS[1], ARGV[1])\n"
                  "return 1\n"};

/* Hex digits of a generation this library makes (8 random bytes). */
#define GEN_LEN 16

static void new_generation(char out[GEN_LEN + 1])
{
    unsigned char raw[GEN_LEN / 2];
    randombytes_buf(raw, sizeof(raw)); /* sodium_init: wk_db_open */
    sodium_bin2hex(out, GEN_LEN + 1, raw, sizeof(raw));
}

/* ------------------------------------------------------------------------
 * Entries: [id, [field, value, …]]
 * ---------------------------------------------------------------------- */

enum { ENTRY_BODY, ENTRY_END, ENTRY_BAD };

typedef struct entry {
    uint64_t ms, seq;
    int what;
    const char *body; /* ENTRY_BODY: in the reply */
    size_t len;
    const char *gen; /* the `g` field (in the reply), or NULL */
    size_t gen_len;
} entry;

static bool parse_u64(const char *s, size_t len, uint64_t *v)
{
    if (!len || len > 20)
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
            return false;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return true;
}

/* "<ms>-<seq>" into buf (>= 42 bytes); returns the length. */
static size_t id_text(char *buf, uint64_t ms, uint64_t seq)
{
    int n = snprintf(buf, 42, "%llu-%llu", (unsigned long long)ms, (unsigned long long)seq);
    return n < 0 ? 0 : (size_t)n;
}

/* The value of the first pair named `name` (string pairs only). */
static const char *field(const wk_reply *fields, const char *name, size_t *len)
{
    size_t nlen = strlen(name);
    for (size_t i = 0; i + 1 < wk_reply_count(fields); i += 2) {
        size_t flen;
        const char *f = wk_reply_str(wk_reply_at(fields, i), &flen);
        const char *v = wk_reply_str(wk_reply_at(fields, i + 1), len);
        if (f && v && flen == nlen && memcmp(f, name, nlen) == 0)
            return v;
    }
    return NULL;
}

/* An entry whose ID does not parse cannot be stepped over: the reply is
 * refused as a whole. Other shapes make an ENTRY_BAD, which is. */
static int parse_entry(const wk_reply *r, entry *e, wk_diag *d)
{
    size_t idlen;
    const char *id = wk_reply_str(wk_reply_at(r, 0), &idlen);
    const char *dash = id ? memchr(id, '-', idlen) : NULL;
    if (wk_reply_count(r) != 2 || !dash || !parse_u64(id, (size_t)(dash - id), &e->ms) ||
        !parse_u64(dash + 1, idlen - (size_t)(dash - id) - 1, &e->seq))
        return wk_diag_fail(d, WK_ECORRUPT, "malformed stream buffer entry ID");
    const wk_reply *fields = wk_reply_at(r, 1);
    e->what = ENTRY_BAD;
    e->gen = NULL;
    if (wk_reply_get_type(fields) != WK_REPLY_ARRAY || wk_reply_count(fields) % 2)
        return WK_OK;
    size_t len;
    e->gen = field(fields, "g", &e->gen_len);
    if ((e->body = field(fields, "b", &e->len)))
        e->what = ENTRY_BODY;
    else if (field(fields, "end", &len))
        e->what = ENTRY_END;
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * Writes
 * ---------------------------------------------------------------------- */

/* The scripts' ARGV: the body (append only), ttl_ms, a new generation (a
 * new buffer's; an existing one keeps its own). */
static int send_with_generation(const wk__call *c, const void *body, size_t len)
{
    char gen[GEN_LEN + 1];
    new_generation(gen);
    return wk__send_body_ttl(c, body, len, gen);
}

/* The index of the body, or -1 when the buffer was finished; `index` may
 * be NULL. Not retry-safe: a re-send after a lost reply would append the
 * body twice. */
static const wk__op append_op = {WK__OP_OF(stream_buffer, append), .kind = WK_KIND_STREAM_BUFFER,
                                  .script = &append_script,
                                 .parse = wk__parse_i64};

int wk_stream_buffer_append(wk_processor *p, const wk_entity *sb, wk_name name, const void *body,
                            size_t len, int64_t *index)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &append_op, sb, name, index);
    if (rc)
        return rc;
    if ((!body && len) || len > WK_BODY_MAX)
        return wk__op_fail(&c, WK_EINVAL, "body NULL or longer than WK_BODY_MAX");
    if (index)
        *index = -1;
    return send_with_generation(&c, body ? body : "", len);
}

typedef struct typed_append {
    wk_processor *p;
    const wk_entity *sb;
    wk_name name;
    int64_t *index;
} typed_append;

static int append_encoded(void *ctx, const uint8_t *bytes, size_t len)
{
    typed_append *t = ctx;
    return wk_stream_buffer_append(t->p, t->sb, t->name, bytes, len, t->index);
}

int wk_stream_buffer_append_typed(wk_processor *p, const wk_entity *sb, wk_name name,
                                  const wk_codec *codec, const void *value, int64_t *index)
{
    typed_append t = {p, sb, name, index};
    return wk__codec_encoded(p, "stream_buffer.append", codec, value, append_encoded, &t);
}

/* 1 when this call finished the buffer; `finished_now` may be NULL. */
static const wk__op finish_op = {WK__OP_OF(stream_buffer, finish), .kind = WK_KIND_STREAM_BUFFER,
                                  .script = &finish_script,
                                 .parse = wk__parse_removed, .out_size = sizeof(bool)};

int wk_stream_buffer_finish(wk_processor *p, const wk_entity *sb, wk_name name, bool *finished_now)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &finish_op, sb, name, finished_now);
    return rc ? rc : send_with_generation(&c, NULL, 0);
}

/* `removed` may be NULL: then any integer reply is success. */
static const wk__op remove_op = {WK__OP_OF(stream_buffer, remove), .kind = WK_KIND_STREAM_BUFFER,
                                  .command = "UNLINK",
                                 .parse = wk__parse_removed, .out_size = sizeof(bool)};

int wk_stream_buffer_remove(wk_processor *p, const wk_entity *sb, wk_name name, bool *removed)
{
    return wk__op_run(p, &remove_op, sb, name, NULL, NULL, 0, removed);
}

/* ------------------------------------------------------------------------
 * Read
 * ---------------------------------------------------------------------- */

/* What the replies of read (XRANGE) and recv (XREAD) share: an error
 * (WRONGTYPE names the key) or nil (nothing there) is the whole parse,
 * with its status in *rc. */
static bool error_or_nil(const wk_query *q, const wk_reply *r, wk_diag *d, int *rc)
{
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        *rc = wk__parse_error_reply(q, r, d, "a StreamBuffer stream");
    else if (wk_reply_get_type(r) == WK_REPLY_NIL)
        *rc = WK_OK;
    else
        return false;
    return true;
}

static int parse_range(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_stream_buffer_contents *c = q->out;
    int rc;
    if (error_or_nil(q, r, d, &rc))
        return rc;
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_EPROTO, "stream_buffer.read: XRANGE reply is not an array");
    size_t n = wk_reply_count(r), bytes = 0, bodies = 0;
    entry e;
    for (size_t i = 0; i < n; i++) {
        rc = parse_entry(wk_reply_at(r, i), &e, d);
        if (rc)
            return rc;
        if (e.what == ENTRY_BAD)
            return wk_diag_fail(d, WK_ECORRUPT, "unknown stream buffer entry %llu-%llu",
                                (unsigned long long)e.ms, (unsigned long long)e.seq);
        if (e.what == ENTRY_BODY) {
            bodies++;
            bytes += e.len + 1;
        }
    }
    /* One block: the array, then the bodies. */
    uint8_t *block = malloc(bodies * sizeof(wk_stream_buffer_body) + bytes + 1);
    if (!block)
        return wk_diag_fail(d, WK_ENOMEM, "stream_buffer.read: out of memory");
    wk_stream_buffer_body *arr = (wk_stream_buffer_body *)(void *)block;
    uint8_t *o = block + bodies * sizeof(wk_stream_buffer_body);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        parse_entry(wk_reply_at(r, i), &e, d);
        if (e.what == ENTRY_END) {
            c->finished = true;
            continue;
        }
        memcpy(o, e.body, e.len);
        o[e.len] = '\0';
        arr[k].data = o;
        arr[k++].len = e.len;
        o += e.len + 1;
    }
    c->bodies = arr;
    c->count = bodies;
    return WK_OK;
}

void wk_stream_buffer_contents_free(wk_stream_buffer_contents *c)
{
    if (!c)
        return;
    free(c->bodies);
    c->bodies = NULL;
    c->count = 0;
    c->finished = false;
}

static const wk__op read_op = {WK__OP_OF(stream_buffer, read), .kind = WK_KIND_STREAM_BUFFER,
                               
                               .flags = WK_QUERY_RETRY_SAFE | WK_QUERY_PARSE_ERRORS,
                               .command = "XRANGE", .parse = parse_range, .out_name = "out"};

int wk_stream_buffer_read(wk_processor *p, const wk_entity *sb, wk_name name, uint64_t from,
                          wk_stream_buffer_contents *out)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &read_op, sb, name, out);
    if (rc)
        return rc;
    wk_stream_buffer_contents_free(out);
    char start[48];
    const char *args[2] = {start, "+"};
    size_t lens[2] = {id_text(start, 0, from == UINT64_MAX ? from : from + 1), 1};
    return wk__op_send(&c, args, lens, 2);
}

/* ------------------------------------------------------------------------
 * Subscriptions
 * ---------------------------------------------------------------------- */

/* The probe: the buffer's first entry (XRANGE key - + COUNT 1), which
 * says whether it exists and which generation it is. */
typedef struct probe {
    bool answered; /* the parser ran (a loop subscription's open) */
    bool present;
    entry first; /* borrowed from the reply: judged inside the parser */
    wk_stream_buffer_subscription *s;
    bool same; /* with `s`: the first entry is of the buffer `s` follows */
} probe;

/* An entry read but not handed out yet; bodies live in `arena`. */
typedef struct pending {
    uint64_t ms, seq;
    int what;
    size_t off, len;
} pending;

struct wk_stream_buffer_subscription {
    wk__receiver rx; /* the blocking handle, the entity and name, the stop */
    char key[WK_KEY_MAX];
    size_t key_len;
    uint64_t after_ms, after_seq; /* the cursor: the last entry read */
    pending queue[WK_STREAM_BUFFER_BATCH];
    size_t head, count;
    uint8_t *arena;
    size_t arena_len, arena_cap;
    wk_stream_buffer_got final; /* 0, or END / GONE once it ended */
    /* The generation of the buffer followed: not seen yet, none (the
     * crate created it), or `gen`. `recreated`: the queue stops before
     * the first entry of another buffer. */
    enum { GEN_UNSEEN, GEN_NONE, GEN_SEEN } gen_state;
    char gen[64];
    size_t gen_len;
    bool recreated;
    /* Through the loop (wk_stream_buffer_recv_async): the receive's
     * output, the probe (the open's, then recv's) and the query in flight. */
    wk_stream_buffer_item *out;
    probe pr;
};

/* The query in flight through the loop (rx.inflight). */
enum { IDLE, READING, PROBING };

static const wk__receiver_loop loop_fns; /* below: the subscription through the loop */

/* Whether entry `e` belongs to the buffer `s` follows (adopting its
 * generation when none was seen yet). An entry without `g` after a
 * generation was seen is the crate appending to our buffer, unless it is
 * the first entry: a buffer this library created has `g` there, so the
 * crate re-created it. A generation where the crate's buffer had none,
 * or another one, is a buffer re-created here. */
static bool same_buffer(wk_stream_buffer_subscription *s, const entry *e)
{
    if (s->gen_state == GEN_UNSEEN) {
        s->gen_state = e->gen ? GEN_SEEN : GEN_NONE;
        s->gen_len = e->gen ? e->gen_len : 0;
        if (e->gen)
            memcpy(s->gen, e->gen, e->gen_len < sizeof(s->gen) ? e->gen_len : sizeof(s->gen));
        return true;
    }
    if (!e->gen)
        return s->gen_state == GEN_NONE || e->seq != 1;
    return s->gen_state == GEN_SEEN && e->gen_len == s->gen_len &&
           memcmp(e->gen, s->gen, e->gen_len < sizeof(s->gen) ? e->gen_len : sizeof(s->gen)) == 0;
}

/* XREAD's reply: nil (timed out) or [[key, entries]]. Entries leave the
 * reply before they are handed out, and the cursor moves past the last. */
static int parse_xread(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_stream_buffer_subscription *s = q->out;
    int rc;
    if (error_or_nil(q, r, d, &rc))
        return rc;
    const wk_reply *stream = wk_reply_at(r, 0);
    const wk_reply *entries = wk_reply_at(stream, 1);
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY || wk_reply_count(r) != 1 ||
        wk_reply_count(stream) != 2 || wk_reply_get_type(entries) != WK_REPLY_ARRAY ||
        wk_reply_count(entries) > WK_STREAM_BUFFER_BATCH)
        return wk_diag_fail(d, WK_EPROTO, "stream_buffer.recv: XREAD reply of the wrong shape");
    size_t n = wk_reply_count(entries), bytes = 0;
    entry e;
    for (size_t i = 0; i < n; i++) {
        rc = parse_entry(wk_reply_at(entries, i), &e, d);
        if (rc)
            return rc;
        bytes += e.what == ENTRY_BODY ? e.len + 1 : 0;
    }
    if (wk__grow_array_from(&s->arena, &s->arena_cap, bytes, 1, 4096))
        return wk_diag_fail(d, WK_ENOMEM, "stream_buffer.recv: out of memory");
    s->arena_len = 0;
    for (size_t i = 0; i < n; i++) {
        parse_entry(wk_reply_at(entries, i), &e, d);
        if (!same_buffer(s, &e)) {
            s->recreated = true;
            n = i;
            break;
        }
        pending *pe = &s->queue[i];
        pe->ms = s->after_ms = e.ms;
        pe->seq = s->after_seq = e.seq;
        pe->what = e.what;
        pe->off = s->arena_len;
        pe->len = e.len;
        if (e.what == ENTRY_BODY) {
            memcpy(s->arena + s->arena_len, e.body, e.len);
            s->arena[s->arena_len + e.len] = '\0';
            s->arena_len += e.len + 1;
        }
    }
    s->head = 0;
    s->count = n;
    return WK_OK;
}

static int xread(void *self)
{
    wk_stream_buffer_subscription *s = self;
    _Static_assert(WK_STREAM_BUFFER_BATCH == WK__RECEIVER_BATCH, "the queue holds one XREAD");
    return wk__receiver_xread(&s->rx, "stream_buffer.recv", s->key, s->key_len, s->after_ms,
                              s->after_seq, s->rx.held.entity.ttl_ms, parse_xread, s);
}

static int parse_probe(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    probe *pr = q->out;
    pr->answered = true;
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return wk__parse_error_reply(q, r, d, "a StreamBuffer stream");
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_EPROTO, "expected an array reply to XRANGE");
    pr->present = wk_reply_count(r) > 0;
    if (!pr->present)
        return WK_OK;
    int rc = parse_entry(wk_reply_at(r, 0), &pr->first, d);
    if (rc == WK_OK && pr->s)
        pr->same = same_buffer(pr->s, &pr->first);
    return rc;
}

/* The probe of subscribe and recv: XRANGE key - + COUNT 1. */
#define PROBE_OP(op)                                                                               \
    {.name = "stream_buffer." op, .kind = WK_KIND_STREAM_BUFFER, .mode = WK_READ,                  \
     .flags = WK_QUERY_RETRY_SAFE | WK_QUERY_PARSE_ERRORS, .command = "XRANGE",                    \
     .parse = parse_probe}
static const wk__op subscribe_op = PROBE_OP("subscribe"), probe_op = PROBE_OP("recv");
static const char *const first_args[4] = {"-", "+", "COUNT", "1"};
static const size_t first_lens[4] = {1, 1, 5, 1};

int wk_stream_buffer_subscribe(wk_processor *p, const wk_entity *sb, wk_name name, uint64_t from,
                               wk_stream_buffer_subscription **out)
{
    if (out)
        *out = NULL;
    probe pr = {0};
    wk__call c;
    int rc = wk__op_begin(&c, p, &subscribe_op, sb, name, &pr);
    if (rc)
        return rc;
    if (!out)
        return wk__op_fail(&c, WK_EINVAL, "out is required");
    bool loop = wk__receiver_is_loop(p);
    if (!loop && (rc = wk__no_deferred(p, subscribe_op.name)))
        return rc;
    wk_stream_buffer_subscription *s = calloc(1, sizeof(*s));
    if (!s)
        return wk__op_fail(&c, WK_ENOMEM, "out of memory");
    memcpy(s->key, c.key[0], c.key_len[0]);
    s->key_len = c.key_len[0];
    s->after_seq = from; /* the entry 0-from precedes index `from` */
    char err[256];
    if (loop) {
        /* Through the loop: the probe's reply comes with the open's
         * callback (s->pr.answered); recv waits for it. */
        rc = wk__receiver_open_loop(&s->rx, p, sb, WK_KIND_STREAM_BUFFER, &name, &loop_fns, s, err,
                                    sizeof(err));
        s->pr.s = s;
        c.out = &s->pr;
        if (rc)
            rc = wk__op_fail(&c, rc, "%s", err);
        else if ((rc = wk__op_send(&c, first_args, first_lens, 4)) == WK_OK)
            *out = s;
        if (rc)
            wk_stream_buffer_subscription_close(s);
        return rc;
    }
    /* The generation of the buffer there now is the one followed. A key of
     * another type is left to recv, which reports it on every call. */
    pr.s = s;
    rc = wk__op_send(&c, first_args, first_lens, 4);
    if (rc && rc != WK_ECORRUPT) {
        free(s);
        return rc;
    }
    rc = wk__receiver_open(&s->rx, p->db, sb, WK_KIND_STREAM_BUFFER, &name, err, sizeof(err));
    if (rc) {
        wk_stream_buffer_subscription_close(s);
        return wk__op_fail(&c, rc, "%s", err);
    }
    *out = s;
    return WK_OK;
}

/* Whether recv decides without a query: from what was read, the end,
 * the stop. */
static bool decided(const void *self)
{
    const wk_stream_buffer_subscription *s = self;
    return s->final || wk__receiver_stopped(&s->rx) || s->count || s->recreated;
}

/* What recv decides without a query (decided(s)): the item, or the
 * status of a corrupted entry (skipped). */
static int recv_local(void *self)
{
    wk_stream_buffer_subscription *s = self;
    wk_stream_buffer_item *item = s->out;
    for (;;) {
        if (s->final) {
            item->got = s->final;
            return WK_OK;
        }
        if (wk__receiver_stopped(&s->rx)) {
            item->got = WK_STREAM_BUFFER_STOPPED;
            return WK_OK;
        }
        if (!s->count) { /* recreated: after the old buffer's last entries */
            s->final = WK_STREAM_BUFFER_GONE;
            continue;
        }
        const pending *pe = &s->queue[s->head++];
        s->count--;
        if (pe->what == ENTRY_END) {
            s->final = WK_STREAM_BUFFER_END;
            continue;
        }
        if (pe->what == ENTRY_BAD)
            return wk__receiver_fail(&s->rx, WK_ECORRUPT,
                                     "stream_buffer.recv: unknown stream buffer entry "
                                     "%llu-%llu (skipped)",
                                     (unsigned long long)pe->ms, (unsigned long long)pe->seq);
        item->got = WK_STREAM_BUFFER_BODY;
        item->index = pe->seq ? pe->seq - 1 : 0; /* 0-0 cannot be stored */
        item->body = s->arena + pe->off;
        item->len = pe->len;
        return WK_OK;
    }
}

int wk_stream_buffer_recv(wk_stream_buffer_subscription *s, wk_stream_buffer_item *item)
{
    if (!s || !item || s->rx.sub) /* through the loop: wk_stream_buffer_recv_async */
        return WK_EINVAL;
    s->out = item;
    item->index = 0;
    item->body = NULL;
    item->len = 0;
    for (;;) {
        if (decided(s))
            return recv_local(s);
        int rc = xread(s);
        if (rc && wk__receiver_stopped(&s->rx))
            continue;
        if (rc)
            return rc == WK_EUNKNOWN ? WK_EIO : rc;
        if (s->count || s->recreated)
            continue;
        /* A whole TTL without an entry past the cursor: gone, unless the
         * key is still there and still the same buffer (one re-created
         * shorter never reaches the cursor). */
        probe pr = {.s = s};
        rc = wk__receiver_run(&s->rx, &probe_op, first_args, first_lens, 4, &pr);
        if (rc && wk__receiver_stopped(&s->rx))
            continue;
        if (rc)
            return rc;
        if (!pr.present || !pr.same)
            s->final = WK_STREAM_BUFFER_GONE;
    }
}

/* ------------------------------------------------------------------------
 * The subscription through the loop: wk_stream_buffer_recv()'s steps,
 * each query's reply deciding the next (XREAD; nothing for a TTL: the
 * probe; XREAD …).
 * ---------------------------------------------------------------------- */

/* The receive ends: with what is decided (WK_OK), or a failure. */
static void loop_deliver(wk_stream_buffer_subscription *s, int status, const char *why)
{
    if (status == WK_OK)
        status = recv_local(s);
    wk__receiver_deliver(&s->rx, status, why ? why : s->rx.msg);
}

/* Send the next query, or deliver what is decided. */
static void loop_next(wk_stream_buffer_subscription *s, bool probing)
{
    int rc;
    if (decided(s)) {
        loop_deliver(s, WK_OK, NULL);
        return;
    }
    if (probing) {
        s->pr = (probe){.s = s, .answered = true};
        rc = wk__receiver_run(&s->rx, &probe_op, first_args, first_lens, 4, &s->pr);
    } else {
        rc = xread(s);
    }
    if (rc)
        loop_deliver(s, rc, NULL);
    else
        s->rx.inflight = probing ? PROBING : READING;
}

static void loop_reply(void *self, int was, int status, const char *msg)
{
    wk_stream_buffer_subscription *s = self;
    bool read = was == READING;
    if (status && !wk__receiver_stopped(&s->rx)) {
        loop_deliver(s, status == WK_EUNKNOWN ? WK_EIO : status, msg);
        return;
    }
    /* A whole TTL without an entry past the cursor: gone, unless the key
     * is still there and still the same buffer. */
    if (!status && !read && (!s->pr.present || !s->pr.same))
        s->final = WK_STREAM_BUFFER_GONE;
    loop_next(s, read && !status);
}

static const wk__receiver_loop loop_fns = {
    .reply = loop_reply, .decided = decided, .local = recv_local, .first = xread};

int wk_stream_buffer_recv_async(wk_stream_buffer_subscription *s, wk_stream_buffer_item *item,
                                wk_async_done_fn done, void *arg)
{
    if (!s || !item)
        return WK_EINVAL;
    int rc = wk__receiver_begin(&s->rx, "stream_buffer.recv", s->pr.answered, done, arg);
    if (rc)
        return rc;
    *item = (wk_stream_buffer_item){0};
    s->out = item;
    return wk__receiver_first(&s->rx, s, READING);
}

int wk_stream_buffer_recv_typed(wk_stream_buffer_subscription *s, const wk_codec *codec,
                                void *value, wk_stream_buffer_got *got)
{
    if (!s || s->rx.sub || !wk__codec_ok(codec) || !value || !got)
        return WK_EINVAL;
    wk_stream_buffer_item it;
    int rc = wk_stream_buffer_recv(s, &it);
    *got = rc ? 0 : it.got;
    if (rc || it.got != WK_STREAM_BUFFER_BODY)
        return rc;
    return wk__codec_decode(wk_db_processor(s->rx.b), "stream_buffer.recv", codec, s->key,
                            s->key_len, it.body, it.len, value);
}

void wk_stream_buffer_subscription_stop(wk_stream_buffer_subscription *s)
{
    /* XREAD takes nothing, so cutting it anywhere loses nothing. Through
     * the loop: the receive outstanding ends at the next turn. */
    if (!s)
        return;
    wk__receiver_stop(&s->rx);
    if (s->rx.sub && s->rx.busy)
        wk__receiver_kick(&s->rx);
}

const char *wk_stream_buffer_subscription_errmsg(const wk_stream_buffer_subscription *s)
{
    return s ? wk__receiver_errmsg(&s->rx) : "";
}

void wk_stream_buffer_subscription_close(wk_stream_buffer_subscription *s)
{
    if (!s)
        return;
    wk__receiver_close(&s->rx);
    free(s->arena);
    free(s);
}
