/*
 * tests/collection/test_wake.c — wake on release (collection/wake.h) for
 * Lock, RwLock and Semaphore against real redis-servers: companion keys
 * in the item's cluster slot; 1, 2 and 8 waiters in other processes, each
 * woken once, in queue order, the lease handed over by the release; a
 * waiter that gives up as it is woken passes the wake-up on; a crashed
 * waiter and a crashed holder; a lease handed to a dead waiter goes on;
 * fairness (no try barges past the queue); owned (writes nothing) and
 * force release.
 *
 * Tests that count commands run a private redis-server of their own
 * (criterion runs two tests at a time against the shared one), so its
 * counters see this test's commands only. Nothing here measures time:
 * waits are bounded by the suite's timeout and by the waiters' deadlines.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <wakuwaku/fenced_lock.h>
#include <wakuwaku/rwlock.h>
#include <wakuwaku/semaphore.h>

#include "collection/lock_scripts.h"
#include "collection/wake.h"
#include "core/core_internal.h"
#include "redis_fixture.h"

TestSuite(wake, .timeout = 90);

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static wk_test_server private_srv;

/* A redis-server of this test's own; children inherit its URL. */
static void private_server(void)
{
    if (getenv("WK_WAKE_DEBUG"))
        return;
    cr_assert_eq(wk_test_server_start(&private_srv, NULL), 0);
    setenv("WK_TEST_REDIS_URL", private_srv.url, 1);
}

static wk_db *child_open(const wk_cap *cap)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = cap;
    wk_db *db = NULL;
    return wk_db_open(&db, &o, NULL, 0) == WK_OK ? db : NULL;
}

/* What the children report, in shared memory. */
typedef struct shared {
    atomic_int order[16]; /* child indexes in the order they acquired */
    atomic_int acquired;
    atomic_int inside;   /* exclusive holders (writers, permits) right now */
    atomic_int readers;  /* RwLock readers inside right now */
    atomic_int overlaps; /* a holder found more inside than may be */
    atomic_int most;     /* the most exclusive holders seen at once */
} shared;

static shared *shared_new(void)
{
    shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(s, MAP_FAILED);
    memset(s, 0, sizeof(*s));
    return s;
}

/* What a waiter takes: a Lock, an RwLock's read or write lease, a
 * Semaphore permit, or a FencedLock. */
enum how { LOCK, READ, WRITE, SEM, FENCED };

typedef struct job {
    const wk_entity *e;
    const char *name;
    enum how how;
    int idx;
    int64_t wait_ms; /* the acquire's deadline, from now */
    int hold_ms;     /* then hold this long (READ: until `together` readers are in) */
    int together;
    shared *sh;
} job;

static int take(wk_processor *p, const wk_entity *e, const char *name, enum how how, wk_token *t,
                bool *got)
{
    wk_name n = wk_name_str(name);
    if (how == FENCED) {
        wk_fenced_lease l;
        int rc = wk_fenced_lock_try(p, e, n, &l);
        *t = l.token;
        *got = l.acquired;
        return rc;
    }
    return how == LOCK    ? wk_lock_try(p, e, n, t, got)
           : how == READ  ? wk_rwlock_try_read(p, e, n, t, got)
           : how == WRITE ? wk_rwlock_try_write(p, e, n, t, got)
                          : wk_semaphore_try(p, e, n, t, got);
}

static int acquire(wk_processor *p, const wk_entity *e, const char *name, enum how how,
                   int64_t wait_ms, wk_token *t, bool *got)
{
    wk_name n = wk_name_str(name);
    int64_t deadline = wk_deadline_in(wait_ms);
    if (how == FENCED) {
        wk_fenced_lease l;
        int rc = wk_fenced_lock_acquire(p, e, n, deadline, &l);
        *t = l.token;
        *got = l.acquired;
        return rc;
    }
    return how == LOCK    ? wk_lock_acquire(p, e, n, deadline, NULL, t, got)
           : how == READ  ? wk_rwlock_acquire_read(p, e, n, deadline, NULL, t, got)
           : how == WRITE ? wk_rwlock_acquire_write(p, e, n, deadline, NULL, t, got)
                          : wk_semaphore_acquire(p, e, n, deadline, t, got);
}

static int release(wk_processor *p, const wk_entity *e, const char *name, enum how how,
                   const wk_token *t, bool *ok)
{
    wk_name n = wk_name_str(name);
    if (how == FENCED)
        return wk_fenced_lock_release(p, e, n, t, ok);
    return how == LOCK    ? wk_lock_release(p, e, n, t, ok)
           : how == READ  ? wk_rwlock_release_read(p, e, n, t, ok)
           : how == WRITE ? wk_rwlock_release_write(p, e, n, t, ok)
                          : wk_semaphore_release(p, e, n, t, ok);
}

/* How many exclusive holders `e` admits at once: a Semaphore's permits,
 * else one (RwLock: one writer, and no reader beside it). */
static int exclusive_limit(const wk_entity *e)
{
    return strcmp(e->kind, WK_KIND_SEMAPHORE) == 0 ? (int)e->capacity : 1;
}

/* A holder comes in (`in`) or goes: counts it, and notes an overlap — a
 * reader beside a writer, a writer beside anyone, more permits than N. */
static void holder_moves(const job *j, bool in)
{
    shared *sh = j->sh;
    if (!in) {
        atomic_fetch_sub(j->how == READ ? &sh->readers : &sh->inside, 1);
        return;
    }
    if (j->how == READ) {
        atomic_fetch_add(&sh->readers, 1);
        if (atomic_load(&sh->inside) != 0)
            atomic_fetch_add(&sh->overlaps, 1);
        return;
    }
    int now = atomic_fetch_add(&sh->inside, 1) + 1;
    if (now > exclusive_limit(j->e) || atomic_load(&sh->readers) != 0)
        atomic_fetch_add(&sh->overlaps, 1);
    for (int m = atomic_load(&sh->most); now > m;)
        if (atomic_compare_exchange_weak(&sh->most, &m, now))
            break;
}

/* A waiter in a child process: 0 acquired, 2 not acquired, 3 error. */
static int waiter(const job *j)
{
    wk_db *db = child_open(wk_cap_read_write());
    if (!db)
        return 3;
    wk_processor *p = wk_db_processor(db);
    wk_token t;
    bool got = false, ok;
    int rc = acquire(p, j->e, j->name, j->how, j->wait_ms, &t, &got);
    if (rc != WK_OK)
        return 3;
    if (!got)
        return 2;
    int at = atomic_fetch_add(&j->sh->acquired, 1);
    j->sh->order[at] = j->idx;
    holder_moves(j, true);
    if (j->how == READ && j->together > 1) {
        /* Hold until all `together` readers got in: each is still in when
         * the last one arrives. */
        for (int i = 0; i < 2000 && atomic_load(&j->sh->acquired) < j->together; i++)
            wk_test_sleep_ms(5);
        if (atomic_load(&j->sh->acquired) < j->together)
            return 4;
    }
    wk_test_sleep_ms(j->hold_ms);
    holder_moves(j, false);
    rc = release(p, j->e, j->name, j->how, &t, &ok);
    wk_db_close(db);
    return rc == WK_OK && ok ? 0 : 3;
}

static pid_t spawn(const job *j)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(waiter(j));
    return pid;
}

static int reap(pid_t pid)
{
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The key of item `name` of `e` the wake keys hang on: a Lock's key, an
 * RwLock's writer key, a Semaphore's permit set. */
static size_t anchor_key(const wk_entity *e, const char *name, char *key)
{
    size_t len;
    wk_name n = wk_name_str(name);
    const char *suffix = strcmp(e->kind, WK_KIND_RWLOCK) == 0        ? ":w"
                         : strcmp(e->kind, WK_KIND_SEMAPHORE) == 0   ? ":permits"
                         : strcmp(e->kind, WK_KIND_FENCED_LOCK) == 0 ? ":lease"
                                                                     : NULL;
    cr_assert_eq(wk_key_build(key, WK_KEY_MAX, &len, e, &n, suffix), WK_OK);
    return len;
}

/* The companion keys of item `name` of `e` (of its anchor key). */
static void wake_keys(const wk_entity *e, const char *name, wk__wake_keys *k)
{
    char key[WK_KEY_MAX];
    size_t len = anchor_key(e, name, key);
    cr_assert_eq(wk__wake_keys_build(k, key, len), WK_OK);
}

static long long zcard(redisContext *raw, const wk__wake_keys *k)
{
    redisReply *r = wk_test_cmd(raw, "ZCARD %b", k->q, k->q_len);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* The locals most tests start with: a handle `db` (processor `p`), a raw
 * connection `raw`, and `k`, the companion keys of item `name_` of `e`. */
#define FIXTURE(e, name_)                                                                          \
    wk_db *db = wk_test_open(NULL);                                                                \
    wk_processor *p = wk_db_processor(db);                                                         \
    redisContext *raw = wk_test_raw(wk_test_url());                                                \
    wk__wake_keys k;                                                                               \
    wake_keys(e, name_, &k)
#define FIXTURE_END()                                                                              \
    do {                                                                                           \
        redisFree(raw);                                                                            \
        wk_db_close(db);                                                                           \
    } while (0)

/* Until `n` waiters are queued (bounded by the suite's timeout). */
static void wait_queued(redisContext *raw, const wk__wake_keys *k, long long n)
{
    while (zcard(raw, k) != n)
        wk_test_sleep_ms(5);
}

static long long info_field(redisContext *raw, const char *section, const char *field)
{
    redisReply *r = wk_test_cmd(raw, "INFO %s", section);
    const char *at = strstr(r->str, field);
    cr_assert_not_null(at, "%s not in INFO %s", field, section);
    long long v = atoll(at + strlen(field) + 1);
    freeReplyObject(r);
    return v;
}

/* The value of item `name` of Lock `e` (a token: binary) into out;
 * returns its length, 0 when free. */
static size_t lock_value(redisContext *raw, const wk_entity *e, const char *name, char *out,
                         size_t cap)
{
    char key[WK_KEY_MAX];
    size_t len;
    wk_name n = wk_name_str(name);
    cr_assert_eq(wk_key_build(key, sizeof(key), &len, e, &n, NULL), WK_OK);
    redisReply *r = wk_test_cmd(raw, "GET %b", key, len);
    size_t got = r->type == REDIS_REPLY_STRING ? (size_t)r->len : 0;
    cr_assert_lt(got, cap);
    memcpy(out, got ? r->str : "", got);
    out[got] = '\0';
    freeReplyObject(r);
    return got;
}

/* ------------------------------------------------------------------------
 * Slots and companion keys
 * ---------------------------------------------------------------------- */

Test(wake, crc16_and_the_hash_tag_rule)
{
    cr_assert_eq(wk__crc16("123456789", 9), 0x31C3); /* the Cluster spec's check value */
    cr_assert_eq(wk__key_slot("foo", 3), 12182);     /* CLUSTER KEYSLOT foo */
    cr_assert_eq(wk__key_slot("{user1000}.following", 20),
                 wk__key_slot("{user1000}.followers", 20));
    cr_assert_eq(wk__key_slot("{user1000}.following", 20), wk__crc16("user1000", 8) & 16383);
    cr_assert_eq(wk__key_slot("foo{}{bar}", 10), wk__crc16("foo{}{bar}", 10) & 16383);
    cr_assert_eq(wk__key_slot("foo{{bar}}zap", 13), wk__crc16("{bar", 4) & 16383);
    cr_assert_eq(wk__key_slot("foo{bar}{zap}", 13), wk__crc16("bar", 3) & 16383);
    cr_assert_eq(wk__key_slot("a{b", 3), wk__crc16("a{b", 3) & 16383);
}

Test(wake, every_slot_has_a_short_tag)
{
    for (unsigned s = 0; s < 16384; s++) {
        char t[4];
        size_t len = wk__wake_tag_for_slot(s, t);
        cr_assert(len >= 1 && len <= 3, "slot %u: no tag", s);
        cr_assert_null(memchr(t, '{', len));
        cr_assert_null(memchr(t, '}', len));
        cr_assert_eq(wk__crc16(t, len) & 16383, s, "slot %u", s);
    }
}

static void same_slot(const wk_entity *e, const void *name, size_t name_len)
{
    char key[WK_KEY_MAX];
    size_t len;
    wk_name n = wk_name_bytes(name, name_len);
    bool rw = strcmp(e->kind, WK_KIND_RWLOCK) == 0;
    cr_assert_eq(wk_key_build(key, sizeof(key), &len, e, &n, rw ? ":w" : NULL), WK_OK);
    wk__wake_keys k;
    cr_assert_eq(wk__wake_keys_build(&k, key, len), WK_OK);
    unsigned slot = wk__key_slot(key, len);
    char list[WK__WAKE_KEY_MAX];
    memcpy(list, k.w, k.w_len);
    memcpy(list + k.w_len, "0123456789abcdef", 16);
    cr_assert_eq(wk__key_slot(k.q, k.q_len), slot, "q of %.*s", (int)len, key);
    cr_assert_eq(wk__key_slot(k.e, k.e_len), slot, "e of %.*s", (int)len, key);
    cr_assert_eq(wk__key_slot(list, k.w_len + 16), slot, "w of %.*s", (int)len, key);
    if (rw) {
        key[len - 1] = 'r'; /* the reader key: the same tag */
        cr_assert_eq(wk__key_slot(key, len), slot);
    }
}

Test(wake, companion_keys_share_the_items_slot_whatever_braces_the_name_holds)
{
    static const wk_entity lock = WK_LOCK_ENTITY("slots", 1000);
    static const wk_entity rw = WK_RWLOCK_ENTITY("slots", 1000);
    static const char *names[] = {"plain", "a{b",   "a}b", "{}", "x{}y}", "}{",
                                  "{a}",   "{a}b}", "}}}", "{",  "{{}}",  ""};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        same_slot(&lock, names[i], strlen(names[i]));
        same_slot(&rw, names[i], strlen(names[i]));
    }
    /* Binary names with braces and NULs, from a fixed seed. */
    unsigned x = 12345;
    for (int i = 0; i < 2000; i++) {
        unsigned char name[12];
        for (size_t b = 0; b < sizeof(name); b++) {
            x = x * 1103515245u + 12345u;
            unsigned v = (x >> 16) % 6;
            name[b] = v == 0 ? '{' : v == 1 ? '}' : v == 2 ? 0 : (unsigned char)('a' + v);
        }
        same_slot(&lock, name, 1 + (size_t)i % sizeof(name));
        same_slot(&rw, name, 1 + (size_t)i % sizeof(name));
    }
    /* Distinct items, distinct companions. */
    wk__wake_keys a, b;
    wake_keys(&lock, "a}b", &a);
    wake_keys(&lock, "a}c", &b);
    cr_assert(a.q_len != b.q_len || memcmp(a.q, b.q, a.q_len) != 0);
}

/* ------------------------------------------------------------------------
 * Waking
 * ---------------------------------------------------------------------- */

/* n waiters (`how`: Lock, RwLock writers, Semaphore permits of a
 * one-permit Semaphore), queued one after the other, then one release:
 * each is woken once (one BLPOP each, by the server's count) and they get
 * the lease in the order they queued. */
static void waiters_in_order(const wk_entity *e, enum how how, int n)
{
    char name[32];
    snprintf(name, sizeof(name), "order-%d", n);
    FIXTURE(e, name);
    wk_token t;
    bool got, ok;
    cr_assert_eq(take(p, e, name, how, &t, &got), WK_OK);
    cr_assert(got);
    long long blpops = wk_test_cmd_calls(raw, "blpop");
    shared *sh = shared_new();
    pid_t kids[16];
    for (int i = 0; i < n; i++) {
        job j = {e, name, how, i, 60000, 5, 0, sh};
        kids[i] = spawn(&j);
        wait_queued(raw, &k, i + 1);
    }
    long long scripts = wk_test_scripts_run(raw);
    cr_assert_eq(release(p, e, name, how, &t, &ok), WK_OK);
    cr_assert(ok);
    for (int i = 0; i < n; i++)
        cr_assert_eq(reap(kids[i]), 0, "%s: waiter %d of %d", e->kind, i, n);
    cr_assert_eq(atomic_load(&sh->acquired), n);
    cr_assert_eq(atomic_load(&sh->overlaps), 0, "never two holders at once");
    /* Handed over: after the release each waiter's pop returns holding
     * the lease, so the only scripts are the n + 1 releases — no attempt
     * after a wake-up (which made it 2n + 1). */
    cr_assert_eq(wk_test_scripts_run(raw) - scripts, n + 1, "%s, %d waiters: %lld scripts",
                 e->kind, n, wk_test_scripts_run(raw) - scripts);
    for (int i = 0; i < n; i++)
        cr_assert_eq(sh->order[i], i, "%s, %d waiters: position %d went to waiter %d", e->kind, n,
                     i, sh->order[i]);
    cr_assert_eq(wk_test_cmd_calls(raw, "blpop") - blpops, n,
                 "each waiter sleeps once and is woken once");
    cr_assert_eq(zcard(raw, &k), 0, "the queue is empty again");
    FIXTURE_END();
}

Test(wake, one_two_and_eight_waiters_across_processes_are_woken_once_each_in_order)
{
    private_server();
    static const wk_entity unfair = WK_LOCK_ENTITY("order", 60000);
    static const wk_entity fair = WK_LOCK_FAIR_ENTITY("order-fair", 60000);
    int counts[] = {1, 2, 8};
    for (int i = 0; i < 3; i++) {
        waiters_in_order(&unfair, LOCK, counts[i]);
        waiters_in_order(&fair, LOCK, counts[i]);
    }
    wk_test_server_stop(&private_srv);
}

/* The same for RwLock writers (fair and not) and for the permit of a
 * one-permit Semaphore: the release hands the lease to the head, whose
 * pop returns holding it (issue 24, the kinds after Lock). */
Test(wake, rwlock_writers_and_semaphore_waiters_are_handed_the_lease_in_order)
{
    private_server();
    static const wk_entity unfair = WK_RWLOCK_ENTITY("order-rw", 60000);
    static const wk_entity fair = WK_RWLOCK_FAIR_ENTITY("order-rw-fair", 60000);
    static const wk_entity sem = WK_SEMAPHORE_ENTITY("order-sem", 1, 60000);
    int counts[] = {1, 2, 8};
    for (int i = 0; i < 3; i++) {
        waiters_in_order(&unfair, WRITE, counts[i]);
        waiters_in_order(&fair, WRITE, counts[i]);
        waiters_in_order(&sem, SEM, counts[i]);
    }
    wk_test_server_stop(&private_srv);
}

/* The head is stopped (SIGSTOP) when the lock is released (or, with
 * `expire`, when the holder's lease runs out instead), so it cannot take
 * the lock until it runs again. A release hands the lock to the head
 * (collection/wake.h, handing over): no try barges in, fair or not. A
 * lease that ran out frees the lock: a fair Lock still refuses every try
 * while a waiter is queued, an unfair one lets it barge in. */
static bool barge_while_head_is_stopped(const wk_entity *lock, enum how how, bool expire)
{
    const char *name = "barge";
    FIXTURE(lock, name);
    wk_token t, t2;
    bool got, ok, barged;
    char v[64];
    cr_assert_eq(take(p, lock, name, how, &t, &got), WK_OK);
    cr_assert(got);
    shared *sh = shared_new();
    job j = {lock, name, how, 0, 60000, 0, 0, sh};
    pid_t kid = spawn(&j);
    wait_queued(raw, &k, 1);
    kill(kid, SIGSTOP);
    if (expire) {
        while (lock_value(raw, lock, name, v, sizeof(v)) > 0)
            wk_test_sleep_ms(10);
    } else {
        cr_assert_eq(release(p, lock, name, how, &t, &ok), WK_OK);
    }
    cr_assert_eq(take(p, lock, name, how, &t2, &barged), WK_OK);
    if (barged)
        cr_assert_eq(release(p, lock, name, how, &t2, &ok), WK_OK);
    kill(kid, SIGCONT);
    cr_assert_eq(reap(kid), 0, "the waiter gets the lock in the end");
    FIXTURE_END();
    return barged;
}

Test(wake, a_fair_lock_lets_no_try_barge_past_its_waiters)
{
    const wk_entity fair = WK_LOCK_FAIR_ENTITY(wk_test_ns("barge-fair"), 60000);
    const wk_entity unfair = WK_LOCK_ENTITY(wk_test_ns("barge"), 60000);
    const wk_entity fair_short = WK_LOCK_FAIR_ENTITY(wk_test_ns("barge-fair-short"), 300);
    const wk_entity unfair_short = WK_LOCK_ENTITY(wk_test_ns("barge-short"), 300);
    cr_assert_not(barge_while_head_is_stopped(&fair, LOCK, false),
                  "fair: handed to the queued waiter");
    cr_assert_not(barge_while_head_is_stopped(&unfair, LOCK, false),
                  "unfair: handed to the queued waiter too");
    cr_assert_not(barge_while_head_is_stopped(&fair_short, LOCK, true),
                  "fair, lease run out: the queued waiter goes first");
    cr_assert(barge_while_head_is_stopped(&unfair_short, LOCK, true),
              "unfair, lease run out: a try takes a free lock");
}

/* After an RwLock writer's or a Semaphore's release nobody barges either,
 * fair or not: the release handed the lease to the queued (stopped)
 * waiter, so a newcomer's try wins only when nobody waits. */
Test(wake, after_an_rwlock_or_semaphore_release_no_try_barges_past_the_head)
{
    const wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("barge-rw"), 60000);
    const wk_entity rw_fair = WK_RWLOCK_FAIR_ENTITY(wk_test_ns("barge-rw-fair"), 60000);
    const wk_entity sem = WK_SEMAPHORE_ENTITY(wk_test_ns("barge-sem"), 1, 60000);
    cr_assert_not(barge_while_head_is_stopped(&rw, WRITE, false), "unfair RwLock writer");
    cr_assert_not(barge_while_head_is_stopped(&rw_fair, WRITE, false), "fair RwLock writer");
    cr_assert_not(barge_while_head_is_stopped(&sem, SEM, false), "Semaphore permit");
}

/* Runs the Lock acquire script as waiter `id` with `cap`: a waiter that
 * this test drives by hand (it never BLPOPs). */
static wk__wake_outcome park_by_hand(wk_processor *p, const wk_entity *lock, const char *name,
                                     const wk__wake_keys *k, const wk_token *id, int64_t cap)
{
    char key[WK_KEY_MAX], ttl[24], caps[24];
    size_t len;
    wk_name n = wk_name_str(name);
    cr_assert_eq(wk_key_build(key, sizeof(key), &len, lock, &n, NULL), WK_OK);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)lock->ttl_ms);
    snprintf(caps, sizeof(caps), "%lld", (long long)cap);
    const char *argv[8] = {key, k->q, k->e, (const char *)id->bytes, ttl, k->w, caps, "1"};
    size_t lens[8] = {len,         k->q_len, k->e_len,     WK_TOKEN_LEN,
                      strlen(ttl), k->w_len, strlen(caps), 1};
    wk__wake_outcome out = {false, 0};
    wk_access a = {lock, WK_WRITE};
    wk_query q = {.name = "test.park",
                  .effect = {&a, 1},
                  .script = &wk__lock_acquire_script,
                  .nkeys = 3,
                  .argc = 8,
                  .argv = argv,
                  .argvlen = lens,
                  .parse = wk__wake_parse_outcome,
                  .out = &out};
    cr_assert_eq(wk_process(p, &q), WK_OK, "%s", wk_processor_errmsg(p));
    return out;
}

/* A, the head, is woken by the release and gives up right then (its
 * deadline passed): leaving, it passes the wake-up to B. Fair, and A's
 * registration lasts a minute, so without the pass B could not get the
 * lock before its own deadline. */
Test(wake, a_waiter_that_gives_up_as_it_is_woken_passes_the_wake_up_on)
{
    private_server();
    static const wk_entity lock = WK_LOCK_FAIR_ENTITY("giveup", 60000);
    const char *name = "job";
    FIXTURE(&lock, name);
    wk_token held, a;
    bool got, ok;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str(name), &held, &got), WK_OK);
    cr_assert(got);
    wk_token_random(&a);
    wk__wake_outcome o = park_by_hand(p, &lock, name, &k, &a, 60000);
    cr_assert_not(o.acquired);
    cr_assert_gt(o.sleep_ms, 0);
    shared *sh = shared_new();
    job j = {&lock, name, LOCK, 1, 20000, 0, 0, sh};
    pid_t b = spawn(&j);
    wait_queued(raw, &k, 2);
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str(name), &held, &ok), WK_OK);
    cr_assert(ok);
    /* The release handed the lock to A (the head), not B. */
    char list[WK__WAKE_KEY_MAX], v[64];
    memcpy(list, k.w, k.w_len);
    memcpy(list + k.w_len, a.bytes, WK_TOKEN_LEN);
    redisReply *r = wk_test_cmd(raw, "LINDEX %b 0", list, k.w_len + WK_TOKEN_LEN);
    cr_assert(r->type == REDIS_REPLY_STRING && r->str[0] == 'h', "A has its handed-over notice");
    freeReplyObject(r);
    cr_assert(lock_value(raw, &lock, name, v, sizeof(v)) == WK_TOKEN_LEN &&
                  memcmp(v, a.bytes, WK_TOKEN_LEN) == 0,
              "the lock is A's: its token, as if A had SET it");
    cr_assert_eq(wk__lock_leave(p, &lock, wk_name_str(name), &a), WK_OK);
    cr_assert_eq(reap(b), 0, "B got the lock A gave up");
    cr_assert_eq(wk_test_cmd_calls(raw, "blpop"), 1, "B slept once");
    FIXTURE_END();
    wk_test_server_stop(&private_srv);
}

/* The leave of a waiter of `how` as token `id` (what its acquire sends
 * when it gives up). */
static int leave_as(wk_processor *p, const wk_entity *e, const char *name, enum how how,
                    const wk_token *id)
{
    wk_name n = wk_name_str(name);
    return how == LOCK  ? wk__lock_leave(p, e, n, id)
           : how == SEM ? wk__semaphore_leave(p, e, n, id)
                        : wk__rwlock_leave(p, e, n, id);
}

/* The token item `name` of e (held on side `how`, one holder) is held
 * by: the Lock's or writer's key, the one reader, the one permit. */
static void holder_token(redisContext *raw, const wk_entity *e, const char *name, enum how how,
                         wk_token *t)
{
    char key[WK_KEY_MAX];
    size_t len = anchor_key(e, name, key);
    if (how == READ)
        key[len - 1] = 'r'; /* the reader set */
    redisReply *r = how == SEM || how == READ ? wk_test_cmd(raw, "ZRANGE %b 0 0", key, len)
                               : wk_test_cmd(raw, "GET %b", key, len);
    redisReply *v = r->type == REDIS_REPLY_ARRAY && r->elements == 1 ? r->element[0] : r;
    bool one = v->type == REDIS_REPLY_STRING && v->len == WK_TOKEN_LEN;
    if (one)
        memcpy(t->bytes, v->str, WK_TOKEN_LEN);
    freeReplyObject(r);
    cr_assert(one, "%s: one holder's token", e->kind);
}

/* The start of the two-waiter cases: the holder (`p`) takes item "job"
 * of e (side `holds`, its token *held); A (side `a_how`, deadline a_ms)
 * queues at the head; `dead`: A is killed then; B (side `b_how`, deadline
 * b_ms) queues behind it. A's pid is returned (0 once killed). */
static pid_t two_waiters(wk_processor *p, redisContext *raw, const wk__wake_keys *k,
                         const wk_entity *e, enum how holds, wk_token *held, const job *a,
                         bool dead, const job *b, pid_t *pb)
{
    bool got;
    cr_assert_eq(take(p, e, "job", holds, held, &got), WK_OK);
    cr_assert(got);
    pid_t pa = spawn(a);
    wait_queued(raw, k, 1);
    if (dead) {
        kill(pa, SIGKILL);
        reap(pa);
        pa = 0;
    }
    *pb = spawn(b);
    wait_queued(raw, k, 2);
    return pa;
}

/* A and B wait (A at the head); A is stopped, then the release hands A
 * the lease (its pop taken by the server already); A is killed, and its
 * leave — what its acquire sends when it gives up, sent here for it —
 * passes the lease to B, who gets it before its deadline though A's
 * lease runs a minute and A's registration longer still. */
static void leave_passes_a_handed_lease_on(const wk_entity *e, enum how how)
{
    /* A reader A: a writer holds, a writer B waits behind A. */
    enum how holds = how == READ ? WRITE : how, next = holds;
    FIXTURE(e, "job");
    wk_token held, a;
    bool ok;
    shared *sh = shared_new();
    job ja = {e, "job", how, 0, 60000, 0, 0, sh}, jb = {e, "job", next, 1, 20000, 0, 0, sh};
    pid_t pb, pa = two_waiters(p, raw, &k, e, holds, &held, &ja, false, &jb, &pb);
    kill(pa, SIGSTOP);
    int rc = release(p, e, "job", holds, &held, &ok);
    kill(pa, SIGKILL);
    reap(pa);
    cr_assert_eq(rc, WK_OK);
    holder_token(raw, e, "job", how, &a);
    cr_assert_eq(leave_as(p, e, "job", how, &a), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(reap(pb), 0, "%s: B got the lease A gave up", e->kind);
    FIXTURE_END();
}

/* `check` of a Lock, an RwLock writer (unfair and fair) and a one-permit
 * Semaphore (minute-long leases, namespaces "<ns>-…"), and with
 * `reader` an RwLock reader too, on a private server. */
static void each_handing_kind(const char *ns, void (*check)(const wk_entity *e, enum how how),
                              bool reader)
{
    static const char *tails[5] = {"lock", "rw", "rw-fair", "sem", "rw-reader"};
    char n[5][64];
    for (int i = 0; i < 5; i++)
        snprintf(n[i], sizeof(n[i]), "%s-%s", ns, tails[i]);
    const wk_entity lock = WK_LOCK_ENTITY(n[0], 60000);
    const wk_entity rw = WK_RWLOCK_ENTITY(n[1], 60000);
    const wk_entity rw_fair = WK_RWLOCK_FAIR_ENTITY(n[2], 60000);
    const wk_entity sem = WK_SEMAPHORE_ENTITY(n[3], 1, 60000);
    const wk_entity rw_reader = WK_RWLOCK_ENTITY(n[4], 60000);
    private_server();
    check(&lock, LOCK);
    check(&rw, WRITE);
    check(&rw_fair, WRITE);
    check(&sem, SEM);
    if (reader)
        check(&rw_reader, READ);
    wk_test_server_stop(&private_srv);
}

Test(wake, a_waiter_that_gives_up_holding_an_rwlock_or_semaphore_lease_passes_it_on)
{
    each_handing_kind("leave", leave_passes_a_handed_lease_on, true);
}

/* A waits at the head and is killed; B queues behind it. The release
 * wakes A, who is gone: B gets the lock once A's registration runs out
 * (one lease plus the grace), sleeping a few times, not polling. Fair,
 * so B could never pass A if a dead waiter were not pruned. */
Test(wake, a_crashed_waiter_costs_the_others_only_its_registration)
{
    private_server();
    static const wk_entity lock = WK_LOCK_FAIR_ENTITY("crashed-waiter", 2000);
    const char *name = "job";
    FIXTURE(&lock, name);
    wk_token held;
    bool got, ok;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str(name), &held, &got), WK_OK);
    cr_assert(got);
    shared *sh = shared_new();
    job ja = {&lock, name, LOCK, 0, 60000, 0, 0, sh};
    pid_t a = spawn(&ja);
    wait_queued(raw, &k, 1);
    kill(a, SIGKILL);
    reap(a);
    job jb = {&lock, name, LOCK, 1, 30000, 0, 0, sh};
    long long blpops = wk_test_cmd_calls(raw, "blpop");
    pid_t b = spawn(&jb);
    wait_queued(raw, &k, 2);
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str(name), &held, &ok), WK_OK);
    cr_assert_eq(reap(b), 0, "B gets the lock after A's registration ran out");
    long long slept = wk_test_cmd_calls(raw, "blpop") - blpops;
    cr_assert(slept >= 1 && slept <= 6, "B slept %lld times", slept);
    FIXTURE_END();
    wk_test_server_stop(&private_srv);
}

/* Whether item `name` of `e` is still taken after the holder's release
 * (of a lease of side `how`; the holder's token `held`): a Lock's or
 * writer's key holds another token, a reader or a permit runs. */
static bool still_taken(redisContext *raw, const wk_entity *e, const char *name, enum how how,
                        const wk_token *held)
{
    char key[WK_KEY_MAX];
    size_t len = anchor_key(e, name, key);
    if (how == READ)
        key[len - 1] = 'r'; /* the reader set, beside the writer key */
    redisReply *r = how == READ || how == SEM
                        ? wk_test_cmd(raw, "ZCOUNT %b (%lld +inf", key, len, 0LL)
                        : wk_test_cmd(raw, "GET %b", key, len);
    bool taken = r->type == REDIS_REPLY_INTEGER
                     ? r->integer > 0
                     : r->type == REDIS_REPLY_STRING && r->len == WK_TOKEN_LEN &&
                           memcmp(r->str, held->bytes, WK_TOKEN_LEN) != 0;
    freeReplyObject(r);
    return taken;
}

/* A (deadline 3 s: its registration ends within 3 s + the grace) waits
 * at the head (side `dead`) and is killed; B (side `next`, deadline 40 s)
 * queues behind it. The release hands the lease to A, who is gone: the
 * lease runs for a minute, but B takes it from A once A's registration
 * has ended and its notice was never popped — well before the lease would
 * have run out. The holder holds what keeps A out: a writer's lease for a
 * reader, else A's own side. */
static void dead_waiter_is_handed_the_lease(const wk_entity *e, enum how dead, enum how next)
{
    enum how holds = dead == READ ? WRITE : dead;
    FIXTURE(e, "job");
    wk_token held;
    bool ok;
    shared *sh = shared_new();
    job ja = {e, "job", dead, 0, 3000, 0, 0, sh}, jb = {e, "job", next, 1, 40000, 0, 0, sh};
    pid_t b;
    two_waiters(p, raw, &k, e, holds, &held, &ja, true, &jb, &b);
    cr_assert_eq(release(p, e, "job", holds, &held, &ok), WK_OK);
    cr_assert(still_taken(raw, e, "job", dead, &held),
              "%s: handed over to the dead head, not freed", e->kind);
    cr_assert_eq(reap(b), 0, "%s: B took the lease from the dead waiter before its own deadline",
                 e->kind);
    cr_assert_eq(atomic_load(&sh->acquired), 1);
    FIXTURE_END();
}

Test(wake, a_lock_handed_to_a_dead_waiter_goes_on_when_its_registration_ends)
{
    private_server();
    static const wk_entity fair = WK_LOCK_FAIR_ENTITY("dead-waiter-fair", 60000);
    static const wk_entity unfair = WK_LOCK_ENTITY("dead-waiter", 60000);
    dead_waiter_is_handed_the_lease(&fair, LOCK, LOCK);
    dead_waiter_is_handed_the_lease(&unfair, LOCK, LOCK);
    wk_test_server_stop(&private_srv);
}

/* The same for an RwLock writer's lease (fair and not), a reader's lease
 * handed to a dead reader with a writer behind it, and a Semaphore
 * permit. */
Test(wake, rwlock_and_semaphore_leases_handed_to_a_dead_waiter_go_on)
{
    private_server();
    static const wk_entity rw_fair = WK_RWLOCK_FAIR_ENTITY("dead-rw-fair", 60000);
    static const wk_entity rw = WK_RWLOCK_ENTITY("dead-rw", 60000);
    static const wk_entity rw_reader = WK_RWLOCK_ENTITY("dead-rw-reader", 60000);
    static const wk_entity sem = WK_SEMAPHORE_ENTITY("dead-sem", 1, 60000);
    dead_waiter_is_handed_the_lease(&rw_fair, WRITE, WRITE);
    dead_waiter_is_handed_the_lease(&rw, WRITE, WRITE);
    dead_waiter_is_handed_the_lease(&rw_reader, READ, WRITE);
    dead_waiter_is_handed_the_lease(&sem, SEM, SEM);
    wk_test_server_stop(&private_srv);
}

/* A holder (`held` side) killed while holding: the waiter (`waits` side)
 * sleeps until the lease runs out, then takes it — one to three sleeps,
 * no polling. */
static void crashed_holder(const wk_entity *e, enum how held, enum how waits)
{
    const char *name = "job";
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) {
        wk_db *db = child_open(wk_cap_read_write());
        wk_token t;
        bool got = false;
        if (db)
            take(wk_db_processor(db), e, name, held, &t, &got);
        char c = got ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1)
            _exit(3);
        pause();
        _exit(0);
    }
    char c = 0;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    cr_assert_eq(c, 'y');
    kill(holder, SIGKILL);
    reap(holder);
    redisContext *raw = wk_test_raw(wk_test_url());
    long long blpops = wk_test_cmd_calls(raw, "blpop");
    wk_db *db = wk_test_open(NULL);
    wk_token t;
    bool got = false;
    cr_assert_eq(acquire(wk_db_processor(db), e, name, waits, 30000, &t, &got), WK_OK);
    cr_assert(got);
    long long slept = wk_test_cmd_calls(raw, "blpop") - blpops;
    cr_assert(slept >= 1 && slept <= 3, "%s: slept %lld times", e->kind, slept);
    FIXTURE_END();
}

Test(wake, a_crashed_holder_hands_over_when_its_lease_runs_out)
{
    private_server();
    static const wk_entity lock = WK_LOCK_ENTITY("crashed-holder", 1500);
    static const wk_entity rw = WK_RWLOCK_ENTITY("crashed-holder", 1500);
    static const wk_entity rw2 = WK_RWLOCK_ENTITY("crashed-holder-2", 1500);
    crashed_holder(&lock, LOCK, LOCK);
    crashed_holder(&rw, READ, WRITE);  /* a writer waits out a dead reader */
    crashed_holder(&rw2, WRITE, READ); /* a reader waits out a dead writer */
    wk_test_server_stop(&private_srv);
}

/* ------------------------------------------------------------------------
 * RwLock
 * ---------------------------------------------------------------------- */

Test(wake, a_writers_release_wakes_every_waiting_reader)
{
    private_server();
    static const wk_entity rw = WK_RWLOCK_ENTITY("readers", 60000);
    const char *name = "doc";
    FIXTURE(&rw, name);
    wk_token t;
    bool got, ok;
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str(name), &t, &got), WK_OK);
    cr_assert(got);
    shared *sh = shared_new();
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        job j = {&rw, name, READ, i, 60000, 0, 3, sh};
        kids[i] = spawn(&j);
        wait_queued(raw, &k, i + 1);
    }
    cr_assert_eq(wk_rwlock_release_write(p, &rw, wk_name_str(name), &t, &ok), WK_OK);
    for (int i = 0; i < 3; i++) {
        int rc = reap(kids[i]);
        cr_assert_eq(rc, 0, "reader %d: %d (4: the three were never in together)", i, rc);
    }
    cr_assert_eq(wk_test_cmd_calls(raw, "blpop"), 3, "one wake-up each");
    FIXTURE_END();
    wk_test_server_stop(&private_srv);
}

Test(wake, the_last_reader_out_wakes_a_waiting_writer)
{
    private_server();
    static const wk_entity rw = WK_RWLOCK_ENTITY("writer", 60000);
    const char *name = "doc";
    FIXTURE(&rw, name);
    wk_token r1, r2;
    bool got, ok;
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str(name), &r1, &got), WK_OK);
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str(name), &r2, &got), WK_OK);
    shared *sh = shared_new();
    job j = {&rw, name, WRITE, 0, 60000, 0, 0, sh};
    pid_t w = spawn(&j);
    wait_queued(raw, &k, 1);
    long long scripts = wk_test_scripts_run(raw);
    cr_assert_eq(wk_rwlock_release_read(p, &rw, wk_name_str(name), &r1, &ok), WK_OK);
    cr_assert_eq(zcard(raw, &k), 1, "one reader left: the writer still waits");
    cr_assert_eq(wk_rwlock_release_read(p, &rw, wk_name_str(name), &r2, &ok), WK_OK);
    cr_assert_eq(reap(w), 0);
    cr_assert_eq(wk_test_cmd_calls(raw, "blpop"), 1, "woken once, by the last reader");
    /* The last reader's release handed the writer lease over: the two
     * reader releases and the writer's own, no attempt after the pop. */
    cr_assert_eq(wk_test_scripts_run(raw) - scripts, 3, "%lld scripts",
                 wk_test_scripts_run(raw) - scripts);
    FIXTURE_END();
    wk_test_server_stop(&private_srv);
}

/* A writer holds; queued behind it: readers R0 and R1, a writer W2, a
 * reader R3. The writer's release hands the read lease to R0 and R1
 * together, in its one script (the readers at the head of the queue, up
 * to the next writer); the last of them out hands the lease to W2, W2's
 * release to R3. Each pops once and attempts nothing: the server runs the
 * five releases alone. Never a reader beside a writer. */
static void readers_at_the_head(const wk_entity *rw)
{
    const char *name = "doc";
    FIXTURE(rw, name);
    wk_token t;
    bool got, ok;
    cr_assert_eq(wk_rwlock_try_write(p, rw, wk_name_str(name), &t, &got), WK_OK);
    cr_assert(got);
    long long blpops = wk_test_cmd_calls(raw, "blpop");
    shared *sh = shared_new();
    static const enum how sides[4] = {READ, READ, WRITE, READ};
    pid_t kids[4];
    for (int i = 0; i < 4; i++) {
        job j = {rw, name, sides[i], i, 60000, 5, i < 2 ? 2 : 0, sh};
        kids[i] = spawn(&j);
        wait_queued(raw, &k, i + 1);
    }
    long long scripts = wk_test_scripts_run(raw);
    cr_assert_eq(wk_rwlock_release_write(p, rw, wk_name_str(name), &t, &ok), WK_OK);
    cr_assert(ok);
    for (int i = 0; i < 4; i++) {
        int rc = reap(kids[i]);
        cr_assert_eq(rc, 0, "waiter %d: %d (4: R0 and R1 were never in together)", i, rc);
    }
    cr_assert_eq(atomic_load(&sh->overlaps), 0, "a reader beside a writer");
    cr_assert(sh->order[0] + sh->order[1] == 1 && sh->order[2] == 2 && sh->order[3] == 3,
              "order %d %d %d %d", sh->order[0], sh->order[1], sh->order[2], sh->order[3]);
    cr_assert_eq(wk_test_scripts_run(raw) - scripts, 5, "%s: %lld scripts for 5 releases",
                 rw->flags ? "fair" : "unfair", wk_test_scripts_run(raw) - scripts);
    cr_assert_eq(wk_test_cmd_calls(raw, "blpop") - blpops, 4, "one pop each");
    cr_assert_eq(zcard(raw, &k), 0);
    FIXTURE_END();
}

Test(wake, a_writers_release_hands_the_read_lease_to_the_readers_at_the_head)
{
    private_server();
    static const wk_entity fair = WK_RWLOCK_FAIR_ENTITY("head-readers-fair", 60000);
    static const wk_entity unfair = WK_RWLOCK_ENTITY("head-readers", 60000);
    readers_at_the_head(&fair);
    readers_at_the_head(&unfair);
    wk_test_server_stop(&private_srv);
}

/* A two-permit Semaphore, both permits held, six waiters queued: every
 * release hands its place to the head — the holder's two and each
 * waiter's own — so the server runs the 2 + 6 releases alone, each
 * waiter pops once, and never more than two hold at once. */
Test(wake, a_semaphore_hands_each_freed_permit_on_and_never_grants_more_than_n)
{
    private_server();
    static const wk_entity sem = WK_SEMAPHORE_ENTITY("sem-hand", 2, 60000);
    const char *name = "pool";
    FIXTURE(&sem, name);
    wk_token t[2];
    bool got, ok;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(take(p, &sem, name, SEM, &t[i], &got), WK_OK);
        cr_assert(got);
    }
    long long blpops = wk_test_cmd_calls(raw, "blpop");
    shared *sh = shared_new();
    pid_t kids[6];
    for (int i = 0; i < 6; i++) {
        job j = {&sem, name, SEM, i, 60000, 5, 0, sh};
        kids[i] = spawn(&j);
        wait_queued(raw, &k, i + 1);
    }
    long long scripts = wk_test_scripts_run(raw);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(release(p, &sem, name, SEM, &t[i], &ok), WK_OK);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(reap(kids[i]), 0, "waiter %d", i);
    cr_assert_eq(atomic_load(&sh->acquired), 6);
    cr_assert_eq(atomic_load(&sh->overlaps), 0, "more holders than permits (most %d)",
                 atomic_load(&sh->most));
    cr_assert_eq(wk_test_scripts_run(raw) - scripts, 8, "%lld scripts",
                 wk_test_scripts_run(raw) - scripts);
    cr_assert_eq(wk_test_cmd_calls(raw, "blpop") - blpops, 6, "each waiter slept once");
    FIXTURE_END();
    wk_test_server_stop(&private_srv);
}

/* Six processes, 25 rounds each of a read or a write acquire (by index
 * and round), on one RwLock: never a reader beside a writer nor two
 * writers, and every acquire gets its lease. */
static void rw_worker(const job *j, int rounds)
{
    wk_db *db = child_open(wk_cap_read_write());
    if (!db)
        _exit(3);
    wk_processor *p = wk_db_processor(db);
    for (int r = 0; r < rounds; r++) {
        job me = *j;
        me.how = (j->idx + r) % 3 == 0 ? WRITE : READ;
        wk_token t;
        bool got = false, ok = false;
        if (acquire(p, me.e, me.name, me.how, me.wait_ms, &t, &got) != WK_OK || !got)
            _exit(2);
        atomic_fetch_add(&me.sh->acquired, 1);
        holder_moves(&me, true);
        wk_test_sleep_ms(1);
        holder_moves(&me, false);
        if (release(p, me.e, me.name, me.how, &t, &ok) != WK_OK || !ok)
            _exit(3);
    }
    wk_db_close(db);
    _exit(0);
}

static void rw_contention(const wk_entity *rw)
{
    shared *sh = shared_new();
    pid_t kids[6];
    for (int i = 0; i < 6; i++) {
        job j = {rw, "hot", READ, i, 60000, 0, 0, sh};
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0)
            rw_worker(&j, 25);
    }
    for (int i = 0; i < 6; i++)
        cr_assert_eq(reap(kids[i]), 0, "worker %d", i);
    cr_assert_eq(atomic_load(&sh->acquired), 6 * 25);
    cr_assert_eq(atomic_load(&sh->overlaps), 0, "%s: %d overlaps", rw->flags ? "fair" : "unfair",
                 atomic_load(&sh->overlaps));
}

Test(wake, rwlock_readers_and_writers_exclude_each_other_under_contention)
{
    const wk_entity fair = WK_RWLOCK_FAIR_ENTITY(wk_test_ns("rw-hot-fair"), 60000);
    const wk_entity unfair = WK_RWLOCK_ENTITY(wk_test_ns("rw-hot"), 60000);
    rw_contention(&fair);
    rw_contention(&unfair);
}

/* A fair RwLock: with a writer queued, a new reader does not get in
 * beside the running one (no writer starvation); unfair, it does. */
static bool reader_passes_waiting_writer(const wk_entity *rw)
{
    const char *name = "doc";
    FIXTURE(rw, name);
    wk_token r1, r2;
    bool got, passed, ok;
    cr_assert_eq(wk_rwlock_try_read(p, rw, wk_name_str(name), &r1, &got), WK_OK);
    cr_assert(got);
    shared *sh = shared_new();
    job j = {rw, name, WRITE, 0, 60000, 0, 0, sh};
    pid_t w = spawn(&j);
    wait_queued(raw, &k, 1);
    cr_assert_eq(wk_rwlock_try_read(p, rw, wk_name_str(name), &r2, &passed), WK_OK);
    if (passed)
        cr_assert_eq(wk_rwlock_release_read(p, rw, wk_name_str(name), &r2, &ok), WK_OK);
    cr_assert_eq(wk_rwlock_release_read(p, rw, wk_name_str(name), &r1, &ok), WK_OK);
    cr_assert_eq(reap(w), 0);
    FIXTURE_END();
    return passed;
}

Test(wake, a_fair_rwlock_lets_no_reader_pass_a_waiting_writer)
{
    const wk_entity fair = WK_RWLOCK_FAIR_ENTITY(wk_test_ns("fair-rw"), 60000);
    const wk_entity unfair = WK_RWLOCK_ENTITY(wk_test_ns("unfair-rw"), 60000);
    cr_assert_not(reader_passes_waiting_writer(&fair));
    cr_assert(reader_passes_waiting_writer(&unfair));
}

/* ------------------------------------------------------------------------
 * owned and force release
 * ---------------------------------------------------------------------- */

Test(wake, owned_reports_the_lease_without_writing_or_extending)
{
    private_server();
    static const wk_entity lock = WK_LOCK_ENTITY("owned", 60000);
    static const wk_entity rw = WK_RWLOCK_ENTITY("owned", 60000);
    wk_db *db = wk_test_open(NULL);
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_processor *p = wk_db_processor(db), *rp = wk_db_processor(ro);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_name n = wk_name_str("x");
    wk_token t, w, r, other;
    bool got, ok;
    wk_token_random(&other);
    cr_assert_eq(wk_lock_try(p, &lock, n, &t, &got), WK_OK);
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("w"), &w, &got), WK_OK);
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("r"), &r, &got), WK_OK);
    long long dirty = info_field(raw, "persistence", "rdb_changes_since_last_save");
    wk_lease_state st, st2;
    cr_assert_eq(wk_lock_owned(rp, &lock, n, &t, &st), WK_OK, "READ: a read-only handle asks");
    cr_assert(st.owned);
    cr_assert(st.ttl_ms > 0 && st.ttl_ms <= 60000, "%lld", (long long)st.ttl_ms);
    wk_test_sleep_ms(20);
    cr_assert_eq(wk_lock_owned(rp, &lock, n, &t, &st2), WK_OK);
    cr_assert(st2.owned && st2.ttl_ms <= st.ttl_ms, "owned does not extend");
    cr_assert_eq(wk_lock_owned(rp, &lock, n, &other, &st), WK_OK);
    cr_assert_not(st.owned);
    cr_assert_eq(st.ttl_ms, 0);
    cr_assert_eq(wk_rwlock_owned_write(rp, &rw, wk_name_str("w"), &w, &st), WK_OK);
    cr_assert(st.owned && st.ttl_ms > 0);
    cr_assert_eq(wk_rwlock_owned_write(rp, &rw, wk_name_str("w"), &other, &st), WK_OK);
    cr_assert_not(st.owned);
    cr_assert_eq(wk_rwlock_owned_read(rp, &rw, wk_name_str("r"), &r, &st), WK_OK);
    cr_assert(st.owned && st.ttl_ms > 0 && st.ttl_ms <= 60000);
    cr_assert_eq(wk_rwlock_owned_read(rp, &rw, wk_name_str("r"), &other, &st), WK_OK);
    cr_assert_not(st.owned);
    cr_assert_eq(info_field(raw, "persistence", "rdb_changes_since_last_save"), dirty,
                 "owned wrote nothing");
    cr_assert_eq(wk_lock_release(p, &lock, n, &t, &ok), WK_OK);
    cr_assert_eq(wk_lock_owned(rp, &lock, n, &t, &st), WK_OK);
    cr_assert_not(st.owned, "released: no longer owned");
    cr_assert_eq(wk_lock_owned(rp, &lock, n, NULL, &st), WK_EINVAL);
    redisFree(raw);
    wk_db_close(ro);
    wk_db_close(db);
    wk_test_server_stop(&private_srv);
}

Test(wake, force_release_frees_whoever_holds_it_and_wakes_the_waiter)
{
    const wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("force"), 60000);
    const wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("force"), 60000);
    const char *name = "stuck";
    wk_db *db = wk_test_open(NULL);
    wk_db *op = wk_test_open(NULL);
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk__wake_keys k;
    wake_keys(&lock, name, &k);
    wk_token t;
    bool got, ok, was;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str(name), &t, &got), WK_OK);
    shared *sh = shared_new();
    job j = {&lock, name, LOCK, 0, 60000, 0, 0, sh};
    pid_t w = spawn(&j);
    wait_queued(raw, &k, 1);
    cr_assert_eq(wk_lock_force_release(wk_db_processor(ro), &lock, wk_name_str(name), &was),
                 WK_EDENIED);
    cr_assert_eq(wk_lock_force_release(wk_db_processor(op), &lock, wk_name_str(name), &was), WK_OK);
    cr_assert(was);
    cr_assert_eq(reap(w), 0, "the waiter was woken and took it");
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str(name), &t, &ok), WK_OK);
    cr_assert_not(ok, "the old holder's release reports false");
    cr_assert_eq(wk_lock_force_release(wk_db_processor(op), &lock, wk_name_str(name), &was), WK_OK);
    cr_assert_not(was, "nobody held it");

    wk_token wt, rt;
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("a"), &wt, &got), WK_OK);
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("b"), &rt, &got), WK_OK);
    cr_assert_eq(wk_rwlock_force_release(wk_db_processor(op), &rw, wk_name_str("a"), &was), WK_OK);
    cr_assert(was);
    cr_assert_eq(wk_rwlock_force_release(wk_db_processor(op), &rw, wk_name_str("b"), &was), WK_OK);
    cr_assert(was);
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("b"), &wt, &got), WK_OK);
    cr_assert(got, "the readers are gone");
    redisFree(raw);
    wk_db_close(ro);
    wk_db_close(op);
    wk_db_close(db);
}

/* Kill the connection blocked in BLPOP (its waiter's): how many. */
static int kill_blpop_clients(redisContext *raw)
{
    redisReply *r = wk_test_cmd(raw, "CLIENT LIST");
    int killed = 0;
    for (char *line = r->str; line && *line;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0'; /* one client a line */
        if (strstr(line, "cmd=blpop") && strstr(line, " flags=b")) {
            const char *id = strstr(line, "id=");
            redisReply *k = wk_test_cmd(raw, "CLIENT KILL ID %lld", atoll(id + 3));
            killed += k->type == REDIS_REPLY_INTEGER && k->integer == 1;
            freeReplyObject(k);
        }
        line = end ? end + 1 : NULL;
    }
    freeReplyObject(r);
    return killed;
}

Test(wake, a_waiter_whose_wait_connection_is_killed_keeps_waiting)
{
    private_server();
    const wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("killed-wait"), 60000);
    const char *name = "w";
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(wk_test_url());
    wk__wake_keys k;
    wake_keys(&lock, name, &k);
    wk_token t;
    bool got, ok;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str(name), &t, &got), WK_OK);
    cr_assert(got);
    shared *sh = shared_new();
    job j = {&lock, name, LOCK, 0, 60000, 0, 0, sh};
    pid_t w = spawn(&j);
    wait_queued(raw, &k, 1);
    /* Its blocking connection dies twice while it waits: a lost wake-up
     * at most, so it queues again and is woken by the release. */
    for (int round = 0; round < 2; round++) {
        while (kill_blpop_clients(raw) == 0)
            wk_test_sleep_ms(5);
        wk_test_sleep_ms(50);
    }
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str(name), &t, &ok), WK_OK);
    cr_assert(ok);
    cr_assert_eq(reap(w), 0, "the waiter took the lock after its waits were cut off");
    cr_assert_eq(atomic_load(&sh->acquired), 1);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&private_srv);
}

/* A waiter on a handle through a proxy that drops the reply to its pop
 * — the pop that carried the handed-over lock. The lock is the waiter's
 * (its token) though it never saw the notice: its next attempt, at once,
 * finds the lock its own and returns holding it (without that, it would
 * park behind its own minute-long lease and time out). */
typedef struct lost_pop {
    const wk_entity *lock;
    const char *url;
    int rc;
    bool got;
    wk_token t;
} lost_pop;

static void *lost_pop_waiter(void *arg)
{
    lost_pop *w = arg;
    wk_db *db = wk_test_open_url(w->url, NULL);
    w->rc = wk_lock_acquire(wk_db_processor(db), w->lock, wk_name_str("job"),
                            wk_deadline_in(30000), NULL, &w->t, &w->got);
    wk_db_close(db);
    return NULL;
}

Test(wake, a_waiter_whose_handed_over_pop_reply_is_lost_finds_the_lock_its_own)
{
    private_server();
    static const wk_entity lock = WK_LOCK_ENTITY("lost-pop", 60000);
    FIXTURE(&lock, "job");
    wk_test_proxy *px = NULL;
    cr_assert_eq(wk_test_proxy_start(&px, private_srv.port), 0);
    wk_token held;
    bool got, ok;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("job"), &held, &got), WK_OK);
    cr_assert(got);
    lost_pop w = {.lock = &lock, .url = wk_test_proxy_url(px)};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, lost_pop_waiter, &w), 0);
    wait_queued(raw, &k, 1);
    while (info_field(raw, "clients", "blocked_clients") != 1) /* in its BLPOP */
        wk_test_sleep_ms(5);
    wk_test_proxy_drop_next_reply(px, NULL, NULL);
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("job"), &held, &ok), WK_OK);
    cr_assert(ok);
    pthread_join(th, NULL);
    cr_assert_eq(wk_test_proxy_drops(px), 1, "the pop's reply was dropped");
    cr_assert_eq(w.rc, WK_OK, "%s", wk_err_name(w.rc));
    cr_assert(w.got, "it holds the lock handed to it");
    char v[64];
    cr_assert(lock_value(raw, &lock, "job", v, sizeof(v)) == WK_TOKEN_LEN &&
              memcmp(v, w.t.bytes, WK_TOKEN_LEN) == 0);
    wk_test_proxy_stop(px);
    FIXTURE_END();
    wk_test_server_stop(&private_srv);
}

/* A waiter on a handle with lease_replicas 1 and no replica: the lock
 * handed to it is not taken on the notice alone — its attempt finds it
 * its own, the WAIT behind that attempt falls short, and the lease goes
 * back (WK_ENOTREPLICATED, not acquired, nothing left held). */
typedef struct acked_wait {
    const wk_entity *lock;
    enum how how;
    int rc;
    bool got;
    wk_token t;
} acked_wait;

static void *acked_waiter(void *arg)
{
    acked_wait *w = arg;
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    o.lease_replicas = 1;
    o.lease_ack_timeout_ms = 100;
    wk_db *db = NULL;
    w->rc = wk_db_open(&db, &o, NULL, 0);
    if (w->rc == WK_OK)
        w->rc = acquire(wk_db_processor(db), w->lock, "job", w->how, 30000, &w->t, &w->got);
    wk_db_close(db);
    return NULL;
}

/* `how` of entity e: the Lock, an RwLock writer, a Semaphore permit. */
static void acked_handoff(const wk_entity *e, enum how how)
{
    FIXTURE(e, "job");
    wk_token held;
    bool got, ok;
    cr_assert_eq(take(p, e, "job", how, &held, &got), WK_OK);
    cr_assert(got);
    acked_wait w = {.lock = e, .how = how};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, acked_waiter, &w), 0);
    wait_queued(raw, &k, 1);
    cr_assert_eq(release(p, e, "job", how, &held, &ok), WK_OK);
    pthread_join(th, NULL);
    cr_assert_eq(w.rc, WK_ENOTREPLICATED, "%s: %s", e->kind, wk_err_name(w.rc));
    cr_assert_not(w.got);
    cr_assert_not(still_taken(raw, e, "job", how, &held), "%s given back: nobody holds it",
                  e->kind);
    FIXTURE_END();
}

Test(wake, a_lock_handed_to_a_waiter_that_needs_replicas_is_acknowledged_or_given_back)
{
    each_handing_kind("acked-handoff", acked_handoff, false);
}

Test(wake, unknown_entity_flags_are_refused)
{
    wk_entity e = WK_LOCK_FAIR_ENTITY("flags", 1000);
    cr_assert_eq(wk_entity_check(&e), WK_OK);
    e.flags |= 0x80u;
    char msg[WK_ENTITY_MSG_MAX];
    cr_assert_eq(wk_entity_check_msg(&e, msg, sizeof(msg)), WK_EINVAL);
    cr_assert_str_eq(msg, "flags 0x81 has bits no WK_ENTITY_* flag defines");
}

/* Waiting needs WRITE, as acquiring does: a read-only handle is refused
 * before anything is sent, and opens no blocking connection. */
Test(wake, waiting_needs_write)
{
    const wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("denied"), 60000);
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_token t;
    bool got = true;
    cr_assert_eq(wk_lock_acquire(wk_db_processor(ro), &lock, wk_name_str("x"), wk_deadline_in(1000),
                                 NULL, &t, &got),
                 WK_EDENIED);
    cr_assert_not(got);
    wk_db_close(ro);
}

/* ------------------------------------------------------------------------
 * Liveness: a handed lease is never stranded (issue 36)
 *
 * B (collection/wake.h) is WK__WAKE_RENEW_MS + WK__WAKE_GRACE_MS plus the
 * server's timer tick and a round trip, about 1.6 s; the leases here run
 * 20 s, so a lease stranded for its TTL cannot pass for one given on
 * within the bound. The checks allow 5 s (a loaded two-core machine).
 * ---------------------------------------------------------------------- */

#define STRANDED_TTL_MS 20000
#define WITHIN_BOUND_MS 5000

/* Whether token t holds item `name` of `e` (side `how`), read raw. */
static bool holds(redisContext *raw, const wk_entity *e, const char *name, enum how how,
                  const wk_token *t)
{
    char key[WK_KEY_MAX];
    size_t len = anchor_key(e, name, key);
    if (how == READ)
        key[len - 1] = 'r';
    redisReply *r = how == FENCED ? wk_test_cmd(raw, "HGET %b token", key, len)
                    : how == READ || how == SEM
                        ? wk_test_cmd(raw, "ZSCORE %b %b", key, len, t->bytes, (size_t)WK_TOKEN_LEN)
                        : wk_test_cmd(raw, "GET %b", key, len);
    bool held = r->type == REDIS_REPLY_STRING &&
                (how == READ || how == SEM ||
                 (r->len == WK_TOKEN_LEN && memcmp(r->str, t->bytes, WK_TOKEN_LEN) == 0));
    freeReplyObject(r);
    return held;
}

/* Whether token t is in the wait queue q. */
static bool in_queue(redisContext *raw, const wk__wake_keys *k, const wk_token *t)
{
    redisReply *r = wk_test_cmd(raw, "ZSCORE %b %b", k->q, k->q_len, t->bytes, (size_t)WK_TOKEN_LEN);
    bool in = r->type == REDIS_REPLY_STRING;
    freeReplyObject(r);
    return in;
}

/* The holder takes item "job" of e; A queues and is killed; the holder
 * releases `hold_ms` later, which hands the lease to dead A. Then B — a
 * waiter queued behind A (`polling` false) or a newcomer trying in a loop
 * (`polling`) — holds it within the bound. Before: Lock and FencedLock
 * waiters slept the handed lease's whole TTL (finding 1), and with an
 * early release every kind stranded it for about a TTL, A's registration
 * lasting the holder's remaining lease (finding 2); plain tries never
 * looked (README's "an unfair plain try does not look"). */
static void killed_waiter_is_handed_the_lease(const wk_entity *e, enum how how, int hold_ms,
                                              bool polling)
{
    enum how holds = how == READ ? WRITE : how;
    FIXTURE(e, "job");
    wk_token held, t;
    bool ok, got;
    shared *sh = shared_new();
    job ja = {e, "job", how, 0, 30000, 0, 0, sh}, jb = {e, "job", how, 1, 30000, 0, 0, sh};
    cr_assert_eq(take(p, e, "job", holds, &held, &got), WK_OK);
    cr_assert(got);
    int64_t taken = wk_monotonic_ms();
    pid_t a = spawn(&ja);
    wait_queued(raw, &k, 1);
    kill(a, SIGKILL);
    reap(a);
    pid_t b = 0;
    if (!polling) {
        b = spawn(&jb);
        wait_queued(raw, &k, 2);
    }
    int64_t left = taken + hold_ms - wk_monotonic_ms();
    if (left > 0)
        wk_test_sleep_ms((int)left);
    int64_t released = wk_monotonic_ms();
    cr_assert_eq(release(p, e, "job", holds, &held, &ok), WK_OK);
    cr_assert(ok);
    int64_t took;
    if (polling) {
        for (got = false; !got && wk_monotonic_ms() - released < STRANDED_TTL_MS + 2000;) {
            cr_assert_eq(take(p, e, "job", how, &t, &got), WK_OK, "%s", wk_db_errmsg(db));
            if (!got)
                wk_test_sleep_ms(50);
        }
        took = wk_monotonic_ms() - released;
        cr_assert(got);
    } else {
        cr_assert_eq(reap(b), 0, "%s: B got the lease", e->kind);
        took = wk_monotonic_ms() - released;
    }
    cr_assert_lt(took, WITHIN_BOUND_MS,
                 "%s%s: %s got the lease handed to a killed waiter %lld ms after a release "
                 "%d ms into a %d ms lease",
                 e->kind, e->flags & WK_ENTITY_FAIR ? " (fair)" : "",
                 polling ? "a newcomer's plain try" : "the next waiter", (long long)took, hold_ms,
                 (int)e->ttl_ms);
    if (polling)
        release(p, e, "job", how, &t, &ok);
    FIXTURE_END();
}

/* Every lease kind, fair and not: Lock, FencedLock, RwLock writer, a
 * one-permit Semaphore, each on a namespace of its own. */
static void each_lease_kind(const char *ns, int hold_ms, bool polling)
{
    static const char *tails[6] = {"lock", "lock-fair", "fenced", "rw", "rw-fair", "sem"};
    static const enum how hows[6] = {LOCK, LOCK, FENCED, WRITE, WRITE, SEM};
    char n[6][64];
    for (int i = 0; i < 6; i++)
        snprintf(n[i], sizeof(n[i]), "%s-%s", ns, tails[i]);
    const wk_entity kinds[6] = {
        WK_LOCK_ENTITY(n[0], STRANDED_TTL_MS),   WK_LOCK_FAIR_ENTITY(n[1], STRANDED_TTL_MS),
        WK_FENCED_LOCK_ENTITY(n[2], STRANDED_TTL_MS), WK_RWLOCK_ENTITY(n[3], STRANDED_TTL_MS),
        WK_RWLOCK_FAIR_ENTITY(n[4], STRANDED_TTL_MS), WK_SEMAPHORE_ENTITY(n[5], 1, STRANDED_TTL_MS)};
    private_server();
    for (int i = 0; i < 6; i++)
        killed_waiter_is_handed_the_lease(&kinds[i], hows[i], hold_ms, polling);
    wk_test_server_stop(&private_srv);
}

Test(wake, a_lease_handed_to_a_killed_waiter_goes_to_the_next_waiter_within_the_bound)
{
    each_lease_kind("strand-early", 500, false); /* the holder finishes early: the common case */
}

Test(wake, a_lease_handed_to_a_killed_waiter_goes_to_a_newcomers_try_within_the_bound)
{
    each_lease_kind("strand-try", 500, true);
}

/* A processor that makes its client late: every query named `op` sent at
 * or after `after` (wk_monotonic_ms) returns `delay_ms` after its reply,
 * as a descheduled thread or a slow hook would. */
typedef struct late_client {
    wk_processor proc;
    wk_processor *inner;
    const char *op;
    int64_t after;
    int delay_ms;
    int delayed;
} late_client;

static int late_process(wk_processor *self, wk_query *q)
{
    late_client *l = (late_client *)self;
    bool late = strcmp(q->name, l->op) == 0 && wk_monotonic_ms() >= l->after;
    int rc = wk_process(l->inner, q);
    if (late) {
        l->delayed++;
        wk_test_sleep_ms(l->delay_ms);
    }
    return rc;
}

/* A waiter (deadline 500 ms) whose attempt at the deadline comes back
 * `delay_ms` late returns "not acquired": then it is in no queue, and the
 * holder's release goes to B, queued behind it, within the bound — never
 * to the token that said "not acquired". Before: its last attempt
 * registered it again for about a second and its leave was skipped past
 * the deadline + 25 ms, so the release handed it the lock and B waited
 * the lease's TTL (finding 3). */
static void late_waiter_leaves(int delay_ms)
{
    private_server();
    static const wk_entity lock = WK_LOCK_ENTITY("late-waiter", STRANDED_TTL_MS);
    FIXTURE(&lock, "job");
    wk_token held, t;
    bool got, ok;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("job"), &held, &got), WK_OK);
    cr_assert(got);
    int64_t deadline = wk_deadline_in(500);
    late_client l = {{late_process, db, 0}, p, "lock.acquire", deadline, delay_ms, 0};
    /* A: its first attempt queues it; B queues behind, from a child. */
    shared *sh = shared_new();
    job jb = {&lock, "job", LOCK, 1, 30000, 0, 0, sh};
    /* B queues after A: A's acquire runs here, B in a child that starts
     * once A is queued. */
    pid_t b = fork();
    cr_assert_geq(b, 0);
    if (b == 0) {
        redisContext *watch = wk_test_raw(wk_test_url());
        while (zcard(watch, &k) < 1)
            wk_test_sleep_ms(2);
        _exit(waiter(&jb));
    }
    got = true;
    int rc = wk_lock_acquire(&l.proc, &lock, wk_name_str("job"), deadline, NULL, &t, &got);
    cr_assert_eq(rc, WK_OK, "%s (%s)", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_not(got);
    cr_assert_geq(l.delayed, 1, "its attempt at the deadline came back late");
    cr_assert_not(in_queue(raw, &k, &t), "a waiter that said 'not acquired' is in no queue");
    while (zcard(raw, &k) < 1) /* B */
        wk_test_sleep_ms(5);
    int64_t released = wk_monotonic_ms();
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("job"), &held, &ok), WK_OK);
    cr_assert_not(holds(raw, &lock, "job", LOCK, &t), "handed to the token that said 'not acquired'");
    cr_assert_eq(reap(b), 0, "B got the lock");
    int64_t took = wk_monotonic_ms() - released;
    cr_assert_lt(took, WITHIN_BOUND_MS, "late by %d ms: B got the lock %lld ms after the release",
                 delay_ms, (long long)took);
    FIXTURE_END();
    wk_test_server_stop(&private_srv);
}

Test(wake, a_waiter_40_ms_late_at_its_deadline_leaves_and_holds_nothing)
{
    late_waiter_leaves(40);
}

Test(wake, a_waiter_200_ms_late_at_its_deadline_leaves_and_holds_nothing)
{
    late_waiter_leaves(200);
}

/* ------------------------------------------------------------------------
 * Waiters are visible (issue 38)
 * ---------------------------------------------------------------------- */

/* How many wait for item "job" of e, by the kind's inspect (READ). */
static int64_t inspected_waiting(wk_processor *p, const wk_entity *e, enum how how)
{
    wk_name n = wk_name_str("job");
    if (how == LOCK) {
        wk_lock_state st;
        cr_assert_eq(wk_lock_inspect(p, e, n, &st), WK_OK);
        cr_assert(st.held);
        return st.waiting;
    }
    if (how == FENCED) {
        wk_fenced_lock_state st;
        cr_assert_eq(wk_fenced_lock_inspect(p, e, n, &st), WK_OK);
        cr_assert(st.held);
        return st.waiting;
    }
    if (how == SEM) {
        wk_semaphore_state st;
        cr_assert_eq(wk_semaphore_inspect(p, e, n, &st), WK_OK);
        cr_assert_eq(st.running, 1);
        return st.waiting;
    }
    wk_rwlock_state st;
    cr_assert_eq(wk_rwlock_inspect(p, e, n, &st), WK_OK);
    cr_assert(st.writer_held);
    return st.waiting;
}

/* Two waiters queue behind the holder: every lease kind's inspect says
 * 2, read in its one script; then 0 once they are gone. */
static void inspect_counts_waiters(const wk_entity *e, enum how how)
{
    FIXTURE(e, "job");
    wk_token held;
    bool got, ok;
    cr_assert_eq(take(p, e, "job", how, &held, &got), WK_OK);
    cr_assert(got);
    cr_assert_eq(inspected_waiting(p, e, how), 0, "%s: nobody waits yet", e->kind);
    shared *sh = shared_new();
    job ja = {e, "job", how, 0, 30000, 0, 0, sh}, jb = {e, "job", how, 1, 30000, 0, 0, sh};
    pid_t a = spawn(&ja);
    wait_queued(raw, &k, 1);
    pid_t b = spawn(&jb);
    wait_queued(raw, &k, 2);
    cr_assert_eq(inspected_waiting(p, e, how), 2, "%s: two wait", e->kind);
    cr_assert_eq(release(p, e, "job", how, &held, &ok), WK_OK);
    cr_assert_eq(reap(a), 0);
    cr_assert_eq(reap(b), 0);
    FIXTURE_END();
}

Test(wake, every_lease_kinds_inspect_counts_its_waiters)
{
    static const wk_entity lock = WK_LOCK_ENTITY("inspect-waiters", 20000);
    static const wk_entity fenced = WK_FENCED_LOCK_ENTITY("inspect-waiters", 20000);
    static const wk_entity rw = WK_RWLOCK_ENTITY("inspect-waiters", 20000);
    static const wk_entity sem = WK_SEMAPHORE_ENTITY("inspect-waiters", 1, 20000);
    private_server();
    inspect_counts_waiters(&lock, LOCK);
    inspect_counts_waiters(&fenced, FENCED);
    inspect_counts_waiters(&rw, WRITE);
    inspect_counts_waiters(&sem, SEM);
    wk_test_server_stop(&private_srv);
}
