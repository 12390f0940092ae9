/*
 * collection/settings.c — Settings queries: put and remove (hash + version
 * and epoch + PUBLISH in one script), snapshots read in bounded chunks
 * (HSCAN, each chunk with the version and epoch, started over when they
 * change), and the decoder of the published change messages.
 *
 * The scripts check the shape of both keys before writing anything, so a
 * corrupted item fails with WK_ECORRUPT and never leaves a half-made
 * change (a hash written without a version bump or a message).
 */
#include <stdlib.h>

#include <sodium.h>

#include "collection/op.h"
#include "core/subscriber.h"

#include <wakuwaku/settings.h>

#include "collection/settings_internal.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): no parameters to check. */
WK__KIND(settings) = {WK_KIND_SETTINGS, NULL};

/* ------------------------------------------------------------------------
 * Scripts. KEYS: map, version. Errors the C side reports as WK_ECORRUPT
 * start with "WKCORRUPT".
 * ---------------------------------------------------------------------- */

/* Shape check shared by every script: the map is a hash (or absent); the
 * version key a hash with a decimal `version` and a 32-hex-digit `epoch`
 * (or absent), or — the layout before epochs — a decimal counter, which
 * the writers turn into the hash. It sets `cur` (the version, decimal; '0'
 * when absent), `epoch` ('' when absent) and `legacy`. Versions stay below
 * 10^15 so Lua numbers (doubles) hold them exactly. */
#define CHECK_SHAPE                                                                        \
    "local t = redis.call('TYPE', KEYS[1]).ok\n"                                           \
    "if t ~= 'none' and t ~= 'hash' then\n"                                                \
    "  return redis.error_reply('WKCORRUPT the map is a ' .. t .. ', not a hash')\n"       \
    "end\n"                                                                                \
    "local cur, epoch, legacy = '0', '', false\n"                                          \
    "local vt = redis.call('TYPE', KEYS[2]).ok\n"                                          \
    "if vt == 'hash' then\n"                                                               \
    "  local f = redis.call('HMGET', KEYS[2], 'version', 'epoch')\n"                       \
    "  cur, epoch = f[1], f[2]\n"                                                          \
    "  if type(cur) ~= 'string' or type(epoch) ~= 'string' or string.len(epoch) ~= 32\n"  \
    "     or string.find(epoch, '[^0-9a-f]') then\n"                                       \
    "    return redis.error_reply('WKCORRUPT the version key lacks a version or an epoch')\n" \
    "  end\n"                                                                              \
    "elseif vt == 'string' then\n"                                                         \
    "  cur, legacy = redis.call('GET', KEYS[2]), true\n"                                   \
    "elseif vt ~= 'none' then\n"                                                           \
    "  return redis.error_reply('WKCORRUPT the version is a ' .. vt .. ', not a hash')\n"  \
    "end\n"                                                                                \
    "if not string.match(cur, '^%d+$') or string.len(cur) > 15 then\n"                    \
    "  return redis.error_reply('WKCORRUPT the version is not a counter')\n"               \
    "end\n"

/* A netstring: "<length>:<bytes>," (lengths below 10^14 print exactly). */
#define NETSTRING "local function ns(s) return string.len(s) .. ':' .. s .. ',' end\n"

/* The next version, with the epoch made when missing: ARGV[2] is 32 fresh
 * random hex digits from the client (libsodium), so the script itself
 * stays deterministic. Sets `v` (decimal). */
#define BUMP                                                                               \
    "if epoch == '' then epoch = ARGV[2] end\n"                                            \
    "if legacy then redis.call('DEL', KEYS[2]) end\n"                                      \
    "local v = string.format('%d', tonumber(cur) + 1)\n"                                   \
    "redis.call('HSET', KEYS[2], 'version', v, 'epoch', epoch)\n"

/* ARGV: channel, new epoch, key, value. Returns the new version. */
static const wk_script put_script = {
    "settings.put",
    CHECK_SHAPE NETSTRING BUMP
    "redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])\n"
    "redis.call('PUBLISH', ARGV[1], 'P' .. ns(epoch) .. ns(v) .. ns(ARGV[3]) .. ns(ARGV[4]))\n"
    "return tonumber(v)\n"};

/* ARGV: channel, new epoch, key. Returns {removed, version}. */
static const wk_script remove_script = {
    "settings.remove",
    CHECK_SHAPE NETSTRING
    "if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then return {0, tonumber(cur)} end\n"
    BUMP
    "redis.call('HDEL', KEYS[1], ARGV[3])\n"
    "redis.call('PUBLISH', ARGV[1], 'R' .. ns(epoch) .. ns(v) .. ns(ARGV[3]))\n"
    "return {1, tonumber(v)}\n"};

/* ARGV: cursor, count. Returns {epoch, version, next cursor, {k1, v1, …}}.
 * Writes nothing; one HSCAN, so it runs in time bounded by the count. */
static const wk_script chunk_script = {
    "settings.snapshot",
    CHECK_SHAPE
    "local r = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])\n"
    "return {epoch, cur, r[1], r[2]}\n"};

/* ARGV: the most entries to read. The whole map in one reply shaped like a
 * chunk's (for batches, which cannot continue a scan), or WKTOOBIG. */
static const wk_script whole_script = {
    "settings.snapshot",
    CHECK_SHAPE
    "local n = redis.call('HLEN', KEYS[1])\n"
    "if n > tonumber(ARGV[1]) then return redis.error_reply('WKTOOBIG ' .. n) end\n"
    "return {epoch, cur, '0', redis.call('HGETALL', KEYS[1])}\n"};

/* Returns {epoch, version}. */
static const wk_script head_script = {"settings.head", CHECK_SHAPE "return {epoch, cur}\n"};

/* ------------------------------------------------------------------------
 * Keys
 * ---------------------------------------------------------------------- */

/* ":chan:<db>" (at most 16 bytes: WK_KEY_SUFFIX_MAX). */
static void chan_suffix(char out[32], wk_db *db)
{
    int n = wk__subscriber_database(db);
    memcpy(out, ":chan:", 6);
    out[6 + wk__fmt_i64(out + 6, n < 0 ? 0 : n)] = '\0';
}

int wk__settings_channel(wk_db *db, const wk_entity *e, const wk_name *name, char *out,
                         size_t cap, size_t *len)
{
    char suffix[32];
    chan_suffix(suffix, db);
    return wk_key_build(out, cap, len, e, name, suffix);
}

/* Every query runs one of the scripts on the map and the version key. */
#define SETTINGS_OP(op, mode_, flags_, s, parser)                                                  \
    {.name = "settings." op, .kind = WK_KIND_SETTINGS, .mode = mode_, .flags = flags_,             \
     .script = &(s), .suffix = {":map", ":version"}, .parse = parser}

/* 32 random hex digits: the epoch a script takes if the map has none. */
static void new_epoch(char out[WK_SETTINGS_EPOCH_LEN + 1])
{
    unsigned char raw[WK_SETTINGS_EPOCH_LEN / 2];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(out, WK_SETTINGS_EPOCH_LEN + 1, raw, sizeof(raw));
}

/* Error replies: the scripts' WKCORRUPT → WK_ECORRUPT, WKTOOBIG (a batch
 * asked for a big map) → WK_EINVAL, others WK_EREDIS. */
static int script_error(const wk_reply *r, wk_diag *d)
{
    size_t len;
    const char *s = wk_reply_str(r, &len);
    if (len >= 10 && memcmp(s, "WKCORRUPT ", 10) == 0)
        return wk_diag_fail(d, WK_ECORRUPT, "%.*s", (int)(len - 10 > 200 ? 200 : len - 10),
                            s + 10);
    if (len >= 9 && memcmp(s, "WKTOOBIG ", 9) == 0)
        return wk_diag_fail(d, WK_EINVAL,
                            "settings.snapshot: the map has %.*s entries, more than the %d a "
                            "batch reads in its one command; take this snapshot through a "
                            "handle, which reads it in chunks",
                            (int)(len - 9 > 20 ? 20 : len - 9), s + 9, WK__SETTINGS_CHUNK);
    return wk_diag_fail(d, WK_EREDIS, "Redis replied: %.*s", (int)(len > 300 ? 300 : len), s);
}

/* ------------------------------------------------------------------------
 * put / remove
 * ---------------------------------------------------------------------- */

static int parse_put(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return script_error(r, d);
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER || wk_reply_integer(r) < 1)
        return wk_diag_fail(d, WK_EPROTO, "expected the new version");
    if (q->out)
        *(int64_t *)q->out = wk_reply_integer(r);
    return WK_OK;
}

/* The writes' ARGV: the channel, a new epoch, the key, then (put) the
 * value. */
static int send_change(const wk__call *c, const wk_name *name, const void *key, size_t key_len,
                       const void *value, size_t value_len, int nargs)
{
    char chan[WK_KEY_MAX], epoch[WK_SETTINGS_EPOCH_LEN + 1];
    size_t chan_len;
    if (wk__settings_channel(c->p->db, c->e, name, chan, sizeof(chan), &chan_len))
        return wk__op_fail(c, WK_EINVAL, "cannot build the key of its channel");
    new_epoch(epoch);
    const char *args[4] = {chan, epoch, key ? key : "", value ? value : ""};
    size_t lens[4] = {chan_len, WK_SETTINGS_EPOCH_LEN, key_len, value_len};
    return wk__op_send(c, args, lens, nargs);
}

/* The parser writes the caller's *version (batches parse later). */
static const wk__op put_op =
    SETTINGS_OP("put", WK_WRITE, WK_QUERY_PARSE_ERRORS, put_script, parse_put);

int wk_settings_put(wk_processor *p, const wk_entity *settings, wk_name name, const void *key,
                    size_t key_len, const void *value, size_t value_len, int64_t *version)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &put_op, settings, name, version);
    if (rc)
        return rc;
    if ((!key && key_len) || (!value && value_len))
        return wk__op_fail(&c, WK_EINVAL, "key or value is NULL");
    return send_change(&c, &name, key, key_len, value, value_len, 4);
}

static int parse_remove(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return script_error(r, d);
    const wk_reply *removed = wk_reply_at(r, 0), *version = wk_reply_at(r, 1);
    if (wk_reply_count(r) != 2 || wk_reply_get_type(removed) != WK_REPLY_INTEGER ||
        wk_reply_get_type(version) != WK_REPLY_INTEGER || wk_reply_integer(version) < 0)
        return wk_diag_fail(d, WK_EPROTO, "expected {removed, version}");
    wk_settings_removal *o = q->out;
    if (o) {
        o->removed = wk_reply_integer(removed) != 0;
        o->version = wk_reply_integer(version);
    }
    return WK_OK;
}

static const wk__op remove_op =
    SETTINGS_OP("remove", WK_WRITE, WK_QUERY_PARSE_ERRORS, remove_script, parse_remove);

int wk_settings_remove(wk_processor *p, const wk_entity *settings, wk_name name, const void *key,
                       size_t key_len, wk_settings_removal *out)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &remove_op, settings, name, out);
    if (rc)
        return rc;
    if (!key && key_len)
        return wk__op_fail(&c, WK_EINVAL, "key is NULL");
    return send_change(&c, &name, key, key_len, NULL, 0, 3);
}

/* ------------------------------------------------------------------------
 * Snapshots
 * ---------------------------------------------------------------------- */

/* Bytewise order, a prefix first. */
static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

/* Copies `len` bytes of src to *data, NUL-terminated; returns the copy
 * and moves *data past it. */
static const char *copy_text(char **data, const char *src, size_t len)
{
    char *at = *data;
    if (len)
        memcpy(at, src, len);
    at[len] = '\0';
    *data += len + 1;
    return at;
}

/* By key; equal keys in the order they were handed out (their bytes lie
 * in that order in the block), so the last one can be kept. */
static int entry_cmp(const void *x, const void *y)
{
    const wk_settings_entry *a = x, *b = y;
    int c = key_cmp(a->key, a->key_len, b->key, b->key_len);
    if (c)
        return c;
    return a->key < b->key ? -1 : a->key > b->key;
}

/* See collection/settings_internal.h. */
int wk__settings_build(wk_settings_map **out, const char *epoch, int64_t version, size_t count,
                       wk__settings_pair_fn pair, const void *ctx)
{
    *out = NULL;
    size_t bytes = sizeof(wk_settings_map);
    if (count > (SIZE_MAX - bytes) / sizeof(wk_settings_entry))
        return WK_ENOMEM;
    bytes += count * sizeof(wk_settings_entry);
    for (size_t i = 0; i < count; i++) {
        const char *k, *v;
        size_t kl, vl;
        pair(ctx, i, &k, &kl, &v, &vl);
        if (kl > SIZE_MAX - bytes - 2 || vl > SIZE_MAX - bytes - kl - 2)
            return WK_ENOMEM;
        bytes += kl + vl + 2;
    }
    char *block = malloc(bytes);
    if (!block)
        return WK_ENOMEM;
    wk_settings_map *s = (wk_settings_map *)(void *)block;
    wk_settings_entry *entries = (wk_settings_entry *)(void *)(block + sizeof(*s));
    char *data = (char *)(entries + count);
    for (size_t i = 0; i < count; i++) {
        const char *k, *v;
        size_t kl, vl;
        pair(ctx, i, &k, &kl, &v, &vl);
        entries[i].key = copy_text(&data, k, kl);
        entries[i].key_len = kl;
        entries[i].value = copy_text(&data, v, vl);
        entries[i].value_len = vl;
    }
    size_t kept = count;
    if (count > 1) {
        qsort(entries, count, sizeof(*entries), entry_cmp);
        kept = 0;
        for (size_t i = 0; i < count; i++) {
            if (i + 1 < count && key_cmp(entries[i].key, entries[i].key_len, entries[i + 1].key,
                                         entries[i + 1].key_len) == 0)
                continue; /* a later copy of this key follows */
            entries[kept++] = entries[i];
        }
    }
    memset(s->epoch, 0, sizeof(s->epoch));
    size_t elen = strnlen(epoch, WK_SETTINGS_EPOCH_LEN);
    memcpy(s->epoch, epoch, elen);
    s->version = version;
    s->count = kept;
    s->entries = entries;
    *out = s;
    return WK_OK;
}

void wk_settings_map_free(wk_settings_map *snap)
{
    free(snap);
}

const wk_settings_entry *wk_settings_map_find(const wk_settings_map *snap,
                                                   const void *key, size_t key_len)
{
    if (!snap || (!key && key_len))
        return NULL;
    size_t lo = 0, hi = snap->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const wk_settings_entry *e = &snap->entries[mid];
        int c = key_cmp(key ? key : "", key_len, e->key, e->key_len);
        if (c == 0)
            return e;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* A chunk-shaped reply, {epoch, version, cursor, {k1, v1, …}}, checked:
 * the head and cursor are written, *pairs is the array. */
static int parse_chunk_reply(const wk_reply *r, wk_diag *d, wk__settings_head *head,
                             char *cursor, const wk_reply **pairs)
{
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return script_error(r, d);
    const wk_reply *epoch = wk_reply_at(r, 0), *version = wk_reply_at(r, 1),
                   *next = wk_reply_at(r, 2), *map = wk_reply_at(r, 3);
    if (wk_reply_count(r) != 4 || wk_reply_get_type(epoch) != WK_REPLY_STRING ||
        wk_reply_get_type(version) != WK_REPLY_STRING ||
        wk_reply_get_type(next) != WK_REPLY_STRING || wk_reply_get_type(map) != WK_REPLY_ARRAY ||
        wk_reply_count(map) % 2 != 0)
        return wk_diag_fail(d, WK_EPROTO, "expected {epoch, version, cursor, {key, value, …}}");
    size_t elen, vlen, clen;
    const char *es = wk_reply_str(epoch, &elen), *vs = wk_reply_str(version, &vlen),
               *cs = wk_reply_str(next, &clen);
    uint64_t v, c;
    if (!wk__parse_decimal(vs, vlen, INT64_MAX, &v))
        return wk_diag_fail(d, WK_ECORRUPT, "the version is not a counter");
    if (elen != 0 && elen != WK_SETTINGS_EPOCH_LEN)
        return wk_diag_fail(d, WK_EPROTO, "expected an epoch of %d characters",
                            WK_SETTINGS_EPOCH_LEN);
    if (!wk__parse_decimal(cs, clen, UINT64_MAX, &c))
        return wk_diag_fail(d, WK_EPROTO, "expected an HSCAN cursor");
    for (size_t i = 0; i < wk_reply_count(map); i++) {
        if (wk_reply_get_type(wk_reply_at(map, i)) != WK_REPLY_STRING)
            return wk_diag_fail(d, WK_EPROTO, "expected strings in HSCAN");
    }
    if (elen)
        memcpy(head->epoch, es, elen);
    head->epoch[elen] = '\0';
    head->version = (int64_t)v;
    memcpy(cursor, cs, clen);
    cursor[clen] = '\0';
    *pairs = map;
    return WK_OK;
}

/* The reads write nothing: retry-safe. */
#define READ_OP(op, s, parser)                                                                     \
    SETTINGS_OP(op, WK_READ, WK_QUERY_RETRY_SAFE | WK_QUERY_PARSE_ERRORS, s, parser)

/* --- one chunk (wk__settings_chunk) --- */

static int parse_chunk(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk__settings_chunk_out *o = q->out;
    const wk_reply *map;
    int rc = parse_chunk_reply(r, d, o->head, o->next, &map);
    for (size_t i = 0; !rc && i < wk_reply_count(map); i += 2) {
        size_t kl, vl;
        const char *k = wk_reply_str(wk_reply_at(map, i), &kl);
        const char *v = wk_reply_str(wk_reply_at(map, i + 1), &vl);
        rc = o->fn(o->ctx, o->head, k, kl, v, vl);
        if (rc)
            rc = wk_diag_fail(d, rc, "settings.snapshot: out of memory copying entries");
    }
    return rc;
}

static const wk__op chunk_op = READ_OP("snapshot", chunk_script, parse_chunk);

/* Send one chunk of call `c` (of chunk_op), from `cursor`, parsed into o. */
static int send_chunk(wk__call *c, const char *cursor, wk__settings_chunk_out *o)
{
    char count[24];
    const char *args[2] = {cursor, count};
    size_t lens[2] = {strlen(cursor), wk__fmt_i64(count, WK__SETTINGS_CHUNK)};
    c->out = o;
    o->next[0] = '\0'; /* the parser writes a cursor; "" means it never ran */
    return wk__op_send(c, args, lens, 2);
}

int wk__settings_chunk_async(wk_processor *p, const wk_entity *e, const wk_name *name,
                             const char *cursor, wk__settings_chunk_out *o)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &chunk_op, e, *name, NULL);
    return rc ? rc : send_chunk(&c, cursor, o);
}

/* One chunk of call `c` (of chunk_op), from `cursor`; `next` gets the next
 * cursor. */
static int read_chunk(wk__call *c, const char *cursor, wk__settings_head *head, char *next,
                      wk__settings_entry_fn fn, void *ctx)
{
    wk__settings_chunk_out o = {head, next, fn, ctx};
    int rc = send_chunk(c, cursor, &o);
    if (rc == WK_OK && next[0] == '\0')
        /* A processor that answered WK_OK without running the query (a
         * wrapper of your own?): stop rather than loop on an unset cursor. */
        return wk__op_fail(c, WK_EPROTO, "the chunk's reply was never parsed");
    return rc;
}

int wk__settings_chunk(wk_processor *p, const wk_entity *e, const wk_name *name,
                       const char *cursor, wk__settings_head *head, char *next,
                       wk__settings_entry_fn fn, void *ctx)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &chunk_op, e, *name, NULL);
    return rc ? rc : read_chunk(&c, cursor, head, next, fn, ctx);
}

/* --- the head alone --- */

static int parse_head(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return script_error(r, d);
    wk__settings_head *head = q->out;
    const wk_reply *epoch = wk_reply_at(r, 0), *version = wk_reply_at(r, 1);
    size_t elen = 0, vlen = 0;
    const char *es = wk_reply_str(epoch, &elen), *vs = wk_reply_str(version, &vlen);
    uint64_t v;
    if (wk_reply_count(r) != 2 || wk_reply_get_type(epoch) != WK_REPLY_STRING ||
        wk_reply_get_type(version) != WK_REPLY_STRING ||
        (elen != 0 && elen != WK_SETTINGS_EPOCH_LEN))
        return wk_diag_fail(d, WK_EPROTO, "expected {epoch, version}");
    if (!wk__parse_decimal(vs, vlen, INT64_MAX, &v))
        return wk_diag_fail(d, WK_ECORRUPT, "the version is not a counter");
    if (elen)
        memcpy(head->epoch, es, elen);
    head->epoch[elen] = '\0';
    head->version = (int64_t)v;
    return WK_OK;
}

static const wk__op head_op = READ_OP("head", head_script, parse_head);

int wk__settings_read_head(wk_processor *p, const wk_entity *e, const wk_name *name,
                           wk__settings_head *head)
{
    return wk__op_run(p, &head_op, e, *name, NULL, NULL, 0, head);
}

/* --- the whole map in one command (batches) --- */

static void reply_pair(const void *ctx, size_t i, const char **k, size_t *klen, const char **v,
                       size_t *vlen)
{
    const wk_reply *map = ctx;
    *k = wk_reply_str(wk_reply_at(map, 2 * i), klen);
    *v = wk_reply_str(wk_reply_at(map, 2 * i + 1), vlen);
}

static int parse_whole(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk__settings_head head;
    char cursor[24];
    const wk_reply *map;
    int rc = parse_chunk_reply(r, d, &head, cursor, &map);
    if (rc)
        return rc;
    size_t count = wk_reply_count(map) / 2;
    /* Written only on success; the caller set it to NULL before sending. */
    rc = wk__settings_build(q->out, head.epoch, head.version, count, reply_pair, map);
    if (rc)
        return wk_diag_fail(d, rc, "out of memory copying %zu entries", count);
    return WK_OK;
}

/* --- the whole map in chunks (handles) --- */

/* The pairs read so far: their bytes in one growing buffer. */
typedef struct gathered {
    char *bytes;
    size_t len, cap;
    struct gathered_pair {
        size_t key, key_len, value, value_len; /* offsets into bytes */
    } *pairs;
    size_t count, pairs_cap;
} gathered;

static int gather(void *ctx, const wk__settings_head *head, const char *k, size_t klen,
                  const char *v, size_t vlen)
{
    (void)head;
    gathered *g = ctx;
    if (klen > SIZE_MAX - g->len || vlen > SIZE_MAX - g->len - klen ||
        wk__grow_array_from(&g->bytes, &g->cap, g->len + klen + vlen, 1, 1024) ||
        wk__grow_array_from(&g->pairs, &g->pairs_cap, g->count + 1, sizeof(*g->pairs), 1024))
        return WK_ENOMEM;
    struct gathered_pair *pr = &g->pairs[g->count++];
    pr->key = g->len;
    pr->key_len = klen;
    if (klen)
        memcpy(g->bytes + g->len, k, klen);
    g->len += klen;
    pr->value = g->len;
    pr->value_len = vlen;
    if (vlen)
        memcpy(g->bytes + g->len, v, vlen);
    g->len += vlen;
    return WK_OK;
}

static void gathered_pair(const void *ctx, size_t i, const char **k, size_t *klen,
                          const char **v, size_t *vlen)
{
    const gathered *g = ctx;
    const struct gathered_pair *pr = &g->pairs[i];
    *k = g->bytes + pr->key;
    *klen = pr->key_len;
    *v = g->bytes + pr->value;
    *vlen = pr->value_len;
}

static bool same_head(const wk__settings_head *a, const wk__settings_head *b)
{
    return a->version == b->version && strcmp(a->epoch, b->epoch) == 0;
}

/*
 * Read the map chunk by chunk; every chunk also reads the version and
 * epoch, in the same script. If all chunks saw the same ones, nothing
 * changed between the first and the last (every change bumps the version;
 * a reset makes a new random epoch), so the pairs are the map at that
 * version. Otherwise start over, at most WK__SETTINGS_ATTEMPTS times.
 */
static int snapshot_in_chunks(wk__call *c, wk_settings_map **out)
{
    gathered g = {0};
    int rc = WK_OK;
    for (int attempt = 0; attempt < WK__SETTINGS_ATTEMPTS; attempt++) {
        g.len = g.count = 0;
        wk__settings_head first = {"", 0}, head;
        char cursor[24] = "0", next[24];
        bool changed = false;
        for (bool more = true; more && !changed;) {
            rc = read_chunk(c, cursor, &head, next, gather, &g);
            if (rc)
                goto done;
            if (strcmp(cursor, "0") == 0)
                first = head;
            else
                changed = !same_head(&first, &head);
            more = strcmp(next, "0") != 0;
            memcpy(cursor, next, sizeof(cursor));
        }
        if (!changed) {
            rc = wk__settings_build(out, first.epoch, first.version, g.count, gathered_pair, &g);
            if (rc)
                rc = wk__op_fail(c, rc, "out of memory copying %zu entries", g.count);
            goto done;
        }
    }
    rc = wk__op_fail(c, WK_ETIMEDOUT,
                     "the map changed during each of %d attempts to read it in chunks; try "
                     "again, or keep a follower's mirror",
                     WK__SETTINGS_ATTEMPTS);
done:
    free(g.bytes);
    free(g.pairs);
    return rc;
}

static const wk__op whole_op = READ_OP("snapshot", whole_script, parse_whole);

int wk_settings_snapshot(wk_processor *p, const wk_entity *settings, wk_name name,
                         wk_settings_map **out)
{
    if (out)
        *out = NULL;
    /* A batch parses replies only after sending everything: one command
     * that reads the whole map, refused by the script for big maps. */
    bool batch = wk_processor_is_deferred(p);
    wk__call c;
    int rc = wk__op_begin(&c, p, batch ? &whole_op : &chunk_op, settings, name, out);
    if (rc)
        return rc;
    if (!out)
        return wk__op_fail(&c, WK_EINVAL, "out is NULL");
    if (!batch)
        return snapshot_in_chunks(&c, out);
    char max[24];
    const char *arg = max;
    size_t len = wk__fmt_i64(max, WK__SETTINGS_CHUNK);
    return wk__op_send(&c, &arg, &len, 1);
}

/* ------------------------------------------------------------------------
 * Change messages: 'P'|'R' then netstrings (see settings.h).
 * ---------------------------------------------------------------------- */

/* Reads one netstring at *pos; its bytes at *field, *flen. */
static bool netstring(const char *m, size_t len, size_t *pos, const char **field, size_t *flen)
{
    size_t i = *pos, start = i;
    while (i < len && i - start <= 20 && m[i] >= '0' && m[i] <= '9')
        i++;
    uint64_t n;
    if (i >= len || m[i] != ':' || !wk__parse_decimal(m + start, i - start, SIZE_MAX, &n))
        return false;
    i++;
    if (n > len - i || len - i - n < 1 || m[i + n] != ',')
        return false;
    *field = m + i;
    *flen = (size_t)n;
    *pos = i + n + 1;
    return true;
}

int wk_settings_change_decode(const void *msg, size_t len, wk_settings_change *change)
{
    if (!change)
        return WK_EINVAL;
    memset(change, 0, sizeof(*change));
    const char *m = msg;
    if (!m || len < 1 || (m[0] != 'P' && m[0] != 'R'))
        return WK_ECORRUPT;
    size_t pos = 1, vlen, elen;
    const char *vs, *es;
    uint64_t version;
    if (!netstring(m, len, &pos, &es, &elen) || elen != WK_SETTINGS_EPOCH_LEN)
        goto corrupt;
    for (size_t i = 0; i < elen; i++) {
        if (!((es[i] >= '0' && es[i] <= '9') || (es[i] >= 'a' && es[i] <= 'f')))
            goto corrupt;
    }
    if (!netstring(m, len, &pos, &vs, &vlen) || !wk__parse_decimal(vs, vlen, INT64_MAX, &version) ||
        version < 1 || !netstring(m, len, &pos, &change->key, &change->key_len))
        goto corrupt;
    if (m[0] == 'P' && !netstring(m, len, &pos, &change->value, &change->value_len))
        goto corrupt;
    if (pos != len)
        goto corrupt;
    change->op = m[0] == 'P' ? WK_SETTINGS_PUT : WK_SETTINGS_REMOVE;
    change->version = (int64_t)version;
    memcpy(change->epoch, es, elen);
    change->epoch[elen] = '\0';
    return WK_OK;
corrupt:
    memset(change, 0, sizeof(*change));
    return WK_ECORRUPT;
}
