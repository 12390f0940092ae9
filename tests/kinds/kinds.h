/*
 * tests/kinds/kinds.h — the test-side registry of entity kinds: every
 * built-in query with its kind and effect, the hot paths whose allocations
 * are counted, and the soak's operations with their invariants.
 *
 * Each kind (or pair of kinds sharing a layout) keeps its rows in ONE file,
 * tests/kinds/<kind>.c, which ends with WK_TEST_KIND(rows). The file
 * registers itself before main() (a constructor), so nothing lists the
 * kinds: every *.c of this folder is linked into the tests that read the
 * registry (tests/CMakeLists.txt: the object library wk_test_kinds;
 * tests/fuzz/run.sh: the same glob). Readers:
 *
 *   tests/capability/test_capability.c   every query against capabilities
 *   tests/core/test_cluster.c            every query against a Redis Cluster
 *   tests/fuzz/fuzz_replies.c            every query's parser, hostile replies
 *   tests/guarantees/test_matrix.c       every query × every handle type × guarantees
 *   tests/perf/test_allocations.c        every hot path: no allocation of its own
 *   tests/soak/soak.c                    every soak operation, under faults
 *
 * The rows must not use criterion (the fuzzer and the soak link without
 * it): they return statuses and the readers assert.
 */
#ifndef WK_TEST_KINDS_H
#define WK_TEST_KINDS_H

#include <wakuwaku/wakuwaku.h>

/* Runs one built-in query on an entity of namespace `ns`, name
 * wk_test_name(). */
typedef int (*wk_test_run_fn)(wk_processor *p, const char *ns);

/* What a query does to a lease, for the guarantee matrix
 * (tests/guarantees/): it takes one (a try: on a free item it is taken),
 * or lengthens one (an extend). Either is acknowledged on a handle with
 * lease_replicas (wakuwaku/db.h, ACKNOWLEDGED LEASES). */
#define WK_TEST_TAKES_LEASE (1u << 0)
#define WK_TEST_LENGTHENS_LEASE (1u << 1)

/* The item name the query rows use: "n" unless a reader set another
 * (tests/core/test_key_injective.c runs every row over adversarial names).
 * The bytes are borrowed: they must outlive the rows' calls. */
wk_name wk_test_name(void);
void wk_test_set_name(wk_name name);

/* One built-in query. */
typedef struct wk_test_query {
    const char *name; /* the query's name ("lock.try") */
    const char *kind; /* the kind of its entity (WK_KIND_LOCK) */
    wk_mode effect;   /* READ or WRITE */
    wk_test_run_fn run;
    unsigned lease;   /* WK_TEST_*_LEASE, or 0 */
} wk_test_query;

/*
 * WK_TEST_ROW(WK_KIND_LOCK, lock, try, run, lease) — the row of operation
 * `try` of the kind's op list (WK_LOCK_OPS, include/wakuwaku/lock.h):
 * named "lock.try", its effect the list's mode (no such operation: a
 * compile error). WK_TEST_VARIANT(…, " (fair)", run, lease): one more row
 * of the same operation, named "lock.try (fair)".
 */
#define WK_TEST_ROW(kind_, k, op, run_, lease_) WK_TEST_VARIANT(kind_, k, op, "", run_, lease_)
#define WK_TEST_VARIANT(kind_, k, op, suffix, run_, lease_)                                        \
    {#k "." #op suffix, kind_, WK__OP_MODE(k, op), run_, lease_}

/* The names of a list's operations, for wk_test_kind.ops:
 *     .ops = (const char *const[]){WK_LOCK_OPS(WK_TEST_OP_NAME) NULL} */
#define WK_TEST_OP_NAME(k, op, mode, params, summary) #k "." #op,

/* A hot path whose allocations tests/perf counts (none may be the
 * library's own). `op` runs one operation with item number i and returns
 * WK_OK, a negative status, or WK_TEST_WRONG_OUTCOME when the call worked
 * but its outcome is not the expected one; `setup` (may be NULL) runs once
 * before the warm-up. */
#define WK_TEST_WRONG_OUTCOME 1
typedef struct wk_test_alloc_case {
    const char *what;
    int (*setup)(wk_processor *p);
    int (*op)(wk_processor *p, unsigned i);
} wk_test_alloc_case;

/* What a soak operation may use: count a call's status (connection errors
 * are expected under faults), report a broken invariant, and its own
 * `shared_size` bytes of memory shared by all workers (zeroed). */
typedef struct wk_test_soak_env {
    void (*account)(int rc, const char *what);
    void (*violation)(const char *fmt, const char *what, int n);
    void *shared;
} wk_test_soak_env;

/* One operation of the soak, picked with probability weight / (sum of all
 * weights). `report` (may be NULL) runs once after the workers end: it
 * prints a line of counts and checks what needs the elapsed time. */
typedef struct wk_test_soak_op {
    const char *what;
    unsigned weight;
    size_t shared_size;
    void (*op)(wk_processor *p, const wk_test_soak_env *env);
    void (*report)(const wk_test_soak_env *env, double elapsed_s);
} wk_test_soak_op;

/* The rows of one file. */
typedef struct wk_test_kind {
    const char *id; /* the file's name: the order of the registry */
    /* the operations of the op lists its rows cover (WK_TEST_OP_NAME),
     * NULL-terminated: each needs a row, and each row one of them */
    const char *const *ops;
    const wk_test_query *queries;
    size_t nqueries;
    const wk_test_alloc_case *allocs;
    size_t nallocs;
    const wk_test_soak_op *soak;
    size_t nsoak;
    struct wk_test_kind *next;
} wk_test_kind;

#define WK_TEST_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/*
 * WK_TEST_KIND(var) — registers the file's rows, a static wk_test_kind
 * `var` (fill in what the kind has; counts with WK_TEST_COUNT). Put it at
 * the end of the file:
 *
 *     static wk_test_kind lock_rows = {
 *         .id = "lock", .ops = (const char *const[]){WK_LOCK_OPS(WK_TEST_OP_NAME) NULL},
 *         .queries = queries, .nqueries = WK_TEST_COUNT(queries), …};
 *     WK_TEST_KIND(lock_rows)
 */
#define WK_TEST_KIND(var_)                                                                         \
    __attribute__((constructor)) static void wk_test_register_##var_(void)                         \
    {                                                                                              \
        wk_test_kind_register(&var_);                                                              \
    }

/* Adds a file's rows, keeping the list sorted by id (so the order does not
 * depend on the link order). Called by WK_TEST_KIND's constructor. Aborts,
 * naming it, when an operation of `ops` has no row or a row none of `ops`:
 * a new operation in a kind's list fails every test that reads the
 * registry until the kind's file has its row. */
void wk_test_kind_register(wk_test_kind *kind);

/* The registered files, sorted by id; NULL-terminated through ->next. */
const wk_test_kind *wk_test_kinds(void);

/* Every query, across the files in registry order: the count, and the i-th. */
size_t wk_test_nqueries(void);
const wk_test_query *wk_test_query_at(size_t i);

/* Every allocation case, likewise. */
size_t wk_test_nallocs(void);
const wk_test_alloc_case *wk_test_alloc_at(size_t i);

#endif /* WK_TEST_KINDS_H */
