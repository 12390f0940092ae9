/*
 * bench/bench_limiter_cache.c — benchmark cases for the limiter and the
 * caches (bench/bench_cache.h): the library call against raw hiredis
 * sending the same script or command.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench/bench_cases.h"

#define BATCH 64

/* ------------------------------------------------------------------------
 * TokenBucket acquire
 * ---------------------------------------------------------------------- */

static const wk_entity bench_bucket = WK_TOKEN_BUCKET_ENTITY("bench", 1e9, 1e9, 1000);
static bench_learned tb_learned;

static void tb_seq_lib(bench_ctx *c, unsigned i)
{
    wk_token_bucket_outcome o;
    bench_check(wk_token_bucket_acquire(wk_db_processor(c->db), &bench_bucket, wk_name_u64(i % 1024),
                                        1, &o),
                c, "token_bucket.acquire");
}

static void tb_batch_lib(bench_ctx *c, unsigned base)
{
    wk_token_bucket_outcome o[BATCH];
    for (unsigned k = 0; k < BATCH; k++)
        wk_token_bucket_acquire(wk_batch_processor(c->batch), &bench_bucket,
                                wk_name_u64((base + k) % 1024), 1, &o[k]);
    bench_check(wk_batch_exec(c->batch), c, "batch token_bucket.acquire");
}

static void tb_raw_send(bench_ctx *c, unsigned i)
{
    char key[128];
    size_t klen = bench_key(key, "TokenBucket", "bench", i % 1024, NULL);
    bench_learned_send(c, &tb_learned, key, klen);
}

static void tb_seq_raw(bench_ctx *c, unsigned i)
{
    tb_raw_send(c, i);
    freeReplyObject(bench_raw_reply(c));
}

static void tb_batch_raw(bench_ctx *c, unsigned base)
{
    for (unsigned k = 0; k < BATCH; k++)
        tb_raw_send(c, base + k);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

/* Learn a library script call from the server's slow log: run `op` with
 * the slow log catching everything and copy the EVALSHA it sent, so the
 * raw side sends byte-identical commands (keys excepted: the raw side
 * builds those itself with bench_key()). */
void bench_learn(bench_ctx *c, void (*op)(bench_ctx *, unsigned), bench_learned *out)
{
    freeReplyObject(redisCommand(c->raw, "CONFIG SET slowlog-log-slower-than 0"));
    op(c, 0); /* the first may be an EVAL (script load) */
    freeReplyObject(redisCommand(c->raw, "SLOWLOG RESET"));
    op(c, 0);
    redisReply *r = redisCommand(c->raw, "SLOWLOG GET 10");
    out->argc = -1;
    for (size_t e = 0; r && e < r->elements && out->argc < 0; e++) {
        redisReply *args = r->element[e]->element[3];
        if (args->elements < 3 || strcasecmp(args->element[0]->str, "EVALSHA") != 0)
            continue;
        memcpy(out->sha, args->element[1]->str, 40);
        out->sha[40] = '\0';
        out->nkeys = atoi(args->element[2]->str);
        out->argc = (int)args->elements - 3 - out->nkeys;
        for (int a = 0; a < out->argc && a < 8; a++) {
            redisReply *v = args->element[3 + out->nkeys + a];
            out->lens[a] = v->len < sizeof(out->args[a]) ? v->len : sizeof(out->args[a]);
            memcpy(out->args[a], v->str, out->lens[a]);
        }
    }
    if (r)
        freeReplyObject(r);
    freeReplyObject(redisCommand(c->raw, "CONFIG SET slowlog-log-slower-than 10000"));
    if (out->argc < 0 || out->argc > 8) {
        fprintf(stderr, "bench: could not learn the library's command\n");
        exit(1);
    }
}

/* EVALSHA <learned sha> <nkeys> key <learned args>. */
void bench_learned_send(bench_ctx *c, const bench_learned *l, const char *key, size_t klen)
{
    const char *argv[16] = {"EVALSHA", l->sha, "1", key};
    size_t lens[16] = {7, 40, 1, klen};
    for (int a = 0; a < l->argc; a++) {
        argv[4 + a] = l->args[a];
        lens[4 + a] = l->lens[a];
    }
    bench_raw_append(c, 4 + l->argc, argv, lens);
}

static void tb_setup(bench_ctx *c)
{
    bench_learn(c, tb_seq_lib, &tb_learned);
}

#include "bench/bench_cache.h"

const bench_case bench_limiter_cache_cases[] = {
    {"token bucket acquire", tb_setup, tb_seq_lib, tb_seq_raw, tb_batch_lib, tb_batch_raw},
    BENCH_CACHE_CASES
};
const size_t bench_limiter_cache_cases_count = sizeof(bench_limiter_cache_cases) / sizeof(bench_limiter_cache_cases[0]);
