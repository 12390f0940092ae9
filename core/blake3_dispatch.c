/*
** core/blake3_dispatch.c — choose the BLAKE3 implementation at run time.
**
** The library is compiled for the baseline ISA; the SIMD files mark their
** functions with __attribute__((target(...))), so nothing in them may run
** before the CPU has been checked here. The choice is made once, on first
** use, and cached. Tests can force an implementation (wk__blake3_force())
** to check every one of them on the same machine.
*/
#include "blake3_internal.h"

#include <stdatomic.h>

static const wk__b3_impl impl_portable = {
    "portable",
    wk__blake3_compress_in_place_portable,
    wk__blake3_compress_xof_portable,
    wk__blake3_hash_many_portable,
};

#if WK__B3_X86
/* The SIMD implementations only widen hash_many: a single block is a
** dependency chain, where the scalar code is fastest (see
** core/blake3_sse41.c). */
static const wk__b3_impl impl_sse41 = {
    "sse41",
    wk__blake3_compress_in_place_portable,
    wk__blake3_compress_xof_portable,
    wk__blake3_hash_many_sse41,
};

static const wk__b3_impl impl_avx2 = {
    "avx2",
    wk__blake3_compress_in_place_portable,
    wk__blake3_compress_xof_portable,
    wk__blake3_hash_many_avx2,
};

static const wk__b3_impl impl_avx512 = {
    "avx512",
    wk__blake3_compress_in_place_portable,
    wk__blake3_compress_xof_portable,
    wk__blake3_hash_many_avx512,
};
#endif

/* Cached detection result and the forced choice; NULL = not yet / none.
** Racing first calls all compute the same answer, so a relaxed store is
** enough. */
static _Atomic(const wk__b3_impl *) detected;
static _Atomic(const wk__b3_impl *) forced;

/* Whether this CPU can run `impl`. For AVX and AVX-512, libgcc's
** __builtin_cpu_supports() also checks that the OS saves the registers
** (XGETBV), so a kernel without that support falls back to narrower code. */
static int supported(const wk__b3_impl *impl)
{
    if (impl == &impl_portable)
        return 1;
#if WK__B3_X86
    __builtin_cpu_init(); /* needed if we run before libgcc's constructor */
    if (impl == &impl_sse41)
        return __builtin_cpu_supports("sse4.1");
    /* Each wider hash_many hands its remainder to the next narrower one. */
    if (impl == &impl_avx2)
        return __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("avx2");
    if (impl == &impl_avx512)
        return __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("avx512f");
#endif
    return 0;
}

static const wk__b3_impl *detect(void)
{
#if WK__B3_X86
    if (supported(&impl_avx512))
        return &impl_avx512;
    if (supported(&impl_avx2))
        return &impl_avx2;
    if (supported(&impl_sse41))
        return &impl_sse41;
#endif
    return &impl_portable;
}

const wk__b3_impl *wk__blake3_impl(void)
{
    const wk__b3_impl *impl = atomic_load_explicit(&forced, memory_order_relaxed);
    if (impl != NULL)
        return impl;
    impl = atomic_load_explicit(&detected, memory_order_relaxed);
    if (impl == NULL) {
        impl = detect();
        atomic_store_explicit(&detected, impl, memory_order_relaxed);
    }
    return impl;
}

int wk__blake3_force(const char *name)
{
    static const wk__b3_impl *const all[] = {
        &impl_portable,
#if WK__B3_X86
        &impl_sse41,
        &impl_avx2,
        &impl_avx512,
#endif
    };

    if (name == NULL) {
        atomic_store_explicit(&forced, NULL, memory_order_relaxed);
        return 0;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(all[i]->name, name) == 0) {
            if (!supported(all[i]))
                return -1;
            atomic_store_explicit(&forced, all[i], memory_order_relaxed);
            return 0;
        }
    }
    return -1;
}

void wk__blake3_force_portable(int on)
{
    (void)wk__blake3_force(on ? "portable" : NULL);
}
