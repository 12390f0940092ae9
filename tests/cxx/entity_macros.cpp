/*
 * tests/cxx/entity_macros.cpp — the public headers and every entity
 * initialiser compile as C++20 with -Wall -Wextra -Werror (designated
 * initialisers in declaration order, nothing left out), link against the
 * C library, and give the descriptors the C macros give.
 *
 * Built and run by the cxx.* ctest tests (tests/CMakeLists.txt), once per
 * C++ compiler found (g++, clang++). Exits 0 when every check holds.
 */
#include <cstdio>
#include <cstring>

#include <wakuwaku/wakuwaku.h>

static const wk_entity lock = WK_LOCK_ENTITY("invoice", 30000);
static const wk_entity rwlock = WK_RWLOCK_ENTITY("index", 5000);
static const wk_entity cache = WK_CACHE_ENTITY("catalog", 60000);
static const wk_entity hashed = WK_HASHED_CACHE_ENTITY("page", 60000);
static const wk_entity bucket = WK_TOKEN_BUCKET_ENTITY("login", 20, 1, 3000);
static const wk_entity settings = WK_SETTINGS_ENTITY("flags");
static const wk_entity view = WK_LIVE_VIEW_ENTITY("document", 100);
static const wk_entity pipe = WK_PIPE_ENTITY("to-client", 60000);
static const wk_entity sbuf = WK_STREAM_BUFFER_ENTITY("completion", 120000);
static const wk_entity fenced = WK_FENCED_LOCK_ENTITY("ledger", 10000);
static const wk_entity sem = WK_SEMAPHORE_ENTITY("workers", 4, 30000);
static const wk_entity custom = WK_CUSTOM_ENTITY("Mine", "things");

static int failures;

static void expect(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "FAILED: %s\n", what);
        failures++;
    }
}

int main()
{
    const wk_entity *all[] = {&lock, &rwlock, &cache, &hashed, &bucket, &settings,
                              &view, &pipe,   &sbuf,  &fenced, &sem,    &custom};
    for (const wk_entity *e : all)
        expect(wk_entity_check(e) == WK_OK, e->kind);

    expect(std::strcmp(lock.kind, WK_KIND_LOCK) == 0 && lock.ttl_ms == 30000, "Lock fields");
    expect(std::strcmp(rwlock.kind, WK_KIND_RWLOCK) == 0, "RwLock kind");
    expect(std::strcmp(cache.kind, WK_KIND_CACHE) == 0, "Cache kind");
    expect(std::strcmp(hashed.kind, WK_KIND_HASHED_CACHE) == 0, "HashedCache kind");
    expect(std::strcmp(bucket.kind, WK_KIND_TOKEN_BUCKET) == 0 && bucket.capacity == 20 &&
               bucket.rate == 1 && bucket.period_ms == 3000 && bucket.ttl_ms == 0,
           "TokenBucket fields");
    expect(std::strcmp(settings.kind, WK_KIND_SETTINGS) == 0 && settings.ttl_ms == 0,
           "Settings kind");
    expect(std::strcmp(view.kind, WK_KIND_LIVE_VIEW) == 0 && view.capacity == 100 &&
               view.ttl_ms == 0,
           "LiveView fields");
    expect(std::strcmp(pipe.kind, WK_KIND_PIPE) == 0 && pipe.ttl_ms == 60000, "Pipe fields");
    expect(std::strcmp(sbuf.kind, WK_KIND_STREAM_BUFFER) == 0 && sbuf.ttl_ms == 120000,
           "StreamBuffer fields");
    expect(std::strcmp(fenced.kind, WK_KIND_FENCED_LOCK) == 0 && fenced.ttl_ms == 10000,
           "FencedLock fields");
    expect(std::strcmp(sem.kind, WK_KIND_SEMAPHORE) == 0 && sem.capacity == 4 &&
               sem.ttl_ms == 30000,
           "Semaphore fields");

    /* Variables of other arithmetic types, as C++ callers pass them. */
    int capacity = 10;
    long ttl = 1000;
    const wk_entity local_bucket = WK_TOKEN_BUCKET_ENTITY("api", capacity, capacity, ttl);
    const wk_entity local_lock = WK_LOCK_ENTITY("jobs", ttl);
    expect(wk_entity_check(&local_bucket) == WK_OK && wk_entity_check(&local_lock) == WK_OK,
           "initialisers from variables");

    wk_entity bad = WK_LOCK_ENTITY("jobs", 0);
    char msg[WK_ENTITY_MSG_MAX];
    expect(wk_entity_check_msg(&bad, msg, sizeof msg) == WK_EINVAL &&
               std::strcmp(msg, "ttl_ms must be > 0 (got 0)") == 0,
           "the check's message");

    /* Other initialisers of the public headers. */
    const wk_backoff backoff = WK_BACKOFF_INIT;
    expect(backoff.initial_ms == 5, "WK_BACKOFF_INIT");
    return failures ? 1 : 0;
}
