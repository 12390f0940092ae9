/*
 * tests/capability/builtin_queries.h — rows of the capability table for
 * the collections beyond Lock and RwLock. Each collection keeps its rows
 * in its own file, queries_<collection>.h, which defines runner functions,
 * a macro <COLLECTION>_QUERIES with the rows (each row ends with a comma),
 * and extends builtin_kind_of() through <COLLECTION>_KIND(query).
 */
#ifndef WK_TEST_BUILTIN_QUERIES_H
#define WK_TEST_BUILTIN_QUERIES_H

#include <string.h>

#if __has_include("queries_cache.h")
#include "queries_cache.h"
#else
#define CACHE_QUERIES
#define CACHE_KIND(q) NULL
#endif

#if __has_include("queries_token_bucket.h")
#include "queries_token_bucket.h"
#else
#define TOKEN_BUCKET_QUERIES
#define TOKEN_BUCKET_KIND(q) NULL
#endif

#if __has_include("queries_settings.h")
#include "queries_settings.h"
#else
#define SETTINGS_QUERIES
#define SETTINGS_KIND(q) NULL
#endif

#define MORE_BUILTIN_QUERIES CACHE_QUERIES TOKEN_BUCKET_QUERIES SETTINGS_QUERIES

static const char *builtin_kind_of(const char *query)
{
    const char *k;
    (void)query;
    if ((k = CACHE_KIND(query)) || (k = TOKEN_BUCKET_KIND(query)) || (k = SETTINGS_KIND(query)))
        return k;
    return "?";
}

#endif
