/*
 * tests/perf/test_allocations.c — the hot paths make no heap allocation of
 * their own: counts, not times.
 *
 * The test binary defines malloc/calloc/realloc/free itself (forwarding to
 * glibc's __libc_* functions), so every allocation in the process — the
 * library (linked statically into this binary), hiredis (a shared
 * library) and libc — passes through it. An allocation is charged to
 * hiredis when its immediate caller lies inside libhiredis.so (hiredis
 * allocates through its hi_malloc wrappers and sds) or in the section
 * wk_reply_code, where core/reply_objects.c builds hiredis's reply objects
 * on hiredis's behalf; everything else in the counting window is charged
 * to the library. After a warm-up (scripts
 * loaded, buffers grown), N operations must charge 0 to the library.
 *
 * The operations are every kind's hot paths, from the test-side registry
 * (tests/kinds/kinds.h: each kind's file lists its own), plus a batch.
 *
 * Skipped under AddressSanitizer, which owns malloc.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <string.h>

#include "redis_fixture.h"

#include <criterion/parameterized.h>

#include "tests/kinds/kinds.h"

#if defined(__SANITIZE_ADDRESS__)
#define WK_UNDER_ASAN 1
#else
#define WK_UNDER_ASAN 0
#endif

#if !WK_UNDER_ASAN
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static _Thread_local bool counting;
static _Thread_local bool inside; /* dladdr itself may allocate */
static _Thread_local long library_allocs, hiredis_allocs, openssl_allocs;
static uintptr_t hiredis_lo, hiredis_hi, crypto_lo, crypto_hi;
extern char __start_wk_reply_code[], __stop_wk_reply_code[];

static void charge(void *caller)
{
    if (!counting || inside)
        return;
    inside = true;
    uintptr_t a = (uintptr_t)caller;
    if (a >= crypto_lo && a < crypto_hi)
        openssl_allocs++; /* OpenSSL allocates through CRYPTO_malloc (libcrypto) */
    else if ((a >= hiredis_lo && a < hiredis_hi) ||
             (a >= (uintptr_t)__start_wk_reply_code && a < (uintptr_t)__stop_wk_reply_code))
        hiredis_allocs++;
    else
        library_allocs++;
    inside = false;
}

void *malloc(size_t n)
{
    charge(__builtin_return_address(0));
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    charge(__builtin_return_address(0));
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    charge(__builtin_return_address(0));
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}

typedef struct range_probe {
    uintptr_t probe, lo, hi;
} range_probe;

/* The address range of the shared object holding probe->probe. */
static int find_range(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    range_probe *rp = data;
    uintptr_t probe = rp->probe;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (probe >= lo && probe < hi) {
            rp->lo = info->dlpi_addr;
            for (int j = 0; j < info->dlpi_phnum; j++) {
                const ElfW(Phdr) *q = &info->dlpi_phdr[j];
                if (q->p_type == PT_LOAD && info->dlpi_addr + q->p_vaddr + q->p_memsz > rp->hi)
                    rp->hi = info->dlpi_addr + q->p_vaddr + q->p_memsz;
            }
            return 1;
        }
    }
    return 0;
}

static void locate_hiredis(void)
{
    range_probe rp = {(uintptr_t)&redisGetReply, 0, 0};
    dl_iterate_phdr(find_range, &rp);
    hiredis_lo = rp.lo;
    hiredis_hi = rp.hi;
    cr_assert(hiredis_hi > hiredis_lo, "libhiredis.so not found in the process");
}

/* libcrypto.so, where OpenSSL's allocator (CRYPTO_malloc) lives. */
static void locate_openssl(void)
{
    void *sym = dlsym(RTLD_DEFAULT, "CRYPTO_zalloc");
    cr_assert_not_null(sym, "libcrypto is not in the process");
    range_probe rp = {(uintptr_t)sym, 0, 0};
    dl_iterate_phdr(find_range, &rp);
    crypto_lo = rp.lo;
    crypto_hi = rp.hi;
    cr_assert(crypto_hi > crypto_lo, "libcrypto.so not found in the process");
}

static void expect_done(const wk_test_alloc_case *c, int rc)
{
    cr_assert_neq(rc, WK_TEST_WRONG_OUTCOME, "%s: the call worked but not as expected", c->what);
    cr_assert_eq(rc, WK_OK, "%s: %s", c->what, wk_err_name(rc));
}

/* `base` offsets the item names: the handle's and the pool's runs of a
 * case go on in parallel processes, and sharing names would make a
 * waiting acquire wait. */
static void count_ops_on(wk_processor *p, const wk_test_alloc_case *c, unsigned n, unsigned base)
{
    locate_hiredis();
    if (c->setup)
        expect_done(c, c->setup(p));
    for (unsigned i = 0; i < 20; i++)
        expect_done(c, c->op(p, base + i)); /* warm-up: scripts, buffers */
    library_allocs = hiredis_allocs = 0;
    counting = true;
    for (unsigned i = 0; i < n; i++) {
        int rc = c->op(p, base + 1000 + i);
        if (rc != WK_OK) {
            counting = false;
            expect_done(c, rc);
        }
    }
    counting = false;
    fprintf(stderr, "%s: %u operations, library allocations %ld, hiredis allocations %ld\n",
            c->what, n, library_allocs, hiredis_allocs);
    cr_assert_eq(library_allocs, 0, "%s: %ld allocations outside hiredis in %u operations", c->what,
                 library_allocs, n);
    cr_assert_gt(hiredis_allocs, 0, "the counter sees hiredis allocating replies");
}

static void count_ops(const wk_test_alloc_case *c, unsigned n)
{
    wk_db *db = wk_test_open(NULL);
    count_ops_on(wk_db_processor(db), c, n, 0);
    wk_db_close(db);
}

/* The same through a pool's shared processor: borrowing a connection (a
 * mutex, a condition) allocates nothing either. */
static void count_pool_ops(const wk_test_alloc_case *c, unsigned n)
{
    wk_pool *pool = wk_test_open_pool(wk_test_url(), NULL, 2, 2000, NULL);
    count_ops_on(wk_pool_processor(pool), c, n, 100000);
    wk_pool_close(pool);
}

#define MAX_ALLOC_CASES 64

/* The registry's hot paths by index (in registry order). */
static struct criterion_test_params hot_paths(void)
{
    static size_t index[MAX_ALLOC_CASES];
    size_t n = wk_test_nallocs();
    if (n > MAX_ALLOC_CASES)
        n = MAX_ALLOC_CASES; /* the_registry_has_the_hot_paths fails */
    for (size_t i = 0; i < n; i++)
        index[i] = i;
    return cr_make_param_array(size_t, index, n);
}

/* One test per hot path, on a handle and through a pool. */
ParameterizedTestParameters(allocations, every_hot_path_allocates_nothing_of_its_own)
{
    return hot_paths();
}

ParameterizedTest(size_t *i, allocations, every_hot_path_allocates_nothing_of_its_own)
{
    count_ops(wk_test_alloc_at(*i), 200);
}

ParameterizedTestParameters(allocations, every_hot_path_through_a_pool_allocates_nothing)
{
    return hot_paths();
}

ParameterizedTest(size_t *i, allocations, every_hot_path_through_a_pool_allocates_nothing)
{
    count_pool_ops(wk_test_alloc_at(*i), 200);
}

Test(allocations, the_registry_has_the_hot_paths)
{
    /* Lock and RwLock cycles, the limiter, the two cache paths at least. */
    cr_assert_geq(wk_test_nallocs(), 5);
    cr_assert_leq(wk_test_nallocs(), MAX_ALLOC_CASES, "raise MAX_ALLOC_CASES");
}

static const wk_entity lock = WK_LOCK_ENTITY("alloc", 10000);

static void batch_cycle_with(wk_db *db, wk_batch *b, unsigned base)
{
    (void)db;
    wk_token t[64];
    bool got[64], ok[64];
    for (unsigned k = 0; k < 64; k++)
        wk_lock_try(wk_batch_processor(b), &lock, wk_name_u64(base + k), &t[k], &got[k]);
    cr_assert_eq(wk_batch_exec(b), WK_OK);
    for (unsigned k = 0; k < 64; k++)
        wk_lock_release(wk_batch_processor(b), &lock, wk_name_u64(base + k), &t[k], &ok[k]);
    cr_assert_eq(wk_batch_exec(b), WK_OK);
}

Test(allocations, batch_in_steady_use_allocates_nothing_of_its_own)
{
    wk_db *db = wk_test_open(NULL);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    locate_hiredis();
    batch_cycle_with(db, b, 0);
    library_allocs = hiredis_allocs = 0;
    counting = true;
    for (unsigned r = 0; r < 10; r++)
        batch_cycle_with(db, b, 100000 + r * 64);
    counting = false;
    fprintf(stderr, "batch of 64 lock cycles x10: library allocations %ld, hiredis %ld\n",
            library_allocs, hiredis_allocs);
    cr_assert_eq(library_allocs, 0);
    wk_batch_close(b);
    wk_db_close(db);
}

static void on_async_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    (void)arg;
    cr_assert_eq(status, WK_OK, "%s", msg);
}

static void async_cycle(wk_async *a, unsigned base)
{
    wk_token t[64];
    bool got[64], ok[64];
    wk_processor *p = wk_async_with(a, on_async_done, NULL);
    for (unsigned k = 0; k < 64; k++)
        wk_lock_try(p, &lock, wk_name_u64(base + k), &t[k], &got[k]);
    wk_test_async_drain(a);
    for (unsigned k = 0; k < 64; k++)
        wk_lock_release(p, &lock, wk_name_u64(base + k), &t[k], &ok[k]);
    wk_test_async_drain(a);
    for (unsigned k = 0; k < 64; k++)
        cr_assert(got[k] && ok[k]);
}

Test(allocations, event_loop_handle_in_steady_use_allocates_nothing_of_its_own)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_async *a;
    char err[256];
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);
    locate_hiredis();
    /* Names of their own: the batch test (run beside it, --jobs=2) takes
     * 0 … 63 of the same entity. */
    async_cycle(a, 300000); /* connected, scripts loaded, buffers grown */
    async_cycle(a, 300064);
    library_allocs = hiredis_allocs = 0;
    counting = true;
    for (unsigned r = 0; r < 10; r++)
        async_cycle(a, 200000 + r * 64);
    counting = false;
    fprintf(stderr,
            "event loop, 64 lock cycles in flight x10: library allocations %ld, hiredis %ld\n",
            library_allocs, hiredis_allocs);
    cr_assert_eq(library_allocs, 0);
    cr_assert_gt(hiredis_allocs, 0, "the counter sees hiredis allocating replies");
    wk_async_close(a);
}

/* Over TLS: the library's own code allocates nothing either. OpenSSL 3.0
 * (Debian 12) allocates in its record layer, a few blocks per record
 * whatever the protocol version or cipher; that is counted apart and
 * printed, not charged to the library. */
Test(allocations, lock_cycles_over_tls_allocate_nothing_of_their_own)
{
    wk_test_tls t;
    cr_assert_eq(wk_test_tls_start(&t, false, NULL), 0, "TLS redis-server");
    wk_db_options o = wk_test_tls_options(&t);
    wk_db *db;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_processor *p = wk_db_processor(db);
    locate_hiredis();
    locate_openssl();
    wk_token tok;
    bool got, ok;
    for (unsigned i = 0; i < 20; i++) {
        cr_assert_eq(wk_lock_try(p, &lock, wk_name_u64(i), &tok, &got), WK_OK);
        cr_assert_eq(wk_lock_release(p, &lock, wk_name_u64(i), &tok, &ok), WK_OK);
    }
    library_allocs = hiredis_allocs = openssl_allocs = 0;
    counting = true;
    for (unsigned i = 0; i < 200; i++) {
        int rc = wk_lock_try(p, &lock, wk_name_u64(1000 + i), &tok, &got);
        if (!rc)
            rc = wk_lock_release(p, &lock, wk_name_u64(1000 + i), &tok, &ok);
        if (rc) {
            counting = false;
            cr_assert_fail("%s", wk_db_errmsg(db));
        }
    }
    counting = false;
    fprintf(stderr, "TLS lock cycles x200: library allocations %ld, hiredis %ld, OpenSSL %ld\n",
            library_allocs, hiredis_allocs, openssl_allocs);
    crypto_lo = crypto_hi = 0;
    cr_assert_eq(library_allocs, 0, "%ld allocations outside hiredis over TLS", library_allocs);
    wk_db_close(db);
    wk_test_tls_stop(&t);
}

#else

Test(allocations, skipped_under_asan)
{
    cr_skip_test("AddressSanitizer replaces malloc; run the normal build");
}

#endif
