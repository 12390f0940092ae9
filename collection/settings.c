/*
 * collection/settings.c — Settings queries: put and remove (hash + version
 * counter + PUBLISH in one script), snapshot (one read-only script), and
 * the decoder of the published change messages.
 *
 * The scripts check the shape of both keys before writing anything, so a
 * corrupted item fails with WK_ECORRUPT and never leaves a half-made
 * change (a hash written without a version bump or a message).
 */
#include <stdlib.h>

#include "collection/common.h"

#include <wakuwaku/settings.h>

#include "collection/settings_internal.h"

/* ------------------------------------------------------------------------
 * Scripts. KEYS: map, version. Errors the C side reports as WK_ECORRUPT
 * start with "WKCORRUPT".
 * ---------------------------------------------------------------------- */

/* Shape check shared by every script: the map is a hash (or absent), the
 * version a decimal counter (or absent). Versions stay below 10^15 so Lua
 * numbers (doubles) hold them exactly. */
#define CHECK_SHAPE                                                                        \
    "local t = redis.call('TYPE', KEYS[1]).ok\n"                                           \
    "if t ~= 'none' and t ~= 'hash' then\n"                                                \
    "  return redis.error_reply('WKCORRUPT the map is a ' .. t .. ', not a hash')\n"       \
    "end\n"                                                                                \
    "local cur = redis.call('TYPE', KEYS[2]).ok\n"                                         \
    "if cur == 'none' then cur = '0'\n"                                                    \
    "elseif cur ~= 'string' then\n"                                                        \
    "  return redis.error_reply('WKCORRUPT the version is a ' .. cur .. ', not a counter')\n" \
    "else\n"                                                                               \
    "  cur = redis.call('GET', KEYS[2])\n"                                                 \
    "  if not string.match(cur, '^%d+$') or string.len(cur) > 15 then\n"                  \
    "    return redis.error_reply('WKCORRUPT the version is not a counter')\n"             \
    "  end\n"                                                                              \
    "end\n"

/* A netstring: "<length>:<bytes>," (lengths below 10^14 print exactly). */
#define NETSTRING "local function ns(s) return string.len(s) .. ':' .. s .. ',' end\n"

/* ARGV: channel, key, value. Returns the new version. */
static const wk_script put_script = {
    "settings.put",
    CHECK_SHAPE NETSTRING
    "local v = redis.call('INCR', KEYS[2])\n"
    "redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])\n"
    "redis.call('PUBLISH', ARGV[1], 'P' .. ns(string.format('%d', v)) .. ns(ARGV[2]) .. ns(ARGV[3]))\n"
    "return v\n"};

/* ARGV: channel, key. Returns {removed, version}. */
static const wk_script remove_script = {
    "settings.remove",
    CHECK_SHAPE NETSTRING
    "if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return {0, tonumber(cur)} end\n"
    "local v = redis.call('INCR', KEYS[2])\n"
    "redis.call('HDEL', KEYS[1], ARGV[2])\n"
    "redis.call('PUBLISH', ARGV[1], 'R' .. ns(string.format('%d', v)) .. ns(ARGV[2]))\n"
    "return {1, v}\n"};

/* Returns {version (string), {k1, v1, k2, v2, …}}. Writes nothing. */
static const wk_script snapshot_script = {
    "settings.snapshot",
    CHECK_SHAPE "return {cur, redis.call('HGETALL', KEYS[1])}\n"};

/* ------------------------------------------------------------------------
 * Keys
 * ---------------------------------------------------------------------- */

typedef struct keys {
    char map[WK_KEY_MAX], version[WK_KEY_MAX], chan[WK_KEY_MAX];
    size_t map_len, version_len, chan_len;
} keys;

static int prepare(wk_processor *p, const char *op, const wk_entity *e, const wk_name *name,
                   keys *k, bool with_chan)
{
    int rc = wk__prepare(p, op, e, WK_KIND_SETTINGS, name, ":map", k->map, &k->map_len);
    if (!rc)
        rc = wk__prepare(p, op, e, WK_KIND_SETTINGS, name, ":version", k->version,
                         &k->version_len);
    if (!rc && with_chan)
        rc = wk__prepare(p, op, e, WK_KIND_SETTINGS, name, ":chan", k->chan, &k->chan_len);
    return rc;
}

/* Error replies: the scripts' WKCORRUPT → WK_ECORRUPT, others WK_EREDIS. */
static int script_error(const wk_reply *r, wk_diag *d)
{
    size_t len;
    const char *s = wk_reply_str(r, &len);
    if (len >= 10 && memcmp(s, "WKCORRUPT ", 10) == 0)
        return wk_diag_fail(d, WK_ECORRUPT, "%.*s", (int)(len - 10 > 200 ? 200 : len - 10),
                            s + 10);
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

int wk_settings_put(wk_processor *p, const wk_entity *settings, wk_name name, const void *key,
                    size_t key_len, const void *value, size_t value_len, int64_t *version)
{
    keys k;
    int rc = prepare(p, "settings.put", settings, &name, &k, true);
    if (rc)
        return rc;
    if ((!key && key_len) || (!value && value_len))
        return wk__processor_fail(p, WK_EINVAL, "settings.put: key or value is NULL");
    const char *argv[5] = {k.map, k.version, k.chan, key ? key : "", value ? value : ""};
    size_t argvlen[5] = {k.map_len, k.version_len, k.chan_len, key_len, value_len};
    wk_access access = {settings, WK_WRITE};
    /* The parser writes the caller's *version (batches parse later). */
    wk_query q = {.name = "settings.put",
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_PARSE_ERRORS,
                  .script = &put_script,
                  .nkeys = 2,
                  .argc = 5,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_put,
                  .out = version};
    return wk_process(p, &q);
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

int wk_settings_remove(wk_processor *p, const wk_entity *settings, wk_name name, const void *key,
                       size_t key_len, wk_settings_removal *out)
{
    keys k;
    int rc = prepare(p, "settings.remove", settings, &name, &k, true);
    if (rc)
        return rc;
    if (!key && key_len)
        return wk__processor_fail(p, WK_EINVAL, "settings.remove: key is NULL");
    const char *argv[4] = {k.map, k.version, k.chan, key ? key : ""};
    size_t argvlen[4] = {k.map_len, k.version_len, k.chan_len, key_len};
    wk_access access = {settings, WK_WRITE};
    wk_query q = {.name = "settings.remove",
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_PARSE_ERRORS,
                  .script = &remove_script,
                  .nkeys = 2,
                  .argc = 4,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_remove,
                  .out = out};
    return wk_process(p, &q);
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

static int entry_cmp(const void *x, const void *y)
{
    const wk_settings_entry *a = x, *b = y;
    return key_cmp(a->key, a->key_len, b->key, b->key_len);
}

/* See collection/settings_internal.h. */
int wk__settings_build(wk_settings_map **out, int64_t version, size_t count,
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
        if (kl)
            memcpy(data, k, kl);
        data[kl] = '\0';
        entries[i].key = data;
        entries[i].key_len = kl;
        data += kl + 1;
        if (vl)
            memcpy(data, v, vl);
        data[vl] = '\0';
        entries[i].value = data;
        entries[i].value_len = vl;
        data += vl + 1;
    }
    if (count > 1)
        qsort(entries, count, sizeof(*entries), entry_cmp);
    s->version = version;
    s->count = count;
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

/* Strict decimal: digits only, no sign, no leading zero (but "0"), fits. */
static bool parse_decimal(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static void reply_pair(const void *ctx, size_t i, const char **k, size_t *klen, const char **v,
                       size_t *vlen)
{
    const wk_reply *map = ctx;
    *k = wk_reply_str(wk_reply_at(map, 2 * i), klen);
    *v = wk_reply_str(wk_reply_at(map, 2 * i + 1), vlen);
}

static int parse_snapshot(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) == WK_REPLY_ERROR)
        return script_error(r, d);
    const wk_reply *version = wk_reply_at(r, 0), *map = wk_reply_at(r, 1);
    if (wk_reply_count(r) != 2 || wk_reply_get_type(version) != WK_REPLY_STRING ||
        wk_reply_get_type(map) != WK_REPLY_ARRAY || wk_reply_count(map) % 2 != 0)
        return wk_diag_fail(d, WK_EPROTO, "expected {version, {key, value, …}}");
    size_t vlen;
    const char *vs = wk_reply_str(version, &vlen);
    uint64_t v;
    if (!parse_decimal(vs, vlen, INT64_MAX, &v))
        return wk_diag_fail(d, WK_ECORRUPT, "the version is not a counter");
    size_t count = wk_reply_count(map) / 2;
    for (size_t i = 0; i < 2 * count; i++) {
        if (wk_reply_get_type(wk_reply_at(map, i)) != WK_REPLY_STRING)
            return wk_diag_fail(d, WK_EPROTO, "expected strings in HGETALL");
    }
    /* Written only on success; the caller set it to NULL before sending. */
    int rc = wk__settings_build(q->out, (int64_t)v, count, reply_pair, map);
    if (rc)
        return wk_diag_fail(d, rc, "out of memory copying %zu entries", count);
    return WK_OK;
}

int wk_settings_snapshot(wk_processor *p, const wk_entity *settings, wk_name name,
                         wk_settings_map **out)
{
    if (out)
        *out = NULL;
    keys k;
    int rc = prepare(p, "settings.snapshot", settings, &name, &k, false);
    if (rc)
        return rc;
    if (!out)
        return wk__processor_fail(p, WK_EINVAL, "settings.snapshot: out is NULL");
    const char *argv[2] = {k.map, k.version};
    size_t argvlen[2] = {k.map_len, k.version_len};
    wk_access access = {settings, WK_READ};
    wk_query q = {.name = "settings.snapshot",
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_RETRY_SAFE | WK_QUERY_PARSE_ERRORS,
                  .script = &snapshot_script,
                  .nkeys = 2,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_snapshot,
                  .out = out};
    return wk_process(p, &q);
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
    if (i >= len || m[i] != ':' || !parse_decimal(m + start, i - start, SIZE_MAX, &n))
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
    size_t pos = 1, vlen;
    const char *vs;
    uint64_t version;
    if (!netstring(m, len, &pos, &vs, &vlen) || !parse_decimal(vs, vlen, INT64_MAX, &version) ||
        version < 1 || !netstring(m, len, &pos, &change->key, &change->key_len))
        goto corrupt;
    if (m[0] == 'P' && !netstring(m, len, &pos, &change->value, &change->value_len))
        goto corrupt;
    if (pos != len)
        goto corrupt;
    change->op = m[0] == 'P' ? WK_SETTINGS_PUT : WK_SETTINGS_REMOVE;
    change->version = (int64_t)version;
    return WK_OK;
corrupt:
    memset(change, 0, sizeof(*change));
    return WK_ECORRUPT;
}
