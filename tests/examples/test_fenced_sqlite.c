/*
 * tests/examples/test_fenced_sqlite.c — the SQLite example's fence check
 * (examples/fenced_sqlite/fence_store.c) against a FencedLock on a real
 * redis-server: a holder stopped with SIGSTOP past its lease resumes and
 * its late write is refused; a lost counter is detected (its fences are
 * refused, never applied out of order); the example program itself.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fence_store.h"
#include "redis_fixture.h"

#define LEASE_MS 300

static void db_path(char *buf, size_t cap, const char *what)
{
    snprintf(buf, cap, "/tmp/wk-test-fenced-%s-%d.db", what, (int)getpid());
    unlink(buf);
}

static sqlite3 *store_open(const char *path)
{
    sqlite3 *s = NULL;
    cr_assert_eq(fence_store_open(&s, path), SQLITE_OK);
    return s;
}

static wk_fenced_lease wait_for_lock(wk_db *db, const wk_entity *e)
{
    wk_fenced_lease l;
    /* Bounded by the suite's timeout, not by a clock. */
    int rc = wk_fenced_lock_acquire(wk_db_processor(db), e, wk_name_str("acct"),
                                    wk_deadline_in(100000), &l);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(l.acquired);
    return l;
}

/* The holder: takes the lock, reports its fence, waits for `proceed` (the
 * parent stops it with SIGSTOP before sending it), then writes 999 with
 * its fence. Exit 0: refused; 1: applied; 2+: set-up failed. */
static int holder(const char *path, const wk_entity *e, int took, int proceed)
{
    wk_db *db = wk_test_open_child();
    sqlite3 *s;
    wk_fenced_lease l;
    if (!db || fence_store_open(&s, path) != SQLITE_OK)
        return 2;
    if (wk_fenced_lock_try(wk_db_processor(db), e, wk_name_str("acct"), &l) != WK_OK || !l.acquired)
        return 3;
    char c;
    if (write(took, &l.fence, sizeof(l.fence)) != sizeof(l.fence) || read(proceed, &c, 1) != 1)
        return 4;
    bool applied;
    if (fence_store_write(s, "acct", 999, l.fence, &applied) != SQLITE_OK)
        return 5;
    sqlite3_close(s);
    wk_db_close(db);
    return applied ? 1 : 0;
}

Test(fenced_sqlite, sigstopped_holder_late_write_is_refused, .timeout = 120)
{
    char path[128];
    db_path(path, sizeof(path), "stop");
    wk_entity e = WK_FENCED_LOCK_ENTITY(wk_test_ns("fsql"), LEASE_MS);
    sqlite3 *s = store_open(path);
    int took[2], proceed[2];
    cr_assert_eq(pipe(took), 0);
    cr_assert_eq(pipe(proceed), 0);
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0)
        _exit(holder(path, &e, took[1], proceed[0]));
    int64_t old_fence = 0;
    cr_assert_eq(read(took[0], &old_fence, sizeof(old_fence)), (ssize_t)sizeof(old_fence));
    /* Stop the holder while it holds the lock, then let its write go
     * through the pipe: it runs only once the holder is continued. */
    cr_assert_eq(kill(kid, SIGSTOP), 0);
    int status;
    cr_assert_eq(waitpid(kid, &status, WUNTRACED), kid);
    cr_assert(WIFSTOPPED(status));
    cr_assert_eq(write(proceed[1], "x", 1), 1);

    /* Its lease runs out while it is stopped; we take the lock after it. */
    wk_db *db = wk_test_open(NULL);
    wk_fenced_lease l = wait_for_lock(db, &e);
    cr_assert_gt(l.fence, old_fence);
    bool applied;
    cr_assert_eq(fence_store_write(s, "acct", 120, l.fence, &applied), SQLITE_OK);
    cr_assert(applied, "the current holder's write is applied");

    cr_assert_eq(kill(kid, SIGCONT), 0);
    cr_assert_eq(waitpid(kid, &status, 0), kid);
    cr_assert(WIFEXITED(status), "holder status %d", status);
    cr_assert_eq(WEXITSTATUS(status), 0, "the stopped holder's late write was %s (exit %d)",
                 WEXITSTATUS(status) == 1 ? "APPLIED" : "not attempted", WEXITSTATUS(status));
    int64_t balance, fence;
    bool found;
    cr_assert_eq(fence_store_read(s, "acct", &balance, &fence, &found), SQLITE_OK);
    cr_assert(found);
    cr_assert_eq(balance, 120, "the current holder's value survives (got %lld)",
                 (long long)balance);
    cr_assert_eq(fence, l.fence);
    sqlite3_close(s);
    unlink(path);
    wk_db_close(db);
}

/* The counter lost (as after FLUSHALL or a failover without the last
 * INCR): fences start again at 1, and the store refuses them all rather
 * than accept a write out of order. */
Test(fenced_sqlite, lost_counter_is_detected_by_the_store, .timeout = 120)
{
    char path[128];
    db_path(path, sizeof(path), "reset");
    wk_entity e = WK_FENCED_LOCK_ENTITY(wk_test_ns("fsqlreset"), 5000);
    sqlite3 *s = store_open(path);
    wk_db *db = wk_test_open(NULL);
    bool applied, ok;
    for (int i = 0; i < 3; i++) {
        wk_fenced_lease l = wait_for_lock(db, &e);
        cr_assert_eq(fence_store_write(s, "acct", i, l.fence, &applied), SQLITE_OK);
        cr_assert(applied);
        cr_assert_eq(
            wk_fenced_lock_release(wk_db_processor(db), &e, wk_name_str("acct"), &l.token, &ok),
            WK_OK);
    }
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "DEL @@wakuwaku-entity:FencedLock:{%s:acct}:fence", e.ns));
    wk_fenced_lease l = wait_for_lock(db, &e);
    cr_assert_eq(l.fence, 1, "a lost counter starts again");
    cr_assert_eq(fence_store_write(s, "acct", 77, l.fence, &applied), SQLITE_OK);
    cr_assert_not(applied, "a fence the store has seen is refused");
    /* The operator's repair: raise the counter above the highest fence. */
    freeReplyObject(wk_test_cmd(raw, "SET @@wakuwaku-entity:FencedLock:{%s:acct}:fence 3", e.ns));
    cr_assert_eq(
        wk_fenced_lock_release(wk_db_processor(db), &e, wk_name_str("acct"), &l.token, &ok), WK_OK);
    l = wait_for_lock(db, &e);
    cr_assert_eq(l.fence, 4);
    cr_assert_eq(fence_store_write(s, "acct", 78, l.fence, &applied), SQLITE_OK);
    cr_assert(applied);
    redisFree(raw);
    sqlite3_close(s);
    unlink(path);
    wk_db_close(db);
}

Test(fenced_sqlite, the_example_program_refuses_the_stale_write, .timeout = 120)
{
    const char *bin = getenv("WK_TEST_BINARY_DIR");
    cr_assert(bin, "WK_TEST_BINARY_DIR is not set (run through ctest)");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s/examples/wk_fenced_sqlite '%s'", bin, wk_test_url());
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    char out[4096];
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    int status = pclose(f);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d, output:\n%s", status, out);
    cr_assert(strstr(out, "refused by the fence check"), "%s", out);
    cr_assert(strstr(out, "balance 120"), "%s", out);
}
