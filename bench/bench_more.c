/*
 * bench/bench_more.c — benchmark cases for the caches and the limiter.
 */
#include "bench/bench_cases.h"

const bench_case bench_more_cases[] = {{0}};
const size_t bench_more_cases_count = 0;
