/*
 * examples/lock_race/lock_race.c — replicas racing to finalise invoices.
 *
 * Forks REPLICAS processes, each with its own handle, that all try to
 * finalise the same invoices. A replica finalises an invoice only while it
 * holds the invoice's lock and only if nobody did before, so each invoice
 * is finalised exactly once. Then a read-only handle — what a reporting
 * replica gets — tries to take a lock and is refused before anything
 * reaches Redis.
 *
 * Usage: wk_lock_race redis://127.0.0.1:6379   (or set WK_REDIS_URL)
 * Exit status 0 when every invariant held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <wakuwaku/wakuwaku.h>

#define REPLICAS 4
#define INVOICES 50

static const wk_entity invoice_lock = WK_LOCK_ENTITY("invoice", 5000);
/* The demo's own record of finalised invoices: a custom entity. */
static const wk_entity invoice_state = WK_CUSTOM_ENTITY("DemoInvoice", "state");

/* The finalisation count of an invoice: GET (READ) or INCR (WRITE). */
static int parse_count(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    size_t len;
    const char *s = wk_reply_str(r, &len);
    long long *out = q->out;
    if (wk_reply_get_type(r) == WK_REPLY_NIL)
        *out = 0;
    else if (wk_reply_get_type(r) == WK_REPLY_INTEGER)
        *out = wk_reply_integer(r);
    else if (wk_reply_get_type(r) == WK_REPLY_STRING && len > 0 && len < 20)
        *out = strtoll(s, NULL, 10);
    else
        return wk_diag_fail(d, WK_ECORRUPT, "not a count");
    return WK_OK;
}

static int invoice_count(wk_processor *p, uint64_t invoice, bool increment, long long *count)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    wk_name name = wk_name_u64(invoice);
    if (wk_key_build(key, sizeof(key), &key_len, &invoice_state, &name, NULL))
        return WK_EINVAL;
    const char *argv[] = {increment ? "INCR" : "GET", key};
    size_t argvlen[] = {increment ? 4 : 3, key_len};
    wk_access access = {&invoice_state, increment ? WK_WRITE : WK_READ};
    wk_query q = {.name = increment ? "demo.finalise" : "demo.status",
                  .effect = {&access, 1},
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_count,
                  .out = count};
    return wk_process(p, &q);
}

static int replica(const char *url, int id)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    wk_db *db;
    char err[256];
    if (wk_db_open(&db, &o, err, sizeof(err)) != WK_OK) {
        fprintf(stderr, "replica %d: %s\n", id, err);
        return 2;
    }
    wk_processor *p = wk_db_processor(db);
    for (uint64_t inv = 1; inv <= INVOICES; inv++) {
        wk_token token;
        bool got, released;
        if (wk_lock_try(p, &invoice_lock, wk_name_u64(inv), &token, &got) != WK_OK)
            return 3;
        if (!got)
            continue; /* another replica is on it */
        /* Check, then act: safe only because we hold the lock. */
        long long count = 0;
        if (invoice_count(p, inv, false, &count) != WK_OK)
            return 4;
        if (count == 0) {
            usleep(500); /* "finalising" */
            if (invoice_count(p, inv, true, &count) != WK_OK)
                return 5;
        }
        wk_lock_release(p, &invoice_lock, wk_name_u64(inv), &token, &released);
    }
    wk_db_close(db);
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : getenv("WK_REDIS_URL");
    if (!url) {
        fprintf(stderr, "usage: %s redis://host:port (or set WK_REDIS_URL)\n", argv[0]);
        return 2;
    }
    printf("wakuwaku %s — %d replicas race for %d invoices\n", wk_version(), REPLICAS, INVOICES);
    pid_t kids[REPLICAS];
    for (int i = 0; i < REPLICAS; i++) {
        kids[i] = fork();
        if (kids[i] == 0)
            _exit(replica(url, i));
    }
    int failures = 0;
    for (int i = 0; i < REPLICAS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }

    /* Report from a read-only handle: reading is allowed … */
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_only();
    wk_db *ro;
    char err[256];
    if (wk_db_open(&ro, &o, err, sizeof(err)) != WK_OK) {
        fprintf(stderr, "read-only handle: %s\n", err);
        return 1;
    }
    int wrong = 0, missed = 0;
    for (uint64_t inv = 1; inv <= INVOICES; inv++) {
        long long count = 0;
        if (invoice_count(wk_db_processor(ro), inv, false, &count) != WK_OK || count > 1)
            wrong++;
        if (count == 0)
            missed++;
    }
    printf("invoices finalised exactly once: %d of %d (twice: %d, never: %d)\n",
           INVOICES - wrong - missed, INVOICES, wrong, missed);
    wk_lock_state st;
    int rc = wk_lock_inspect(wk_db_processor(ro), &invoice_lock, wk_name_u64(1), &st);
    printf("read-only replica inspects invoice 1: %s (held: %s)\n", wk_err_name(rc),
           st.held ? "yes" : "no");
    /* … taking a lock is not, and nothing is sent. */
    wk_token t;
    bool got = false;
    rc = wk_lock_try(wk_db_processor(ro), &invoice_lock, wk_name_u64(1), &t, &got);
    printf("read-only replica tries to lock invoice 1: %s — %s\n", wk_err_name(rc),
           wk_db_errmsg(ro));
    bool refused = rc == WK_EDENIED && !got;
    wk_db_close(ro);

    printf("replica processes failed: %d\n", failures);
    printf("read-only handle refused: %s\n", refused ? "yes" : "NO");
    return failures == 0 && refused && wrong == 0 && missed == 0 ? 0 : 1;
}
