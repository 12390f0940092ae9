/*
 * tests/capability/queries_token_bucket.h — capability-table rows for the
 * TokenBucket queries (included by builtin_queries.h).
 */
#ifndef WK_TEST_QUERIES_TOKEN_BUCKET_H
#define WK_TEST_QUERIES_TOKEN_BUCKET_H

#include <string.h>

#include <wakuwaku/token_bucket.h>

#define TB_E(ns) wk_entity e = WK_TOKEN_BUCKET_ENTITY(ns, 10, 1, 1000)

static int q_token_bucket_acquire(wk_processor *p, const char *ns)
{
    TB_E(ns);
    wk_token_bucket_outcome o;
    return wk_token_bucket_acquire(p, &e, wk_name_str("n"), 1, &o);
}
static int q_token_bucket_peek(wk_processor *p, const char *ns)
{
    TB_E(ns);
    wk_token_bucket_state st;
    return wk_token_bucket_peek(p, &e, wk_name_str("n"), &st);
}
static int q_token_bucket_reset(wk_processor *p, const char *ns)
{
    TB_E(ns);
    bool used;
    return wk_token_bucket_reset(p, &e, wk_name_str("n"), &used);
}

#define TOKEN_BUCKET_QUERIES                                   \
    {"token_bucket.acquire", WK_WRITE, q_token_bucket_acquire}, \
    {"token_bucket.peek", WK_READ, q_token_bucket_peek},        \
    {"token_bucket.reset", WK_WRITE, q_token_bucket_reset},

#define TOKEN_BUCKET_KIND(q) \
    (strncmp(q, "token_bucket.", 13) == 0 ? WK_KIND_TOKEN_BUCKET : NULL)

#endif /* WK_TEST_QUERIES_TOKEN_BUCKET_H */
