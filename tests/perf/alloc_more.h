/*
 * tests/perf/alloc_more.h — allocation counts for the cache and limiter
 * paths (added with those collections).
 */
