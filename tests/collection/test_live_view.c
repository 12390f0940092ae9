/*
 * tests/collection/test_live_view.c — LiveView against a real redis-server:
 * the key bytes and stored shapes of the spec (specs/rust-dynamic-
 * structures.md), commits conditional on the parent, the crate's squash
 * rule, history, corrupted heads and entries, subscribers that follow a
 * writer through 1,000 commits and squashes (one of them falling behind
 * past a squash), "gone" and "stopped" as outcomes distinct from
 * corruption, capabilities, typed bodies, the Rust side played with raw
 * Redis commands in both directions, and re-creation under the same name
 * (the generation `g`).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/batch.h>
#include <wakuwaku/live_view.h>

#include "redis_fixture.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* The diff format of these tests: bytes appended to the body. */
static int append(void *arg, const uint8_t *body, size_t body_len, const uint8_t *diff,
                  size_t diff_len, uint8_t **out, size_t *out_len)
{
    (void)arg;
    uint8_t *b = malloc(body_len + diff_len + 1);
    if (!b)
        return WK_ENOMEM;
    memcpy(b, body, body_len);
    memcpy(b + body_len, diff, diff_len);
    *out = b;
    *out_len = body_len + diff_len;
    return WK_OK;
}

static void key_of(char *dst, const wk_entity *e, wk_name name, const char *suffix)
{
    size_t len;
    cr_assert_eq(wk_key_build(dst, WK_KEY_MAX - 1, &len, e, &name, suffix), WK_OK);
    dst[len] = '\0';
}

/* The locals of most tests: a handle, a fresh view entity, a name and its
 * two keys. */
#define SETUP(cap_, prefix_, max_diffs_, name_)                                                    \
    wk_db *db = wk_test_open(cap_);                                                                \
    wk_processor *p = wk_db_processor(db);                                                         \
    wk_entity e = WK_LIVE_VIEW_ENTITY(wk_test_ns(prefix_), max_diffs_);                            \
    wk_name n = (name_);                                                                           \
    char head[WK_KEY_MAX], log[WK_KEY_MAX];                                                        \
    key_of(head, &e, n, ":h");                                                                     \
    key_of(log, &e, n, ":l");                                                                      \
    (void)p

/* Raw commands (the Rust side, inspection). */
#define cmd wk_test_cmd

static void expect_str(const redisReply *r, const char *want)
{
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "type %d", r->type);
    cr_assert_eq(r->len, strlen(want), "\"%.*s\" != \"%s\"", (int)r->len, r->str, want);
    cr_assert(memcmp(r->str, want, r->len) == 0, "\"%.*s\" != \"%s\"", (int)r->len, r->str, want);
}

/* An entry of an XRANGE reply: ID and fields, as text. */
static void expect_entry(const redisReply *e, const char *id, int nfields, const char *const *fv)
{
    cr_assert_eq(e->type, REDIS_REPLY_ARRAY);
    expect_str(e->element[0], id);
    cr_assert_eq((int)e->element[1]->elements, nfields, "%s: %zu fields", id,
                 e->element[1]->elements);
    for (int i = 0; i < nfields; i++)
        expect_str(e->element[1]->element[i], fv[i]);
}

/* The generation `g` of the head `head` (16 lowercase hex digits), or ""
 * when it has none (a view the crate created). */
static void gen_of(redisContext *raw, const char *head, char out[17])
{
    redisReply *r = cmd(raw, "HGET %s g", head);
    out[0] = '\0';
    if (r->type == REDIS_REPLY_STRING) {
        cr_assert_eq(r->len, 16, "g is \"%s\"", r->str);
        cr_assert_eq(strspn(r->str, "0123456789abcdef"), 16, "g is \"%s\"", r->str);
        memcpy(out, r->str, 17);
    } else {
        cr_assert_eq(r->type, REDIS_REPLY_NIL, "type %d", r->type);
    }
    freeReplyObject(r);
}

static wk_live_view_commit_outcome commit(wk_processor *p, const wk_entity *e, wk_name n,
                                          uint64_t parent, const char *diff, const char *body)
{
    wk_live_view_commit_outcome out;
    int rc = wk_live_view_commit(p, e, n, parent, diff, strlen(diff), body, strlen(body), &out);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_processor_errmsg(p));
    return out;
}

static void create(wk_processor *p, const wk_entity *e, wk_name n, const char *body)
{
    bool created = false;
    int rc = wk_live_view_create(p, e, n, body, strlen(body), &created);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_processor_errmsg(p));
    cr_assert(created);
}

static int recv_ev(wk_live_view_sub *sub, wk_live_view_event *ev)
{
    return wk_live_view_recv(sub, ev);
}

/* ------------------------------------------------------------------------
 * Layout, commits, squashing
 * ---------------------------------------------------------------------- */

Test(live_view, key_bytes_and_stored_shapes_follow_the_spec, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *ns = wk_test_ns("doc");
    wk_entity e = WK_LIVE_VIEW_ENTITY(ns, 100);
    char head[WK_KEY_MAX], log[WK_KEY_MAX], want[WK_KEY_MAX];
    key_of(head, &e, wk_name_u64(7), ":h");
    key_of(log, &e, wk_name_u64(7), ":l");
    snprintf(want, sizeof(want), "@@wakuwaku-entity:LiveView:{%s:7}:h", ns);
    cr_assert_str_eq(head, want);
    snprintf(want, sizeof(want), "@@wakuwaku-entity:LiveView:{%s:7}:l", ns);
    cr_assert_str_eq(log, want);

    create(p, &e, wk_name_u64(7), "title");
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = cmd(raw, "HMGET %s v b", head);
    expect_str(r->element[0], "1");
    expect_str(r->element[1], "title");
    freeReplyObject(r);
    /* The crate's two fields, and this library's generation `g` (random,
     * taken at creation), which every entry of the log repeats. */
    r = cmd(raw, "HLEN %s", head);
    cr_assert_eq(r->integer, 3);
    freeReplyObject(r);
    char g[17];
    gen_of(raw, head, g);
    cr_assert_eq(strlen(g), 16, "a view created here has a generation");
    r = cmd(raw, "PTTL %s", head);
    cr_assert_eq(r->integer, -1, "a live view has no TTL");
    freeReplyObject(r);
    wk_live_view_commit_outcome out = commit(p, &e, wk_name_u64(7), 1, "+a", "title+a");
    cr_assert_eq(out.result, WK_LIVE_VIEW_COMMITTED);
    cr_assert_eq(out.version, 2);
    r = cmd(raw, "XRANGE %s - +", log);
    cr_assert_eq(r->elements, 2);
    expect_entry(r->element[0], "1-0", 4, (const char *[]){"base", "title", "g", g});
    expect_entry(r->element[1], "2-0", 4, (const char *[]){"diff", "+a", "g", g});
    freeReplyObject(r);
    r = cmd(raw, "TYPE %s", log);
    cr_assert_str_eq(r->str, "stream");
    freeReplyObject(r);

    /* A byte-string name is verbatim, braces and NUL included. */
    char bhead[WK_KEY_MAX];
    size_t blen;
    wk_name bn = wk_name_bytes("a}\0b", 4);
    cr_assert_eq(wk_key_build(bhead, sizeof(bhead), &blen, &e, &bn, ":h"), WK_OK);
    char expect[WK_KEY_MAX];
    int n = snprintf(expect, sizeof(expect), "@@wakuwaku-entity:LiveView:{%s:a}", ns);
    memcpy(expect + n, "\0b}:h", 5);
    cr_assert_eq(blen, (size_t)n + 5);
    cr_assert(memcmp(bhead, expect, blen) == 0);
    redisFree(raw);
    wk_db_close(db);
}

Test(live_view, commits_are_conditional_on_the_parent, .timeout = 60)
{
    SETUP(NULL, "cond", 10, wk_name_str("x"));
    wk_live_view_commit_outcome out = commit(p, &e, n, 1, "d", "bd");
    cr_assert_eq(out.result, WK_LIVE_VIEW_ABSENT, "no view yet");
    create(p, &e, n, "b");
    bool created = true;
    cr_assert_eq(wk_live_view_create(p, &e, n, "other", 5, &created), WK_OK);
    cr_assert_not(created, "create never replaces");
    out = commit(p, &e, n, 1, "d", "bd");
    cr_assert_eq(out.result, WK_LIVE_VIEW_COMMITTED);
    cr_assert_eq(out.version, 2);
    out = commit(p, &e, n, 1, "e", "be");
    cr_assert_eq(out.result, WK_LIVE_VIEW_CONFLICT, "a second writer from 1 loses");
    cr_assert_eq(out.version, 2, "and learns the head");
    out = commit(p, &e, n, 3, "e", "bde");
    cr_assert_eq(out.result, WK_LIVE_VIEW_CONFLICT, "a parent ahead of the head is a conflict too");
    wk_live_view_body b = WK_LIVE_VIEW_BODY_INIT;
    cr_assert_eq(wk_live_view_get(p, &e, n, &b), WK_OK);
    cr_assert(b.found);
    cr_assert_eq(b.version, 2);
    cr_assert_str_eq((const char *)b.data, "bd");
    uint64_t v = 0;
    bool found = false;
    cr_assert_eq(wk_live_view_version(p, &e, n, &v, &found), WK_OK);
    cr_assert(found);
    cr_assert_eq(v, 2);
    bool removed = false;
    cr_assert_eq(wk_live_view_remove(p, &e, n, &removed), WK_OK);
    cr_assert(removed);
    cr_assert_eq(wk_live_view_remove(p, &e, n, &removed), WK_OK);
    cr_assert_not(removed);
    cr_assert_eq(wk_live_view_get(p, &e, n, &b), WK_OK);
    cr_assert_not(b.found);
    cr_assert_eq(wk_live_view_version(p, &e, n, &v, &found), WK_OK);
    cr_assert_not(found);
    /* Create and commits in one batch: outcomes land when it runs. */
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    wk_processor *bp = wk_batch_processor(batch);
    bool made = false;
    wk_live_view_commit_outcome o2, o3;
    cr_assert_eq(wk_live_view_create(bp, &e, n, "x", 1, &made), WK_OK);
    cr_assert_eq(wk_live_view_commit(bp, &e, n, 1, "y", 1, "xy", 2, &o2), WK_OK);
    cr_assert_eq(wk_live_view_commit(bp, &e, n, 2, "z", 1, "xyz", 3, &o3), WK_OK);
    cr_assert_eq(wk_live_view_get(bp, &e, n, &b), WK_OK);
    cr_assert_eq(wk_batch_exec(batch), WK_OK, "%s", wk_db_errmsg(db));
    wk_batch_close(batch);
    cr_assert(made);
    cr_assert_eq(o2.result, WK_LIVE_VIEW_COMMITTED);
    cr_assert_eq(o3.version, 3);
    cr_assert_str_eq((const char *)b.data, "xyz");
    /* Bad arguments are refused before anything is sent. */
    cr_assert_eq(wk_live_view_commit(p, &e, n, 0, "d", 1, "b", 1, &out), WK_EINVAL);
    cr_assert_eq(wk_live_view_commit(p, &e, n, WK_LIVE_VIEW_VERSION_MAX, "d", 1, "b", 1, &out),
                 WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "parent must be"), "%s", wk_db_errmsg(db));
    wk_live_view_body_free(&b);
    wk_db_close(db);
}

static void expect_log_ids(redisContext *raw, const char *log, const char *const *ids, size_t n)
{
    redisReply *r = cmd(raw, "XRANGE %s - +", log);
    cr_assert_eq(r->elements, n, "%zu entries, want %zu", r->elements, n);
    for (size_t i = 0; i < n; i++)
        expect_str(r->element[i]->element[0], ids[i]);
    freeReplyObject(r);
}

Test(live_view, squashing_follows_the_crates_rule, .timeout = 60)
{
    SETUP(NULL, "squash", 2, wk_name_str("s"));
    redisContext *raw = wk_test_raw(wk_test_url());
    create(p, &e, n, "a");
    commit(p, &e, n, 1, "b", "ab");
    commit(p, &e, n, 2, "c", "abc");
    expect_log_ids(raw, log, (const char *[]){"1-0", "2-0", "3-0"}, 3);
    /* The log holds max_diffs diffs: the next commit squashes. */
    commit(p, &e, n, 3, "d", "abcd");
    redisReply *r = cmd(raw, "XRANGE %s - +", log);
    cr_assert_eq(r->elements, 1);
    char g[17];
    gen_of(raw, head, g);
    /* The crate's fields in the crate's order, then the generation. */
    expect_entry(r->element[0], "4-0", 6, (const char *[]){"base", "abcd", "diff", "d", "g", g});
    freeReplyObject(r);
    commit(p, &e, n, 4, "e", "abcde");
    expect_log_ids(raw, log, (const char *[]){"4-0", "5-0"}, 2);

    /* History: the squash base (its diff ignored) and the diffs after it. */
    wk_live_view_log h = WK_LIVE_VIEW_LOG_INIT;
    cr_assert_eq(wk_live_view_history(p, &e, n, &h), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(h.base.found);
    cr_assert_eq(h.base.version, 4);
    cr_assert_str_eq((const char *)h.base.data, "abcd");
    cr_assert_eq(h.ndiffs, 1);
    cr_assert_str_eq((const char *)h.diffs[0].data, "e");
    wk_live_view_body latest = WK_LIVE_VIEW_BODY_INIT;
    cr_assert_eq(wk_live_view_log_latest(&h, append, NULL, &latest), WK_OK);
    cr_assert_eq(latest.version, 5);
    cr_assert_str_eq((const char *)latest.data, "abcde");

    /* max_diffs 0: every commit squashes. */
    wk_entity zero = WK_LIVE_VIEW_ENTITY(wk_test_ns("squash0"), 0);
    key_of(head, &zero, n, ":h");
    key_of(log, &zero, n, ":l");
    create(p, &zero, n, "a");
    commit(p, &zero, n, 1, "b", "ab");
    r = cmd(raw, "XRANGE %s - +", log);
    cr_assert_eq(r->elements, 1);
    gen_of(raw, head, g);
    expect_entry(r->element[0], "2-0", 6, (const char *[]){"base", "ab", "diff", "b", "g", g});
    freeReplyObject(r);
    wk_live_view_log_free(&h);
    cr_assert_eq(wk_live_view_history(p, &zero, wk_name_str("none"), &h), WK_OK);
    cr_assert_not(h.base.found, "an absent view has no history");
    wk_live_view_log_free(&h);
    wk_live_view_body_free(&latest);
    redisFree(raw);
    wk_db_close(db);
}

Test(live_view, entity_rules, .timeout = 60)
{
    char msg[WK_ENTITY_MSG_MAX];
    wk_entity half = WK_LIVE_VIEW_ENTITY("x", 1.5);
    cr_assert_eq(wk_entity_check_msg(&half, msg, sizeof(msg)), WK_EINVAL);
    cr_assert_str_eq(msg, "max_diffs must be a whole number 0..2^53 (got 1.5)");
    wk_entity neg = WK_LIVE_VIEW_ENTITY("x", -1);
    cr_assert_eq(wk_entity_check(&neg), WK_EINVAL);
    wk_entity zero = WK_LIVE_VIEW_ENTITY("x", 0);
    cr_assert_eq(wk_entity_check(&zero), WK_OK);
    wk_entity colon = WK_LIVE_VIEW_ENTITY("a:b", 1);
    cr_assert_eq(wk_entity_check(&colon), WK_EINVAL);
}

/* ------------------------------------------------------------------------
 * Corrupted heads and histories
 * ---------------------------------------------------------------------- */

Test(live_view, corrupted_heads_and_histories_are_ecorrupt, .timeout = 60)
{
    SETUP(NULL, "bad", 5, wk_name_str("h"));
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_live_view_body b = WK_LIVE_VIEW_BODY_INIT;
    uint64_t v;
    bool found;

    freeReplyObject(cmd(raw, "HSET %s v 3", head));
    cr_assert_eq(wk_live_view_get(p, &e, n, &b), WK_ECORRUPT);
    cr_assert(strstr(wk_db_errmsg(db), "lacks its version or body"), "%s", wk_db_errmsg(db));
    freeReplyObject(cmd(raw, "HSET %s v x3 b body", head));
    cr_assert_eq(wk_live_view_get(p, &e, n, &b), WK_ECORRUPT);
    cr_assert_eq(wk_live_view_version(p, &e, n, &v, &found), WK_ECORRUPT);
    cr_assert_not(b.found);
    freeReplyObject(cmd(raw, "DEL %s", head));
    freeReplyObject(cmd(raw, "SET %s s", head));
    cr_assert_eq(wk_live_view_get(p, &e, n, &b), WK_ECORRUPT, "another Redis type");

    wk_live_view_log h = WK_LIVE_VIEW_LOG_INIT;
    freeReplyObject(cmd(raw, "XADD %s 1-0 diff x", log));
    cr_assert_eq(wk_live_view_history(p, &e, n, &h), WK_ECORRUPT);
    cr_assert(strstr(wk_db_errmsg(db), "doesn't start with a base"), "%s", wk_db_errmsg(db));
    freeReplyObject(cmd(raw, "DEL %s", log));
    freeReplyObject(cmd(raw, "XADD %s 1-0 base b", log));
    freeReplyObject(cmd(raw, "XADD %s 3-0 diff x", log));
    cr_assert_eq(wk_live_view_history(p, &e, n, &h), WK_ECORRUPT, "a gap in the versions");
    cr_assert_not(h.base.found);
    freeReplyObject(cmd(raw, "DEL %s", log));
    freeReplyObject(cmd(raw, "XADD %s 1-1 base b", log));
    cr_assert_eq(wk_live_view_history(p, &e, n, &h), WK_ECORRUPT, "a seq other than 0");
    redisFree(raw);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Subscribers
 * ---------------------------------------------------------------------- */

#define COMMITS 1000

typedef struct follower {
    const wk_entity *e;
    const char *name;
    bool pause_after_first; /* wait for the writer's end before going on */
    atomic_int *ready;
    atomic_bool *writer_done;
    wk_live_view_body view;
    int diffs, snapshots, errors;
    char why[256];
} follower;

static void *follow(void *arg)
{
    follower *f = arg;
    wk_db_options opts = WK_DB_OPTIONS_INIT;
    opts.url = wk_test_url();
    opts.capability = wk_cap_read_only();
    wk_db *db = NULL;
    if (wk_db_open(&db, &opts, f->why, sizeof(f->why)) != WK_OK) {
        atomic_fetch_add(f->ready, 1);
        f->errors++;
        return NULL;
    }
    wk_live_view_sub_options o = WK_LIVE_VIEW_SUB_OPTIONS_INIT;
    o.poll_ms = 200;
    wk_live_view_sub *sub = NULL;
    int rc =
        wk_live_view_subscribe(wk_db_processor(db), f->e, wk_name_str(f->name), &o, &f->view, &sub);
    atomic_fetch_add(f->ready, 1);
    if (rc || !sub) {
        snprintf(f->why, sizeof(f->why), "subscribe: %s %s", wk_err_name(rc), wk_db_errmsg(db));
        f->errors++;
        wk_db_close(db);
        return NULL;
    }
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    while (f->view.version < COMMITS + 1) {
        rc = recv_ev(sub, &ev);
        if (rc == WK_OK && (ev.type == WK_LIVE_VIEW_DIFF || ev.type == WK_LIVE_VIEW_SNAPSHOT)) {
            if (ev.type == WK_LIVE_VIEW_DIFF)
                f->diffs++;
            else
                f->snapshots++;
            if (ev.type == WK_LIVE_VIEW_DIFF && ev.version != f->view.version + 1)
                rc = WK_EINVAL;
            else if (ev.type == WK_LIVE_VIEW_SNAPSHOT && ev.version <= f->view.version)
                rc = WK_EINVAL;
            else
                rc = wk_live_view_update(&f->view, &ev, append, NULL);
        } else if (rc == WK_OK) {
            rc = WK_EPROTO; /* gone or stopped: neither may happen here */
        }
        if (rc) {
            snprintf(f->why, sizeof(f->why), "at %llu: %s %s", (unsigned long long)f->view.version,
                     wk_err_name(rc), wk_live_view_sub_errmsg(sub));
            f->errors++;
            break;
        }
        if (f->pause_after_first && f->diffs + f->snapshots == 1) {
            while (!atomic_load(f->writer_done))
                wk_test_sleep_ms(5);
        }
    }
    if (!f->errors && wk_live_view_sub_version(sub) != f->view.version) {
        snprintf(f->why, sizeof(f->why), "sub version %llu, view %llu",
                 (unsigned long long)wk_live_view_sub_version(sub),
                 (unsigned long long)f->view.version);
        f->errors++;
    }
    wk_live_view_sub_close(sub);
    wk_db_close(db);
    return NULL;
}

Test(live_view, three_subscribers_follow_1000_commits_and_squashes_to_the_final_body, .timeout = 60)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_LIVE_VIEW_ENTITY(wk_test_ns("follow"), 7);
    const char *name = "doc";
    create(p, &e, wk_name_str(name), "^");
    atomic_int ready = 0;
    atomic_bool done = false;
    follower f[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        f[i] = (follower){.e = &e,
                          .name = name,
                          .ready = &ready,
                          .writer_done = &done,
                          .view = WK_LIVE_VIEW_BODY_INIT,
                          .pause_after_first = i == 2};
        cr_assert_eq(pthread_create(&t[i], NULL, follow, &f[i]), 0);
    }
    while (atomic_load(&ready) < 3)
        wk_test_sleep_ms(1);
    /* The writer: each commit appends "<i>,"; its body is built locally. */
    size_t cap = 16 * COMMITS, len = 1;
    char *body = malloc(cap);
    body[0] = '^';
    for (uint64_t v = 1; v <= COMMITS; v++) {
        char diff[24];
        int dl = snprintf(diff, sizeof(diff), "%llu,", (unsigned long long)v);
        memcpy(body + len, diff, (size_t)dl);
        len += (size_t)dl;
        wk_live_view_commit_outcome out;
        int rc =
            wk_live_view_commit(p, &e, wk_name_str(name), v, diff, (size_t)dl, body, len, &out);
        cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
        cr_assert_eq(out.result, WK_LIVE_VIEW_COMMITTED);
        cr_assert_eq(out.version, v + 1);
    }
    atomic_store(&done, true);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(f[i].errors, 0, "follower %d: %s", i, f[i].why);
        cr_assert_eq(f[i].view.version, COMMITS + 1);
        cr_assert_eq(f[i].view.len, len, "follower %d", i);
        cr_assert(memcmp(f[i].view.data, body, len) == 0, "follower %d ends on another body", i);
        cr_log_info("follower %d: %d diffs, %d snapshots", i, f[i].diffs, f[i].snapshots);
        wk_live_view_body_free(&f[i].view);
    }
    /* The one that fell behind past a squash caught up through a snapshot;
     * the log holds at most max_diffs + 1 entries, far fewer than it
     * missed. */
    cr_assert_geq(f[2].snapshots, 1);
    cr_assert_lt(f[2].diffs, COMMITS);
    wk_live_view_body latest = WK_LIVE_VIEW_BODY_INIT;
    cr_assert_eq(wk_live_view_get(p, &e, wk_name_str(name), &latest), WK_OK);
    cr_assert_eq(latest.len, len);
    cr_assert(memcmp(latest.data, body, len) == 0);
    wk_live_view_body_free(&latest);
    free(body);
    wk_db_close(db);
}

Test(live_view, resume_from_zero_starts_with_a_snapshot_of_the_base_and_catches_up, .timeout = 60)
{
    SETUP(NULL, "resume", 50, wk_name_str("r"));
    create(p, &e, n, "a");
    commit(p, &e, n, 1, "b", "ab");
    commit(p, &e, n, 2, "c", "abc");
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_resume(p, &e, n, 0, NULL, &sub), WK_OK, "%s", wk_db_errmsg(db));
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_SNAPSHOT);
    cr_assert_eq(ev.version, 1);
    cr_assert_str_eq((const char *)ev.data, "a");
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF);
    cr_assert_eq(ev.version, 2);
    cr_assert_str_eq((const char *)ev.data, "b");
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.version, 3);
    cr_assert_eq(wk_live_view_sub_version(sub), 3);
    wk_live_view_sub_close(sub);
    wk_db_close(db);
}

Test(live_view, removed_or_recreated_view_is_gone_not_corrupt, .timeout = 60)
{
    SETUP(NULL, "gone", 5, wk_name_str("g"));
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;

    /* Absent at subscribe: no subscription, not an error. */
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
    cr_assert_not(first.found);
    cr_assert_null(sub);

    /* Removed while followed. */
    create(p, &e, n, "a");
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
    cr_assert(first.found);
    commit(p, &e, n, 1, "b", "ab");
    bool removed;
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF);
    cr_assert_eq(wk_live_view_remove(p, &e, n, &removed), WK_OK);
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE);
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "gone is final");
    wk_live_view_sub_close(sub);

    /* Re-created below the subscriber's version. */
    create(p, &e, n, "a");
    commit(p, &e, n, 1, "b", "ab");
    commit(p, &e, n, 2, "c", "abc");
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
    cr_assert_eq(first.version, 3);
    cr_assert_eq(wk_live_view_remove(p, &e, n, &removed), WK_OK);
    create(p, &e, n, "z");
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE);
    wk_live_view_sub_close(sub);

    /* Resumed on a view that does not exist. */
    cr_assert_eq(wk_live_view_resume(p, &e, wk_name_str("never"), 4, &o, &sub), WK_OK);
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE);
    wk_live_view_sub_close(sub);
    wk_live_view_body_free(&first);
    wk_db_close(db);
}

Test(live_view, corrupted_entries_are_ecorrupt_and_passed_over, .timeout = 60)
{
    SETUP(NULL, "corrupt", 5, wk_name_str("c"));
    create(p, &e, n, "a");
    commit(p, &e, n, 1, "b", "ab");
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
    cr_assert_eq(first.version, 2);
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(cmd(raw, "XADD %s 3-0 junk x", log)); /* neither diff nor base */
    freeReplyObject(cmd(raw, "XADD %s 4-0 diff y", log)); /* a diff after a gap */
    freeReplyObject(cmd(raw, "XADD %s 5-1 diff z", log)); /* not <version>-0 */
    freeReplyObject(cmd(raw, "XADD %s 6-0 base full diff w", log));
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    cr_assert_eq(recv_ev(sub, &ev), WK_ECORRUPT);
    cr_assert(strstr(wk_live_view_sub_errmsg(sub),
                     "3-0: diff doesn't follow the previous version (at version 2)"),
              "%s", wk_live_view_sub_errmsg(sub));
    cr_assert_eq(wk_live_view_sub_version(sub), 2, "an error leaves the version");
    cr_assert_eq(recv_ev(sub, &ev), WK_ECORRUPT, "4-0 does not follow 2");
    cr_assert_eq(recv_ev(sub, &ev), WK_ECORRUPT);
    cr_assert(strstr(wk_live_view_sub_errmsg(sub), "ID is not <version>-0"), "%s",
              wk_live_view_sub_errmsg(sub));
    cr_assert_eq(recv_ev(sub, &ev), WK_OK, "a base gets the subscriber going again");
    cr_assert_eq(ev.type, WK_LIVE_VIEW_SNAPSHOT);
    cr_assert_eq(ev.version, 6);
    cr_assert_str_eq((const char *)ev.data, "full");
    /* A log of another type: corrupt too, never gone. */
    freeReplyObject(cmd(raw, "DEL %s", log));
    freeReplyObject(cmd(raw, "SET %s x", log));
    cr_assert_eq(recv_ev(sub, &ev), WK_ECORRUPT, "%s", wk_live_view_sub_errmsg(sub));
    wk_live_view_body_free(&first);
    wk_live_view_sub_close(sub);
    redisFree(raw);
    wk_db_close(db);
}

static void *stop_later(void *arg)
{
    wk_test_sleep_ms(200);
    wk_live_view_sub_stop(arg);
    return NULL;
}

/* The bound is the suite's timeout: without the stop, recv waits for ever
 * (the view exists and nobody commits; each poll is 120 s). */
Test(live_view, another_thread_stops_a_waiting_subscriber, .timeout = 60)
{
    SETUP(NULL, "stop", 5, wk_name_str("s"));
    create(p, &e, n, "a");
    wk_live_view_sub_options o = {.poll_ms = 120000};
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stop_later, sub), 0);
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    cr_assert_eq(recv_ev(sub, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
    pthread_join(t, NULL);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_STOPPED);
    commit(p, &e, n, 1, "b", "ab");
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_STOPPED, "stopped is final, even with news");
    /* The handle's own connection was never involved. */
    cr_assert_eq(wk_db_ping(db), WK_OK);
    wk_live_view_sub_close(sub);
    wk_live_view_sub_stop(NULL);
    wk_live_view_sub_close(NULL);
    wk_live_view_body_free(&first);
    wk_db_close(db);
}

typedef struct receiver {
    wk_live_view_sub *sub;
    int rc;
    wk_live_view_event ev;
} receiver;

static void *recv_one(void *arg)
{
    receiver *r = arg;
    r->rc = wk_live_view_recv(r->sub, &r->ev);
    return NULL;
}

/* The id of the client blocked in XREAD in database 2 (this test's
 * subscriber: the suite's others use database 0), 0 while there is none. */
static long long xread_client(redisContext *raw)
{
    redisReply *r = cmd(raw, "CLIENT LIST TYPE normal");
    long long id = 0;
    for (char *line = r->str; line && *line && !id;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        if (strstr(line, "cmd=xread") && strstr(line, "flags=b") && strstr(line, " db=2 "))
            id = strtoll(strstr(line, "id=") + 3, NULL, 10);
        line = end ? end + 1 : NULL;
    }
    freeReplyObject(r);
    return id;
}

Test(live_view, a_subscriber_in_another_database_survives_a_killed_connection, .timeout = 60)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    o.database = 2;
    wk_db *db;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_LIVE_VIEW_ENTITY(wk_test_ns("killed"), 50);
    wk_name n = wk_name_str("k");
    create(p, &e, n, "a");
    wk_live_view_sub_options so = {.poll_ms = 30000};
    receiver r = {.ev = WK_LIVE_VIEW_EVENT_INIT};
    wk_live_view_body view = WK_LIVE_VIEW_BODY_INIT;
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &so, &view, &r.sub), WK_OK);
    /* Waiting in database 2: a commit there wakes it. */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, recv_one, &r), 0);
    commit(p, &e, n, 1, "b", "ab");
    pthread_join(t, NULL);
    cr_assert_eq(r.rc, WK_OK, "%s", wk_live_view_sub_errmsg(r.sub));
    cr_assert_eq(r.ev.type, WK_LIVE_VIEW_DIFF);
    cr_assert_eq(wk_live_view_update(&view, &r.ev, append, NULL), WK_OK);
    /* Kill its connection while it waits: recv fails with a connection
     * error, and the next recv reconnects and misses nothing. */
    redisContext *raw = wk_test_raw(wk_test_url());
    cr_assert_eq(pthread_create(&t, NULL, recv_one, &r), 0);
    long long id;
    while (!(id = xread_client(raw)))
        wk_test_sleep_ms(5);
    freeReplyObject(cmd(raw, "CLIENT KILL ID %lld", id));
    pthread_join(t, NULL);
    cr_assert(wk_is_connection_error(r.rc), "%s: %s", wk_err_name(r.rc),
              wk_live_view_sub_errmsg(r.sub));
    commit(p, &e, n, 2, "c", "abc");
    commit(p, &e, n, 3, "d", "abcd");
    while (view.version < 4) {
        cr_assert_eq(recv_ev(r.sub, &r.ev), WK_OK, "%s", wk_live_view_sub_errmsg(r.sub));
        cr_assert_eq(r.ev.type, WK_LIVE_VIEW_DIFF);
        cr_assert_eq(wk_live_view_update(&view, &r.ev, append, NULL), WK_OK);
    }
    cr_assert_str_eq((const char *)view.data, "abcd");
    wk_live_view_body_free(&view);
    wk_live_view_sub_close(r.sub);
    redisFree(raw);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Capabilities and batches
 * ---------------------------------------------------------------------- */

Test(live_view, read_only_follows_but_cannot_commit, .timeout = 60)
{
    wk_db *rw = wk_test_open(NULL);
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_entity e = WK_LIVE_VIEW_ENTITY(wk_test_ns("cap"), 5);
    wk_name n = wk_name_str("c");
    create(wk_db_processor(rw), &e, n, "a");
    /* (That nothing is sent when refused is checked for every query by
     * capability::read_only_refuses_every_write_and_sends_nothing, on a
     * server of its own; this one is shared by parallel tests.) */
    wk_live_view_commit_outcome out;
    cr_assert_eq(wk_live_view_commit(wk_db_processor(ro), &e, n, 1, "b", 1, "ab", 2, &out),
                 WK_EDENIED);
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_subscribe(wk_db_processor(ro), &e, n, NULL, &first, &sub), WK_OK);
    commit(wk_db_processor(rw), &e, n, 1, "b", "ab");
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF);
    wk_live_view_sub_close(sub);

    /* A grant on another namespace does not reach this one. */
    wk_cap_entry rows[] = {{WK_KIND_LIVE_VIEW, "elsewhere", WK_GRANT_READ}};
    wk_cap *cap;
    cr_assert_eq(wk_cap_new(&cap, "other", WK_GRANT_NONE, rows, 1), WK_OK);
    wk_db *other = wk_test_open(cap);
    wk_cap_free(cap);
    cr_assert_eq(wk_live_view_resume(wk_db_processor(other), &e, n, 1, NULL, &sub), WK_EDENIED);
    cr_assert_null(sub);
    cr_assert(strstr(wk_db_errmsg(other), "may not READ LiveView:"), "%s", wk_db_errmsg(other));

    /* Subscriptions need outcomes at once: a batch is refused. */
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, rw), WK_OK);
    cr_assert_eq(wk_live_view_subscribe(wk_batch_processor(batch), &e, n, NULL, &first, &sub),
                 WK_EINVAL);
    wk_batch_close(batch);
    wk_live_view_body_free(&first);
    wk_db_close(other);
    wk_db_close(ro);
    wk_db_close(rw);
}

/* ------------------------------------------------------------------------
 * Typed bodies
 * ---------------------------------------------------------------------- */

typedef struct counter {
    long n;
} counter;

static int counter_encode(const wk_codec *c, const void *v, uint8_t **bytes, size_t *len)
{
    (void)c;
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%ld", ((const counter *)v)->n);
    *bytes = (uint8_t *)strdup(buf);
    *len = (size_t)n;
    return *bytes ? WK_OK : WK_ENOMEM;
}

static int counter_decode(const wk_codec *c, const uint8_t *bytes, size_t len, void *v)
{
    (void)c;
    char buf[32];
    if (len == 0 || len >= sizeof(buf))
        return wk_codec_fail(WK_ECORRUPT, "not a counter");
    memcpy(buf, bytes, len);
    buf[len] = '\0';
    char *end;
    ((counter *)v)->n = strtol(buf, &end, 10);
    return *end ? wk_codec_fail(WK_ECORRUPT, "not a number") : WK_OK;
}

static const wk_codec counter_codec = {"counter", counter_encode, counter_decode, NULL};

Test(live_view, typed_bodies_go_through_the_codec, .timeout = 60)
{
    SETUP(NULL, "typed", 5, wk_name_str("t"));
    counter c = {41}, back = {0};
    bool created, found;
    uint64_t v;
    cr_assert_eq(wk_live_view_create_typed(p, &e, n, &counter_codec, &c, &created), WK_OK);
    cr_assert(created);
    c.n = 42;
    wk_live_view_commit_outcome out;
    cr_assert_eq(wk_live_view_commit_typed(p, &e, n, 1, "+1", 2, &counter_codec, &c, &out), WK_OK);
    cr_assert_eq(out.result, WK_LIVE_VIEW_COMMITTED);
    cr_assert_eq(wk_live_view_get_typed(p, &e, n, &counter_codec, &back, &v, &found), WK_OK);
    cr_assert(found);
    cr_assert_eq(v, 2);
    cr_assert_eq(back.n, 42);
    cr_assert_eq(wk_live_view_commit(p, &e, n, 2, "x", 1, "oops", 4, &out), WK_OK);
    cr_assert_eq(wk_live_view_get_typed(p, &e, n, &counter_codec, &back, &v, &found), WK_ECORRUPT);
    cr_assert(strstr(wk_db_errmsg(db), "does not decode as counter: not a number"), "%s",
              wk_db_errmsg(db));
    cr_assert_not(found);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Compatibility: the Rust side played with raw commands from the spec
 * ---------------------------------------------------------------------- */

/* The crate's create, step by step (spec: LiveView, create). */
static void rust_create(redisContext *raw, const char *head, const char *log, const char *body)
{
    freeReplyObject(cmd(raw, "MULTI"));
    freeReplyObject(cmd(raw, "HSET %s v 1 b %s", head, body));
    freeReplyObject(cmd(raw, "DEL %s", log));
    freeReplyObject(cmd(raw, "XADD %s 1-0 base %s", log, body));
    freeReplyObject(cmd(raw, "EXEC"));
}

/* The crate's commit from `parent` (spec: LiveView, commit), the steps
 * run in a MULTI after the checks (nobody else writes here). */
static void rust_commit(redisContext *raw, const char *head, const char *log, uint64_t parent,
                        const char *diff, const char *body, uint64_t max_diffs)
{
    redisReply *r = cmd(raw, "HGET %s v", head);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    cr_assert_eq(strtoull(r->str, NULL, 10), parent);
    freeReplyObject(r);
    r = cmd(raw, "XLEN %s", log);
    bool squash = (uint64_t)r->integer > max_diffs;
    freeReplyObject(r);
    char id[32];
    snprintf(id, sizeof(id), "%llu-0", (unsigned long long)(parent + 1));
    freeReplyObject(cmd(raw, "MULTI"));
    freeReplyObject(cmd(raw, "HSET %s v %llu b %s", head, (unsigned long long)(parent + 1), body));
    if (squash) {
        freeReplyObject(cmd(raw, "XTRIM %s MAXLEN 0", log));
        freeReplyObject(cmd(raw, "XADD %s %s base %s diff %s", log, id, body, diff));
    } else {
        freeReplyObject(cmd(raw, "XADD %s %s diff %s", log, id, diff));
    }
    freeReplyObject(cmd(raw, "EXEC"));
}

Test(live_view, a_rust_writer_and_a_c_subscriber_share_one_view, .timeout = 60)
{
    SETUP(wk_cap_read_only(), "rust2c", 3, wk_name_u64(99));
    redisContext *raw = wk_test_raw(wk_test_url());
    rust_create(raw, head, log, "r");
    wk_live_view_body view = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, NULL, &view, &sub), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert_eq(view.version, 1);
    char body[256] = "r";
    for (uint64_t v = 1; v <= 10; v++) {
        char diff[8];
        snprintf(diff, sizeof(diff), "%c", (char)('a' + v));
        strcat(body, diff);
        rust_commit(raw, head, log, v, diff, body, 3);
    }
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    while (view.version < 11) {
        cr_assert_eq(recv_ev(sub, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
        cr_assert_eq(wk_live_view_update(&view, &ev, append, NULL), WK_OK);
    }
    cr_assert_str_eq((const char *)view.data, body);
    /* The C reads agree with what the Rust side wrote. */
    wk_live_view_body got = WK_LIVE_VIEW_BODY_INIT;
    cr_assert_eq(wk_live_view_get(p, &e, n, &got), WK_OK);
    cr_assert_eq(got.version, 11);
    cr_assert_str_eq((const char *)got.data, body);
    wk_live_view_log h = WK_LIVE_VIEW_LOG_INIT;
    cr_assert_eq(wk_live_view_history(p, &e, n, &h), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_live_view_log_latest(&h, append, NULL, &got), WK_OK);
    cr_assert_str_eq((const char *)got.data, body);
    cr_assert_eq(got.version, 11);
    /* A C commit continues the Rust history (a read-write handle). */
    wk_db *rw = wk_test_open(NULL);
    strcat(body, "!");
    commit(wk_db_processor(rw), &e, n, 11, "!", body);
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF);
    cr_assert_eq(ev.version, 12);
    wk_db_close(rw);
    wk_live_view_log_free(&h);
    wk_live_view_body_free(&got);
    wk_live_view_body_free(&view);
    wk_live_view_sub_close(sub);
    redisFree(raw);
    wk_db_close(db);
}

/* The crate's subscription (spec: LiveView, a subscription's recv), with
 * the body kept by the test's append rule. Returns the version reached. */
static uint64_t rust_follow(redisContext *raw, const char *log, uint64_t c, char *body,
                            uint64_t until, int *snapshots)
{
    while (c < until) {
        redisReply *r =
            cmd(raw, "XREAD COUNT 128 BLOCK 0 STREAMS %s %llu-0", log, (unsigned long long)c);
        cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "XREAD type %d", r->type);
        const redisReply *entries = r->element[0]->element[1];
        for (size_t i = 0; i < entries->elements; i++) {
            const redisReply *en = entries->element[i];
            uint64_t w = strtoull(en->element[0]->str, NULL, 10);
            cr_assert(strstr(en->element[0]->str, "-0"), "IDs are <version>-0");
            const redisReply *f = en->element[1];
            const char *base = NULL, *diff = NULL;
            for (size_t j = 0; j + 1 < f->elements; j += 2) {
                if (!base && strcmp(f->element[j]->str, "base") == 0)
                    base = f->element[j + 1]->str;
                if (!diff && strcmp(f->element[j]->str, "diff") == 0)
                    diff = f->element[j + 1]->str;
            }
            if (w == c + 1 && diff) {
                strcat(body, diff);
            } else {
                cr_assert_not_null(base, "entry %llu is neither the next diff nor a base",
                                   (unsigned long long)w);
                strcpy(body, base);
                (*snapshots)++;
            }
            c = w;
        }
        freeReplyObject(r);
    }
    return c;
}

Test(live_view, a_c_writer_and_a_rust_subscriber_share_one_view, .timeout = 60)
{
    SETUP(NULL, "c2rust", 2, wk_name_str("doc 1"));
    create(p, &e, n, "c");
    redisContext *raw = wk_test_raw(wk_test_url());
    /* The crate's subscribe: HMGET, then follow from <v>-0. */
    redisReply *r = cmd(raw, "HMGET %s v b", head);
    expect_str(r->element[0], "1");
    char rbody[256];
    snprintf(rbody, sizeof(rbody), "%s", r->element[1]->str);
    freeReplyObject(r);
    char body[256] = "c";
    int snapshots = 0;
    uint64_t c = 1;
    /* Up to date through version 5; version 4 squashed (max_diffs 2), and
     * the squash base's diff kept it on diffs. */
    for (uint64_t v = 1; v <= 4; v++) {
        char diff[2] = {(char)('0' + v), '\0'};
        strcat(body, diff);
        commit(p, &e, n, v, diff, body);
        c = rust_follow(raw, log, c, rbody, v + 1, &snapshots);
        cr_assert_str_eq(rbody, body);
    }
    cr_assert_eq(c, 5);
    r = cmd(raw, "XLEN %s", log);
    cr_assert_eq(r->integer, 2, "version 4 squashed: [4-0 base+diff, 5-0 diff]");
    freeReplyObject(r);
    cr_assert_eq(snapshots, 0, "one version behind a squash still reads its diff");
    /* Fall behind past a squash: the crate's rule gives one snapshot. */
    for (uint64_t v = 5; v <= 9; v++) {
        char diff[2] = {(char)('0' + v), '\0'};
        strcat(body, diff);
        commit(p, &e, n, v, diff, body);
    }
    c = rust_follow(raw, log, c, rbody, 10, &snapshots);
    cr_assert_str_eq(rbody, body);
    cr_assert_geq(snapshots, 1);
    /* The crate's commit script answers the C script's shapes: a raw
     * conflict check reads the same version. */
    r = cmd(raw, "HGET %s v", head);
    expect_str(r, "10");
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Re-creation: a subscription follows one view, never a later one of the
 * same name (the generation `g`; issue 21, finding 6)
 * ---------------------------------------------------------------------- */

/* Re-created and committed past the subscriber's version before it reads:
 * the old cursor must not hand out the new view's diffs. Before the
 * generation it failed with "got event 1 at version 3" (a Diff of the new
 * view for the old body). */
Test(live_view, recreated_view_past_the_subscriber_is_gone_never_mixed, .timeout = 60)
{
    SETUP(NULL, "remix", 5, wk_name_str("g"));
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    create(p, &e, n, "a");
    commit(p, &e, n, 1, "b", "ab");
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
    cr_assert_eq(first.version, 2);
    bool removed;
    cr_assert_eq(wk_live_view_remove(p, &e, n, &removed), WK_OK);
    create(p, &e, n, "x");
    commit(p, &e, n, 1, "y", "xy");
    commit(p, &e, n, 2, "z", "xyz");
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "got event %d at version %llu", ev.type,
                 (unsigned long long)ev.version);
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "gone is final");
    cr_assert_eq(wk_live_view_sub_version(sub), 2, "nothing of the new view was taken");
    wk_live_view_sub_close(sub);
    wk_live_view_body_free(&first);
    wk_db_close(db);
}

typedef struct timed_recv {
    wk_live_view_sub *sub;
    int rc;
    wk_live_view_event ev;
    atomic_bool done;
} timed_recv;

static void *recv_flagged(void *arg)
{
    timed_recv *t = arg;
    t->rc = wk_live_view_recv(t->sub, &t->ev);
    atomic_store(&t->done, true);
    return NULL;
}

/* One recv, stopped if it has not returned within `ms` (a generous bound:
 * the answer expected comes after one poll of a few ms). */
static int recv_within(wk_live_view_sub *sub, int ms, wk_live_view_event *ev)
{
    timed_recv t = {.sub = sub, .ev = WK_LIVE_VIEW_EVENT_INIT};
    atomic_init(&t.done, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, recv_flagged, &t), 0);
    for (int64_t until = wk_test_now_ms() + ms; !atomic_load(&t.done) && wk_test_now_ms() < until;)
        wk_test_sleep_ms(5);
    if (!atomic_load(&t.done))
        wk_live_view_sub_stop(sub);
    pthread_join(th, NULL);
    *ev = t.ev;
    return t.rc;
}

/* Re-created and committed up to the subscriber's version, not past it:
 * nothing new for the XREAD, so the quiet poll must tell. Before the
 * generation its version check passed (3 >= 3) and recv waited on the
 * new view: stopped after 10 s instead of GONE, then the new view's
 * diff. */
Test(live_view, recreated_view_up_to_the_subscribers_version_is_gone, .timeout = 60)
{
    SETUP(NULL, "remixat", 5, wk_name_str("g"));
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    create(p, &e, n, "a");
    commit(p, &e, n, 1, "b", "ab");
    commit(p, &e, n, 2, "c", "abc");
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
    cr_assert_eq(first.version, 3);
    bool removed;
    cr_assert_eq(wk_live_view_remove(p, &e, n, &removed), WK_OK);
    create(p, &e, n, "x");
    commit(p, &e, n, 1, "y", "xy");
    commit(p, &e, n, 2, "z", "xyz");
    cr_assert_eq(recv_within(sub, 10000, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "got event %d (4: stopped, still waiting)", ev.type);
    commit(p, &e, n, 3, "w", "xyzw");
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "got event %d at version %llu", ev.type,
                 (unsigned long long)ev.version);
    wk_live_view_sub_close(sub);
    wk_live_view_body_free(&first);
    wk_db_close(db);
}

/* Whether the client named `name` is blocked in XREAD. */
static bool blocked_in_xread(redisContext *raw, const char *name)
{
    char want[128];
    snprintf(want, sizeof(want), " name=%s ", name);
    redisReply *r = cmd(raw, "CLIENT LIST TYPE normal");
    bool found = false;
    for (char *line = r->str; line && *line && !found;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        found = strstr(line, want) && strstr(line, "cmd=xread") && strstr(line, "flags=b");
        line = end ? end + 1 : NULL;
    }
    freeReplyObject(r);
    return found;
}

/* The usual case: the subscriber waits in XREAD when the view is removed,
 * re-created and committed past it; the new view's commit wakes it. */
Test(live_view, a_waiting_subscriber_woken_by_a_recreated_view_is_gone, .timeout = 60)
{
    const char *client = wk_test_ns("lvwoken");
    wk_db *db = wk_test_open_as(NULL, client, -1);
    cr_assert_not_null(db);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_LIVE_VIEW_ENTITY(wk_test_ns("woken"), 5);
    wk_name n = wk_name_str("w");
    create(p, &e, n, "a");
    commit(p, &e, n, 1, "b", "ab");
    wk_live_view_sub_options o = {.poll_ms = 30000};
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    receiver r = {.ev = WK_LIVE_VIEW_EVENT_INIT};
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &r.sub), WK_OK);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, recv_one, &r), 0);
    redisContext *raw = wk_test_raw(wk_test_url());
    while (!blocked_in_xread(raw, client))
        wk_test_sleep_ms(5);
    bool removed;
    cr_assert_eq(wk_live_view_remove(p, &e, n, &removed), WK_OK);
    create(p, &e, n, "x");
    commit(p, &e, n, 1, "y", "xy");
    commit(p, &e, n, 2, "z", "xyz");
    pthread_join(t, NULL);
    cr_assert_eq(r.rc, WK_OK, "%s", wk_live_view_sub_errmsg(r.sub));
    cr_assert_eq(r.ev.type, WK_LIVE_VIEW_GONE, "got event %d at version %llu", r.ev.type,
                 (unsigned long long)r.ev.version);
    wk_live_view_sub_close(r.sub);
    wk_live_view_body_free(&first);
    redisFree(raw);
    wk_db_close(db);
}

/* Removal alone is GONE as before, for a view of this library (with a
 * generation) and for one the crate created (none), removed by either. */
Test(live_view, removed_view_without_recreation_is_gone, .timeout = 60)
{
    SETUP(NULL, "gone2", 5, wk_name_str("ours"));
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    for (int crate = 0; crate < 2; crate++) {
        wk_live_view_sub *sub = NULL;
        if (crate)
            rust_create(raw, head, log, "a");
        else
            create(p, &e, n, "a");
        cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
        commit(p, &e, n, 1, "b", "ab");
        cr_assert_eq(recv_ev(sub, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
        cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF);
        if (crate) /* the crate's remove */
            freeReplyObject(cmd(raw, "UNLINK %s %s", head, log));
        else
            cr_assert_eq(wk_live_view_remove(p, &e, n, NULL), WK_OK);
        cr_assert_eq(recv_within(sub, 10000, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
        cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "crate %d: event %d", crate, ev.type);
        cr_assert_eq(recv_ev(sub, &ev), WK_OK);
        cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "gone is final");
        cr_assert_eq(wk_live_view_sub_version(sub), 2);
        wk_live_view_sub_close(sub);
    }
    wk_live_view_body_free(&first);
    redisFree(raw);
    wk_db_close(db);
}

/* A view the crate created has no generation and gets none: this library's
 * commits keep the crate's layout exactly, a subscriber follows crate and
 * C commits alike, and a re-creation here (whose entries carry one) is
 * GONE. */
Test(live_view, crate_view_without_generation_is_followed_and_its_recreation_here_is_gone,
     .timeout = 60)
{
    SETUP(NULL, "crategen", 2, wk_name_u64(5));
    redisContext *raw = wk_test_raw(wk_test_url());
    rust_create(raw, head, log, "r");
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_body view = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &view, &sub), WK_OK, "%s", wk_db_errmsg(db));
    char body[64] = "r";
    for (uint64_t v = 1; v <= 6; v++) {
        char diff[2] = {(char)('a' + v), '\0'};
        strcat(body, diff);
        if (v % 2)
            rust_commit(raw, head, log, v, diff, body, 2);
        else
            commit(p, &e, n, v, diff, body);
    }
    char g[17];
    gen_of(raw, head, g);
    cr_assert_str_eq(g, "", "a crate view gets no generation");
    redisReply *r = cmd(raw, "XRANGE %s - +", log);
    for (size_t i = 0; i < r->elements; i++)
        for (size_t j = 0; j < r->element[i]->element[1]->elements; j += 2)
            cr_assert_str_neq(r->element[i]->element[1]->element[j]->str, "g",
                              "entry %s has a generation", r->element[i]->element[0]->str);
    freeReplyObject(r);
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    while (view.version < 7) {
        cr_assert_eq(recv_ev(sub, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
        cr_assert(ev.type == WK_LIVE_VIEW_DIFF || ev.type == WK_LIVE_VIEW_SNAPSHOT);
        cr_assert_eq(wk_live_view_update(&view, &ev, append, NULL), WK_OK);
    }
    cr_assert_str_eq((const char *)view.data, body);
    /* Re-created here past it: the new view's entries carry a generation
     * the crate's view had not. */
    cr_assert_eq(wk_live_view_remove(p, &e, n, NULL), WK_OK);
    create(p, &e, n, "x");
    for (uint64_t v = 1; v <= 8; v++)
        commit(p, &e, n, v, "y", "xy");
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "got event %d at version %llu", ev.type,
                 (unsigned long long)ev.version);
    wk_live_view_body_free(&view);
    wk_live_view_sub_close(sub);
    redisFree(raw);
    wk_db_close(db);
}

/* The crate's commits to a view of this library write entries without a
 * generation: they are followed (the head still has the view's), later
 * commits here carry the generation again, and a re-creation by the crate
 * past the subscriber (a head without it) is GONE. */
Test(live_view, crate_commits_to_our_view_are_followed_and_a_crate_recreation_is_gone,
     .timeout = 60)
{
    SETUP(NULL, "crateours", 5, wk_name_str("o"));
    redisContext *raw = wk_test_raw(wk_test_url());
    create(p, &e, n, "c");
    char g[17];
    gen_of(raw, head, g);
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_body view = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &view, &sub), WK_OK);
    rust_commit(raw, head, log, 1, "d", "cd", 5);
    rust_commit(raw, head, log, 2, "e", "cde", 5);
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    for (uint64_t v = 2; v <= 3; v++) {
        cr_assert_eq(recv_ev(sub, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
        cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF, "event %d", ev.type);
        cr_assert_eq(ev.version, v);
        cr_assert_eq(wk_live_view_update(&view, &ev, append, NULL), WK_OK);
    }
    commit(p, &e, n, 3, "f", "cdef");
    redisReply *r = cmd(raw, "XRANGE %s 4-0 4-0", log);
    expect_entry(r->element[0], "4-0", 4, (const char *[]){"diff", "f", "g", g});
    freeReplyObject(r);
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF);
    cr_assert_eq(wk_live_view_update(&view, &ev, append, NULL), WK_OK);
    cr_assert_str_eq((const char *)view.data, "cdef");
    /* The crate removes and re-creates it, and commits past version 4. */
    freeReplyObject(cmd(raw, "UNLINK %s %s", head, log));
    rust_create(raw, head, log, "x");
    const char *bodies[] = {"xy", "xyy", "xyyy", "xyyyy"};
    for (uint64_t v = 1; v <= 4; v++)
        rust_commit(raw, head, log, v, "y", bodies[v - 1], 5);
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "got event %d at version %llu", ev.type,
                 (unsigned long long)ev.version);
    cr_assert_eq(wk_live_view_sub_version(sub), 4);
    wk_live_view_body_free(&view);
    wk_live_view_sub_close(sub);
    redisFree(raw);
    wk_db_close(db);
}

/* resume sends nothing, so it follows the view whose entries it reads
 * first; a re-creation after that is GONE. */
Test(live_view, resumed_subscription_notices_a_later_recreation, .timeout = 60)
{
    SETUP(NULL, "resumegen", 5, wk_name_str("r"));
    create(p, &e, n, "a");
    commit(p, &e, n, 1, "b", "ab");
    commit(p, &e, n, 2, "c", "abc");
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_resume(p, &e, n, 1, &o, &sub), WK_OK);
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    for (uint64_t v = 2; v <= 3; v++) {
        cr_assert_eq(recv_ev(sub, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
        cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF);
        cr_assert_eq(ev.version, v);
    }
    cr_assert_eq(wk_live_view_remove(p, &e, n, NULL), WK_OK);
    create(p, &e, n, "x");
    for (uint64_t v = 1; v <= 4; v++)
        commit(p, &e, n, v, "y", "xy");
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "got event %d at version %llu", ev.type,
                 (unsigned long long)ev.version);
    wk_live_view_sub_close(sub);
    wk_db_close(db);
}

/* Entries of two generations in one batch (only hand-written data makes
 * that): those of the view followed are handed out, then GONE; nothing of
 * the other one. */
Test(live_view, another_generation_mid_batch_ends_the_view_there, .timeout = 60)
{
    SETUP(NULL, "midbatch", 5, wk_name_str("m"));
    redisContext *raw = wk_test_raw(wk_test_url());
    create(p, &e, n, "a");
    char g[17];
    gen_of(raw, head, g);
    wk_live_view_sub_options o = {.poll_ms = 50};
    wk_live_view_body first = WK_LIVE_VIEW_BODY_INIT;
    wk_live_view_sub *sub = NULL;
    cr_assert_eq(wk_live_view_subscribe(p, &e, n, &o, &first, &sub), WK_OK);
    freeReplyObject(cmd(raw, "XADD %s 2-0 diff b g %s", log, g));
    freeReplyObject(cmd(raw, "XADD %s 3-0 diff c", log));
    freeReplyObject(cmd(raw, "XADD %s 4-0 diff d g 0000000000000000", log));
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    for (uint64_t v = 2; v <= 3; v++) {
        cr_assert_eq(recv_ev(sub, &ev), WK_OK, "%s", wk_live_view_sub_errmsg(sub));
        cr_assert_eq(ev.type, WK_LIVE_VIEW_DIFF, "event %d", ev.type);
        cr_assert_eq(ev.version, v);
    }
    cr_assert_eq(recv_ev(sub, &ev), WK_OK);
    cr_assert_eq(ev.type, WK_LIVE_VIEW_GONE, "got event %d at version %llu", ev.type,
                 (unsigned long long)ev.version);
    cr_assert_eq(wk_live_view_sub_version(sub), 3);
    wk_live_view_body_free(&first);
    wk_live_view_sub_close(sub);
    redisFree(raw);
    wk_db_close(db);
}
