/*
 * tests/docs/prelude.h — what a guide's code fragment takes as given.
 *
 * tests/docs/check_docs.pl compiles every ```c fragment and ```c body
 * block of README.md and of the guides in docs/ after this header
 * (docs/testing.md, "Code blocks in the docs"): a fragment at file scope,
 * a body as the body of a function. The names below are those the guides
 * use without defining them: a handle and its processor, the options it
 * was opened with, a few entities, and the application's own functions
 * and data, which the fragments only call. Nothing here is linked or run.
 *
 * A fragment is a piece lifted out of a program, so what it declares for
 * its surroundings may be unused there: the "unused" warnings are off for
 * fragments and bodies (a whole ```c block gets every warning).
 */
#ifndef WK_DOCS_PRELUDE_H
#define WK_DOCS_PRELUDE_H

#define _DEFAULT_SOURCE /* uv.h (the libuv adapter) needs it under -std=c11 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wakuwaku/wakuwaku.h>

#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"

/* A handle opened with db_options (wk_db_open), and its processor. */
extern wk_db *db;
extern wk_processor *p;
extern wk_db_options db_options;
extern const char *url;
extern char err[256];

/* The entities the guides share (what they are: the comment). */
extern const wk_entity invoice_lock;   /* WK_LOCK_ENTITY("invoice", 30000) */
extern const wk_entity catalog_lock;   /* WK_LOCK_ENTITY("catalog", 30000) */
extern const wk_entity config_cache;   /* WK_HASHED_CACHE_ENTITY("config", 60000) */
extern const wk_entity profiles;       /* WK_HASHED_CACHE_ENTITY("profile", 300000) */
extern const wk_entity flags;          /* WK_SETTINGS_ENTITY("flags") */
extern const wk_entity jobs;           /* WK_LOCK_ENTITY("jobs", 10000) */
extern const wk_entity chan;           /* WK_PIPE_ENTITY("orders", 60000) */

/* Handles and objects a guide has opened before the fragment. */
extern wk_async *a;
extern wk_pool *pool;
extern wk_near_cache *nc;
extern wk_metrics *metrics;
extern wk_settings_follower *f;

/* A name, a token and the outcome of a try, as a call before left them. */
extern wk_name name;
extern wk_token t, token;
extern bool got, acquired;
extern int64_t v; /* the version a settings put returned */

/* The event-loop guide's request: the OUT parameters of one request's
 * queries, alive until their callbacks ran. */
typedef struct request {
    wk_token token;
    bool acquired;
    int64_t version;
    wk_settings_follower *f;
    wk_body body;
} request;
extern request *r;
void on_lock(wk_async *a, int status, const char *msg, void *arg);
void on_seen(wk_async *a, int status, const char *msg, void *arg);
void on_change(void *ctx, const wk_settings_change *change);

/* The application's own work. */
extern int n;
extern const char *ip, *user, *html;
extern size_t html_len;
void fail(int status);
void busy(void);
bool do_payout(uint64_t id);
void step(int i);
void serve(const void *data, size_t len);
void apply(const void *data, size_t len);
void handle(const void *data, size_t len);
uint8_t *build_report(void *arg, size_t *len);
void my_log(void *ctx, wk_log_level level, const char *message);
int hourly_report(wk_cron_ctx *ctx, void *arg);

#endif
