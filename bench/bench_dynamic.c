/*
 * bench/bench_dynamic.c — Pipe and StreamBuffer against raw hiredis doing
 * the same Redis work in the same run (bench/README.md):
 *
 *   pipe send+recv         one send then one recv per message: the
 *                          library's pipe.push and pipe.take scripts vs raw
 *                          EVALSHA of the same scripts (their SHA-1s learnt
 *                          from the server's slow log), same keys and args;
 *   pipe send x64 + recv   64 sends in one batch (raw: 64 pipelined EVALSHA),
 *                          then 64 recvs, one round trip each;
 *   sbuf append            one append per round trip (raw: EVALSHA);
 *   sbuf follow            a subscription reading 1024 appended bodies
 *                          (XREAD COUNT 128 batches) vs a raw XREAD loop
 *                          copying the same bodies.
 *
 * And, for information, what the take script costs against the crate's
 * destructive receive: raw MULTI/RPUSH/PEXPIRE/EXEC + BLPOP per message.
 *
 *   bench_dynamic [--url redis://…] [--reps N] [--n N]
 *
 * Starts its own redis-server on a free port without --url. Library and
 * raw runs alternate; the table shows the median rate of the repetitions.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <wakuwaku/wakuwaku.h>

#define BENCH_PROG "bench_dynamic"
#include "bench_util.h"

#include "support.h"

static void check(int rc, wk_db *db, const char *what)
{
    if (rc != WK_OK)
        die(what, wk_db_errmsg(db));
}

/* The SHA-1 of the first EVALSHA the slow log shows after `run`. */
static void learn_sha(redisContext *raw, void (*run)(void *), void *arg, char sha[41])
{
    freeReplyObject(cmd(raw, "CONFIG SET slowlog-log-slower-than 0"));
    run(arg); /* loads the script */
    freeReplyObject(cmd(raw, "SLOWLOG RESET"));
    run(arg);
    redisReply *r = cmd(raw, "SLOWLOG GET 20");
    sha[0] = '\0';
    for (size_t e = r->elements; e-- > 0 && !sha[0];) {
        redisReply *args = r->element[e]->element[3];
        if (args->elements > 1 && strcasecmp(args->element[0]->str, "EVALSHA") == 0)
            snprintf(sha, 41, "%s", args->element[1]->str);
    }
    freeReplyObject(r);
    freeReplyObject(cmd(raw, "CONFIG SET slowlog-log-slower-than 10000"));
    if (!sha[0])
        die("learn", "no EVALSHA in the slow log");
}

typedef struct bench {
    wk_db *db;
    redisContext *raw;
    int n;
    char push_sha[41], take_sha[41], append_sha[41];
    unsigned round;
    wk_pipe_receiver *rx;               /* opened before a pipe case is timed */
    wk_stream_buffer_subscription *sub; /* likewise for the follow case */
} bench;

static const wk_entity pipe_e = WK_PIPE_ENTITY("bench", 60000);
static const wk_entity sb_e = WK_STREAM_BUFFER_ENTITY("bench", 60000);

/* ------------------------------------------------------------------------
 * Pipe
 * ---------------------------------------------------------------------- */

static void open_rx(bench *b)
{
    check(wk_pipe_receive(wk_db_processor(b->db), &pipe_e, wk_name_u64(b->round), &b->rx), b->db,
          "pipe.receive");
}

static void open_sub(bench *b)
{
    check(wk_stream_buffer_subscribe(wk_db_processor(b->db), &sb_e, wk_name_u64(b->round), 0,
                                     &b->sub),
          b->db, "stream_buffer.subscribe");
}

static void close_all(bench *b)
{
    wk_pipe_receiver_close(b->rx);
    wk_stream_buffer_subscription_close(b->sub);
    b->rx = NULL;
    b->sub = NULL;
}

static void lib_pipe_seq(bench *b)
{
    wk_processor *p = wk_db_processor(b->db);
    wk_name name = wk_name_u64(b->round);
    wk_pipe_receiver *r = b->rx;
    for (int i = 0; i < b->n; i++) {
        char body[16];
        int len = snprintf(body, sizeof(body), "%d", i);
        check(wk_pipe_send(p, &pipe_e, name, body, (size_t)len), b->db, "pipe.send");
        wk_pipe_message m;
        if (wk_pipe_recv(r, &m) || m.got != WK_PIPE_MESSAGE)
            die("pipe.recv", wk_pipe_receiver_errmsg(r));
    }
}

/* The keys, the receiver's count and the same scripts, by hand. */
static void raw_pipe_seq(bench *b)
{
    char m[96], c[96], r[96];
    snprintf(m, sizeof(m), "@@wakuwaku-entity:Pipe:{bench:raw%u}:m", b->round);
    snprintf(c, sizeof(c), "@@wakuwaku-entity:Pipe:{bench:raw%u}:c", b->round);
    snprintf(r, sizeof(r), "@@wakuwaku-entity:Pipe:{bench:raw%u}:r", b->round);
    for (int i = 0; i < b->n; i++) {
        freeReplyObject(cmd(b->raw, "EVALSHA %s 1 %s %d 60000", b->push_sha, m, i));
        redisReply *t = cmd(b->raw, "EVALSHA %s 3 %s %s %s %d 60000", b->take_sha, m, c, r, i);
        if (t->type != REDIS_REPLY_ARRAY || t->element[0]->integer != 1)
            die("raw take", "no message");
        freeReplyObject(t);
    }
}

static void lib_pipe_batch(bench *b)
{
    wk_name name = wk_name_u64(b->round);
    wk_pipe_receiver *r = b->rx;
    wk_batch *batch;
    check(wk_batch_open(&batch, b->db), b->db, "batch");
    for (int i = 0; i < b->n; i += 64) {
        char body[64][16];
        for (int k = 0; k < 64; k++) {
            int len = snprintf(body[k], sizeof(body[k]), "%d", i + k);
            wk_pipe_send(wk_batch_processor(batch), &pipe_e, name, body[k], (size_t)len);
        }
        check(wk_batch_exec(batch), b->db, "batch pipe.send");
        for (int k = 0; k < 64; k++) {
            wk_pipe_message m;
            if (wk_pipe_recv(r, &m) || m.got != WK_PIPE_MESSAGE)
                die("pipe.recv", wk_pipe_receiver_errmsg(r));
        }
    }
    wk_batch_close(batch);
}

static void raw_pipe_batch(bench *b)
{
    char m[96], c[96], r[96];
    snprintf(m, sizeof(m), "@@wakuwaku-entity:Pipe:{bench:raw%u}:m", b->round);
    snprintf(c, sizeof(c), "@@wakuwaku-entity:Pipe:{bench:raw%u}:c", b->round);
    snprintf(r, sizeof(r), "@@wakuwaku-entity:Pipe:{bench:raw%u}:r", b->round);
    for (int i = 0; i < b->n; i += 64) {
        for (int k = 0; k < 64; k++)
            redisAppendCommand(b->raw, "EVALSHA %s 1 %s %d 60000", b->push_sha, m, i + k);
        for (int k = 0; k < 64; k++) {
            void *reply;
            if (redisGetReply(b->raw, &reply) != REDIS_OK)
                die("raw", b->raw->errstr);
            freeReplyObject(reply);
        }
        for (int k = 0; k < 64; k++)
            freeReplyObject(
                cmd(b->raw, "EVALSHA %s 3 %s %s %s %d 60000", b->take_sha, m, c, r, i + k));
    }
}

/* The crate's protocol, for comparison: MULTI/RPUSH/PEXPIRE/EXEC, BLPOP. */
static void raw_crate_pipe(bench *b)
{
    char m[96], c[96];
    snprintf(m, sizeof(m), "@@wakuwaku-entity:Pipe:{crate:%u}:m", b->round);
    snprintf(c, sizeof(c), "@@wakuwaku-entity:Pipe:{crate:%u}:c", b->round);
    for (int i = 0; i < b->n; i++) {
        redisAppendCommand(b->raw, "MULTI");
        redisAppendCommand(b->raw, "RPUSH %s %d", m, i);
        redisAppendCommand(b->raw, "PEXPIRE %s 60000", m);
        redisAppendCommand(b->raw, "EXEC");
        for (int k = 0; k < 4; k++) {
            void *reply;
            if (redisGetReply(b->raw, &reply) != REDIS_OK)
                die("raw", b->raw->errstr);
            freeReplyObject(reply);
        }
        freeReplyObject(cmd(b->raw, "BLPOP %s %s 60.0", m, c));
    }
}

/* ------------------------------------------------------------------------
 * StreamBuffer
 * ---------------------------------------------------------------------- */

static void lib_sb_append(bench *b)
{
    wk_processor *p = wk_db_processor(b->db);
    for (int i = 0; i < b->n; i++)
        check(wk_stream_buffer_append(p, &sb_e, wk_name_u64(b->round), "chunk of text", 13, NULL),
              b->db, "stream_buffer.append");
}

static void raw_sb_append(bench *b)
{
    char key[96];
    snprintf(key, sizeof(key), "@@wakuwaku-entity:StreamBuffer:bench:raw%u", b->round);
    for (int i = 0; i < b->n; i++)
        freeReplyObject(
            cmd(b->raw, "EVALSHA %s 1 %s %s 60000", b->append_sha, key, "chunk of text"));
}

/* Both follow the buffer the previous append case filled (n bodies). */
static void lib_sb_follow(bench *b)
{
    wk_stream_buffer_subscription *s = b->sub;
    size_t bytes = 0;
    for (int i = 0; i < b->n; i++) {
        wk_stream_buffer_item it;
        if (wk_stream_buffer_recv(s, &it) || it.got != WK_STREAM_BUFFER_BODY)
            die("stream_buffer.recv", wk_stream_buffer_subscription_errmsg(s));
        bytes += it.len;
    }
    if (bytes != (size_t)b->n * 13)
        die("follow", "wrong bytes");
}

static void raw_sb_follow(bench *b)
{
    char key[96], after[48] = "0-0";
    snprintf(key, sizeof(key), "@@wakuwaku-entity:StreamBuffer:bench:raw%u", b->round);
    char *copy = malloc(64 * 1024);
    size_t bytes = 0;
    for (int got = 0; got < b->n;) {
        redisReply *r = cmd(b->raw, "XREAD COUNT 128 BLOCK 60000 STREAMS %s %s", key, after);
        redisReply *entries = r->element[0]->element[1];
        size_t at = 0;
        for (size_t e = 0; e < entries->elements; e++, got++) {
            redisReply *f = entries->element[e]->element[1];
            memcpy(copy + at, f->element[1]->str, f->element[1]->len);
            at += f->element[1]->len;
            bytes += f->element[1]->len;
            snprintf(after, sizeof(after), "%s", entries->element[e]->element[0]->str);
        }
        freeReplyObject(r);
    }
    free(copy);
    if (bytes != (size_t)b->n * 13)
        die("raw follow", "wrong bytes");
}

/* ------------------------------------------------------------------------
 * Driver
 * ---------------------------------------------------------------------- */

typedef struct bcase {
    const char *name;
    void (*lib)(bench *);
    void (*raw)(bench *);
    void (*setup)(bench *); /* untimed, before the library run; may be NULL */
} bcase;

static void warm_send(void *arg)
{
    bench *b = arg;
    check(wk_pipe_send(wk_db_processor(b->db), &pipe_e, wk_name_str("learn"), "x", 1), b->db,
          "pipe.send");
}

static void warm_take(void *arg)
{
    bench *b = arg;
    wk_pipe_receiver *r;
    check(wk_pipe_receive(wk_db_processor(b->db), &pipe_e, wk_name_str("learn"), &r), b->db,
          "pipe.receive");
    wk_pipe_message m;
    if (wk_pipe_recv(r, &m) || m.got != WK_PIPE_MESSAGE)
        die("learn", "pipe.recv");
    wk_pipe_receiver_close(r);
}

static void warm_append(void *arg)
{
    bench *b = arg;
    check(
        wk_stream_buffer_append(wk_db_processor(b->db), &sb_e, wk_name_str("learn"), "x", 1, NULL),
        b->db, "stream_buffer.append");
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    int reps = 7, n = 8192;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            n = atoi(argv[++i]);
        else
            die("usage", "bench_dynamic [--url redis://…] [--reps N] [--n N]");
    }
    if (reps < 1 || reps > 99 || n < 64 || n % 64)
        die("usage", "--reps 1..99, --n a multiple of 64");
    wk_test_server server = {0};
    if (!url) {
        if (wk_test_server_start(&server, NULL) != 0)
            die("redis-server", "cannot start");
        url = server.url;
    }
    bench b = {.n = n};
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    char err[256];
    if (wk_db_open(&b.db, &o, err, sizeof(err)) != WK_OK)
        die("open", err);
    wk_url u;
    if (wk_url_parse(&u, url, err, sizeof(err)) != WK_OK)
        die("url", err);
    b.raw = redisConnect(u.host, u.port);
    wk_url_free(&u);
    if (!b.raw || b.raw->err)
        die("raw connect", b.raw ? b.raw->errstr : "no memory");
    learn_sha(b.raw, warm_send, &b, b.push_sha);
    warm_send(&b);
    learn_sha(b.raw, warm_take, &b, b.take_sha);
    learn_sha(b.raw, warm_append, &b, b.append_sha);

    const bcase cases[] = {
        {"pipe send+recv", lib_pipe_seq, raw_pipe_seq, open_rx},
        {"pipe send x64 batched + recv", lib_pipe_batch, raw_pipe_batch, open_rx},
        {"sbuf append", lib_sb_append, raw_sb_append, NULL},
        {"sbuf follow (subscription)", lib_sb_follow, raw_sb_follow, open_sub},
    };
    size_t ncases = sizeof(cases) / sizeof(cases[0]);
    double lib[8][99], raw[8][99], crate[99];
    for (int rep = 0; rep < reps; rep++) {
        for (size_t k = 0; k < ncases; k++) {
            /* Append and follow share a round number: follow reads what
             * append wrote. */
            b.round = (unsigned)(rep * 16 + (k == 3 ? 2 : k));
            if (cases[k].setup)
                cases[k].setup(&b);
            double t0 = now_s();
            cases[k].lib(&b);
            double t1 = now_s();
            cases[k].raw(&b);
            double t2 = now_s();
            close_all(&b);
            lib[k][rep] = n / (t1 - t0 > 1e-6 ? t1 - t0 : 1e-6);
            raw[k][rep] = n / (t2 - t1 > 1e-6 ? t2 - t1 : 1e-6);
        }
        double t0 = now_s();
        raw_crate_pipe(&b);
        crate[rep] = n / (now_s() - t0 > 1e-6 ? now_s() - t0 : 1e-6);
    }
    printf("bench_dynamic: n = %d, %d repetitions, median rates (operations/s)\n\n", n, reps);
    printf("| %-30s | %10s | %10s | %5s |\n", "case", "library", "raw", "ratio");
    printf("|%s|%s|%s|%s|\n", "--------------------------------", "------------", "------------",
           "-------");
    double take_median = 0;
    for (size_t k = 0; k < ncases; k++) {
        qsort(lib[k], (size_t)reps, sizeof(double), cmp_double);
        qsort(raw[k], (size_t)reps, sizeof(double), cmp_double);
        double l = lib[k][reps / 2], r = raw[k][reps / 2];
        if (k == 0)
            take_median = r;
        printf("| %-30s | %10.0f | %10.0f | %5.3f |\n", cases[k].name, l, r, l / r);
    }
    qsort(crate, (size_t)reps, sizeof(double), cmp_double);
    printf("\nraw, the crate's receive (MULTI/RPUSH/PEXPIRE/EXEC + BLPOP): %.0f messages/s;\n"
           "raw take script (pipe.push + pipe.take EVALSHA): %.0f/s (%.3f of the crate's)\n",
           crate[reps / 2], take_median, take_median / crate[reps / 2]);
    wk_db_close(b.db);
    redisFree(b.raw);
    if (server.pid)
        wk_test_server_stop(&server);
    return 0;
}
