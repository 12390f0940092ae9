/*
 * tests/cxx/entity_macros.cpp — the public headers and every entity
 * initialiser compile as C++20 with -Wall -Wextra -Werror (designated
 * initialisers in declaration order, nothing left out), link against the
 * C library, and give the descriptors the C macros give.
 *
 * Built and run by the cxx.* ctest tests (tests/CMakeLists.txt), once per
 * C++ compiler found (g++, clang++), through tests/cxx/run.sh, which lists
 * every initialiser of the headers (WK_CXX_ENTITIES) and compiles the same
 * list as C (wk_cxx_from_c). Exits 0 when every check holds.
 */
#include <cstdio>
#include <cstring>

#include <wakuwaku/wakuwaku.h>

struct initialiser {
    const char *kind; /* WK_KIND_X */
    wk_entity e;      /* as C++ compiles its initialiser */
};
#define WK_CXX_ROW(kind_, init_) {kind_, init_},
static const initialiser every[] = {WK_CXX_ENTITIES(WK_CXX_ROW)};
static const wk_entity custom = WK_CUSTOM_ENTITY("Mine", "things");

extern "C" const wk_entity wk_cxx_from_c[]; /* the same list, compiled as C */

static int failures;

static void expect(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "FAILED: %s\n", what);
        failures++;
    }
}

static bool same(const wk_entity &a, const wk_entity &b)
{
    return !std::strcmp(a.kind, b.kind) && !std::strcmp(a.ns, b.ns) && a.ttl_ms == b.ttl_ms &&
           a.capacity == b.capacity && a.rate == b.rate && a.period_ms == b.period_ms &&
           a.flags == b.flags;
}

int main()
{
    size_t n = sizeof(every) / sizeof(every[0]);
    expect(n >= 13, "the list holds the 13 initialisers of the 11 kinds (at least)");
    for (size_t i = 0; i < n; i++) {
        const wk_entity &e = every[i].e;
        expect(wk_entity_check(&e) == WK_OK, e.kind);
        expect(!std::strcmp(e.kind, every[i].kind) && !std::strcmp(e.ns, "ns"), "kind and ns");
        expect(same(e, wk_cxx_from_c[i]), "the descriptor C gives");
    }
    expect(wk_entity_check(&custom) == WK_OK && !std::strcmp(custom.kind, "Mine"), "custom");

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
