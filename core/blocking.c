/*
 * core/blocking.c — blocking handles (core/blocking.h): a second handle
 * with its own connection, whose replies may wait for a command's block
 * time, and whose wait another thread can cut short through a pipe that
 * the socket code polls beside the socket (core/wire.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/blocking.h"
#include "core/cluster.h"
#include "core/db_internal.h"
#include "core/core_internal.h"

static int fail(char *err, size_t errlen, int rc, const char *what)
{
    return wk__errbuf_set(err, errlen, rc, "blocking handle: %s", what);
}

/* A copy of a URL's strings (the new connection outlives nothing). */
static int wake_pipe(wk__conn *conn)
{
    int fds[2];
    if (pipe(fds) != 0)
        return WK_EIO;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    conn->wake_fd = fds[0];
    conn->wake_signal_fd = fds[1];
    return WK_OK;
}

int wk__blocking_clone(wk_db **out, wk_db *db, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return fail(err, errlen, WK_EINVAL, "out is NULL");
    *out = NULL;
    if (!db || !db->conn)
        return fail(err, errlen, WK_EINVAL, "no handle");
    const wk__conn *from = db->conn;
    wk_db *b = calloc(1, sizeof(*b));
    wk__conn *conn = calloc(1, sizeof(*conn));
    if (!b || !conn) {
        free(b);
        free(conn);
        return fail(err, errlen, WK_ENOMEM, "out of memory");
    }
    atomic_init(&conn->refs, 1);
    atomic_init(&conn->interrupted, false);
    conn->counters = wk__counters_ref(from->counters); /* its handle's */
    conn->wake_fd = conn->wake_signal_fd = -1;
    conn->connect_timeout = from->connect_timeout;
    conn->command_timeout = from->command_timeout;
    b->conn = conn;
    b->proc.process = wk__db_process;
    b->proc.db = b;

    int rc = wk__url_copy(&conn->url, &from->url);
    if (!rc && from->cluster)
        rc = wk__cluster_clone(&conn->cluster, from->cluster);
    if (!rc && from->sentinel_username &&
        !(conn->sentinel_username = strdup(from->sentinel_username)))
        rc = WK_ENOMEM;
    if (!rc && from->sentinel_password &&
        !(conn->sentinel_password = strdup(from->sentinel_password)))
        rc = WK_ENOMEM;
    conn->lease_replicas = from->lease_replicas;
    conn->lease_ack_timeout_ms = from->lease_ack_timeout_ms;
    if (!rc && from->client_name && !(conn->client_name = strdup(from->client_name)))
        rc = WK_ENOMEM;
    if (!rc && from->tls) {
        /* The TLS settings are shared, not rebuilt: the handle keeps the
         * connection that owns them alive. */
        conn->settings = from->settings ? from->settings : db->conn;
        atomic_fetch_add(&conn->settings->refs, 1);
        conn->tls = from->tls;
    }
    if (!rc)
        rc = wake_pipe(conn) == WK_OK ? WK_OK : WK_EIO;
    if (!rc)
        rc = wk_cap_intersect(&b->cap, db->cap, db->cap, NULL);
    if (rc) {
        wk__errbuf_set(err, errlen, rc, "%s", wk_strerror(rc));
        wk_db_close(b);
        return rc;
    }
    *out = b;
    return WK_OK;
}

/* wk__blocking_open(), the open ending by `deadline` (0: its own connect
 * timeout alone). */
static int open_until(wk_db **out, wk_db *db, int64_t deadline, char *err, size_t errlen)
{
    int rc = wk__blocking_clone(out, db, err, errlen);
    if (rc)
        return rc;
    wk_db *b = *out;
    b->conn->call_deadline = deadline; /* an enclosing call's, spent by the open too */
    rc = wk__conn_open(b);
    b->conn->call_deadline = 0;
    if (rc) {
        wk__errbuf_set(err, errlen, rc, "%s", b->errmsg[0] ? b->errmsg : wk_strerror(rc));
        wk_db_close(b);
        *out = NULL;
        return rc;
    }
    return WK_OK;
}

int wk__blocking_open(wk_db **out, wk_db *db, char *err, size_t errlen)
{
    return open_until(out, db, 0, err, errlen);
}

int wk__blocking_of(wk_db *db, int64_t deadline, wk_db **out, bool *close_after)
{
    if (!out || !close_after)
        return WK_EINVAL;
    *out = NULL;
    *close_after = false;
    if (!db)
        return WK_EINVAL;
    char err[WK__ERRMSG_MAX];
    if (db->pool) {
        /* A pool's shared handle serves every thread at once: a blocking
         * handle for this wait alone, one an earlier wait left if any. */
        *close_after = true;
        if ((*out = wk__pool_take_wait_handle(db->pool)) != NULL) {
            wk__blocking_reset(*out);
            return WK_OK;
        }
        int rc = open_until(out, db, deadline, err, sizeof(err));
        if (rc) {
            *close_after = false;
            return wk__db_fail(db, rc, "%s", err);
        }
        return WK_OK;
    }
    if (!db->blocking) {
        int rc = open_until(&db->blocking, db, deadline, err, sizeof(err));
        if (rc)
            return wk__db_fail(db, rc, "%s", err);
    }
    *out = db->blocking;
    return WK_OK;
}

/* Whether a connection still waits for the reply of a command the
 * deadline abandoned (WK__QUERY_ABANDON): it may still block on the
 * server (whose own timeout fires up to a timer tick late), and a
 * command queued behind it would start only then — a new connection
 * serves sooner. A reply that came is dropped now. */
static bool owed_still(wk__link *link)
{
    return link->ctx && link->owed && (!wk__link_idle_alive(link) || link->owed);
}

void wk__blocking_done(wk_db *db, wk_db *b)
{
    if (db && db->pool)
        wk__pool_keep_wait_handle(db->pool, b);
    else
        wk_db_close(b);
}

int wk__blocking_process(wk_db *b, wk_query *query, int64_t block_ms)
{
    if (!b || !b->conn || b->conn->wake_fd < 0 || block_ms < 0)
        return WK_EINVAL;
    if (owed_still(&b->conn->link))
        wk__conn_drop(b->conn);
    for (size_t i = 0; b->conn->cluster && i < b->conn->cluster->nnodes; i++)
        if (owed_still(&b->conn->cluster->nodes[i]->link))
            wk__link_close(&b->conn->cluster->nodes[i]->link);
    b->conn->extra_wait_ms = block_ms;
    int rc = wk__db_process(&b->proc, query);
    b->conn->extra_wait_ms = 0;
    return rc;
}

void wk__blocking_interrupt(wk_db *b)
{
    if (!b || !b->conn || b->conn->wake_signal_fd < 0)
        return;
    atomic_store(&b->conn->interrupted, true);
    char byte = 1;
    /* A full pipe already wakes the waiter. */
    ssize_t n = write(b->conn->wake_signal_fd, &byte, 1);
    (void)n;
}

bool wk__blocking_interrupted(const wk_db *b)
{
    return b && b->conn && atomic_load(&b->conn->interrupted);
}

void wk__blocking_reset(wk_db *b)
{
    if (!b || !b->conn || b->conn->wake_fd < 0)
        return;
    char buf[64];
    while (read(b->conn->wake_fd, buf, sizeof(buf)) > 0)
        ;
    atomic_store(&b->conn->interrupted, false);
}

uint64_t wk__blocking_reconnects(const wk_db *b)
{
    return b && b->conn ? b->conn->reconnects : 0;
}
