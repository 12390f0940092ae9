/*
 * tests/cxx/adapters.cpp — the header-only event-loop adapters
 * (wakuwaku/adapters/libuv.h, libevent.h) compile as C++20 with -Wall
 * -Wextra -Werror and link against the C library and the loops.
 *
 * Built and run by the cxx.adapters.* ctest tests (tests/CMakeLists.txt),
 * once per C++ compiler found. Exits 0 when every check holds.
 */
#include <cstdio>

#include <wakuwaku/adapters/libevent.h>
#include <wakuwaku/adapters/libuv.h>
#include <wakuwaku/wakuwaku.h>

int main()
{
    wk_async_uv *uv = nullptr;
    wk_async_event *ev = nullptr;
    if (wk_async_attach_uv(nullptr, nullptr, &uv) != WK_EINVAL || uv != nullptr ||
        wk_async_attach_event(nullptr, nullptr, &ev) != WK_EINVAL || ev != nullptr) {
        std::fprintf(stderr, "attaching nothing must be WK_EINVAL\n");
        return 1;
    }
    wk_async_detach_uv(nullptr);
    wk_async_detach_event(nullptr);
    return 0;
}
