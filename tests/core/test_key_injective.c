/*
 * tests/core/test_key_injective.c — no key belongs to two items (issue 21,
 * finding 2): a Lock's companion keys (wake queue, registrations, wake-up
 * lists) never equal another name's item key, against a real redis-server;
 * and, over every kind's layout and adversarial names, every item key and
 * companion key names exactly one (kind, namespace, name), in that item's
 * cluster slot.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wakuwaku/wakuwaku.h>

#include "core/core_internal.h"
#include "redis_fixture.h"

TestSuite(key_injective, .timeout = 240);

/* ------------------------------------------------------------------------
 * The reported scenario: "{job}" and "{job}:q"
 * ---------------------------------------------------------------------- */

typedef struct waiter {
    const wk_entity *e;
    int rc;
    bool acquired;
} waiter;

static void *wait_for_job(void *arg)
{
    waiter *w = arg;
    wk_db *db = wk_test_open(NULL);
    wk_token t;
    w->rc = wk_lock_acquire(wk_db_processor(db), w->e, wk_name_str("{job}"), wk_deadline_in(1500),
                            NULL, &t, &w->acquired);
    wk_db_close(db);
    return NULL;
}

/* Until some client is blocked (the waiter's BLPOP): CLIENT LIST flags. */
static void until_blocked(redisContext *raw)
{
    for (int i = 0; i < 2000; i++) {
        redisReply *r = wk_test_cmd(raw, "CLIENT LIST");
        bool blocked = r && r->str && strstr(r->str, "flags=b ");
        freeReplyObject(r);
        if (blocked)
            return;
        usleep(1000);
    }
    cr_assert_fail("the waiter never blocked");
}

Test(key_injective, waiting_for_a_name_leaves_its_suffixed_name_free)
{
    wk_entity e = WK_LOCK_ENTITY("inj1", 5000);
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_token held, other;
    bool ok = false;
    cr_assert_eq(wk_lock_try(p, &e, wk_name_str("{job}"), &held, &ok), WK_OK);
    cr_assert(ok);

    waiter w = {&e, -1, false};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, wait_for_job, &w), 0);
    until_blocked(raw);

    /* "{job}:q" is free: nobody took it. */
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &e, wk_name_str("{job}:q"), &st), WK_OK);
    cr_expect(!st.held, "the free lock \"{job}:q\" is reported held while \"{job}\" has a waiter");
    cr_assert_eq(wk_lock_try(p, &e, wk_name_str("{job}:q"), &other, &ok), WK_OK);
    cr_expect(ok, "the free lock \"{job}:q\" cannot be taken while \"{job}\" has a waiter");
    bool released = false;
    if (ok) {
        /* Its force release must not touch "{job}"'s queue. */
        cr_assert_eq(wk_lock_force_release(p, &e, wk_name_str("{job}:q"), &released), WK_OK);
        cr_expect(released);
    }
    cr_assert_eq(wk_lock_release(p, &e, wk_name_str("{job}"), &held, &released), WK_OK);
    cr_assert(released);
    pthread_join(th, NULL);
    cr_expect_eq(w.rc, WK_OK, "the waiter of \"{job}\" failed: %s", wk_err_name(w.rc));
    cr_expect(w.acquired, "the waiter of \"{job}\" was not woken by the release");
    redisFree(raw);
    wk_db_close(db);
}

Test(key_injective, a_held_suffixed_name_does_not_break_waiting)
{
    wk_entity e = WK_LOCK_ENTITY("inj2", 5000);
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_token a, b, c;
    bool ok = false;
    cr_assert_eq(wk_lock_try(p, &e, wk_name_str("{job}"), &a, &ok), WK_OK);
    cr_assert(ok);
    cr_assert_eq(wk_lock_try(p, &e, wk_name_str("{job}:q"), &b, &ok), WK_OK);
    cr_assert(ok);
    int rc = wk_lock_acquire(p, &e, wk_name_str("{job}"), wk_deadline_in(50), NULL, &c, &ok);
    cr_expect_eq(rc, WK_OK, "waiting for \"{job}\" while \"{job}:q\" is held: %s (%s)",
                 wk_err_name(rc), wk_db_errmsg(db));
    cr_expect(!ok);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * The property: every query of every kind (tests/kinds), adversarial names
 *
 * The server's MONITOR shows every command as it runs — a client's, a
 * script's own redis.call()s (with keys the script builds, such as a
 * waiter's list), the blocking connection's BLPOPs — and COMMAND GETKEYS
 * says which of its arguments are keys, as Redis itself reads them. Each
 * row runs alone, followed by a marker, so every key seen belongs to that
 * row's (kind, namespace, name). PUBLISH channels are collected apart
 * (channels and keys do not meet in Redis).
 * ---------------------------------------------------------------------- */

#include "tests/kinds/kinds.h"

/* Redis Cluster's slot, written here again (not the library's). */
static unsigned slot_of(const char *k, size_t n)
{
    const char *o = memchr(k, '{', n);
    if (o) {
        size_t s = (size_t)(o - k) + 1;
        const char *c = memchr(k + s, '}', n - s);
        if (c && c != k + s) {
            k += s;
            n = (size_t)(c - k);
        }
    }
    unsigned crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (unsigned)(unsigned char)k[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc & 16383u;
}

typedef struct seen {
    char *key; /* 'K' or 'C' (key or channel), then the bytes */
    size_t key_len;
    char *owner; /* kind NUL ns NUL name */
    size_t owner_len;
    unsigned slot;
} seen;

typedef struct book {
    seen *v;
    size_t n, cap;
} book;

static char *dup_bytes(const void *p, size_t n)
{
    char *d = malloc(n + 1);
    cr_assert_not_null(d);
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

static void book_add(book *b, char type, const char *key, size_t key_len, const char *owner,
                     size_t owner_len)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4096;
        b->v = realloc(b->v, b->cap * sizeof(*b->v));
        cr_assert_not_null(b->v);
    }
    seen *s = &b->v[b->n++];
    s->key = malloc(key_len + 1);
    cr_assert_not_null(s->key);
    s->key[0] = type;
    memcpy(s->key + 1, key, key_len);
    s->key_len = key_len + 1;
    s->owner = dup_bytes(owner, owner_len);
    s->owner_len = owner_len;
    s->slot = slot_of(key, key_len);
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static int by_key(const void *x, const void *y)
{
    const seen *a = x, *b = y;
    return cmp_bytes(a->key, a->key_len, b->key, b->key_len);
}

static int by_owner(const void *x, const void *y)
{
    const seen *a = x, *b = y;
    return cmp_bytes(a->owner, a->owner_len, b->owner, b->owner_len);
}

/* One MONITOR line's arguments: `… [0 127.0.0.1:1234] "SET" "k" "v"`. */
typedef struct args {
    char *v[64];
    size_t len[64];
    int n;
} args;

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10;
}

static void parse_monitor(const char *line, args *a)
{
    a->n = 0;
    const char *p = strstr(line, "] ");
    cr_assert_not_null(p, "MONITOR line: %s", line);
    p += 2;
    while (*p == '"' && a->n < 64) {
        char *out = malloc(strlen(p) + 1);
        size_t n = 0;
        for (p++; *p && *p != '"'; p++) {
            if (*p != '\\') {
                out[n++] = *p;
                continue;
            }
            p++;
            switch (*p) {
            case 'n': out[n++] = '\n'; break;
            case 'r': out[n++] = '\r'; break;
            case 't': out[n++] = '\t'; break;
            case 'a': out[n++] = '\a'; break;
            case 'b': out[n++] = '\b'; break;
            case 'x':
                out[n++] = (char)(hexval(p[1]) * 16 + hexval(p[2]));
                p += 2;
                break;
            default: out[n++] = *p;
            }
        }
        out[n] = '\0';
        a->v[a->n] = out;
        a->len[a->n++] = n;
        p += *p == '"';
        while (*p == ' ')
            p++;
    }
}

static void args_free(args *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    a->n = 0;
}

static bool is(const args *a, const char *cmd)
{
    return a->n > 0 && strlen(cmd) == a->len[0] && strncasecmp(a->v[0], cmd, a->len[0]) == 0;
}

typedef struct watch {
    redisContext *mon, *ctl;
    book keys;
    unsigned long marks;
} watch;

/* Everything the server ran since the last mark belongs to `owner`. */
static void attribute(watch *w, const char *owner, size_t owner_len)
{
    char mark[64];
    snprintf(mark, sizeof(mark), "wk-mark-%lu", ++w->marks);
    freeReplyObject(wk_test_cmd(w->ctl, "ECHO %s", mark));
    for (;;) {
        redisReply *r = NULL;
        cr_assert_eq(redisGetReply(w->mon, (void **)&r), REDIS_OK, "MONITOR read failed");
        args a;
        if (getenv("WK_INJ_DEBUG"))
            fprintf(stderr, "  %.150s\n", r->str);
        parse_monitor(r->str, &a);
        freeReplyObject(r);
        bool done = is(&a, "ECHO") && a.n == 2 && strcmp(a.v[1], mark) == 0;
        if (done) {
            args_free(&a);
            return;
        }
        if (is(&a, "ECHO") || is(&a, "COMMAND") || a.n == 0) {
            args_free(&a);
            continue;
        }
        if (is(&a, "PUBLISH") || is(&a, "SPUBLISH")) {
            book_add(&w->keys, 'C', a.v[1], a.len[1], owner, owner_len);
        } else {
            const char *argv[66] = {"COMMAND", "GETKEYS"};
            size_t lens[66] = {7, 7};
            for (int i = 0; i < a.n; i++) {
                argv[i + 2] = a.v[i];
                lens[i + 2] = a.len[i];
            }
            redisReply *k = redisCommandArgv(w->ctl, a.n + 2, argv, lens);
            cr_assert_not_null(k);
            if (k->type == REDIS_REPLY_ARRAY)
                for (size_t i = 0; i < k->elements; i++)
                    book_add(&w->keys, 'K', k->element[i]->str, k->element[i]->len, owner,
                             owner_len);
            freeReplyObject(k);
        }
        args_free(&a);
    }
}

/* Bytes made printable (NUL: the owner's separators shown as ", "). */
static void shown(char out[512], const char *b, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o < 500; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c >= 0x20 && c < 0x7f)
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, 512 - o, "\\x%02x", c);
    }
    out[o] = '\0';
}

static size_t owner_of(char *out, const char *kind, const char *ns, const void *name,
                       size_t name_len)
{
    size_t kl = strlen(kind) + 1, nl = strlen(ns) + 1;
    memcpy(out, kind, kl);
    memcpy(out + kl, ns, nl);
    memcpy(out + kl + nl, name, name_len);
    return kl + nl + name_len;
}

/* A waiting acquire that parks once and gives up: the wait's own keys
 * (queue, registrations, the waiter's list and its BLPOP). */
static void contend(wk_processor *p, const char *kind, const char *ns, wk_name n)
{
    wk_token a, b;
    bool ok;
    int64_t soon = wk_deadline_in(15);
    if (strcmp(kind, WK_KIND_LOCK) == 0) {
        wk_entity e = WK_LOCK_FAIR_ENTITY(ns, 5000);
        wk_lock_try(p, &e, n, &a, &ok);
        wk_lock_acquire(p, &e, n, soon, NULL, &b, &ok);
        wk_lock_release(p, &e, n, &a, &ok);
    } else if (strcmp(kind, WK_KIND_RWLOCK) == 0) {
        wk_entity e = WK_RWLOCK_ENTITY(ns, 5000);
        wk_rwlock_try_read(p, &e, n, &a, &ok);
        wk_rwlock_acquire_write(p, &e, n, soon, NULL, &b, &ok);
        wk_rwlock_release_read(p, &e, n, &a, &ok);
    } else if (strcmp(kind, WK_KIND_FENCED_LOCK) == 0) {
        wk_entity e = WK_FENCED_LOCK_ENTITY(ns, 5000);
        wk_fenced_lease l1, l2;
        wk_fenced_lock_try(p, &e, n, &l1);
        wk_fenced_lock_acquire(p, &e, n, soon, &l2);
        wk_fenced_lock_release(p, &e, n, &l1.token, &ok);
    } else if (strcmp(kind, WK_KIND_SEMAPHORE) == 0) {
        wk_entity e = WK_SEMAPHORE_ENTITY(ns, 1, 5000);
        bool got;
        wk_semaphore_try(p, &e, n, &a, &got);
        wk_semaphore_acquire(p, &e, n, soon, &b, &got);
        wk_semaphore_release(p, &e, n, &a, &ok);
    }
}

#define MAX_NAMES 160

typedef struct names {
    char *v[MAX_NAMES];
    size_t len[MAX_NAMES];
    size_t n;
} names;

static void name_add(names *ns, const void *b, size_t len)
{
    for (size_t i = 0; i < ns->n; i++)
        if (ns->len[i] == len && memcmp(ns->v[i], b, len) == 0)
            return;
    if (ns->n < MAX_NAMES) {
        ns->v[ns->n] = dup_bytes(b, len);
        ns->len[ns->n++] = len;
    }
}

static const char *const spaces[] = {"ki", "kj"};

static void run_names(watch *w, wk_processor *p, const names *nm, size_t from, bool waits)
{
    const char *kinds[] = {WK_KIND_LOCK, WK_KIND_RWLOCK, WK_KIND_FENCED_LOCK, WK_KIND_SEMAPHORE};
    char owner[WK_KIND_MAX + WK_NAMESPACE_MAX + WK_NAME_MAX + 2];
    for (size_t i = from; i < nm->n; i++) {
        wk_name n = wk_name_bytes(nm->v[i], nm->len[i]);
        wk_test_set_name(n);
        for (size_t s = 0; s < 2; s++) {
            for (size_t q = 0; q < wk_test_nqueries(); q++) {
                const wk_test_query *row = wk_test_query_at(q);
                if (getenv("WK_INJ_DEBUG"))
                    fprintf(stderr, "name %zu ns %zu row %s\n", i, s, row->name);
                int rc = row->run(p, spaces[s]);
                cr_expect(rc != WK_EREDIS, "%s on name #%zu (%zu bytes): %s", row->name, i,
                          nm->len[i], wk_processor_errmsg(p));
                attribute(w, owner, owner_of(owner, row->kind, spaces[s], nm->v[i], nm->len[i]));
            }
            /* Waits take a server timer tick each: the fixed names, one namespace. */
            for (size_t k = 0; waits && i < 30 && s == 0 && k < 4; k++) {
                contend(p, kinds[k], spaces[s], n);
                attribute(w, owner, owner_of(owner, kinds[k], spaces[s], nm->v[i], nm->len[i]));
            }
        }
    }
    wk_test_set_name(wk_name_str("n"));
}

/* The names whose item key (of any kind, either namespace, either
 * layout) is a key seen: the collision a companion key would make. */
static void names_from_keys(names *nm, const book *b)
{
    for (size_t i = 0; i < b->n; i++) {
        const char *k = b->v[i].key + 1;
        size_t len = b->v[i].key_len - 1, pre = strlen(WK_KEY_PREFIX);
        if (b->v[i].key[0] != 'K' || len <= pre || memcmp(k, WK_KEY_PREFIX, pre) != 0)
            continue;
        const char *kind_end = memchr(k + pre, ':', len - pre);
        if (!kind_end)
            continue;
        const char *rest = kind_end + 1, *end = k + len;
        bool multi = rest < end && *rest == '{';
        const char *ns_end = memchr(rest, ':', (size_t)(end - rest));
        if (!ns_end)
            continue;
        const char *name = ns_end + 1, *name_end = end;
        if (multi) {
            while (name_end > name && name_end[-1] != '}')
                name_end--;
            if (name_end == name)
                continue;
            name_end--;
        }
        name_add(nm, name, (size_t)(name_end - name));
    }
}

Test(key_injective, every_query_of_every_kind_over_adversarial_names)
{
    static const char *const fixed[] = {
        "",      "{",       "}",      "{}",      "}{",      "{{}}",     "{job}",     "{job}:q",
        "{job}:e", "{job}:w:", "job}:q", "{job",   "job}",    "a}b{c}",   ":",         "::q",
        ":q",    "}:q",     "{}:q",   "{a}}:w",  "x}:w",    "{ki:x}",   "ki:x",      "{:}",
        "n",     "n:q",     "n}:e",   "{n}:w:0123456789abcdef",
    };
    names nm = {.n = 0};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        name_add(&nm, fixed[i], strlen(fixed[i]));
    name_add(&nm, "a\0{b}", 5);
    name_add(&nm, "\xff{\x80}", 4);
    /* Generated: short words over the bytes that matter to the layout. */
    static const char alphabet[] = "{}:qew\0a";
    unsigned seed = 21;
    for (int i = 0; i < 40; i++) {
        char b[8];
        size_t len = (size_t)(rand_r(&seed) % 8);
        for (size_t j = 0; j < len; j++)
            b[j] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
        name_add(&nm, b, len);
    }

    /* A server of this test's own: MONITOR must see no other test. */
    wk_test_server srv;
    cr_assert_eq(wk_test_server_start(&srv, NULL), 0);
    watch w = {.mon = wk_test_raw(srv.url), .ctl = wk_test_raw(srv.url)};
    redisReply *ok = wk_test_cmd(w.mon, "MONITOR");
    cr_assert(ok && ok->type == REDIS_REPLY_STATUS);
    freeReplyObject(ok);
    wk_db *db = wk_test_open_url(srv.url, NULL);
    wk_processor *p = wk_db_processor(db);

    size_t first = nm.n;
    run_names(&w, p, &nm, 0, true);
    /* Then the names the keys seen would collide with, if any could. */
    names_from_keys(&nm, &w.keys);
    run_names(&w, p, &nm, first, false);
    cr_log_info("%zu names, %zu keys and channels seen", nm.n, w.keys.n);

    book *b = &w.keys;
    cr_assert_gt(b->n, 1000);
    qsort(b->v, b->n, sizeof(*b->v), by_key);
    int bad = 0;
    for (size_t i = 1; i < b->n && bad < 5; i++) {
        seen *x = &b->v[i - 1], *y = &b->v[i];
        if (by_key(x, y) == 0 && by_owner(x, y) != 0) {
            bad++;
            char k[512], o1[512], o2[512];
            shown(k, x->key + 1, x->key_len - 1);
            shown(o1, x->owner, x->owner_len);
            shown(o2, y->owner, y->owner_len);
            cr_expect_fail("%s %s belongs to (%s) and (%s)", x->key[0] == 'K' ? "key" : "channel",
                           k, o1, o2);
        }
    }
    qsort(b->v, b->n, sizeof(*b->v), by_owner);
    size_t start = 0;
    for (size_t i = 0; i <= b->n && bad < 10; i++) {
        if (i < b->n && by_owner(&b->v[start], &b->v[i]) == 0)
            continue;
        unsigned slot = UINT32_MAX;
        for (size_t j = start; j < i; j++) {
            if (b->v[j].key[0] != 'K')
                continue;
            if (slot == UINT32_MAX)
                slot = b->v[j].slot;
            if (b->v[j].slot != slot && bad++ < 10) {
                char k[512], o[512];
                shown(k, b->v[j].key + 1, b->v[j].key_len - 1);
                shown(o, b->v[j].owner, b->v[j].owner_len);
                cr_expect_fail("the keys of (%s) are in slots %u and %u (%s)", o, slot,
                               b->v[j].slot, k);
            }
        }
        start = i;
    }
    for (size_t i = 0; i < b->n; i++) {
        free(b->v[i].key);
        free(b->v[i].owner);
    }
    free(b->v);
    for (size_t i = 0; i < nm.n; i++)
        free(nm.v[i]);
    wk_db_close(db);
    redisFree(w.mon);
    redisFree(w.ctl);
    wk_test_server_stop(&srv);
}
