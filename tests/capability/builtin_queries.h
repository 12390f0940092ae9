/*
 * tests/capability/builtin_queries.h — the table of every built-in query:
 * a runner that performs it on entity kind:ns, and its effect. Used by the
 * capability test and the reply fuzzer. Each collection keeps its rows
 * in its own file, queries_<collection>.h, which defines runner functions,
 * a macro <COLLECTION>_QUERIES with the rows (each row ends with a comma),
 * and extends builtin_kind_of() through <COLLECTION>_KIND(query).
 */
#ifndef WK_TEST_BUILTIN_QUERIES_H
#define WK_TEST_BUILTIN_QUERIES_H

#include <string.h>

#include <wakuwaku/wakuwaku.h>

typedef int (*run_fn)(wk_processor *p, const char *ns);

typedef struct builtin_query {
    const char *name;
    wk_mode effect;
    run_fn run;
} builtin_query;

#include "queries_lock.h"

#include "queries_cache.h"
#include "queries_settings.h"
#include "queries_token_bucket.h"

static const builtin_query builtin_queries[] = {
    LOCK_QUERIES CACHE_QUERIES TOKEN_BUCKET_QUERIES SETTINGS_QUERIES
};
#define NQUERIES (sizeof(builtin_queries) / sizeof(builtin_queries[0]))

static const char *builtin_kind_of(const char *query)
{
    const char *k;
    (void)query;
    if ((k = LOCK_KIND(query)) || (k = CACHE_KIND(query)) || (k = TOKEN_BUCKET_KIND(query)) || (k = SETTINGS_KIND(query)))
        return k;
    return "?";
}

#endif

