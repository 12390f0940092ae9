/*
 * tools/wk/main.c — wk, the operator's command line: inspect and repair a
 * service's entities in Redis, driven by the service's own schema.json.
 *
 *   wk --url URL --schema schema.json [--as CAPABILITY] [--json] [--raw]
 *      [--tls-… FILE] [--sentinel-… …] [--password-file FILE]
 *      <entity-id> <command> [name] [args]
 *
 * The schema is read and checked by the code generator's own parser and
 * checker (codegen/cg_json.c, codegen/check.c, compiled in), so wk knows
 * every entity by id, kind, namespace and name type exactly as generated
 * code does. Every command is a query through the library's dispatch, on a
 * handle opened with the capability named by --as: a capability that does
 * not grant a command refuses it with the library's own message. How it
 * reaches Redis (URL, TLS, credentials) is connect.c's; the check of a
 * typed body before put, and its fields in help, body.c's.
 *
 * Exit status: 0 done; 1 not found / not held / limited (watch: its
 * --timeout-ms passed before --count versions); 2 usage (bad arguments,
 * unknown entity, command or capability, unreadable or invalid schema,
 * unreadable password file, a body its record does not decode, and every
 * WK_EINVAL of the library: a TLS file it cannot read or load, an option
 * or URL it refuses); 3 refused by the capability (WK_EDENIED); 4
 * connection or server error (any other status). docs/wk.1 says the same,
 * and lists the commands of commands[] below (tests/tools/test_wk_cli.c
 * compares it with `wk --help`).
 *
 * --json may stand anywhere on the line; "--" ends wk's options (an
 * argument after it that is the text --json is an argument).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wakuwaku/wakuwaku.h>

#include "core/core_internal.h"
#include "tools/wk/wk.h"

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

/* Whether `s` is valid UTF-8 (RFC 3629) without NUL, so it can be a JSON
 * string: no overlong form (C0, C1; E0 then below A0; F0 then below 90),
 * no surrogate (ED then A0 or above), nothing past U+10FFFF (F4 then 90
 * or above; F5 to FF). The second byte's range depends on the first; the
 * others are 80..BF. */
static bool is_text(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        size_t n = 1;
        unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c == 0)
            return false;
        if (c >= 0x80) {
            if (c < 0xC2 || c > 0xF4)
                return false;
            n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
            else if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
            if (i + n > len || s[i + 1] < lo || s[i + 1] > hi)
                return false;
            for (size_t k = 2; k < n; k++)
                if ((s[i + k] & 0xC0) != 0x80)
                    return false;
        }
        i += n;
    }
    return true;
}

static void put_hex(FILE *f, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", b[i]);
}

/* The one writer of every string the CLI puts in its JSON (bodies, names,
 * settings keys and values, messages). As a member (bare false):
 * "member":"text" when the bytes are UTF-8 text, else "member_hex":"…".
 * As a value in an array or object (bare true): "text", else
 * {"member_hex":"…"}. */
static void json_bytes(FILE *f, const char *member, const void *data, size_t len, bool bare)
{
    bool text = is_text(data, len);
    if (!bare)
        fprintf(f, text ? "\"%s\":" : "\"%s_hex\":", member);
    if (text) {
        json_string(f, data, len);
        return;
    }
    if (bare)
        fprintf(f, "{\"%s_hex\":", member);
    fputc('"', f);
    put_hex(f, data, len);
    fputc('"', f);
    if (bare)
        fputc('}', f);
}

static void json_bytes_member(FILE *f, const char *key, const void *data, size_t len)
{
    json_bytes(f, key, data, len, false);
}

/* With --json, an error is the one object on stdout: its message and a
 * status (a library status name, or "usage"). */
static void json_error(const char *msg, const char *status)
{
    if (!json_mode)
        return;
    fputc('{', stdout);
    json_bytes_member(stdout, "error", msg, strlen(msg));
    printf(",\"status\":\"%s\"}\n", status);
}

/* ------------------------------------------------------------------------
 * Invocation
 * ---------------------------------------------------------------------- */

typedef struct invocation {
    conn_options conn; /* --url, TLS, credentials */
    const char *schema_path, *as;
    const entity *ent;     /* the schema's entity */
    wk_entity desc;        /* its runtime descriptor */
    const char *kind_name; /* "Lock" */
    const char *cmd;
    int argc; /* after the command */
    char **argv;
    wk_db *db;
    wk_processor *p;
    const wk_db_options *opts; /* how db was opened (watch opens a follower) */
    const schema *s;
    bool raw;           /* --raw: put writes a body unchecked */
    const op_desc *op;  /* the operation the command runs (NULL: a look) */
    char node_msg[512]; /* a cluster node's handle failed: its message */
} invocation;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "wk: %s (wk --help)\n", msg);
    json_error(msg, "usage");
    return EXIT_USAGE;
}

/* A library status → exit status, with `msg` (NULL or "": the status's
 * own text). */
static int fail_msg(int rc, const char *msg)
{
    if (!msg || !*msg)
        msg = wk_strerror(rc);
    fprintf(stderr, "wk: %s\n", msg);
    json_error(msg, wk_err_name(rc));
    if (rc == WK_EDENIED)
        return EXIT_DENIED;
    if (rc == WK_EINVAL)
        return EXIT_USAGE;
    return EXIT_ERROR;
}

/* A library status → exit status, with the handle's message. */
static int fail(const invocation *inv, int rc)
{
    return fail_msg(rc, inv->node_msg[0] ? inv->node_msg : inv->db ? wk_db_errmsg(inv->db) : "");
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
        json_bytes(stdout, "name", name, len, true);
}

/* ------------------------------------------------------------------------
 * Commands
 * ---------------------------------------------------------------------- */

/*
 * An entity's commands are its kind's operations, from the kind's op list
 * (include/wakuwaku/<kind>.h, read through codegen's kind table): each
 * one that has an OP row in commands[] below is a command of its name
 * (force_release may be typed force-release) with the list's mode as its
 * effect, and help lists the others as the library's. A new kind's
 * operations are all listed with no edit here; a row gives one of them a
 * command line. Then
 * wk's own looks (LOOK rows): READ command queries of the entity's keys, or
 * several operations in one.
 */
typedef struct command {
    const char *kind; /* WK_KIND_X; NULL (a look): every kind */
    const char *name; /* the operation's name in its list, or the look's */
    const char *args; /* after the command, for usage */
    int min_args, max_args;
    const char *summary; /* one line; the exit status 1 case after "1:" */
    int (*run)(invocation *inv, wk_name name);
    bool look;   /* wk's own (READ), not an operation of the kind's list */
    int body_at; /* 1 + the index after NAME of a body put stores (checked); 0: none */
} command;

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

/* One member of an outcome struct, printed under its name. */
typedef struct member {
    const char *key;
    bool is_bool; /* else int64_t */
    size_t off;
} member;
#define MEMBER_BOOL(type, m) {#m, true, offsetof(type, m)}
#define MEMBER_I64(type, m) {#m, false, offsetof(type, m)}

/* The end of a command whose outcome is the struct at `st`: its members
 * `m` (up to one with a NULL key) in order; exit 0 when `found`, 1 when
 * not. */
static int members_outcome(const invocation *inv, int rc, const void *st, const member *m,
                           bool found)
{
    if (rc)
        return fail(inv, rc);
    open_json();
    for (; m->key; m++) {
        const char *at = (const char *)st + m->off;
        if (m->is_bool)
            text_or_json_bool(m->key, *(const bool *)at, !m[1].key);
        else
            text_or_json_int(m->key, *(const int64_t *)at, !m[1].key);
    }
    return found ? EXIT_OK : EXIT_NOT_FOUND;
}

/* Every operation's function by its query's name ("lock.owned"), from
 * the op lists: a row is the function's prototype (WK__OPS checks it),
 * so a caller casts it back to that exact type. */
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
typedef void (*any_fn)(void);
#define FN_ROW(k, op, mode, params, summary) {#k "." #op, (any_fn)wk_##k##_##op},
#define FN_KIND(X) WK_##X##_OPS(FN_ROW)
static const struct {
    const char *query;
    any_fn fn;
} functions[] = {WK__KINDS(FN_KIND)};

/* The function of `op`, or NULL. */
static any_fn op_function(const op_desc *op)
{
    for (size_t k = 0; k < COUNT(functions); k++)
        if (!strcmp(functions[k].query, op->query))
            return functions[k].fn;
    return NULL;
}

/* ---- Lock, RwLock, FencedLock, Semaphore */

/* inspect NAME of a lease kind: `fn` fills a `type`, printed member by
 * member (the MEMBER_ rows after it); exit 1 unless `held`, an expression
 * of its members (st.…), is true. */
#define INSPECT(cmd, fn, type, held, ...)                                                          \
    static int cmd(invocation *inv, wk_name name)                                                  \
    {                                                                                              \
        static const member m[] = {__VA_ARGS__, {0}};                                              \
        type st = {0};                                                                             \
        int rc = fn(inv->p, &inv->desc, name, &st);                                                \
        return members_outcome(inv, rc, &st, m, held);                                             \
    }
INSPECT(lock_inspect, wk_lock_inspect, wk_lock_state, st.held, MEMBER_BOOL(wk_lock_state, held),
        MEMBER_I64(wk_lock_state, ttl_ms), MEMBER_I64(wk_lock_state, waiting))
INSPECT(rwlock_inspect, wk_rwlock_inspect, wk_rwlock_state, st.writer_held || st.readers > 0,
        MEMBER_BOOL(wk_rwlock_state, writer_held), MEMBER_I64(wk_rwlock_state, writer_ttl_ms),
        MEMBER_I64(wk_rwlock_state, readers), MEMBER_I64(wk_rwlock_state, waiting))
INSPECT(fenced_inspect, wk_fenced_lock_inspect, wk_fenced_lock_state, st.held,
        MEMBER_BOOL(wk_fenced_lock_state, held), MEMBER_I64(wk_fenced_lock_state, ttl_ms),
        MEMBER_I64(wk_fenced_lock_state, last_fence), MEMBER_I64(wk_fenced_lock_state, waiting))
INSPECT(sem_inspect, wk_semaphore_inspect, wk_semaphore_state, st.running > 0,
        MEMBER_I64(wk_semaphore_state, running), MEMBER_I64(wk_semaphore_state, available),
        MEMBER_I64(wk_semaphore_state, waiting))

/* What an owned command learned: whether the token holds it, as whom
 * (RwLock: "writer" or "reader"; NULL: not said) and for how long. */
typedef struct ownership {
    bool owned;
    const char *as;
    int64_t ttl_ms;
} ownership;

/* owned NAME TOKEN: `ask` asks the library whether TOKEN holds NAME. */
typedef int (*owned_ask)(invocation *inv, wk_name name, const wk_token *token, ownership *o);
static int owned_command(invocation *inv, wk_name name, owned_ask ask)
{
    wk_token token;
    ownership o = {false, NULL, 0};
    if (parse_token(inv->argv[0], &token))
        return EXIT_USAGE;
    int rc = ask(inv, name, &token, &o);
    if (rc)
        return fail(inv, rc);
    open_json();
    text_or_json_bool("owned", o.owned, false);
    if (o.owned && o.as) {
        if (json_mode)
            printf("\"as\":\"%s\",", o.as);
        else
            printf("as: %s\n", o.as);
    }
    text_or_json_int("ttl_ms", o.ttl_ms, true);
    return o.owned ? EXIT_OK : EXIT_NOT_FOUND;
}

/* Lock, Semaphore: the operation's function writes a wk_lease_state. */
typedef int (*lease_owned_fn)(wk_processor *, const wk_entity *, wk_name, const wk_token *,
                              wk_lease_state *);
static int ask_lease(invocation *inv, wk_name name, const wk_token *token, ownership *o)
{
    lease_owned_fn fn = (lease_owned_fn)op_function(inv->op);
    wk_lease_state st = {0};
    int rc = fn ? fn(inv->p, &inv->desc, name, token, &st) : WK_EINVAL;
    *o = (ownership){st.owned, NULL, st.ttl_ms};
    return rc;
}

/* RwLock: the writer lease first, then a reader lease. */
static int ask_rwlock(invocation *inv, wk_name name, const wk_token *token, ownership *o)
{
    wk_lease_state st = {0};
    int rc = wk_rwlock_owned_write(inv->p, &inv->desc, name, token, &st);
    o->as = "writer";
    if (!rc && !st.owned) {
        rc = wk_rwlock_owned_read(inv->p, &inv->desc, name, token, &st);
        o->as = "reader";
    }
    o->owned = st.owned, o->ttl_ms = st.ttl_ms;
    return rc;
}

static int ask_fenced(invocation *inv, wk_name name, const wk_token *token, ownership *o)
{
    wk_fenced_lock_ownership st = {0};
    int rc = wk_fenced_lock_owned(inv->p, &inv->desc, name, token, &st);
    *o = (ownership){st.owned, NULL, st.ttl_ms};
    return rc;
}

static int lease_owned(invocation *inv, wk_name name)
{
    return owned_command(inv, name, ask_lease);
}

/* A look of wk's own. */
static int rwlock_owned(invocation *inv, wk_name name)
{
    return owned_command(inv, name, ask_rwlock);
}

static int fenced_owned(invocation *inv, wk_name name)
{
    return owned_command(inv, name, ask_fenced);
}

/* ---- TokenBucket */

static int bucket_peek(invocation *inv, wk_name name)
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

static int bucket_reset(invocation *inv, wk_name name)
{
    bool was_used = false;
    int rc = wk_token_bucket_reset(inv->p, &inv->desc, name, &was_used);
    if (rc)
        return fail(inv, rc);
    open_json();
    text_or_json_bool("was_used", was_used, true);
    return EXIT_OK;
}

/* ---- Cache, HashedCache */

static int print_body_of(const invocation *inv, int rc, wk_body *body, bool hashed)
{
    if (rc)
        return fail(inv, rc);
    if (json_mode) {
        printf("{\"found\":%s", body->found ? "true" : "false");
        if (body->found) {
            fputc(',', stdout);
            json_bytes_member(stdout, "body", body->data, body->len);
            if (hashed) {
                fputs(",\"hash\":\"", stdout);
                put_hex(stdout, body->hash, WK_HASH_LEN);
                fputc('"', stdout);
            }
        }
        fputs("}\n", stdout);
    } else if (body->found) {
        fwrite(body->data, 1, body->len, stdout);
    } else {
        fprintf(stderr, "wk: %s: no item\n", inv->ent->id);
    }
    bool found = body->found;
    wk_body_free(body);
    return found ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cache_get(invocation *inv, wk_name name)
{
    wk_body body = WK_BODY_INIT;
    int rc = wk_cache_get(inv->p, &inv->desc, name, &body);
    return print_body_of(inv, rc, &body, false);
}

static int hcache_get(invocation *inv, wk_name name)
{
    wk_body body = WK_BODY_INIT;
    int rc = wk_hashed_cache_get(inv->p, &inv->desc, name, &body);
    return print_body_of(inv, rc, &body, true);
}

static int stored(const invocation *inv, int rc)
{
    if (rc)
        return fail(inv, rc);
    if (json_mode)
        puts("{\"stored\":true}");
    return EXIT_OK;
}

/* A body for `put`, before any connection: refused (exit 2, nothing
 * written) when the entity has a typed body and it does not decode as its
 * record, unless --raw. */
static int checked_body(const invocation *inv, const char *v)
{
    char msg[512] = "";
    int rc = inv->raw ? WK_OK : body_check(inv->s, inv->ent, v, strlen(v), msg, sizeof(msg));
    if (rc == WK_ECORRUPT)
        return usage_error("%s put: the body does not decode as %s: %s; --raw stores it as is",
                           inv->ent->id, inv->ent->body->id, msg);
    return rc ? fail_msg(rc, msg) : EXIT_OK;
}

/* put's BODY was checked before the handle opened (checked_body). */
static int cache_put(invocation *inv, wk_name name)
{
    const char *v = inv->argv[0];
    return stored(inv, wk_cache_put(inv->p, &inv->desc, name, v, strlen(v)));
}

static int hcache_put(invocation *inv, wk_name name)
{
    const char *v = inv->argv[0];
    uint8_t hash[WK_HASH_LEN];
    return stored(inv, wk_hashed_cache_put(inv->p, &inv->desc, name, v, strlen(v), hash));
}

/* ---- Settings */

/* A whole settings map: one JSON object on one line, or "# version N"
 * and key=value lines. */
static void print_map(const wk_settings_map *map)
{
    if (json_mode) {
        /* A key that is not text cannot be an object key: such entries
         * go to "entries_hex", [{"key_hex", "value" or "value_hex"}]. */
        printf("{\"version\":%" PRId64 ",\"epoch\":\"%s\",\"entries\":{", map->version, map->epoch);
        size_t shown = 0, binary = 0;
        for (size_t i = 0; i < map->count; i++) {
            const wk_settings_entry *e = &map->entries[i];
            if (!is_text((const unsigned char *)e->key, e->key_len)) {
                binary++;
                continue;
            }
            if (shown++)
                fputc(',', stdout);
            json_bytes(stdout, "key", e->key, e->key_len, true);
            fputc(':', stdout);
            json_bytes(stdout, "value", e->value, e->value_len, true);
        }
        fputc('}', stdout);
        if (binary) {
            fputs(",\"entries_hex\":[", stdout);
            shown = 0;
            for (size_t i = 0; i < map->count; i++) {
                const wk_settings_entry *e = &map->entries[i];
                if (is_text((const unsigned char *)e->key, e->key_len))
                    continue;
                fputs(shown++ ? ",{" : "{", stdout);
                json_bytes_member(stdout, "key", e->key, e->key_len);
                fputc(',', stdout);
                json_bytes_member(stdout, "value", e->value, e->value_len);
                fputc('}', stdout);
            }
            fputc(']', stdout);
        }
        fputs("}\n", stdout);
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
    } else {
        print_map(map);
    }
    wk_settings_map_free(map);
    return status;
}

static int settings_put(invocation *inv, wk_name name)
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

static int settings_remove(invocation *inv, wk_name name)
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

/* ---- settings watch: a follower, and each new version of its mirror */

/* The versions the follower reached and the main thread has not printed
 * yet (FIFO), shared with the change callback under `mu`. */
typedef struct watch {
    pthread_mutex_t mu;
    wk_settings_follower *f; /* set under mu once started */
    wk_settings_map **v;
    size_t head, n, cap;
    int64_t last_version; /* of the last queued map, with its epoch */
    char last_epoch[WK_SETTINGS_EPOCH_LEN + 1];
    int failed; /* a copy could not be queued (WK_ENOMEM) */
    int wake_w; /* written once per queued map */
} watch;

static volatile sig_atomic_t watch_signalled;
static int watch_signal_fd = -1;

static void watch_on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    watch_signalled = 1;
    char b = 's';
    if (write(watch_signal_fd, &b, 1) < 0) {
        /* the pipe is full: the main thread wakes anyway */
    }
    errno = saved;
}

/* Queue `map` as the next version (taken over). Under w->mu. */
static void watch_push(watch *w, wk_settings_map *map)
{
    if (w->head + w->n == w->cap) {
        if (w->head) { /* slide the unprinted ones to the front */
            memmove(w->v, w->v + w->head, w->n * sizeof(*w->v));
            w->head = 0;
        } else {
            size_t cap = w->cap ? 2 * w->cap : 16;
            wk_settings_map **v = realloc(w->v, cap * sizeof(*v));
            if (!v) {
                wk_settings_map_free(map);
                w->failed = WK_ENOMEM;
                return;
            }
            w->v = v, w->cap = cap;
        }
    }
    w->v[w->head + w->n++] = map;
    w->last_version = map->version;
    memcpy(w->last_epoch, map->epoch, sizeof(w->last_epoch));
    char b = 'v';
    if (write(w->wake_w, &b, 1) < 0) {
        /* full: the main thread has bytes to wake on already */
    }
}

/* On the follower thread, after each change reached the mirror: a copy
 * of the mirror for each new version (a reload reports several changes
 * at one version: one copy). */
static void watch_on_change(void *ctx, const wk_settings_change *c)
{
    watch *w = ctx;
    pthread_mutex_lock(&w->mu); /* also waits until w->f is set */
    if (c->version != w->last_version || strcmp(c->epoch, w->last_epoch)) {
        wk_settings_map *map = NULL;
        if (wk_settings_follower_snapshot(w->f, &map) == WK_OK)
            watch_push(w, map);
        else
            w->failed = WK_ENOMEM;
    }
    pthread_mutex_unlock(&w->mu);
}

/* The options after NAME: --count N, --timeout-ms MS. */
static int watch_options(const invocation *inv, long *count, long *timeout_ms)
{
    for (int i = 0; i < inv->argc; i += 2) {
        const char *o = inv->argv[i];
        long *slot = !strcmp(o, "--count") ? count : !strcmp(o, "--timeout-ms") ? timeout_ms : NULL;
        if (!slot)
            return usage_error("%s watch: unknown option %s", inv->ent->id, o);
        char *end;
        errno = 0;
        long v = i + 1 < inv->argc ? strtol(inv->argv[i + 1], &end, 10) : 0;
        if (i + 1 >= inv->argc || *end || errno || v <= 0 || v > 1000000000L)
            return usage_error("%s watch: %s needs a number from 1 to 1000000000", inv->ent->id, o);
        *slot = v;
    }
    return 0;
}

static int cmd_settings_watch(invocation *inv, wk_name name)
{
    long count = 0, timeout_ms = 0;
    if (watch_options(inv, &count, &timeout_ms))
        return EXIT_USAGE;
    int fds[2];
    if (pipe(fds))
        return fail_msg(WK_EIO, "watch: cannot create a pipe");
    for (int i = 0; i < 2; i++)
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    watch w = {.wake_w = fds[1], .last_version = -1};
    pthread_mutex_init(&w.mu, NULL);

    /* The follower's thread inherits a mask without SIGINT and SIGTERM,
     * so they arrive here (and its waits are never cut short). */
    sigset_t stop_sigs, old_mask;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    watch_signal_fd = fds[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = watch_on_signal;
    sigemptyset(&sa.sa_mask);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, &old_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    wk_settings_follower_options fo = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    fo.db = inv->opts;
    fo.settings = &inv->desc;
    fo.name = name;
    fo.on_change = watch_on_change;
    fo.ctx = &w;
    char err[512] = "";
    pthread_mutex_lock(&w.mu);
    int rc = wk_settings_follower_start(&w.f, &fo, err, sizeof(err));
    if (!rc) { /* the version it starts at is the first one printed */
        wk_settings_map *map = NULL;
        rc = wk_settings_follower_snapshot(w.f, &map);
        if (!rc)
            watch_push(&w, map);
    }
    pthread_mutex_unlock(&w.mu);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);

    int status = EXIT_OK;
    long printed = 0;
    int64_t end = timeout_ms ? wk_monotonic_ms() + timeout_ms : 0;
    while (!rc && !watch_signalled && !(count && printed >= count)) {
        pthread_mutex_lock(&w.mu);
        wk_settings_map *map = w.n ? w.v[w.head] : NULL;
        if (map)
            w.head++, w.n--;
        rc = w.failed;
        pthread_mutex_unlock(&w.mu);
        if (map) {
            print_map(map);
            if (!json_mode)
                putchar('\n'); /* a blank line between versions */
            fflush(stdout);
            wk_settings_map_free(map);
            printed++;
            continue;
        }
        if (rc)
            break;
        int wait = -1;
        if (end) {
            int64_t left = end - wk_monotonic_ms();
            if (left <= 0) {
                status = count ? EXIT_NOT_FOUND : EXIT_OK; /* fewer than --count */
                break;
            }
            wait = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        if (poll(&pfd, 1, wait) > 0) {
            char buf[64];
            while (read(fds[0], buf, sizeof(buf)) > 0) {
            }
        }
    }
    if (rc)
        status = fail_msg(rc, err[0] ? err : NULL);
    wk_settings_follower_free(w.f); /* halts the thread first */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    watch_signal_fd = -1;
    for (size_t i = 0; i < w.n; i++)
        wk_settings_map_free(w.v[w.head + i]);
    free(w.v);
    pthread_mutex_destroy(&w.mu);
    close(fds[0]);
    close(fds[1]);
    return status;
}

/* ---- list: SCAN over the entity's key prefixes, a READ query each page */

/* Byte strings (names, messages, bodies), each NUL-terminated too. */
typedef struct names {
    char **v;
    size_t *len;
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
        if (v)
            ns->v = v;
        size_t *l = v ? realloc(ns->len, cap * sizeof(*l)) : NULL;
        if (!l)
            return WK_ENOMEM;
        ns->len = l, ns->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c)
        return WK_ENOMEM;
    memcpy(c, s, len);
    c[len] = '\0';
    ns->len[ns->n] = len;
    ns->v[ns->n++] = c;
    return WK_OK;
}

static void names_free(names *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        free(ns->v[i]);
    free(ns->v);
    free(ns->len);
    memset(ns, 0, sizeof(*ns));
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

/* One command as a READ query of the entity, through the handle's
 * dispatch (so the capability check applies as to the library's reads):
 * `argc` arguments, argv[k] of lens[k] bytes (lens NULL: NUL-terminated).
 * Retry-safe: it changes nothing. */
static int read_command(invocation *inv, const char *qname, int argc, const char **argv,
                        const size_t *lens, wk_parse_fn parse, void *out)
{
    size_t argvlen[8];
    for (int i = 0; i < argc && i < 8; i++)
        argvlen[i] = lens ? lens[i] : strlen(argv[i]);
    wk_access a = {&inv->desc, WK_READ};
    wk_query q = {.name = qname,
                  .effect = {&a, 1},
                  .flags = WK_QUERY_RETRY_SAFE,
                  .argc = argc,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse,
                  .out = out};
    return wk_process(inv->p, &q);
}

static int scan_node(invocation *inv, const char *pattern, scan_out *o)
{
    strcpy(o->cursor, "0");
    do {
        char cursor[32];
        strcpy(cursor, o->cursor);
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        int rc = read_command(inv, "wk.list", 6, argv, NULL, parse_scan, o);
        if (rc)
            return rc;
    } while (strcmp(o->cursor, "0"));
    return WK_OK;
}

/* SCAN sees one node's keys: in a cluster, every primary in turn. */
static int scan_prefix(invocation *inv, const char *pattern, scan_out *o)
{
    size_t primaries = wk_db_cluster_primaries(inv->db);
    if (primaries == 0)
        return scan_node(inv, pattern, o);
    wk_processor *whole = inv->p;
    int rc = WK_OK;
    for (size_t i = 0; !rc && i < primaries; i++) {
        wk_db *node;
        rc = wk_db_cluster_primary(&node, inv->db, i);
        if (rc)
            break;
        inv->p = wk_db_processor(node);
        rc = scan_node(inv, pattern, o);
        if (rc) /* the message is on the node's handle */
            snprintf(inv->node_msg, sizeof(inv->node_msg), "%s", wk_db_errmsg(node));
        inv->p = whole;
        wk_db_close(node);
    }
    return rc;
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
    names_free(&found);
    return rc ? fail(inv, rc) : EXIT_OK;
}

/* ---- LiveView, Pipe, StreamBuffer: looks that never consume */

/* The key of item `name` with `suffix` (NULL: single-key layout). */
static int item_key(const invocation *inv, const wk_name *name, const char *suffix, char *key,
                    size_t *len)
{
    return wk_key_build(key, WK_KEY_MAX + 1, len, &inv->desc, name, suffix);
}

/* An integer reply (LLEN, XLEN, PTTL …) into a long long. */
static int parse_integer(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "%s: not an integer reply", q->name);
    *(long long *)q->out = wk_reply_integer(r);
    return WK_OK;
}

/* An array of strings or nils (LRANGE, HMGET) into `names` (a nil as ""
 * of length SIZE_MAX, so it differs from an empty string). */
static int parse_strings(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_EPROTO, "%s: not an array reply", q->name);
    names *out = q->out;
    for (size_t i = 0; i < wk_reply_count(r); i++) {
        size_t len;
        const char *sv = wk_reply_str(wk_reply_at(r, i), &len);
        if (add_name(out, sv ? sv : "", sv ? len : 0))
            return WK_ENOMEM;
        if (!sv)
            out->len[out->n - 1] = SIZE_MAX;
    }
    return WK_OK;
}

/* XREVRANGE … COUNT 1: whether the last entry's first field is `end`
 * (a finished StreamBuffer). */
static int parse_last_is_end(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_EPROTO, "%s: not an array reply", q->name);
    bool *finished = q->out;
    *finished = false;
    if (!wk_reply_count(r))
        return WK_OK;
    const wk_reply *fields = wk_reply_at(wk_reply_at(r, 0), 1);
    size_t len;
    const char *f = wk_reply_str(wk_reply_at(fields, 0), &len);
    *finished = f && len == 3 && !memcmp(f, "end", 3);
    return WK_OK;
}

/* A one-key integer command (`cmd` key) as a READ of the entity. */
static int key_integer(invocation *inv, const char *qname, const char *cmd, const char *key,
                       size_t klen, long long *out)
{
    const char *argv[] = {cmd, key};
    size_t lens[] = {strlen(cmd), klen};
    return read_command(inv, qname, 2, argv, lens, parse_integer, out);
}

/* `"key": <bytes>` members of the JSON output, or the bytes and a newline. */
static void print_body(const char *key, const void *data, size_t len)
{
    if (json_mode) {
        json_bytes_member(stdout, key, data, len);
    } else {
        fwrite(data, 1, len, stdout);
        fputc('\n', stdout);
    }
}

/* --- LiveView */

static int cmd_view_inspect(invocation *inv, wk_name name)
{
    wk_live_view_body head = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_log log = WK_LIVE_VIEW_LOG_INIT;
    int rc = wk_live_view_get(inv->p, &inv->desc, name, &head);
    if (!rc)
        rc = wk_live_view_history(inv->p, &inv->desc, name, &log);
    if (rc) {
        wk_live_view_body_free(&head);
        return fail(inv, rc);
    }
    bool found = head.found;
    open_json();
    text_or_json_bool("exists", found, !found);
    if (found) {
        text_or_json_int("version", (long long)head.version, false);
        text_or_json_int("body_len", (long long)head.len, false);
        text_or_json_int("history_from", log.base.found ? (long long)log.base.version : 0, false);
        text_or_json_int("history_diffs", (long long)log.ndiffs, true);
    }
    wk_live_view_body_free(&head);
    wk_live_view_log_free(&log);
    return found ? EXIT_OK : EXIT_NOT_FOUND;
}

static int view_get(invocation *inv, wk_name name)
{
    wk_live_view_body head = WK_LIVE_VIEW_BODY_INIT;
    int rc = wk_live_view_get(inv->p, &inv->desc, name, &head);
    if (rc)
        return fail(inv, rc);
    bool found = head.found;
    if (json_mode) {
        printf("{\"found\":%s", found ? "true" : "false");
        if (found) {
            printf(",\"version\":%" PRIu64 ",", head.version);
            json_bytes_member(stdout, "body", head.data, head.len);
        }
        fputs("}\n", stdout);
    } else if (found) {
        fwrite(head.data, 1, head.len, stdout);
    } else {
        fprintf(stderr, "wk: %s: no view\n", inv->ent->id);
    }
    wk_live_view_body_free(&head);
    return found ? EXIT_OK : EXIT_NOT_FOUND;
}

/* --- Pipe: LLEN, LRANGE and HMGET only, so no message is ever taken */

static int cmd_pipe_inspect(invocation *inv, wk_name name)
{
    char m[WK_KEY_MAX + 1], c[WK_KEY_MAX + 1], r[WK_KEY_MAX + 1];
    size_t ml, cl, rl;
    int rc = item_key(inv, &name, ":m", m, &ml);
    if (!rc)
        rc = item_key(inv, &name, ":c", c, &cl);
    if (!rc)
        rc = item_key(inv, &name, ":r", r, &rl);
    long long waiting = 0, closes = 0, ttl = -2;
    names state = {0};
    if (!rc)
        rc = key_integer(inv, "wk.pipe.waiting", "LLEN", m, ml, &waiting);
    if (!rc)
        rc = key_integer(inv, "wk.pipe.closes", "LLEN", c, cl, &closes);
    if (!rc)
        rc = key_integer(inv, "wk.pipe.ttl", "PTTL", m, ml, &ttl);
    if (!rc) {
        const char *argv[] = {"HMGET", r, "n", "c"};
        size_t lens[] = {5, rl, 1, 1};
        rc = read_command(inv, "wk.pipe.state", 4, argv, lens, parse_strings, &state);
    }
    if (!rc && state.n != 2) {
        names_free(&state);
        return fail_msg(WK_EPROTO, "pipe state: HMGET did not give 2 values");
    }
    if (rc) {
        names_free(&state);
        return fail(inv, rc);
    }
    bool has_state = state.len[0] != SIZE_MAX;
    long long taken = has_state ? strtoll(state.v[0], NULL, 10) : 0;
    bool ended = state.len[1] == 1 && state.v[1][0] == '1';
    names_free(&state);
    open_json();
    text_or_json_int("waiting", waiting, false);
    text_or_json_bool("closed", closes > 0 || ended, false);
    text_or_json_bool("receiver_ended", ended, false);
    text_or_json_int("taken", taken, false);
    text_or_json_int("ttl_ms", ttl < 0 ? 0 : ttl, true);
    return waiting || closes || has_state ? EXIT_OK : EXIT_NOT_FOUND;
}

static int cmd_pipe_peek(invocation *inv, wk_name name)
{
    long long max = 10;
    if (inv->argc == 1) {
        char *end;
        errno = 0;
        max = strtoll(inv->argv[0], &end, 10);
        if (*end || errno || max <= 0)
            return usage_error("%s peek: COUNT is a number >= 1", inv->ent->id);
    }
    char m[WK_KEY_MAX + 1], stop[24];
    size_t ml;
    int rc = item_key(inv, &name, ":m", m, &ml);
    if (rc)
        return fail(inv, rc);
    snprintf(stop, sizeof(stop), "%lld", max - 1);
    const char *argv[] = {"LRANGE", m, "0", stop};
    size_t lens[] = {6, ml, 1, strlen(stop)};
    names got = {0};
    long long waiting = 0;
    rc = read_command(inv, "wk.pipe.peek", 4, argv, lens, parse_strings, &got);
    if (!rc)
        rc = key_integer(inv, "wk.pipe.waiting", "LLEN", m, ml, &waiting);
    if (rc) {
        names_free(&got);
        return fail(inv, rc);
    }
    if (json_mode)
        printf("{\"waiting\":%lld,\"messages\":[", waiting);
    for (size_t i = 0; i < got.n; i++) {
        if (json_mode)
            fputs(i ? ",{" : "{", stdout);
        print_body("body", got.v[i], got.len[i]);
        if (json_mode)
            fputc('}', stdout);
    }
    if (json_mode)
        fputs("]}\n", stdout);
    size_t n = got.n;
    names_free(&got);
    return n ? EXIT_OK : EXIT_NOT_FOUND;
}

/* finish, and close (its old name, the library's wk_pipe_close): no
 * outcome but done. */
typedef int (*pipe_end_fn)(wk_processor *, const wk_entity *, wk_name);
static int pipe_end(invocation *inv, wk_name name)
{
    pipe_end_fn fn = (pipe_end_fn)op_function(inv->op);
    int rc = fn ? fn(inv->p, &inv->desc, name) : WK_EINVAL;
    if (rc)
        return fail(inv, rc);
    if (json_mode)
        printf("{\"%s\":true}\n", strcmp(inv->op->op, "close") ? "finished" : "closed");
    return EXIT_OK;
}

/* --- StreamBuffer */

static int cmd_sbuf_inspect(invocation *inv, wk_name name)
{
    char k[WK_KEY_MAX + 1];
    size_t kl;
    long long entries = 0, ttl = -2;
    bool finished = false;
    int rc = item_key(inv, &name, NULL, k, &kl);
    if (!rc)
        rc = key_integer(inv, "wk.stream_buffer.length", "XLEN", k, kl, &entries);
    if (!rc)
        rc = key_integer(inv, "wk.stream_buffer.ttl", "PTTL", k, kl, &ttl);
    if (!rc) {
        const char *argv[] = {"XREVRANGE", k, "+", "-", "COUNT", "1"};
        size_t lens[] = {9, kl, 1, 1, 5, 1};
        rc =
            read_command(inv, "wk.stream_buffer.last", 6, argv, lens, parse_last_is_end, &finished);
    }
    if (rc)
        return fail(inv, rc);
    open_json();
    text_or_json_bool("exists", entries > 0, false);
    text_or_json_int("length", entries - (finished ? 1 : 0), false);
    text_or_json_bool("finished", finished, false);
    text_or_json_int("ttl_ms", ttl < 0 ? 0 : ttl, true);
    return entries > 0 ? EXIT_OK : EXIT_NOT_FOUND;
}

static int sbuf_read(invocation *inv, wk_name name)
{
    unsigned long long from = 0;
    if (inv->argc == 1) {
        char *end;
        errno = 0;
        from = strtoull(inv->argv[0], &end, 10);
        if (*end || errno || inv->argv[0][0] == '-')
            return usage_error("%s read: FROM is an index >= 0", inv->ent->id);
    }
    wk_stream_buffer_contents c = WK_STREAM_BUFFER_CONTENTS_INIT;
    int rc = wk_stream_buffer_read(inv->p, &inv->desc, name, from, &c);
    if (rc)
        return fail(inv, rc);
    if (json_mode) {
        printf("{\"from\":%llu,\"finished\":%s,\"bodies\":[", from, c.finished ? "true" : "false");
        for (size_t i = 0; i < c.count; i++) {
            fputs(i ? ",{" : "{", stdout);
            json_bytes_member(stdout, "body", c.bodies[i].data, c.bodies[i].len);
            fputc('}', stdout);
        }
        fputs("]}\n", stdout);
    } else {
        for (size_t i = 0; i < c.count; i++) /* the chunks as they were streamed */
            fwrite(c.bodies[i].data, 1, c.bodies[i].len, stdout);
    }
    bool any = c.count > 0 || c.finished;
    wk_stream_buffer_contents_free(&c);
    return any ? EXIT_OK : EXIT_NOT_FOUND;
}

/* ---- Every other operation whose parameters wk can read and print */

/*
 * An operation with no row in commands[] below is still a command when its
 * parameters after the name are integers in (int64_t: an argument each,
 * in order) and integers or booleans out (int64_t *, bool *: printed
 * under their names; exit 1 when a boolean is false). Its row in the op
 * list is its prototype (WK__OPS checks it), so it is called through its
 * exact type: one of the shapes below. Any other operation (tokens,
 * bodies, records) stays the library's, listed by help. A row may run
 * such an operation with run_generic too, to give it wk's own summary
 * (force_release, `bool *was_held` on every lease kind; remove; finish).
 */

#define GENERIC_PARAMS_MAX 3
typedef enum { IN_I64, OUT_I64, OUT_BOOL } generic_param;
typedef struct generic_shape {
    int n;
    generic_param type[GENERIC_PARAMS_MAX];
    char name[GENERIC_PARAMS_MAX][32];
} generic_shape;

/* The shape of op's parameters after the name ("int64_t by, int64_t
 * *value"); false when wk cannot run it. */
static bool shape_of(const op_desc *op, generic_shape *sh)
{
    static const struct {
        const char *prefix;
        generic_param type;
    } known[] = {{"int64_t *", OUT_I64}, {"bool *", OUT_BOOL}, {"int64_t ", IN_I64}};
    sh->n = 0;
    for (const char *p = op->params; *p; sh->n++) {
        size_t n = strcspn(p, ","), k = 0;
        while (k < COUNT(known) && strncmp(p, known[k].prefix, strlen(known[k].prefix)))
            k++;
        size_t id = k < COUNT(known) ? strlen(known[k].prefix) : 0;
        if (sh->n == GENERIC_PARAMS_MAX || k == COUNT(known) || n - id >= 32)
            return false;
        sh->type[sh->n] = known[k].type;
        memcpy(sh->name[sh->n], p + id, n - id);
        sh->name[sh->n][n - id] = '\0';
        p += n + (p[n] == ',' ? 2 : 0);
    }
    return (sh->n == 1 && sh->type[0] != IN_I64) ||
           (sh->n == 2 && sh->type[0] == IN_I64 && sh->type[1] != IN_I64);
}

/* Calls op's function through its exact type: the shapes shape_of()
 * accepts. */
typedef int (*fn_o64)(wk_processor *, const wk_entity *, wk_name, int64_t *);
typedef int (*fn_obool)(wk_processor *, const wk_entity *, wk_name, bool *);
typedef int (*fn_i64_o64)(wk_processor *, const wk_entity *, wk_name, int64_t, int64_t *);
typedef int (*fn_i64_obool)(wk_processor *, const wk_entity *, wk_name, int64_t, bool *);
static int call_shape(invocation *inv, any_fn fn, const generic_shape *sh, wk_name name,
                      int64_t *v)
{
    wk_processor *p = inv->p;
    const wk_entity *e = &inv->desc;
    bool b = false;
    int rc;
    if (sh->n == 1 && sh->type[0] == OUT_I64)
        rc = ((fn_o64)fn)(p, e, name, &v[0]);
    else if (sh->n == 1 && sh->type[0] == OUT_BOOL)
        rc = ((fn_obool)fn)(p, e, name, &b), v[0] = b;
    else if (sh->n == 2 && sh->type[0] == IN_I64 && sh->type[1] == OUT_I64)
        rc = ((fn_i64_o64)fn)(p, e, name, v[0], &v[1]);
    else
        rc = ((fn_i64_obool)fn)(p, e, name, v[0], &b), v[1] = b;
    return rc;
}

static int run_generic(invocation *inv, wk_name name)
{
    const op_desc *op = inv->op;
    generic_shape sh;
    shape_of(op, &sh);
    int64_t v[GENERIC_PARAMS_MAX] = {0};
    int in = 0;
    for (int k = 0; k < sh.n; k++) {
        if (sh.type[k] != IN_I64)
            continue;
        char *end;
        errno = 0;
        v[k] = strtoll(inv->argv[in], &end, 10);
        if (errno || !*inv->argv[in] || *end)
            return usage_error("%s %s: %s must be an integer (got \"%s\")", inv->ent->id, op->op,
                               sh.name[k], inv->argv[in]);
        in++;
    }
    any_fn fn = op_function(op);
    int rc = fn ? call_shape(inv, fn, &sh, name, v) : WK_EINVAL;
    if (rc)
        return fail(inv, rc);
    open_json();
    int st = EXIT_OK, last = sh.n - 1;
    for (int k = 0; k < sh.n; k++) {
        if (sh.type[k] == OUT_BOOL) {
            text_or_json_bool(sh.name[k], v[k], k == last);
            st = v[k] ? st : EXIT_NOT_FOUND;
        } else if (sh.type[k] == OUT_I64) {
            text_or_json_int(sh.name[k], v[k], k == last);
        }
    }
    return st;
}

/* The commands wk runs: the operations of the kinds' lists that have a
 * row here (OP, PUT: how each reads its arguments and prints its outcome;
 * its effect is its op list's; PUT's BODY is checked against a typed
 * body), then wk's own looks (LOOK: READ). A row: kind, command, [usage
 * after the command, fewest and most arguments after NAME: _ARGS rows;
 * the others take NAME alone], summary, runner. */
#define ROW(look, body_at, kind, name, ...) {kind, name, __VA_ARGS__, look, body_at}
#define OP_ARGS(...) ROW(false, 0, __VA_ARGS__)
#define PUT_ARGS(...) ROW(false, 1, __VA_ARGS__)
#define LOOK_ARGS(...) ROW(true, 0, __VA_ARGS__)
#define OP(kind, name, ...) OP_ARGS(kind, name, "NAME", 0, 0, __VA_ARGS__)
#define LOOK(kind, name, ...) LOOK_ARGS(kind, name, "NAME", 0, 0, __VA_ARGS__)
static const command commands[] = {
    OP(WK_KIND_LOCK, "inspect", "who holds NAME, and for how long (1: not held)", lock_inspect),
    OP_ARGS(WK_KIND_LOCK, "owned", "NAME TOKEN", 1, 1,
            "does TOKEN (32 hex digits) hold NAME, and for how long (1: not held)", lease_owned),
    OP(WK_KIND_LOCK, "force_release",
       "free NAME whoever holds it, and wake its first waiter (1: was not held)", run_generic),
    OP(WK_KIND_RWLOCK, "inspect",
       "whether a writer holds NAME, for how long, and how many readers (1: nobody)",
       rwlock_inspect),
    OP(WK_KIND_RWLOCK, "force_release",
       "free the writer and every reader, and wake the first waiter (1: was not held)",
       run_generic),
    OP(WK_KIND_FENCED_LOCK, "inspect",
       "who holds NAME, for how long, and the last fence (1: not held)", fenced_inspect),
    OP_ARGS(WK_KIND_FENCED_LOCK, "owned", "NAME TOKEN", 1, 1,
            "does TOKEN (32 hex digits) hold NAME, and for how long (1: not held)", fenced_owned),
    OP(WK_KIND_FENCED_LOCK, "force_release",
       "free NAME whoever holds it; the fence counter is kept (1: was not held)", run_generic),
    OP(WK_KIND_SEMAPHORE, "inspect", "permits running and free (1: none running)", sem_inspect),
    OP_ARGS(WK_KIND_SEMAPHORE, "owned", "NAME TOKEN", 1, 1,
            "does TOKEN (32 hex digits) hold a permit, and for how long (1: not held)", lease_owned),
    OP(WK_KIND_SEMAPHORE, "force_release",
       "free every permit whoever holds them (1: none was held)", run_generic),
    OP(WK_KIND_TOKEN_BUCKET, "peek", "tokens left, without taking any (1: limited, none left)",
       bucket_peek),
    OP(WK_KIND_TOKEN_BUCKET, "reset", "refill NAME at once", bucket_reset),
    OP(WK_KIND_CACHE, "get", "print the body of NAME (1: no item)", cache_get),
    PUT_ARGS(WK_KIND_CACHE, "put", "NAME BODY", 1, 1, "store BODY (bytes of the argument)",
             cache_put),
    OP(WK_KIND_CACHE, "remove", "delete the item NAME (1: no item)", run_generic),
    OP(WK_KIND_HASHED_CACHE, "get", "print the body of NAME (1: no item)", hcache_get),
    PUT_ARGS(WK_KIND_HASHED_CACHE, "put", "NAME BODY", 1, 1, "store BODY (bytes of the argument)",
             hcache_put),
    OP(WK_KIND_HASHED_CACHE, "remove", "delete the item NAME (1: no item)", run_generic),
    OP_ARGS(WK_KIND_SETTINGS, "put", "NAME KEY VALUE", 2, 2, "set KEY to VALUE (a new version)",
            settings_put),
    OP_ARGS(WK_KIND_SETTINGS, "remove", "NAME KEY", 1, 1, "delete KEY (1: no such key)",
            settings_remove),
    OP(WK_KIND_LIVE_VIEW, "get", "print the latest body (1: no view)", view_get),
    OP(WK_KIND_LIVE_VIEW, "remove", "delete it and its history (1: there was none)", run_generic),
    OP(WK_KIND_PIPE, "finish", "finish it: its receiver ends after the waiting messages",
       pipe_end),
    OP(WK_KIND_PIPE, "close", "the old name of finish", pipe_end),
    OP_ARGS(WK_KIND_STREAM_BUFFER, "read", "NAME [FROM]", 0, 1,
            "print the bodies from index FROM (0) on, as streamed (1: none, not finished)",
            sbuf_read),
    OP(WK_KIND_STREAM_BUFFER, "finish",
       "end it: subscribers stop after its last body (1: was already)", run_generic),
    OP(WK_KIND_STREAM_BUFFER, "remove", "delete it (1: there was none)", run_generic),
    LOOK_ARGS(WK_KIND_RWLOCK, "owned", "NAME TOKEN", 1, 1,
              "does TOKEN (32 hex digits) hold NAME, as writer or reader, and for how long "
              "(1: not held)",
              rwlock_owned),
    LOOK_ARGS(WK_KIND_SETTINGS, "get", "NAME [KEY]", 0, 1,
              "print the whole map NAME, or the value of KEY (1: no such key)", cmd_settings_get),
    LOOK_ARGS(
        WK_KIND_SETTINGS, "watch", "NAME [--count N] [--timeout-ms MS]", 0, 4,
        "print the map, then each new version, until SIGINT/SIGTERM (exit 0), N versions printed "
        "(the first included) or MS passed (1: --count not reached by then)",
        cmd_settings_watch),
    LOOK(WK_KIND_LIVE_VIEW, "inspect",
         "version, body length, history kept (first version, diffs) (1: no view)",
         cmd_view_inspect),
    LOOK(WK_KIND_PIPE, "inspect",
         "messages waiting, closed, messages taken, TTL; takes nothing (1: no pipe)",
         cmd_pipe_inspect),
    LOOK_ARGS(
        WK_KIND_PIPE, "peek", "NAME [COUNT]", 0, 1,
        "print the first COUNT (10) waiting messages, one a line; takes none (1: none waiting)",
        cmd_pipe_peek),
    LOOK(WK_KIND_STREAM_BUFFER, "inspect", "bodies, finished, TTL (1: no buffer)",
         cmd_sbuf_inspect),
    LOOK_ARGS(NULL, "list", "", -1, -1, "the names that have keys now (SCAN, never KEYS)",
              cmd_list),
};

/* The row of `t` for command `name` of kind `kd` ('-' read as '_'), a
 * look or not as `look` says, or NULL. */
static const command *find(const command *t, size_t n, const kind_desc *kd, const char *name,
                           bool look)
{
    for (size_t i = 0; i < n; i++) {
        const char *a = t[i].name, *b = name;
        if (t[i].look != look)
            continue;
        while (*a && (*a == *b || (*a == '_' && *b == '-')))
            a++, b++;
        if (!*a && !*b && (!t[i].kind || !strcmp(t[i].kind, kd->name)))
            return &t[i];
    }
    return NULL;
}

/* The commands of the op lists' own (run_generic): every operation of
 * every kind with no row in commands[] and a shape wk can run. */
static const command *generic_commands(size_t *count)
{
    static command cmds[KIND_MAX * 16];
    static char args[KIND_MAX * 16][64];
    static size_t n;
    static bool done;
    for (kind k = 0; !done && k < kind_count(); k++) {
        const kind_desc *kd = kind_info(k);
        for (size_t i = 0; i < kd->nops && n < COUNT(cmds); i++) {
            const op_desc *op = &kd->ops[i];
            generic_shape sh;
            if (find(commands, COUNT(commands), kd, op->op, false) || !shape_of(op, &sh))
                continue;
            int nin = 0, at = snprintf(args[n], sizeof(args[n]), "NAME");
            for (int p = 0; p < sh.n; p++) {
                if (sh.type[p] != IN_I64)
                    continue;
                at += snprintf(args[n] + at, sizeof(args[n]) - (size_t)at, " ");
                for (const char *c = sh.name[p]; *c; c++)
                    args[n][at++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
                args[n][at] = '\0';
                nin++;
            }
            cmds[n] = (command){kd->name, op->op, args[n], nin, nin,
                                op->summary ? op->summary : "", run_generic, false, 0};
            n++;
        }
    }
    done = true;
    *count = n;
    return cmds;
}

/* The command that runs operation `name` of kind `kd`: its row in commands[],
 * or its generic command; NULL: none. */
static const command *op_command(const kind_desc *kd, const char *name)
{
    size_t n;
    const command *generic = generic_commands(&n);
    const command *c = find(commands, COUNT(commands), kd, name, false);
    return c ? c : find(generic, n, kd, name, false);
}

/* The operation `name` of the kind's op list, or NULL. */
static const op_desc *kind_op(const kind_desc *kd, const char *name)
{
    for (size_t i = 0; i < kd->nops; i++)
        if (!strcmp(kd->ops[i].op, name))
            return &kd->ops[i];
    return NULL;
}

/* ------------------------------------------------------------------------
 * Help
 * ---------------------------------------------------------------------- */

/* The commands of kind `kd`: its operations that have a command (a row in
 * commands[] or a generic one), in the order of its list, then its looks (and,
 * with every_kind, the looks of every kind); cmds[k] runs op[k] (NULL: a
 * look). Returns how many, at most KIND_COMMANDS_MAX. */
#define KIND_OPS_MAX 64
#define KIND_COMMANDS_MAX (KIND_OPS_MAX + COUNT(commands))
static size_t kind_commands(const kind_desc *kd, bool every_kind, const command **cmds,
                            const op_desc **op)
{
    size_t n = 0;
    for (size_t i = 0; i < kd->nops && n < KIND_OPS_MAX; i++)
        if ((cmds[n] = op_command(kd, kd->ops[i].op)))
            op[n++] = &kd->ops[i];
    for (size_t i = 0; i < COUNT(commands); i++)
        if (commands[i].look &&
            (commands[i].kind ? !strcmp(commands[i].kind, kd->name) : every_kind))
            cmds[n] = &commands[i], op[n++] = NULL;
    return n;
}

/* Prints `sep` ("; ") and `item` on the current line, *col columns long;
 * or, when the line would pass 79 columns, ends it with sep's first byte
 * and puts `item` on a new line indented by `indent`. */
static void wrapped(FILE *to, int *col, int indent, const char *sep, const char *item)
{
    if (*col + (int)(strlen(sep) + strlen(item)) > 79)
        *col = fprintf(to, "%.1s\n%*s", sep, indent, "") - 2, sep = "";
    *col += fprintf(to, "%s%s", sep, item);
}

/* The name of command `c` as typed (force_release: force-release). */
static const char *typed_name(const command *c, char *buf, size_t cap)
{
    size_t i = 0;
    for (; c->name[i] && i + 1 < cap; i++)
        buf[i] = c->name[i] == '_' ? '-' : c->name[i];
    buf[i] = '\0';
    return buf;
}
/* wk --commands: every command wk runs, one a line, "KIND<TAB>COMMAND
 * ARGS" ("*": a look of every kind): each kind's commands as help lists
 * them, then any row of commands[] for the kind that help does not (an
 * operation the kind's list lacks). For completion scripts, and for
 * docs/wk.1's test (tests/tools/test_wk_man.c). */
static void list_commands(FILE *to)
{
    const command *cmds[KIND_COMMANDS_MAX];
    const op_desc *op[KIND_COMMANDS_MAX];
    char name[64];
    for (kind k = 0; k < kind_count(); k++) {
        const kind_desc *kd = kind_info(k);
        size_t n = kind_commands(kd, false, cmds, op);
        for (size_t i = 0; i < COUNT(commands) && n < KIND_COMMANDS_MAX; i++) {
            bool listed = !commands[i].kind || strcmp(commands[i].kind, kd->name);
            for (size_t c = 0; c < n && !listed; c++)
                listed = cmds[c] == &commands[i];
            if (!listed)
                cmds[n++] = &commands[i];
        }
        for (size_t c = 0; c < n; c++)
            fprintf(to, "%s\t%s%s%s\n", kd->name, typed_name(cmds[c], name, sizeof(name)),
                    *cmds[c]->args ? " " : "", cmds[c]->args);
    }
    for (size_t i = 0; i < COUNT(commands); i++)
        if (!commands[i].kind)
            fprintf(to, "*\t%s%s%s\n", typed_name(&commands[i], name, sizeof(name)),
                    *commands[i].args ? " " : "", commands[i].args);
}

static void help(FILE *to)
{
    fputs("usage: wk --url URL --schema SCHEMA.json [--as CAPABILITY] [--json]\n"
          "          ENTITY COMMAND [NAME] [ARGS]\n"
          "       wk --url URL --schema SCHEMA.json [--as CAPABILITY] [--json]\n"
          "          acquire-all BUCKET NAME COST [BUCKET NAME COST ...]\n"
          "       wk --schema SCHEMA.json help [ENTITY [COMMAND]]\n"
          "       wk --help | --version | --commands\n"
          "\n"
          "ENTITY is an entity id of the schema; the commands depend on its kind\n"
          "(help ENTITY: what each does, its effect, the kind's other operations):\n",
          to);
    const command *cmds[KIND_COMMANDS_MAX];
    const op_desc *op[KIND_COMMANDS_MAX];
    for (kind k = 0; k < kind_count(); k++) {
        char label[64];
        snprintf(label, sizeof(label), "%s:", kind_info(k)->name);
        int col = fprintf(to, "  %-14s", label);
        size_t n = kind_commands(kind_info(k), false, cmds, op);
        for (size_t c = 0; c < n; c++) {
            char name[64], item[128];
            snprintf(item, sizeof(item), "%s%s%s", typed_name(cmds[c], name, sizeof(name)),
                     *cmds[c]->args ? " " : "", cmds[c]->args);
            wrapped(to, &col, 16, c ? "; " : "", item);
        }
        fputc('\n', to);
    }
    fputs("  every kind:   list (the names that have keys now)\n"
          "  acquire-all:  take COST from each TokenBucket BUCKET for NAME, all or\n"
          "                none, in one round trip (exit 1: refused; which bucket,\n"
          "                retry_after_ms)\n"
          "\n"
          "options:\n",
          to);
    conn_help(to);
    fputs("  --schema FILE       the service's schema.json (or $WK_SCHEMA)\n"
          "  --as CAPABILITY     a capability of the schema, or read-only (default)\n"
          "                      or read-write; refusals are the library's own\n"
          "  --json              machine-readable output: one JSON object on stdout\n"
          "                      (watch: one a line); anywhere on the line\n"
          "  --                  ends the options: an argument after it that is\n"
          "                      the text --json is an argument (a body, a value)\n"
          "  --timeout MS        the whole command's deadline (default 2000)\n"
          "  --commands          every kind's commands, one a line: KIND, a tab,\n"
          "                      COMMAND ARGS (KIND * for every kind)\n"
          "  --raw               put: store the bytes as given; without it, an\n"
          "                      entity with a typed body refuses a body that does\n"
          "                      not decode as its record (help ENTITY: the fields)\n"
          "\n"
          "exit status: 0 done; 1 not found, not held or limited; 2 usage: bad\n"
          "arguments, an unreadable schema, password or TLS file, or any option\n"
          "the library refuses (WK_EINVAL); 3 refused by the capability\n"
          "(WK_EDENIED); 4 connection or server error.\n",
          to);
}

/* help ENTITY [COMMAND]: each command (or COMMAND) with its effect, then
 * the operations of the kind's list that wk has no command for. */
static int help_entity(const schema *s, const char *id, const char *cmd)
{
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        if (strcmp(e->id, id))
            continue;
        const kind_desc *kd = kind_info(e->kind);
        printf("%s: %s, namespace \"%s\"%s%s\n", e->id, kd->name, e->ns, e->description ? ": " : "",
               e->description ? e->description : "");
        if (!cmd)
            body_help(stdout, e);
        const command *cmds[KIND_COMMANDS_MAX];
        const op_desc *op[KIND_COMMANDS_MAX];
        size_t n = kind_commands(kd, true, cmds, op);
        for (size_t c = 0; c < n; c++) {
            char name[64];
            if (!cmd || find(cmds[c], 1, kd, cmd, cmds[c]->look))
                printf("  wk … %s %s%s%s\n      %s: %s\n", e->id,
                       typed_name(cmds[c], name, sizeof(name)), *cmds[c]->args ? " " : "",
                       cmds[c]->args, op[c] && op[c]->write ? "WRITE" : "READ", cmds[c]->summary);
        }
        const char *sep = NULL;
        int col = 0;
        for (size_t k = 0; !cmd && k < kd->nops; k++) {
            char item[128];
            if (op_command(kd, kd->ops[k].op))
                continue;
            if (!sep)
                col = printf("  the library's, with no command here:"), sep = " ";
            snprintf(item, sizeof(item), "%s (%s)", kd->ops[k].op,
                     kd->ops[k].write ? "WRITE" : "READ");
            wrapped(stdout, &col, 4, sep, item);
            sep = ", ";
        }
        if (sep)
            putchar('\n');
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
            char msg[256];
            snprintf(msg, sizeof(msg), "capability %s: %s", as, wk_strerror(rc));
            fail_msg(rc, msg);
            return EXIT_ERROR;
        }
        *cap = *owned;
        return 0;
    }
    char known[512] = "read-only, read-write";
    for (size_t i = 0; i < s->ncaps; i++)
        snprintf(known + strlen(known), sizeof(known) - strlen(known), ", %s", s->caps[i].id);
    return usage_error("no capability \"%s\" (%s)", as, known);
}

/* Open inv->db with --as's capability and the connection options;
 * `bound`: --timeout bounds the whole command, open and queries together
 * (one deadline from here). *owned: the capability to free after. */
static int open_db(invocation *inv, int timeout_ms, bool bound, wk_db_options *opts,
                   wk_cap **owned)
{
    const wk_cap *cap = NULL;
    int st = capability_of(inv->s, inv->as, &cap, owned);
    if (st)
        return st;
    *opts = (wk_db_options)WK_DB_OPTIONS_INIT;
    char msg[1024];
    if (conn_apply(&inv->conn, opts, msg, sizeof(msg))) {
        wk_cap_free(*owned);
        return usage_error("%s", msg);
    }
    opts->capability = cap;
    opts->client_name = "wk";
    opts->connect_timeout_ms = opts->command_timeout_ms = timeout_ms;
    int64_t deadline = wk__add_ms(wk__boot_ms(), timeout_ms);
    char err[256] = "";
    int rc = wk_db_open(&inv->db, opts, err, sizeof(err));
    if (rc) {
        wk_cap_free(*owned);
        return fail_msg(rc, err);
    }
    if (bound)
        wk__db_bound(inv->db, deadline);
    inv->p = wk_db_processor(inv->db);
    inv->opts = opts;
    return EXIT_OK;
}

static int acquire_all(invocation *inv, int argc, char **argv, int timeout_ms);

static int run_command(invocation *inv, int timeout_ms)
{
    const kind_desc *kd = kind_info(inv->ent->kind);
    const command *cmd = op_command(kd, inv->cmd);
    if (!cmd)
        cmd = find(commands, COUNT(commands), kd, inv->cmd, true);
    const op_desc *op = cmd ? NULL : kind_op(kd, inv->cmd);
    if (op)
        return usage_error("%s: %s is the library's (%s()); wk has no command for it", inv->ent->id,
                           op->query, op->runtime);
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
    int st = cmd->body_at ? checked_body(inv, inv->argv[cmd->body_at - 1]) : EXIT_OK;
    if (st)
        return st;

    wk_cap *owned;
    wk_db_options opts;
    /* `watch` runs until its own --timeout-ms. */
    st = open_db(inv, timeout_ms, strcmp(cmd->name, "watch") != 0, &opts, &owned);
    if (st)
        return st;
    inv->op = kind_op(kd, cmd->name);
    st = cmd->run(inv, name);
    fflush(stdout);
    wk_db_close(inv->db);
    wk_cap_free(owned);
    return st;
}

/*
 * wk acquire-all BUCKET NAME COST [BUCKET NAME COST …]: take from every
 * bucket or none, in one script (wk_token_bucket_acquire_all). Exit 0
 * taken; 1 refused (which bucket, and how long until all could be taken).
 */
static int acquire_all(invocation *inv, int argc, char **argv, int timeout_ms)
{
    if (argc < 3 || argc % 3 || argc / 3 > WK_TOKEN_BUCKET_ALL_MAX)
        return usage_error("acquire-all: BUCKET NAME COST, 1 to %d times (usage: acquire-all "
                           "BUCKET NAME COST [BUCKET NAME COST …])",
                           WK_TOKEN_BUCKET_ALL_MAX);
    size_t n = (size_t)argc / 3;
    wk_entity descs[WK_TOKEN_BUCKET_ALL_MAX];
    const entity *ents[WK_TOKEN_BUCKET_ALL_MAX];
    wk_token_bucket_take takes[WK_TOKEN_BUCKET_ALL_MAX];
    for (size_t t = 0; t < n; t++) {
        char **a = argv + 3 * t;
        inv->ent = NULL;
        for (size_t k = 0; k < inv->s->nentities; k++)
            if (!strcmp(inv->s->entities[k].id, a[0]))
                inv->ent = &inv->s->entities[k];
        if (!inv->ent)
            return usage_error("acquire-all: no entity \"%s\" in %s", a[0], inv->schema_path);
        descriptor_of(inv->ent, &descs[t]);
        if (strcmp(descs[t].kind, WK_KIND_TOKEN_BUCKET))
            return usage_error("acquire-all: %s is a %s, not a TokenBucket", a[0], descs[t].kind);
        ents[t] = inv->ent;
        wk_name name;
        if (parse_name(inv, a[1], &name))
            return EXIT_USAGE;
        char *end;
        errno = 0;
        unsigned long long cost = strtoull(a[2], &end, 10);
        if (errno || *end || !*a[2] || *a[2] == '-' || cost < 1 || cost > WK_TOKEN_BUCKET_COST_MAX)
            return usage_error("acquire-all: %s's COST must be 1 to %llu (got %s)", a[0],
                               (unsigned long long)WK_TOKEN_BUCKET_COST_MAX, a[2]);
        takes[t] = (wk_token_bucket_take){.bucket = &descs[t], .name = name, .cost = cost};
    }
    wk_cap *owned;
    wk_db_options opts;
    int st = open_db(inv, timeout_ms, true, &opts, &owned);
    if (st)
        return st;
    wk_token_bucket_all_outcome out;
    int rc = wk_token_bucket_acquire_all(inv->p, takes, n, &out);
    if (rc) {
        st = fail(inv, rc);
    } else {
        open_json();
        text_or_json_bool("allowed", out.allowed, false);
        if (!out.allowed) {
            const char *name = argv[3 * out.refused + 1];
            inv->ent = ents[out.refused];
            if (json_mode) {
                printf("\"refused\":\"%s\",\"refused_index\":%zu,\"refused_name\":",
                       ents[out.refused]->id, out.refused);
                json_name(inv, name, strlen(name));
                putchar(',');
            } else
                printf("refused: %s %s\n", ents[out.refused]->id, name);
        }
        text_or_json_int("retry_after_ms", out.retry_after_ms, true);
        st = out.allowed ? EXIT_OK : EXIT_NOT_FOUND;
    }
    fflush(stdout);
    wk_db_close(inv->db);
    wk_cap_free(owned);
    return st;
}

int main(int argc, char **argv)
{
    invocation inv = {0};
    conn_from_env(&inv.conn);
    inv.schema_path = getenv("WK_SCHEMA");
    inv.as = "read-only";
    int timeout_ms = 2000;
    /* --json anywhere on the line, before the entity or after the command
     * and its arguments: taken out of argv first, so that every error is
     * JSON too. "--" ends that: the arguments after it are kept as they
     * are (a body or a value that is the text --json), and none of them is
     * an option of wk's. */
    int literal = argc;
    {
        int n = 1;
        for (int k = 1; k < argc; k++) {
            if (literal == argc && !strcmp(argv[k], "--json"))
                json_mode = true;
            else if (literal == argc && !strcmp(argv[k], "--"))
                literal = n;
            else
                argv[n++] = argv[k];
        }
        literal = literal < n ? literal : n;
        argc = n;
        argv[argc] = NULL;
    }
    int i = 1;
    for (; i < literal && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help")) {
            help(stdout);
            return EXIT_OK;
        }
        if (!strcmp(o, "--commands")) {
            list_commands(stdout);
            return EXIT_OK;
        }
        if (!strcmp(o, "--version")) {
            printf("wk %s\n", wk_version());
            return EXIT_OK;
        }
        if (!strcmp(o, "--raw")) {
            inv.raw = true;
            continue;
        }
        const char **slot = !strcmp(o, "--schema") ? &inv.schema_path
                            : !strcmp(o, "--as")   ? &inv.as
                                                   : NULL;
        bool is_timeout = !strcmp(o, "--timeout");
        char msg[256];
        int conn = conn_from_cli(&inv.conn, o, i + 1 < argc ? argv[i + 1] : NULL, msg, sizeof(msg));
        if (conn < 0)
            return usage_error("%s", msg);
        if (!slot && !is_timeout && !conn)
            return usage_error("unknown option %s", o);
        if (i + 1 >= argc)
            return usage_error("%s needs a value", o);
        if (conn) {
            i++;
        } else if (is_timeout) {
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
        char msg[1024];
        snprintf(msg, sizeof(msg), "cannot read %s: %s", inv.schema_path, strerror(errno));
        fprintf(stderr, "wk: %s\n", msg);
        json_error(msg, "usage");
        return EXIT_USAGE;
    }
    char perr[256];
    cg_json_pos ppos = {0, 0};
    cg_json_doc *doc = cg_json_parse(text, len, perr, sizeof(perr), &ppos);
    free(text);
    if (!doc) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s:%d:%d: error: %s", inv.schema_path, ppos.line, ppos.col,
                 perr);
        fprintf(stderr, "%s\n", msg);
        json_error(msg, "usage");
        return EXIT_USAGE;
    }
    pool *pl = pool_new();
    diag d = {inv.schema_path, stderr, 0};
    schema s;
    int status;
    if (!check_schema(cg_json_doc_root(doc), inv.schema_path, pl, &d, &s)) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s: %d error(s)", inv.schema_path, d.errors);
        fprintf(stderr, "%s\n", msg);
        json_error(msg, "usage");
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
    if (!strcmp(argv[i], "acquire-all")) {
        status = !inv.conn.v[CONN_URL] ? usage_error("--url is required (or $WK_URL)")
                                       : acquire_all(&inv, argc - i - 1, argv + i + 1, timeout_ms);
        goto out;
    }
    for (size_t k = 0; k < s.nentities; k++)
        if (!strcmp(s.entities[k].id, argv[i]))
            inv.ent = &s.entities[k];
    if (!inv.ent) {
        status = usage_error("no entity \"%s\" in %s", argv[i], inv.schema_path);
        goto out;
    }
    if (i + 1 >= argc && json_mode) { /* the help text is not JSON */
        status = usage_error("%s: no command given", inv.ent->id);
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
    if (!inv.conn.v[CONN_URL]) {
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
    conn_free(&inv.conn);
    pool_free(pl);
    cg_json_doc_free(doc);
    return status;
}
