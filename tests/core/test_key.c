/*
 * tests/core/test_key.c — key layout pinned byte for byte (compatibility
 * with the Rust wakuwaku-entity crate depends on these exact bytes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <wakuwaku/wakuwaku.h>

#include "core/core_internal.h"

static void expect_key(const wk_entity *e, wk_name name, const char *suffix, const char *want,
                       size_t want_len)
{
    char buf[WK_KEY_MAX];
    size_t len = 0;
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, e, &name, suffix), WK_OK);
    cr_assert_eq(len, want_len, "length %zu, want %zu", len, want_len);
    cr_assert(memcmp(buf, want, want_len) == 0, "key bytes differ: got %.*s", (int)len, buf);
}

#define EXPECT(e, name, suffix, lit) expect_key(e, name, suffix, lit, sizeof(lit) - 1)

Test(key, string_name_single_key)
{
    wk_entity lock = WK_LOCK_ENTITY("invoice", 1000);
    EXPECT(&lock, wk_name_str("inv-42"), NULL, "@@wakuwaku-entity:Lock:invoice:inv-42");
}

Test(key, integer_names_in_decimal)
{
    wk_entity lock = WK_LOCK_ENTITY("invoice", 1000);
    EXPECT(&lock, wk_name_u64(42), NULL, "@@wakuwaku-entity:Lock:invoice:42");
    EXPECT(&lock, wk_name_u64(UINT64_MAX), NULL,
           "@@wakuwaku-entity:Lock:invoice:18446744073709551615");
    EXPECT(&lock, wk_name_i64(-7), NULL, "@@wakuwaku-entity:Lock:invoice:-7");
    EXPECT(&lock, wk_name_i64(INT64_MIN), NULL,
           "@@wakuwaku-entity:Lock:invoice:-9223372036854775808");
    EXPECT(&lock, wk_name_i64(0), NULL, "@@wakuwaku-entity:Lock:invoice:0");
}

Test(key, byte_string_with_nul_and_brace_verbatim)
{
    wk_entity cache = WK_CACHE_ENTITY("blob", 1000);
    static const char raw[] = {'a', '\0', '}', '{', ':', '\xff'};
    EXPECT(&cache, wk_name_bytes(raw, sizeof(raw)), NULL,
           "@@wakuwaku-entity:Cache:blob:a\0}{:\xff");
}

Test(key, multi_key_layout_uses_braces)
{
    wk_entity rw = WK_RWLOCK_ENTITY("catalog", 1000);
    EXPECT(&rw, wk_name_str("shoes"), ":w", "@@wakuwaku-entity:RwLock:{catalog:shoes}:w");
    EXPECT(&rw, wk_name_u64(7), ":r", "@@wakuwaku-entity:RwLock:{catalog:7}:r");
    static const char raw[] = {'x', '}', '\0'};
    EXPECT(&rw, wk_name_bytes(raw, 3), ":r", "@@wakuwaku-entity:RwLock:{catalog:x}\0}:r");
}

Test(key, every_builtin_kind_spelled_like_rust)
{
    wk_entity hc = WK_HASHED_CACHE_ENTITY("profile", 1000);
    wk_entity tb = WK_TOKEN_BUCKET_ENTITY("login", 10, 1, 1000);
    wk_entity st = WK_SETTINGS_ENTITY("flags");
    EXPECT(&hc, wk_name_str("u1"), NULL, "@@wakuwaku-entity:HashedCache:profile:u1");
    EXPECT(&tb, wk_name_str("1.2.3.4"), NULL, "@@wakuwaku-entity:TokenBucket:login:1.2.3.4");
    EXPECT(&st, wk_name_str("main"), NULL, "@@wakuwaku-entity:Settings:flags:main");
    /* specs/rust-dynamic-structures.md, LiveView: a key pair :h / :l. */
    wk_entity lv = WK_LIVE_VIEW_ENTITY("document", 100);
    EXPECT(&lv, wk_name_u64(7), ":h", "@@wakuwaku-entity:LiveView:{document:7}:h");
    EXPECT(&lv, wk_name_u64(7), ":l", "@@wakuwaku-entity:LiveView:{document:7}:l");
}

/* The spec's examples (specs/rust-dynamic-structures.md): a Pipe is a key
 * pair in one slot, a StreamBuffer a single key. */
Test(key, pipe_and_stream_buffer_spelled_like_rust)
{
    wk_entity pipe = WK_PIPE_ENTITY("to-client", 60000);
    wk_entity sb = WK_STREAM_BUFFER_ENTITY("completion", 120000);
    EXPECT(&pipe, wk_name_str("s1"), ":m", "@@wakuwaku-entity:Pipe:{to-client:s1}:m");
    EXPECT(&pipe, wk_name_str("s1"), ":c", "@@wakuwaku-entity:Pipe:{to-client:s1}:c");
    EXPECT(&pipe, wk_name_u64(9), ":m", "@@wakuwaku-entity:Pipe:{to-client:9}:m");
    EXPECT(&sb, wk_name_u64(7), NULL, "@@wakuwaku-entity:StreamBuffer:completion:7");
    EXPECT(&sb, wk_name_str("a b"), NULL, "@@wakuwaku-entity:StreamBuffer:completion:a b");
}

Test(key, empty_name_allowed)
{
    wk_entity lock = WK_LOCK_ENTITY("n", 1000);
    EXPECT(&lock, wk_name_str(""), NULL, "@@wakuwaku-entity:Lock:n:");
}

Test(key, rejects_bad_input)
{
    wk_entity lock = WK_LOCK_ENTITY("invoice", 1000);
    char buf[WK_KEY_MAX];
    size_t len;
    wk_name null_name = wk_name_str(NULL);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &lock, &null_name, NULL), WK_EINVAL);
    static char big[WK_NAME_MAX + 1];
    memset(big, 'a', sizeof(big));
    wk_name too_long = wk_name_bytes(big, sizeof(big));
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &lock, &too_long, NULL), WK_EINVAL);
    wk_name max = wk_name_bytes(big, WK_NAME_MAX);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &lock, &max, NULL), WK_OK);
    wk_name ok = wk_name_str("x");
    cr_assert_eq(wk_key_build(buf, 10, &len, &lock, &ok, NULL), WK_EINVAL, "buffer too small");
    wk_entity no_ns = WK_LOCK_ENTITY(NULL, 1000);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &no_ns, &ok, NULL), WK_EINVAL);
    wk_entity empty_ns = WK_LOCK_ENTITY("", 1000);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &empty_ns, &ok, NULL), WK_EINVAL);
}

/* ------------------------------------------------------------------------
 * No two (kind, namespace, name) triples share a key
 *
 * Every query of every built-in kind runs through a processor that sends
 * nothing and records each argument that looks like a key or a channel
 * (starts with the prefix): so the keys checked are the ones the library
 * builds, whatever suffixes a kind uses. Namespaces and names come from a
 * small alphabet holding the key's separators (':', '{', '}') and NUL.
 * ---------------------------------------------------------------------- */

typedef struct recorder {
    wk_processor base; /* first: process() recovers the recorder from it */
    char *bytes;       /* every recorded key, back to back */
    size_t bytes_len, bytes_cap;
    struct recorded {
        size_t off, len;
        size_t triple; /* kind * NS_COUNT * NAME_COUNT + ns * NAME_COUNT + name */
    } *keys;
    size_t nkeys, keys_cap;
    size_t triple; /* the triple of the queries being run */
    size_t queries;
} recorder;

static int record_query(wk_processor *self, wk_query *q)
{
    recorder *r = (recorder *)self;
    r->queries++;
    for (int i = 0; i < q->argc; i++) {
        size_t len = q->argvlen[i];
        if (len < sizeof(WK_KEY_PREFIX) - 1 ||
            memcmp(q->argv[i], WK_KEY_PREFIX, sizeof(WK_KEY_PREFIX) - 1) != 0)
            continue;
        if (r->bytes_len + len > r->bytes_cap) {
            r->bytes_cap = (r->bytes_cap + len) * 2;
            r->bytes = realloc(r->bytes, r->bytes_cap);
            cr_assert(r->bytes);
        }
        if (r->nkeys == r->keys_cap) {
            r->keys_cap = r->keys_cap ? r->keys_cap * 2 : 4096;
            r->keys = realloc(r->keys, r->keys_cap * sizeof(*r->keys));
            cr_assert(r->keys);
        }
        memcpy(r->bytes + r->bytes_len, q->argv[i], len);
        r->keys[r->nkeys++] = (struct recorded){r->bytes_len, len, r->triple};
        r->bytes_len += len;
    }
    return WK_OK; /* nothing sent; parsers never run, so outcomes stay unset */
}

/* Runs every query of the entity's kind on `name`; returns how many were
 * accepted (WK_OK) and sets *refused to how many failed with WK_EINVAL. */
static int run_every_query(wk_processor *p, const wk_entity *e, wk_name n, int *refused)
{
    wk_token t;
    memset(&t, 0, sizeof(t));
    bool b;
    int rc[8], nrc = 0;
    if (strcmp(e->kind, WK_KIND_LOCK) == 0) {
        wk_lock_state st;
        rc[nrc++] = wk_lock_try(p, e, n, &t, &b);
        rc[nrc++] = wk_lock_release(p, e, n, &t, &b);
        rc[nrc++] = wk_lock_extend(p, e, n, &t, &b);
        rc[nrc++] = wk_lock_inspect(p, e, n, &st);
    } else if (strcmp(e->kind, WK_KIND_RWLOCK) == 0) {
        wk_rwlock_state st;
        rc[nrc++] = wk_rwlock_try_read(p, e, n, &t, &b);
        rc[nrc++] = wk_rwlock_try_write(p, e, n, &t, &b);
        rc[nrc++] = wk_rwlock_release_read(p, e, n, &t, &b);
        rc[nrc++] = wk_rwlock_extend_read(p, e, n, &t, &b);
        rc[nrc++] = wk_rwlock_release_write(p, e, n, &t, &b);
        rc[nrc++] = wk_rwlock_extend_write(p, e, n, &t, &b);
        rc[nrc++] = wk_rwlock_inspect(p, e, n, &st);
    } else if (strcmp(e->kind, WK_KIND_FENCED_LOCK) == 0) {
        wk_fenced_lease lease;
        wk_fenced_lock_ownership own;
        wk_fenced_lock_state st;
        rc[nrc++] = wk_fenced_lock_try(p, e, n, &lease);
        rc[nrc++] = wk_fenced_lock_release(p, e, n, &t, &b);
        rc[nrc++] = wk_fenced_lock_extend(p, e, n, &t, &b);
        rc[nrc++] = wk_fenced_lock_owned(p, e, n, &t, &own);
        rc[nrc++] = wk_fenced_lock_inspect(p, e, n, &st);
        rc[nrc++] = wk_fenced_lock_force_release(p, e, n, &b);
    } else if (strcmp(e->kind, WK_KIND_SEMAPHORE) == 0) {
        wk_lease_state own;
        wk_semaphore_state st;
        rc[nrc++] = wk_semaphore_try(p, e, n, &t, &b);
        rc[nrc++] = wk_semaphore_release(p, e, n, &t, &b);
        rc[nrc++] = wk_semaphore_extend(p, e, n, &t, &b);
        rc[nrc++] = wk_semaphore_owned(p, e, n, &t, &own);
        rc[nrc++] = wk_semaphore_inspect(p, e, n, &st);
        rc[nrc++] = wk_semaphore_force_release(p, e, n, &b);
    } else if (strcmp(e->kind, WK_KIND_CACHE) == 0) {
        wk_body body = WK_BODY_INIT;
        rc[nrc++] = wk_cache_get(p, e, n, &body);
        rc[nrc++] = wk_cache_put(p, e, n, "v", 1);
        rc[nrc++] = wk_cache_remove(p, e, n, &b);
        wk_body_free(&body);
    } else if (strcmp(e->kind, WK_KIND_HASHED_CACHE) == 0) {
        wk_body body = WK_BODY_INIT;
        uint8_t hash[WK_HASH_LEN] = {0};
        rc[nrc++] = wk_hashed_cache_get(p, e, n, &body);
        rc[nrc++] = wk_hashed_cache_hash(p, e, n, &body);
        rc[nrc++] = wk_hashed_cache_get_if_changed(p, e, n, hash, &body);
        rc[nrc++] = wk_hashed_cache_put(p, e, n, "v", 1, hash);
        rc[nrc++] = wk_hashed_cache_remove(p, e, n, &b);
        wk_body_free(&body);
    } else if (strcmp(e->kind, WK_KIND_TOKEN_BUCKET) == 0) {
        wk_token_bucket_outcome o;
        wk_token_bucket_state st;
        rc[nrc++] = wk_token_bucket_acquire(p, e, n, 1, &o);
        rc[nrc++] = wk_token_bucket_peek(p, e, n, &st);
        rc[nrc++] = wk_token_bucket_reset(p, e, n, &b);
    } else if (strcmp(e->kind, WK_KIND_SETTINGS) == 0) {
        int64_t version;
        wk_settings_removal removal;
        wk_settings_map *map = NULL;
        rc[nrc++] = wk_settings_put(p, e, n, "k", 1, "v", 1, &version);
        rc[nrc++] = wk_settings_remove(p, e, n, "k", 1, &removal);
        rc[nrc++] = wk_settings_snapshot(p, e, n, &map);
        wk_settings_map_free(map);
    } else if (strcmp(e->kind, WK_KIND_LIVE_VIEW) == 0) {
        /* The queries a deferred processor takes (version, history and
         * subscribe need their outcome at once); they build both keys. */
        wk_live_view_body body = WK_LIVE_VIEW_BODY_INIT;
        wk_live_view_commit_outcome out;
        rc[nrc++] = wk_live_view_create(p, e, n, "v", 1, &b);
        rc[nrc++] = wk_live_view_commit(p, e, n, 1, "d", 1, "vd", 2, &out);
        rc[nrc++] = wk_live_view_get(p, e, n, &body);
        rc[nrc++] = wk_live_view_remove(p, e, n, &b);
        wk_live_view_body_free(&body);
    } else if (strcmp(e->kind, WK_KIND_PIPE) == 0) {
        /* receive needs its outcome at once: a deferred processor (this
         * test's) refuses it, so only the writes that queue run here. */
        rc[nrc++] = wk_pipe_send(p, e, n, "m", 1);
        rc[nrc++] = wk_pipe_close(p, e, n);
    } else if (strcmp(e->kind, WK_KIND_STREAM_BUFFER) == 0) {
        int64_t index;
        wk_stream_buffer_contents c = WK_STREAM_BUFFER_CONTENTS_INIT;
        rc[nrc++] = wk_stream_buffer_append(p, e, n, "b", 1, &index);
        rc[nrc++] = wk_stream_buffer_finish(p, e, n, &b);
        rc[nrc++] = wk_stream_buffer_read(p, e, n, 0, &c);
        rc[nrc++] = wk_stream_buffer_remove(p, e, n, &b);
        wk_stream_buffer_contents_free(&c);
    } else {
        /* A kind of the caller's own: the keys its queries would build. */
        static const char *const suffixes[] = {NULL, "", ":x", ":y"};
        for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
            char key[WK_KEY_MAX];
            size_t len;
            rc[nrc] = wk_key_build(key, sizeof(key), &len, e, &n, suffixes[i]);
            if (rc[nrc] == WK_OK) {
                const char *argv[] = {"EXISTS", key};
                size_t argvlen[] = {6, len};
                wk_query q = {.name = "custom", .argc = 2, .argv = argv, .argvlen = argvlen};
                wk_process(p, &q);
            }
            nrc++;
        }
    }
    int ok = 0;
    *refused = 0;
    for (int i = 0; i < nrc; i++) {
        if (rc[i] == WK_OK)
            ok++;
        else if (rc[i] == WK_EINVAL)
            (*refused)++;
        else
            cr_assert_fail("%s query %d: %s", e->kind, i, wk_err_name(rc[i]));
    }
    return ok;
}

static const char ns_alphabet[] = {'a', 'w', ':', '{', '}'};
static const char name_alphabet[] = {'a', 'w', 'r', ':', '{', '}', '\0'};
#define NS_MAXLEN 3
#define NAME_MAXLEN 3
/* 5 + 25 + 125 namespaces; 1 + 7 + 49 + 343 names */
#define NS_COUNT 155
#define NAME_COUNT 400

/* The i-th string over `alphabet` (length 1..max or 0..max), shortest first. */
static size_t nth_string(char *out, size_t i, const char *alphabet, size_t n, size_t min,
                         size_t max)
{
    size_t len = min, block = 1;
    for (size_t k = 0; k < min; k++)
        block *= n;
    while (i >= block) {
        i -= block;
        len++;
        block *= n;
        cr_assert(len <= max);
    }
    for (size_t k = len; k-- > 0;) {
        out[k] = alphabet[i % n];
        i /= n;
    }
    out[len] = '\0';
    return len;
}

static const recorder *sort_target;

static int cmp_recorded(const void *a, const void *b)
{
    const struct recorded *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(sort_target->bytes + x->off, sort_target->bytes + y->off, n);
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

static void describe_triple(char *dst, size_t cap, const char *const *kinds, size_t triple)
{
    char ns[NS_MAXLEN + 1], name[NAME_MAXLEN + 1];
    size_t kind = triple / (NS_COUNT * NAME_COUNT);
    nth_string(ns, triple / NAME_COUNT % NS_COUNT, ns_alphabet, sizeof(ns_alphabet), 1,
               NS_MAXLEN);
    size_t nl = nth_string(name, triple % NAME_COUNT, name_alphabet, sizeof(name_alphabet), 0,
                           NAME_MAXLEN);
    char shown[4 * NAME_MAXLEN + 1] = "", *o = shown;
    for (size_t i = 0; i < nl; i++)
        o += name[i] ? sprintf(o, "%c", name[i]) : sprintf(o, "\\0");
    snprintf(dst, cap, "(%s, \"%s\", \"%s\")", kinds[kind], ns, shown);
}

Test(key, no_two_triples_build_the_same_key)
{
    static const char *const kinds[] = {
        WK_KIND_LOCK,         WK_KIND_RWLOCK,        WK_KIND_CACHE,
        WK_KIND_HASHED_CACHE, WK_KIND_TOKEN_BUCKET,  WK_KIND_SETTINGS,
        WK_KIND_LIVE_VIEW,    WK_KIND_PIPE,          WK_KIND_STREAM_BUFFER,
        WK_KIND_FENCED_LOCK,  WK_KIND_SEMAPHORE,     "Job"};
    const size_t nkinds = sizeof(kinds) / sizeof(kinds[0]);
    /* Deferred, like a batch: parsers never run, so a settings snapshot
     * takes its one-command path instead of reading chunks. */
    recorder r = {.base = {.process = record_query, .flags = WK_PROCESSOR_DEFERRED}};
    /* Namespaces the library accepted although they hold a separator, and
     * how many namespaces it accepted in all. Checked after the keys, so
     * that a layout that lets them through shows its collision first. */
    size_t wrongly_accepted = 0, accepted_ns = 0;
    char first_wrong[64] = "";
    for (size_t k = 0; k < nkinds; k++) {
        for (size_t s = 0; s < NS_COUNT; s++) {
            char ns[NS_MAXLEN + 1];
            nth_string(ns, s, ns_alphabet, sizeof(ns_alphabet), 1, NS_MAXLEN);
            bool legal = strpbrk(ns, ":{}") == NULL;
            wk_entity e = {.kind = kinds[k], .ns = ns, .ttl_ms = 1000, .capacity = 10,
                           .rate = 1, .period_ms = 1000};
            bool accepted = wk_entity_check(&e) == WK_OK;
            for (size_t m = 0; m < NAME_COUNT; m++) {
                char name[NAME_MAXLEN + 1];
                size_t nl = nth_string(name, m, name_alphabet, sizeof(name_alphabet), 0,
                                       NAME_MAXLEN);
                r.triple = (k * NS_COUNT + s) * NAME_COUNT + m;
                size_t keys_before = r.nkeys;
                int refused;
                int ok = run_every_query(&r.base, &e, wk_name_bytes(name, nl), &refused);
                /* A namespace is accepted or refused by every query alike,
                 * and refused before anything is sent. */
                cr_assert(accepted ? refused == 0 && ok > 0 && r.nkeys > keys_before
                                   : ok == 0 && r.nkeys == keys_before,
                          "%s:%s: wk_entity_check says %s, but %d queries accepted it and %d "
                          "refused it",
                          kinds[k], ns, accepted ? "OK" : "EINVAL", ok, refused);
            }
            if (accepted)
                accepted_ns++;
            if (accepted && !legal && !wrongly_accepted++)
                snprintf(first_wrong, sizeof(first_wrong), "%s:%s", kinds[k], ns);
        }
    }

    sort_target = &r;
    qsort(r.keys, r.nkeys, sizeof(*r.keys), cmp_recorded);
    size_t distinct = r.nkeys ? 1 : 0;
    for (size_t i = 1; i < r.nkeys; i++) {
        if (cmp_recorded(&r.keys[i - 1], &r.keys[i]) != 0) {
            distinct++;
            continue;
        }
        if (r.keys[i - 1].triple != r.keys[i].triple) {
            char a[128], b[128], key[4 * WK_KEY_MAX];
            describe_triple(a, sizeof(a), kinds, r.keys[i - 1].triple);
            describe_triple(b, sizeof(b), kinds, r.keys[i].triple);
            wk__render_key(key, sizeof(key), r.bytes + r.keys[i].off, r.keys[i].len);
            cr_assert_fail("%s and %s both build the key \"%s\"", a, b, key);
        }
    }
    /* At least one key per accepted triple (RwLock, Settings, FencedLock,
     * Semaphore and the custom kind have several). */
    cr_assert_geq(distinct, accepted_ns * NAME_COUNT, "%zu distinct keys", distinct);
    cr_assert_eq(wrongly_accepted, 0,
                 "%zu namespaces holding ':', '{' or '}' were accepted, e.g. %s",
                 wrongly_accepted, first_wrong);
    cr_assert_eq(accepted_ns, nkinds * 14, "2 + 4 + 8 legal namespaces per kind");
    free(r.bytes);
    free(r.keys);
}

/* The separators of the layout may not appear in the parts that have no
 * length of their own: kind, namespace and suffix. */
Test(key, separators_refused_in_kind_namespace_and_suffix)
{
    char buf[WK_KEY_MAX];
    size_t len;
    wk_name n = wk_name_str("daily");
    static const char *const bad_ns[] = {"jobs:billing", ":", "a{", "}a", "{jobs}"};
    for (size_t i = 0; i < sizeof(bad_ns) / sizeof(bad_ns[0]); i++) {
        wk_entity e = WK_LOCK_ENTITY(bad_ns[i], 1000);
        cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &e, &n, NULL), WK_EINVAL, "%s",
                     bad_ns[i]);
        cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &e, &n, ":w"), WK_EINVAL, "%s",
                     bad_ns[i]);
    }
    static const char *const bad_kinds[] = {"Lock:jobs", "Lo{ck", "Lock}"};
    for (size_t i = 0; i < sizeof(bad_kinds) / sizeof(bad_kinds[0]); i++) {
        wk_entity e = WK_CUSTOM_ENTITY(bad_kinds[i], "billing");
        cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &e, &n, NULL), WK_EINVAL, "%s",
                     bad_kinds[i]);
    }
    /* A '}' in a suffix would let name "x}:a" + suffix ":b" equal name "x"
     * + suffix ":a}:b". */
    wk_entity rw = WK_RWLOCK_ENTITY("catalog", 1000);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &rw, &n, ":a}:b"), WK_EINVAL);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &rw, &n, ":a{b"), WK_OK);
}
