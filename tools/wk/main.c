/*
 * tools/wk/main.c — wk, the operator's command line: inspect and repair a
 * service's entities in Redis, driven by the service's own schema.json.
 *
 *   wk --url URL --schema schema.json [--as CAPABILITY] [--json]
 *      <entity-id> <command> [name] [args]
 *
 * The schema is read and checked by the code generator's own parser and
 * checker (codegen/cg_json.c, codegen/check.c, compiled in), so wk knows
 * every entity by id, kind, namespace and name type exactly as generated
 * code does. Every command is a query through the library's dispatch, on a
 * handle opened with the capability named by --as: a capability that does
 * not grant a command refuses it with the library's own message.
 *
 * Exit status: 0 done; 1 not found / not held / limited; 2 usage (bad
 * arguments, unknown entity, command or capability, unreadable or invalid
 * schema); 3 refused by the capability (WK_EDENIED); 4 connection or
 * server error (any other status).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/wakuwaku.h>

#include "codegen/schema.h"

enum { EXIT_OK = 0, EXIT_NOT_FOUND = 1, EXIT_USAGE = 2, EXIT_DENIED = 3, EXIT_ERROR = 4 };

/* ------------------------------------------------------------------------
 * Output: text or JSON
 * ---------------------------------------------------------------------- */

static bool json_mode;

static void json_string(FILE *f, const char *s, size_t len)
{
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Whether `s` is valid UTF-8 without NUL, so it can be a JSON string. */
static bool is_text(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!n || c == 0 || i + n > len)
            return false;
        for (size_t k = 1; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        i += n;
    }
    return true;
}

static void put_hex(FILE *f, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", b[i]);
}

/* A JSON member with a byte value: "key": "text" when it is text, else
 * "key_hex": "…". */
static void json_bytes_member(FILE *f, const char *key, const void *data, size_t len)
{
    if (is_text(data, len)) {
        fprintf(f, "\"%s\":", key);
        json_string(f, data, len);
    } else {
        fprintf(f, "\"%s_hex\":\"", key);
        put_hex(f, data, len);
        fputc('"', f);
    }
}

/* ------------------------------------------------------------------------
 * Invocation
 * ---------------------------------------------------------------------- */

typedef struct invocation {
    const char *url, *schema_path, *as;
    const entity *ent;     /* the schema's entity */
    wk_entity desc;        /* its runtime descriptor */
    const char *kind_name; /* "Lock" */
    const char *cmd;
    int argc; /* after the command */
    char **argv;
    wk_db *db;
    wk_processor *p;
    const schema *s;
} invocation;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("wk: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (wk --help)\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* A library status → exit status, with the handle's message. */
static int fail(const invocation *inv, int rc)
{
    const char *msg = inv->db ? wk_db_errmsg(inv->db) : "";
    if (!msg || !*msg)
        msg = wk_strerror(rc);
    fprintf(stderr, "wk: %s\n", msg);
    if (json_mode) {
        fputs("{\"error\":", stdout);
        json_string(stdout, msg, strlen(msg));
        printf(",\"status\":\"%s\"}\n", wk_err_name(rc));
    }
    if (rc == WK_EDENIED)
        return EXIT_DENIED;
    if (rc == WK_EINVAL)
        return EXIT_USAGE;
    return EXIT_ERROR;
}

/* The item name of the entity's name type from `text`. */
static int parse_name(const invocation *inv, const char *text, wk_name *out)
{
    char *end;
    errno = 0;
    switch (inv->ent->name_type) {
    case NAME_U64:
        if (!*text || *text == '-' || *text == '+')
            break;
        out->type = WK_NAME_U64;
        out->u64 = strtoull(text, &end, 10);
        if (!errno && !*end)
            return 0;
        break;
    case NAME_I64:
        out->type = WK_NAME_I64;
        out->i64 = strtoll(text, &end, 10);
        if (*text && !errno && !*end)
            return 0;
        break;
    case NAME_STR:
    case NAME_BYTES:
        *out = wk_name_str(text);
        return 0;
    }
    return usage_error("%s: name \"%s\" is not a%s integer", inv->ent->id, text,
                       inv->ent->name_type == NAME_U64 ? "n unsigned" : "");
}

static int parse_token(const char *text, wk_token *t)
{
    if (strlen(text) != 2 * WK_TOKEN_LEN)
        return usage_error("a token is %d hex digits (got \"%s\")", 2 * WK_TOKEN_LEN, text);
    for (int i = 0; i < WK_TOKEN_LEN; i++) {
        unsigned v;
        char pair[3] = {text[2 * i], text[2 * i + 1], 0};
        char *end;
        v = (unsigned)strtoul(pair, &end, 16);
        if (*end || pair[0] == '+' || pair[0] == '-' || pair[0] == ' ')
            return usage_error("a token is %d hex digits (got \"%s\")", 2 * WK_TOKEN_LEN, text);
        t->bytes[i] = (uint8_t)v;
    }
    return 0;
}

/* Print the item name as a JSON value (a number for integer names). */
static void json_name(const invocation *inv, const char *name, size_t len)
{
    if (inv->ent->name_type == NAME_U64 || inv->ent->name_type == NAME_I64)
        fwrite(name, 1, len, stdout);
    else
        json_string(stdout, name, len);
}

/* ------------------------------------------------------------------------
 * Commands
 * ---------------------------------------------------------------------- */

#define K_LOCK (1u << 0)
#define K_RWLOCK (1u << 1)
#define K_FENCED (1u << 2)
#define K_SEM (1u << 3)
#define K_BUCKET (1u << 4)
#define K_CACHE (1u << 5)
#define K_HCACHE (1u << 6)
#define K_SETTINGS (1u << 7)
#define K_OTHER (1u << 8)
#define K_LEASES (K_LOCK | K_RWLOCK | K_FENCED | K_SEM)
#define K_ALL 0x1FFu

typedef struct command {
    unsigned kinds;
    const char *name;
    const char *args; /* after the command, for usage */
    int min_args, max_args;
    const char *summary; /* one line; the exit status 1 case after "1:" */
    int (*run)(invocation *inv, wk_name name);
} command;

static unsigned kind_bit(const char *k)
{
    static const struct {
        const char *name;
        unsigned bit;
    } map[] = {{"Lock", K_LOCK},          {"RwLock", K_RWLOCK},      {"FencedLock", K_FENCED},
               {"Semaphore", K_SEM},      {"TokenBucket", K_BUCKET}, {"Cache", K_CACHE},
               {"HashedCache", K_HCACHE}, {"Settings", K_SETTINGS}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(map[i].name, k))
            return map[i].bit;
    return K_OTHER;
}

static void text_or_json_bool(const char *key, bool v, bool last)
{
    if (json_mode)
        printf("\"%s\":%s%s", key, v ? "true" : "false", last ? "}\n" : ",");
    else
        printf("%s: %s\n", key, v ? "yes" : "no");
}

static void text_or_json_int(const char *key, long long v, bool last)
{
    if (json_mode)
        printf("\"%s\":%lld%s", key, v, last ? "}\n" : ",");
    else
        printf("%s: %lld\n", key, v);
}

static void open_json(void)
{
    if (json_mode)
        fputc('{', stdout);
}

static int cmd_inspect(invocation *inv, wk_name name)
{
    int rc;
    bool held;
    open_json();
    switch (kind_bit(inv->kind_name)) {
    case K_LOCK: {
        wk_lock_state st;
        if ((rc = wk_lock_inspect(inv->p, &inv->desc, name, &st)))
            return fail(inv, rc);
        held = st.held;
        text_or_json_bool("held", st.held, false);
        text_or_json_int("ttl_ms", st.ttl_ms, true);
        break;
    }
    case K_RWLOCK: {
        wk_rwlock_state st;
        if ((rc = wk_rwlock_inspect(inv->p, &inv->desc, name, &st)))
            return fail(inv, rc);
        held = st.writer_held || st.readers > 0;
        text_or_json_bool("writer_held", st.writer_held, false);
        text_or_json_int("writer_ttl_ms", st.writer_ttl_ms, false);
        text_or_json_int("readers", st.readers, true);
        break;
    }
    case K_FENCED: {
        wk_fenced_lock_state st;
        if ((rc = wk_fenced_lock_inspect(inv->p, &inv->desc, name, &st)))
            return fail(inv, rc);
        held = st.held;
        text_or_json_bool("held", st.held, false);
        text_or_json_int("ttl_ms", st.ttl_ms, false);
        text_or_json_int("last_fence", st.last_fence, true);
        break;
    }
    default: {
        wk_semaphore_state st;
        if ((rc = wk_semaphore_inspect(inv->p, &inv->desc, name, &st)))
            return fail(inv, rc);
        held = st.running > 0;
        text_or_json_int("running", st.running, false);
        text_or_json_int("available", st.available, true);
        break;
    }
    }
    return held ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_owned(invocation *inv, wk_name name)
{
    wk_token token;
    if (parse_token(inv->argv[0], &token))
        return EXIT_USAGE;
    int rc;
    bool owned = false;
    int64_t ttl = 0;
    const char *as = NULL;
    switch (kind_bit(inv->kind_name)) {
    case K_LOCK: {
        wk_lease_state st;
        rc = wk_lock_owned(inv->p, &inv->desc, name, &token, &st);
        owned = st.owned, ttl = st.ttl_ms;
        break;
    }
    case K_RWLOCK: {
        wk_lease_state st;
        rc = wk_rwlock_owned_write(inv->p, &inv->desc, name, &token, &st);
        as = "writer";
        if (!rc && !st.owned) {
            rc = wk_rwlock_owned_read(inv->p, &inv->desc, name, &token, &st);
            as = "reader";
        }
        owned = st.owned, ttl = st.ttl_ms;
        if (!owned)
            as = NULL;
        break;
    }
    case K_FENCED: {
        wk_fenced_lock_ownership st;
        rc = wk_fenced_lock_owned(inv->p, &inv->desc, name, &token, &st);
        owned = st.owned, ttl = st.ttl_ms;
        break;
    }
    default: {
        wk_lease_state st;
        rc = wk_semaphore_owned(inv->p, &inv->desc, name, &token, &st);
        owned = st.owned, ttl = st.ttl_ms;
        break;
    }
    }
    if (rc)
        return fail(inv, rc);
    open_json();
    text_or_json_bool("owned", owned, false);
    if (as) {
        if (json_mode)
            printf("\"as\":\"%s\",", as);
        else
            printf("as: %s\n", as);
    }
    text_or_json_int("ttl_ms", ttl, true);
    return owned ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_force_release(invocation *inv, wk_name name)
{
    int rc;
    bool was_held = false;
    int64_t freed = 0;
    switch (kind_bit(inv->kind_name)) {
    case K_LOCK:
        rc = wk_lock_force_release(inv->p, &inv->desc, name, &was_held);
        break;
    case K_RWLOCK:
        rc = wk_rwlock_force_release(inv->p, &inv->desc, name, &was_held);
        break;
    case K_FENCED:
        rc = wk_fenced_lock_force_release(inv->p, &inv->desc, name, &was_held);
        break;
    default:
        rc = wk_semaphore_force_release(inv->p, &inv->desc, name, &freed);
        was_held = freed > 0;
        break;
    }
    if (rc)
        return fail(inv, rc);
    open_json();
    if (kind_bit(inv->kind_name) == K_SEM) {
        text_or_json_bool("was_held", was_held, false);
        text_or_json_int("freed", freed, true);
    } else {
        text_or_json_bool("was_held", was_held, true);
    }
    return was_held ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_peek(invocation *inv, wk_name name)
{
    wk_token_bucket_state st;
    int rc = wk_token_bucket_peek(inv->p, &inv->desc, name, &st);
    if (rc)
        return fail(inv, rc);
    if (json_mode)
        printf("{\"tokens\":%.17g,\"available\":%" PRId64 ",\"full_after_ms\":%" PRId64 "}\n",
               st.tokens, st.available, st.full_after_ms);
    else
        printf("tokens: %.17g\navailable: %" PRId64 "\nfull_after_ms: %" PRId64 "\n", st.tokens,
               st.available, st.full_after_ms);
    return st.available > 0 ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_reset(invocation *inv, wk_name name)
{
    bool was_used = false;
    int rc = wk_token_bucket_reset(inv->p, &inv->desc, name, &was_used);
    if (rc)
        return fail(inv, rc);
    open_json();
    text_or_json_bool("was_used", was_used, true);
    return EXIT_OK;
}

static int cmd_get(invocation *inv, wk_name name)
{
    wk_body body = WK_BODY_INIT;
    bool hashed = kind_bit(inv->kind_name) == K_HCACHE;
    int rc = hashed ? wk_hashed_cache_get(inv->p, &inv->desc, name, &body)
                    : wk_cache_get(inv->p, &inv->desc, name, &body);
    if (rc)
        return fail(inv, rc);
    if (json_mode) {
        printf("{\"found\":%s", body.found ? "true" : "false");
        if (body.found) {
            fputc(',', stdout);
            json_bytes_member(stdout, "body", body.data, body.len);
            if (hashed) {
                fputs(",\"hash\":\"", stdout);
                put_hex(stdout, body.hash, WK_HASH_LEN);
                fputc('"', stdout);
            }
        }
        fputs("}\n", stdout);
    } else if (body.found) {
        fwrite(body.data, 1, body.len, stdout);
    } else {
        fprintf(stderr, "wk: %s: no item\n", inv->ent->id);
    }
    bool found = body.found;
    wk_body_free(&body);
    return found ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_put(invocation *inv, wk_name name)
{
    const char *v = inv->argv[0];
    int rc;
    if (kind_bit(inv->kind_name) == K_HCACHE) {
        uint8_t hash[WK_HASH_LEN];
        rc = wk_hashed_cache_put(inv->p, &inv->desc, name, v, strlen(v), hash);
    } else {
        rc = wk_cache_put(inv->p, &inv->desc, name, v, strlen(v));
    }
    if (rc)
        return fail(inv, rc);
    if (json_mode)
        puts("{\"stored\":true}");
    return EXIT_OK;
}

static int cmd_remove(invocation *inv, wk_name name)
{
    bool removed = false;
    int rc = kind_bit(inv->kind_name) == K_HCACHE
                 ? wk_hashed_cache_remove(inv->p, &inv->desc, name, &removed)
                 : wk_cache_remove(inv->p, &inv->desc, name, &removed);
    if (rc)
        return fail(inv, rc);
    open_json();
    text_or_json_bool("removed", removed, true);
    return removed ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_settings_get(invocation *inv, wk_name name)
{
    wk_settings_map *map = NULL;
    int rc = wk_settings_snapshot(inv->p, &inv->desc, name, &map);
    if (rc)
        return fail(inv, rc);
    int status = EXIT_OK;
    if (inv->argc == 1) {
        const char *key = inv->argv[0];
        const wk_settings_entry *e = wk_settings_map_find(map, key, strlen(key));
        if (json_mode) {
            printf("{\"version\":%" PRId64 ",\"found\":%s", map->version, e ? "true" : "false");
            if (e) {
                fputc(',', stdout);
                json_bytes_member(stdout, "value", e->value, e->value_len);
            }
            fputs("}\n", stdout);
        } else if (e) {
            fwrite(e->value, 1, e->value_len, stdout);
            fputc('\n', stdout);
        } else {
            fprintf(stderr, "wk: %s: no key \"%s\"\n", inv->ent->id, key);
        }
        status = e ? EXIT_OK : EXIT_NOT_FOUND;
    } else if (json_mode) {
        printf("{\"version\":%" PRId64 ",\"epoch\":\"%s\",\"entries\":{", map->version, map->epoch);
        for (size_t i = 0; i < map->count; i++) {
            const wk_settings_entry *e = &map->entries[i];
            if (i)
                fputc(',', stdout);
            json_string(stdout, e->key, e->key_len);
            fputc(':', stdout);
            json_string(stdout, e->value, e->value_len);
        }
        fputs("}}\n", stdout);
    } else {
        printf("# version %" PRId64 "\n", map->version);
        for (size_t i = 0; i < map->count; i++) {
            const wk_settings_entry *e = &map->entries[i];
            fwrite(e->key, 1, e->key_len, stdout);
            fputc('=', stdout);
            fwrite(e->value, 1, e->value_len, stdout);
            fputc('\n', stdout);
        }
    }
    wk_settings_map_free(map);
    return status;
}

static int cmd_settings_put(invocation *inv, wk_name name)
{
    const char *k = inv->argv[0], *v = inv->argv[1];
    int64_t version = 0;
    int rc = wk_settings_put(inv->p, &inv->desc, name, k, strlen(k), v, strlen(v), &version);
    if (rc)
        return fail(inv, rc);
    open_json();
    text_or_json_int("version", version, true);
    return EXIT_OK;
}

static int cmd_settings_remove(invocation *inv, wk_name name)
{
    const char *k = inv->argv[0];
    wk_settings_removal out;
    int rc = wk_settings_remove(inv->p, &inv->desc, name, k, strlen(k), &out);
    if (rc)
        return fail(inv, rc);
    open_json();
    text_or_json_bool("removed", out.removed, false);
    text_or_json_int("version", out.version, true);
    return out.removed ? EXIT_OK : EXIT_NOT_FOUND;
}

/* ---- list: SCAN over the entity's key prefixes, a READ query each page */

typedef struct names {
    char **v;
    size_t n, cap;
} names;

typedef struct scan_out {
    char cursor[32];
    names *found;
    const char *single, *multi; /* the two key prefixes */
    size_t single_len, multi_len;
} scan_out;

static int add_name(names *ns, const char *s, size_t len)
{
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 64;
        char **v = realloc(ns->v, cap * sizeof(*v));
        if (!v)
            return WK_ENOMEM;
        ns->v = v, ns->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c)
        return WK_ENOMEM;
    memcpy(c, s, len);
    c[len] = '\0';
    ns->v[ns->n++] = c;
    return WK_OK;
}

static int parse_scan(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    scan_out *o = q->out;
    const wk_reply *cur = wk_reply_at(r, 0), *keys = wk_reply_at(r, 1);
    size_t clen;
    const char *c = wk_reply_str(cur, &clen);
    if (wk_reply_count(r) != 2 || !c || clen >= sizeof(o->cursor) ||
        wk_reply_get_type(keys) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_EPROTO, "list: unexpected SCAN reply");
    memcpy(o->cursor, c, clen);
    o->cursor[clen] = '\0';
    for (size_t i = 0; i < wk_reply_count(keys); i++) {
        size_t len;
        const char *k = wk_reply_str(wk_reply_at(keys, i), &len);
        if (!k)
            continue;
        if (len > o->single_len && !memcmp(k, o->single, o->single_len)) {
            if (add_name(o->found, k + o->single_len, len - o->single_len))
                return WK_ENOMEM;
        } else if (len > o->multi_len && !memcmp(k, o->multi, o->multi_len)) {
            const char *rest = k + o->multi_len, *close = NULL;
            for (const char *p = rest; p < k + len; p++)
                if (*p == '}')
                    close = p; /* suffixes hold no '}': the last one closes */
            if (close && add_name(o->found, rest, (size_t)(close - rest)))
                return WK_ENOMEM;
        }
    }
    return WK_OK;
}

/* A glob pattern matching `prefix` literally, then anything. */
static void glob_of(char *out, size_t cap, const char *prefix)
{
    size_t n = 0;
    for (const char *p = prefix; *p && n + 3 < cap; p++) {
        if (strchr("*?[]\\", *p))
            out[n++] = '\\';
        out[n++] = *p;
    }
    out[n++] = '*';
    out[n] = '\0';
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int scan_prefix(invocation *inv, const char *pattern, scan_out *o)
{
    strcpy(o->cursor, "0");
    do {
        char cursor[32];
        strcpy(cursor, o->cursor);
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        size_t argvlen[6];
        for (int i = 0; i < 6; i++)
            argvlen[i] = strlen(argv[i]);
        wk_access a = {&inv->desc, WK_READ};
        wk_query q = {.name = "wk.list",
                      .effect = {&a, 1},
                      .flags = WK_QUERY_RETRY_SAFE,
                      .argc = 6,
                      .argv = argv,
                      .argvlen = argvlen,
                      .parse = parse_scan,
                      .out = o};
        int rc = wk_process(inv->p, &q);
        if (rc)
            return rc;
    } while (strcmp(o->cursor, "0"));
    return WK_OK;
}

static int cmd_list(invocation *inv, wk_name unused)
{
    (void)unused;
    names found = {0};
    char single[WK_KEY_MAX], multi[WK_KEY_MAX], pat[2 * WK_KEY_MAX];
    snprintf(single, sizeof(single), "%s%s:%s:", WK_KEY_PREFIX, inv->kind_name, inv->desc.ns);
    snprintf(multi, sizeof(multi), "%s%s:{%s:", WK_KEY_PREFIX, inv->kind_name, inv->desc.ns);
    scan_out o = {.found = &found,
                  .single = single,
                  .multi = multi,
                  .single_len = strlen(single),
                  .multi_len = strlen(multi)};
    glob_of(pat, sizeof(pat), single);
    int rc = scan_prefix(inv, pat, &o);
    if (!rc) {
        glob_of(pat, sizeof(pat), multi);
        rc = scan_prefix(inv, pat, &o);
    }
    if (!rc) {
        if (found.n)
            qsort(found.v, found.n, sizeof(*found.v), cmp_names);
        if (json_mode)
            fputs("{\"names\":[", stdout);
        size_t shown = 0;
        for (size_t i = 0; i < found.n; i++) {
            if (i && !strcmp(found.v[i], found.v[i - 1]))
                continue; /* the keys of one multi-key item */
            if (json_mode) {
                if (shown)
                    fputc(',', stdout);
                json_name(inv, found.v[i], strlen(found.v[i]));
            } else {
                puts(found.v[i]);
            }
            shown++;
        }
        if (json_mode)
            fputs("]}\n", stdout);
    }
    for (size_t i = 0; i < found.n; i++)
        free(found.v[i]);
    free(found.v);
    return rc ? fail(inv, rc) : EXIT_OK;
}

static const command commands[] = {
    {K_LEASES, "inspect", "NAME", 0, 0, "who holds NAME, and for how long (1: not held)",
     cmd_inspect},
    {K_LEASES, "owned", "NAME TOKEN", 1, 1,
     "does TOKEN (32 hex digits) hold NAME, and for how long (1: not held)", cmd_owned},
    {K_LEASES, "force-release", "NAME", 0, 0,
     "free NAME whoever holds it, and wake its first waiter (1: was not held)", cmd_force_release},
    {K_BUCKET, "peek", "NAME", 0, 0, "tokens left, without taking any (1: limited, none left)",
     cmd_peek},
    {K_BUCKET, "reset", "NAME", 0, 0, "refill NAME at once", cmd_reset},
    {K_CACHE | K_HCACHE, "get", "NAME", 0, 0, "print the body of NAME (1: no item)", cmd_get},
    {K_CACHE | K_HCACHE, "put", "NAME BODY", 1, 1, "store BODY (bytes of the argument)", cmd_put},
    {K_CACHE | K_HCACHE, "remove", "NAME", 0, 0, "delete the item NAME (1: no item)", cmd_remove},
    {K_SETTINGS, "get", "NAME [KEY]", 0, 1,
     "print the whole map NAME, or the value of KEY (1: no such key)", cmd_settings_get},
    {K_SETTINGS, "put", "NAME KEY VALUE", 2, 2, "set KEY to VALUE (a new version)",
     cmd_settings_put},
    {K_SETTINGS, "remove", "NAME KEY", 1, 1, "delete KEY (1: no such key)", cmd_settings_remove},
    {K_ALL, "list", "", -1, -1, "the names that have keys now (SCAN, never KEYS)", cmd_list},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* ------------------------------------------------------------------------
 * Help
 * ---------------------------------------------------------------------- */

static void help(FILE *to)
{
    fputs("usage: wk --url URL --schema SCHEMA.json [--as CAPABILITY] [--json]\n"
          "          ENTITY COMMAND [NAME] [ARGS]\n"
          "       wk --schema SCHEMA.json help [ENTITY [COMMAND]]\n"
          "       wk --help | --version\n"
          "\n"
          "ENTITY is an entity id of the schema; the commands depend on its kind:\n"
          "  Lock, RwLock, FencedLock, Semaphore:\n"
          "    inspect NAME           who holds it, for how long         (1: not held)\n"
          "    owned NAME TOKEN       does TOKEN (32 hex digits) hold it (1: not held)\n"
          "    force-release NAME     free it whoever holds it           (1: was not held)\n"
          "  TokenBucket:\n"
          "    peek NAME              tokens left                        (1: limited)\n"
          "    reset NAME             refill it at once\n"
          "  Cache, HashedCache:\n"
          "    get NAME               print the body                     (1: no item)\n"
          "    put NAME BODY          store BODY\n"
          "    remove NAME            delete the item                    (1: no item)\n"
          "  Settings:\n"
          "    get NAME [KEY]         the whole map, or one value        (1: no such key)\n"
          "    put NAME KEY VALUE     set a key (a new version)\n"
          "    remove NAME KEY        delete a key                       (1: no such key)\n"
          "  every kind:\n"
          "    list                   the names with keys now (SCAN, cursor by cursor)\n"
          "\n"
          "options:\n"
          "  --url URL           redis://, rediss:// or redis-sentinel:// (or $WK_URL)\n"
          "  --schema FILE       the service's schema.json (or $WK_SCHEMA)\n"
          "  --as CAPABILITY     a capability of the schema, or read-only (default)\n"
          "                      or read-write; refusals are the library's own\n"
          "  --json              machine-readable output: one JSON object on stdout\n"
          "  --timeout MS        connect and command timeout (default 2000)\n"
          "\n"
          "exit status: 0 done; 1 not found, not held or limited; 2 usage;\n"
          "3 refused by the capability; 4 connection or server error.\n",
          to);
}

static int help_entity(const schema *s, const char *id, const char *cmd)
{
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        if (strcmp(e->id, id))
            continue;
        const char *kn = kind_info(e->kind)->name;
        printf("%s: %s, namespace \"%s\"%s%s\n", e->id, kn, e->ns, e->description ? ": " : "",
               e->description ? e->description : "");
        for (size_t c = 0; c < NCOMMANDS; c++) {
            if (!(commands[c].kinds & kind_bit(kn)))
                continue;
            if (cmd && strcmp(cmd, commands[c].name))
                continue;
            printf("  wk … %s %s %s\n      %s\n", e->id, commands[c].name, commands[c].args,
                   commands[c].summary);
        }
        return EXIT_OK;
    }
    return usage_error("no entity \"%s\" in the schema", id);
}

static void list_entities(const schema *s)
{
    printf("entities of %s:\n", s->service);
    for (size_t i = 0; i < s->nentities; i++)
        printf("  %-16s %-12s namespace \"%s\"\n", s->entities[i].id,
               kind_info(s->entities[i].kind)->name, s->entities[i].ns);
    printf("capabilities: read-only read-write");
    for (size_t i = 0; i < s->ncaps; i++)
        printf(" %s", s->caps[i].id);
    putchar('\n');
}

/* ------------------------------------------------------------------------
 * Schema, capability, handle
 * ---------------------------------------------------------------------- */

static void descriptor_of(const entity *e, wk_entity *out)
{
    const kind_desc *kd = kind_info(e->kind);
    memset(out, 0, sizeof(*out));
    out->kind = kd->name;
    out->ns = e->ns;
    out->flags = e->fair ? WK_ENTITY_FAIR : 0;
    for (size_t i = 0; kd->params[i]; i++) {
        const param_desc *pd = kd->params[i];
        const param_value *pv = &e->params[i];
        double v = pd->rule == RULE_DURATION ? (double)pv->ms : pv->num;
        if (!strcmp(pd->field, "ttl_ms"))
            out->ttl_ms = (int64_t)v;
        else if (!strcmp(pd->field, "capacity"))
            out->capacity = v;
        else if (!strcmp(pd->field, "rate"))
            out->rate = v;
        else if (!strcmp(pd->field, "period_ms"))
            out->period_ms = (int64_t)v;
    }
}

static wk_grant grant_of(grant g)
{
    return g == GRANT_WRITE ? WK_GRANT_WRITE : g == GRANT_READ ? WK_GRANT_READ : WK_GRANT_NONE;
}

/* The capability named `as`: a built-in one (borrowed, *owned NULL) or one
 * built from the schema (*owned: free it). */
static int capability_of(const schema *s, const char *as, const wk_cap **cap, wk_cap **owned)
{
    *owned = NULL;
    if (!strcmp(as, "read-only")) {
        *cap = wk_cap_read_only();
        return 0;
    }
    if (!strcmp(as, "read-write")) {
        *cap = wk_cap_read_write();
        return 0;
    }
    for (size_t i = 0; i < s->ncaps; i++) {
        const capability *c = &s->caps[i];
        if (strcmp(c->id, as))
            continue;
        wk_cap_entry *rows = calloc(s->nentities ? s->nentities : 1, sizeof(*rows));
        if (!rows)
            return EXIT_ERROR;
        for (size_t k = 0; k < s->nentities; k++) {
            rows[k].kind = kind_info(s->entities[k].kind)->name;
            rows[k].ns = s->entities[k].ns;
            rows[k].grant = grant_of(c->grants[k]);
        }
        wk_cap_table t = {c->id, grant_of(c->default_grant), rows, s->nentities};
        int rc = wk_cap_new_table(owned, &t);
        free(rows);
        if (rc) {
            fprintf(stderr, "wk: capability %s: %s\n", as, wk_strerror(rc));
            return EXIT_ERROR;
        }
        *cap = *owned;
        return 0;
    }
    fprintf(stderr, "wk: no capability \"%s\" (read-only, read-write", as);
    for (size_t i = 0; i < s->ncaps; i++)
        fprintf(stderr, ", %s", s->caps[i].id);
    fputs(")\n", stderr);
    return EXIT_USAGE;
}

static int run_command(invocation *inv, int timeout_ms)
{
    const command *cmd = NULL;
    unsigned bit = kind_bit(inv->kind_name);
    for (size_t c = 0; c < NCOMMANDS; c++)
        if ((commands[c].kinds & bit) && !strcmp(commands[c].name, inv->cmd))
            cmd = &commands[c];
    if (!cmd)
        return usage_error("%s (a %s) has no command \"%s\" (wk --schema … help %s)", inv->ent->id,
                           inv->kind_name, inv->cmd, inv->ent->id);
    wk_name name = wk_name_str("");
    int argc = inv->argc;
    if (cmd->min_args >= 0) {
        if (argc < 1)
            return usage_error("%s %s: NAME is missing (usage: %s %s %s)", inv->ent->id, cmd->name,
                               inv->ent->id, cmd->name, cmd->args);
        if (parse_name(inv, inv->argv[0], &name))
            return EXIT_USAGE;
        inv->argv++, argc--;
        if (argc < cmd->min_args || argc > cmd->max_args)
            return usage_error("%s %s: wrong number of arguments (usage: %s %s %s)", inv->ent->id,
                               cmd->name, inv->ent->id, cmd->name, cmd->args);
    } else if (argc) {
        return usage_error("%s %s takes no arguments", inv->ent->id, cmd->name);
    }
    inv->argc = argc;

    const wk_cap *cap;
    wk_cap *owned;
    int st = capability_of(inv->s, inv->as, &cap, &owned);
    if (st)
        return st;
    wk_db_options opts = WK_DB_OPTIONS_INIT;
    opts.url = inv->url;
    opts.capability = cap;
    opts.client_name = "wk";
    opts.connect_timeout_ms = opts.command_timeout_ms = timeout_ms;
    char err[256] = "";
    int rc = wk_db_open(&inv->db, &opts, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "wk: %s\n", err);
        if (json_mode) {
            fputs("{\"error\":", stdout);
            json_string(stdout, err, strlen(err));
            printf(",\"status\":\"%s\"}\n", wk_err_name(rc));
        }
        wk_cap_free(owned);
        return rc == WK_EINVAL ? EXIT_USAGE : EXIT_ERROR;
    }
    inv->p = wk_db_processor(inv->db);
    st = cmd->run(inv, name);
    fflush(stdout);
    wk_db_close(inv->db);
    wk_cap_free(owned);
    return st;
}

int main(int argc, char **argv)
{
    invocation inv = {0};
    inv.url = getenv("WK_URL");
    inv.schema_path = getenv("WK_SCHEMA");
    inv.as = "read-only";
    int timeout_ms = 2000;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help")) {
            help(stdout);
            return EXIT_OK;
        }
        if (!strcmp(o, "--version")) {
            printf("wk %s\n", wk_version());
            return EXIT_OK;
        }
        if (!strcmp(o, "--json")) {
            json_mode = true;
            continue;
        }
        const char **slot = !strcmp(o, "--url")      ? &inv.url
                            : !strcmp(o, "--schema") ? &inv.schema_path
                            : !strcmp(o, "--as")     ? &inv.as
                                                     : NULL;
        bool is_timeout = !strcmp(o, "--timeout");
        if (!slot && !is_timeout)
            return usage_error("unknown option %s", o);
        if (i + 1 >= argc)
            return usage_error("%s needs a value", o);
        if (is_timeout) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v <= 0 || v > 3600000)
                return usage_error("--timeout: a number of ms from 1 to 3600000");
            timeout_ms = (int)v;
        } else {
            *slot = argv[++i];
        }
    }
    if (i >= argc)
        return usage_error("no entity given");
    if (!inv.schema_path)
        return usage_error("--schema is required (or $WK_SCHEMA)");

    size_t len;
    char *text = read_file(inv.schema_path, &len);
    if (!text) {
        fprintf(stderr, "wk: cannot read %s: %s\n", inv.schema_path, strerror(errno));
        return EXIT_USAGE;
    }
    char perr[256];
    cg_json_pos ppos = {0, 0};
    cg_json_doc *doc = cg_json_parse(text, len, perr, sizeof(perr), &ppos);
    free(text);
    if (!doc) {
        fprintf(stderr, "%s:%d:%d: error: %s\n", inv.schema_path, ppos.line, ppos.col, perr);
        return EXIT_USAGE;
    }
    pool *pl = pool_new();
    diag d = {inv.schema_path, stderr, 0};
    schema s;
    int status;
    if (!check_schema(cg_json_doc_root(doc), inv.schema_path, pl, &d, &s)) {
        fprintf(stderr, "%s: %d error(s)\n", inv.schema_path, d.errors);
        status = EXIT_USAGE;
        goto out;
    }
    inv.s = &s;
    if (!strcmp(argv[i], "help")) {
        if (i + 1 < argc)
            status = help_entity(&s, argv[i + 1], i + 2 < argc ? argv[i + 2] : NULL);
        else
            list_entities(&s), status = EXIT_OK;
        goto out;
    }
    for (size_t k = 0; k < s.nentities; k++)
        if (!strcmp(s.entities[k].id, argv[i]))
            inv.ent = &s.entities[k];
    if (!inv.ent) {
        status = usage_error("no entity \"%s\" in %s", argv[i], inv.schema_path);
        goto out;
    }
    if (i + 1 >= argc || !strcmp(argv[i + 1], "--help") || !strcmp(argv[i + 1], "help")) {
        status = help_entity(&s, inv.ent->id, NULL);
        if (i + 1 >= argc)
            status = EXIT_USAGE;
        goto out;
    }
    if (i + 2 < argc && !strcmp(argv[i + 2], "--help")) {
        status = help_entity(&s, inv.ent->id, argv[i + 1]);
        goto out;
    }
    if (!inv.url) {
        status = usage_error("--url is required (or $WK_URL)");
        goto out;
    }
    descriptor_of(inv.ent, &inv.desc);
    inv.kind_name = inv.desc.kind;
    inv.cmd = argv[i + 1];
    inv.argc = argc - (i + 2);
    inv.argv = argv + i + 2;
    status = run_command(&inv, timeout_ms);
out:
    pool_free(pl);
    cg_json_doc_free(doc);
    return status;
}
