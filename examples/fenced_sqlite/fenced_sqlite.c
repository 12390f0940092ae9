/*
 * examples/fenced_sqlite/fenced_sqlite.c — fencing a real resource.
 *
 * Two workers update one account in a SQLite database under a FencedLock.
 * Worker A takes the lock, reads the balance, and is then paused (here: it
 * waits on a pipe, as a GC pause or a SIGSTOP would stop it) while its
 * lease runs out. Worker B takes the lock after the lease, with a greater
 * fence, and writes. When A resumes, it writes with its old fence, and the
 * database refuses it (fence_store.c: UPDATE … WHERE fence < $fence): B's
 * update is not lost.
 *
 * Usage: wk_fenced_sqlite [redis-url [db-path]]
 *        (URL default: $WK_REDIS_URL, else redis://127.0.0.1:6379;
 *         db-path default: a file in /tmp, removed at the end)
 * Exit status 0 when the stale write was refused and B's write kept.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <wakuwaku/wakuwaku.h>

#include "fence_store.h"

#define LEASE_MS 300

static wk_db *open_db(const char *url)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    wk_db *db = NULL;
    char err[256];
    if (wk_db_open(&db, &o, err, sizeof(err)) != WK_OK) {
        fprintf(stderr, "cannot open %s: %s\n", url, err);
        return NULL;
    }
    return db;
}

/* Take the lock (waiting up to 10 s), read the balance, add `amount`:
 * the read-modify-write a fence protects. */
static int take_and_read(wk_db *db, const wk_entity *lock, sqlite3 *store, wk_fenced_lease *lease,
                         int64_t *balance)
{
    int rc = wk_fenced_lock_acquire(wk_db_processor(db), lock, wk_name_str("account-42"),
                                    wk_deadline_in(10000), lease);
    if (rc != WK_OK || !lease->acquired) {
        fprintf(stderr, "acquire: %s %s\n", wk_err_name(rc), wk_db_errmsg(db));
        return 1;
    }
    int64_t fence;
    bool found;
    if (fence_store_read(store, "account-42", balance, &fence, &found) != SQLITE_OK)
        return 1;
    return 0;
}

/* Worker A: takes the lock, then is "paused" until `resume` is readable,
 * and writes with its fence. Exits 0 when the write was refused. */
static int worker_a(const char *url, const char *path, const wk_entity *lock, int took, int resume)
{
    wk_db *db = open_db(url);
    sqlite3 *store;
    if (!db || fence_store_open(&store, path) != SQLITE_OK)
        return 2;
    wk_fenced_lease lease;
    int64_t balance;
    if (take_and_read(db, lock, store, &lease, &balance))
        return 2;
    printf("A: took the lock with fence %" PRId64 ", balance %" PRId64 "; pausing\n", lease.fence,
           balance);
    fflush(stdout);
    if (write(took, "x", 1) != 1)
        return 2;
    char c;
    if (read(resume, &c, 1) != 1) /* the pause: B works meanwhile */
        return 2;
    wk_fenced_lock_ownership own;
    wk_fenced_lock_owned(wk_db_processor(db), lock, wk_name_str("account-42"), &lease.token, &own);
    printf("A: resumed; still own the lock: %s\n", own.owned ? "yes" : "no");
    bool applied;
    if (fence_store_write(store, "account-42", balance + 50, lease.fence, &applied) != SQLITE_OK)
        return 2;
    printf("A: write of %" PRId64 " under fence %" PRId64 ": %s\n", balance + 50, lease.fence,
           applied ? "APPLIED (lost update!)" : "refused by the fence check");
    sqlite3_close(store);
    wk_db_close(db);
    return applied ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : getenv("WK_REDIS_URL");
    if (!url)
        url = "redis://127.0.0.1:6379";
    char path[128], ns[64];
    snprintf(path, sizeof(path), "/tmp/wk_fenced_sqlite-%d.db", (int)getpid());
    if (argc > 2)
        snprintf(path, sizeof(path), "%s", argv[2]);
    snprintf(ns, sizeof(ns), "fenced-demo-%d", (int)getpid());
    const wk_entity lock = WK_FENCED_LOCK_ENTITY(ns, LEASE_MS);

    sqlite3 *store;
    bool applied;
    if (fence_store_open(&store, path) != SQLITE_OK ||
        fence_store_write(store, "account-42", 100, 0, &applied) != SQLITE_OK)
        return 2;
    wk_db *db = open_db(url);
    if (!db)
        return 2;

    int took[2], resume[2];
    if (pipe(took) || pipe(resume))
        return 2;
    fflush(stdout);
    pid_t a = fork();
    if (a == 0) {
        int rc = worker_a(url, path, &lock, took[1], resume[0]);
        fflush(stdout); /* _exit does not */
        _exit(rc);
    }
    char c;
    if (a < 0 || read(took[0], &c, 1) != 1)
        return 2;

    /* B waits for the lock: it gets it when A's lease runs out. */
    wk_fenced_lease lease;
    int64_t balance;
    if (take_and_read(db, &lock, store, &lease, &balance))
        return 2;
    if (fence_store_write(store, "account-42", balance + 20, lease.fence, &applied) != SQLITE_OK)
        return 2;
    printf("B: took the lock with fence %" PRId64 " after A's lease ran out; write of %" PRId64
           ": %s\n",
           lease.fence, balance + 20, applied ? "applied" : "refused");
    bool released;
    wk_fenced_lock_release(wk_db_processor(db), &lock, wk_name_str("account-42"), &lease.token,
                           &released);
    fflush(stdout);
    if (write(resume[1], "x", 1) != 1)
        return 2;

    int status;
    waitpid(a, &status, 0);
    int64_t final, fence;
    bool found;
    fence_store_read(store, "account-42", &final, &fence, &found);
    printf("account-42: balance %" PRId64 " (fence %" PRId64 ")\n", final, fence);
    sqlite3_close(store);
    wk_db_close(db);
    if (argc <= 2)
        unlink(path);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && applied && final == 120;
    printf("%s\n", ok ? "ok: the stale holder's write was refused" : "FAILED");
    return ok ? 0 : 1;
}
