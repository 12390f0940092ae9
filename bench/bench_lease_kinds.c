/*
 * bench/bench_lease_kinds.c — benchmark cases for FencedLock and
 * Semaphore: a try + release cycle of the library against raw hiredis
 * sending the library's own scripts (SCRIPT LOAD) with the same keys —
 * the item's keys, and for the release the wake keys of collection/wake.h
 * (base = the item key, which carries the hash tag, + ":q" / ":e" /
 * ":w:").
 */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "bench/bench_cases.h"
#include "collection/lease_script.h"

#define BATCH 64

static const wk_entity bench_fenced = WK_FENCED_LOCK_ENTITY("bench", 30000);
static const wk_entity bench_sem = WK_SEMAPHORE_ENTITY("bench", 4, 30000);

/* One kind's raw cycle. */
typedef struct raw_kind {
    const char *kind;
    const char *suffixes[2]; /* the item's keys (NULL: one key) */
    const char *try_args[3]; /* after the token, before the wake prefix */
    int ntry_args;
    int nrelease_args;  /* the first of try_args the release passes */
    bool try_wake_keys; /* the try names q and e after the item's keys */
    const wk_script *try_script, *release_script;
    char try_sha[41], release_sha[41];
} raw_kind;

static raw_kind fenced_raw = {"FencedLock",
                              {":lease", ":fence"},
                              {"30000", "-1", NULL},
                              2,
                              1,
                              false,
                              &wk__fenced_lock_try_script,
                              &wk__fenced_lock_release_script,
                              "",
                              ""};
static raw_kind sem_raw = {"Semaphore",
                           {":permits", NULL},
                           {"30000", "4", "-1"},
                           3,
                           2,
                           true,
                           &wk__semaphore_try_script,
                           &wk__semaphore_release_script,
                           "",
                           ""};

typedef struct raw_item {
    unsigned char tok[16];
    char key[2][160], q[170], e[170], w[170];
    size_t kl[2], ql, el, wl;
    int nkeys;
} raw_item;

static void raw_try_send(bench_ctx *c, raw_kind *k, unsigned i, raw_item *s)
{
    s->nkeys = 0;
    for (int j = 0; j < 2 && k->suffixes[j]; j++, s->nkeys++)
        s->kl[j] = bench_key(s->key[j], k->kind, "bench", i, k->suffixes[j]);
    s->ql = (size_t)sprintf(s->q, "%s:q", s->key[0]);
    s->el = (size_t)sprintf(s->e, "%s:e", s->key[0]);
    s->wl = (size_t)sprintf(s->w, "%s:w:", s->key[0]);
    randombytes_buf(s->tok, 16);
    char nk[2] = {(char)('0' + s->nkeys + (k->try_wake_keys ? 2 : 0)), 0};
    const char *argv[12] = {"EVALSHA", k->try_sha, nk};
    size_t lens[12] = {7, 40, 1};
    int n = 3;
    for (int j = 0; j < s->nkeys; j++)
        argv[n] = s->key[j], lens[n++] = s->kl[j];
    if (k->try_wake_keys) {
        argv[n] = s->q, lens[n++] = s->ql;
        argv[n] = s->e, lens[n++] = s->el;
    }
    argv[n] = (const char *)s->tok, lens[n++] = 16;
    for (int j = 0; j < k->ntry_args; j++)
        argv[n] = k->try_args[j], lens[n++] = strlen(k->try_args[j]);
    argv[n] = s->w, lens[n++] = s->wl; /* the wake prefix: a try looks for unclaimed handoffs */
    bench_raw_append(c, n, argv, lens);
}

static void raw_release_send(bench_ctx *c, const raw_kind *k, const raw_item *s)
{
    char nk[2] = {(char)('0' + s->nkeys + 2), 0};
    const char *argv[12] = {"EVALSHA", k->release_sha, nk};
    size_t lens[12] = {7, 40, 1};
    int n = 3;
    for (int j = 0; j < s->nkeys; j++)
        argv[n] = s->key[j], lens[n++] = s->kl[j];
    argv[n] = s->q, lens[n++] = s->ql;
    argv[n] = s->e, lens[n++] = s->el;
    argv[n] = (const char *)s->tok, lens[n++] = 16;
    argv[n] = s->w, lens[n++] = s->wl;
    /* Then the ttl (and N), as the try's: a release hands the item over. */
    for (int j = 0; j < k->nrelease_args; j++)
        argv[n] = k->try_args[j], lens[n++] = strlen(k->try_args[j]);
    bench_raw_append(c, n, argv, lens);
}

static void raw_seq(bench_ctx *c, raw_kind *k, unsigned i)
{
    raw_item s;
    raw_try_send(c, k, i, &s);
    freeReplyObject(bench_raw_reply(c));
    raw_release_send(c, k, &s);
    freeReplyObject(bench_raw_reply(c));
}

static void raw_batch(bench_ctx *c, raw_kind *k, unsigned base)
{
    static raw_item s[BATCH];
    for (unsigned j = 0; j < BATCH; j++)
        raw_try_send(c, k, base + j, &s[j]);
    for (unsigned j = 0; j < BATCH; j++)
        freeReplyObject(bench_raw_reply(c));
    for (unsigned j = 0; j < BATCH; j++)
        raw_release_send(c, k, &s[j]);
    for (unsigned j = 0; j < BATCH; j++)
        freeReplyObject(bench_raw_reply(c));
}

static void setup(bench_ctx *c)
{
    raw_kind *kinds[2] = {&fenced_raw, &sem_raw};
    for (int j = 0; j < 2; j++) {
        bench_raw_load(c, kinds[j]->try_script, kinds[j]->try_sha);
        bench_raw_load(c, kinds[j]->release_script, kinds[j]->release_sha);
    }
}

/* ---- FencedLock ---- */

static void fenced_seq_lib(bench_ctx *c, unsigned i)
{
    wk_fenced_lease l;
    bool ok;
    wk_processor *p = wk_db_processor(c->db);
    bench_check(wk_fenced_lock_try(p, &bench_fenced, wk_name_u64(i), &l), c, "fenced_lock.try");
    bench_check(wk_fenced_lock_release(p, &bench_fenced, wk_name_u64(i), &l.token, &ok), c,
                "fenced_lock.release");
}

static void fenced_batch_lib(bench_ctx *c, unsigned base)
{
    static wk_fenced_lease l[BATCH];
    static bool ok[BATCH];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned j = 0; j < BATCH; j++)
        wk_fenced_lock_try(p, &bench_fenced, wk_name_u64(base + j), &l[j]);
    bench_check(wk_batch_exec(c->batch), c, "batch fenced_lock.try");
    for (unsigned j = 0; j < BATCH; j++)
        wk_fenced_lock_release(p, &bench_fenced, wk_name_u64(base + j), &l[j].token, &ok[j]);
    bench_check(wk_batch_exec(c->batch), c, "batch fenced_lock.release");
}

static void fenced_seq_raw(bench_ctx *c, unsigned i)
{
    raw_seq(c, &fenced_raw, i);
}

static void fenced_batch_raw(bench_ctx *c, unsigned base)
{
    raw_batch(c, &fenced_raw, base);
}

/* ---- Semaphore ---- */

static void sem_seq_lib(bench_ctx *c, unsigned i)
{
    wk_token t;
    bool got, ok;
    wk_processor *p = wk_db_processor(c->db);
    bench_check(wk_semaphore_try(p, &bench_sem, wk_name_u64(i), &t, &got), c, "semaphore.try");
    bench_check(wk_semaphore_release(p, &bench_sem, wk_name_u64(i), &t, &ok), c,
                "semaphore.release");
}

static void sem_batch_lib(bench_ctx *c, unsigned base)
{
    static wk_token t[BATCH];
    static bool got[BATCH], ok[BATCH];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned j = 0; j < BATCH; j++)
        wk_semaphore_try(p, &bench_sem, wk_name_u64(base + j), &t[j], &got[j]);
    bench_check(wk_batch_exec(c->batch), c, "batch semaphore.try");
    for (unsigned j = 0; j < BATCH; j++)
        wk_semaphore_release(p, &bench_sem, wk_name_u64(base + j), &t[j], &ok[j]);
    bench_check(wk_batch_exec(c->batch), c, "batch semaphore.release");
}

static void sem_seq_raw(bench_ctx *c, unsigned i)
{
    raw_seq(c, &sem_raw, i);
}

static void sem_batch_raw(bench_ctx *c, unsigned base)
{
    raw_batch(c, &sem_raw, base);
}

const bench_case bench_lease_kinds_cases[] = {
    {"fenced lock try+release", setup, fenced_seq_lib, fenced_seq_raw, fenced_batch_lib,
     fenced_batch_raw},
    {"semaphore try+release", setup, sem_seq_lib, sem_seq_raw, sem_batch_lib, sem_batch_raw},
};
const size_t bench_lease_kinds_cases_count =
    sizeof(bench_lease_kinds_cases) / sizeof(bench_lease_kinds_cases[0]);
