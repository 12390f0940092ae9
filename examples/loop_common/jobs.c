/*
 * examples/loop_common/jobs.c — "job", "wait", "follow" and "get"
 * requests through a wk_async (see jobs.h): lock, limiter, reply,
 * release; a waiting acquire; a pipe followed message by message; a near
 * cache read — each step in the previous one's callback.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"

const wk_entity jobs_lock = WK_LOCK_ENTITY("loopjobs", JOBS_LOCK_TTL_MS);
const wk_entity jobs_bucket =
    WK_TOKEN_BUCKET_ENTITY("loopjobs", JOBS_BUCKET_CAPACITY, 1, JOBS_BUCKET_PERIOD_MS);
const wk_entity jobs_pipe = WK_PIPE_ENTITY("loopjobs", JOBS_PIPE_TTL_MS);
const wk_entity jobs_cache = WK_CACHE_ENTITY("loopjobs", JOBS_CACHE_TTL_MS);

/* The near cache of "get" (one loop thread: shared by every connection);
 * NULL when it could not be opened. */
static wk_near_cache *jobs_nc;
static char jobs_nc_err[320];

#define LINE_MAX_LEN 256

struct jobs_conn {
    wk_async *a;
    jobs_send_fn send;
    void *io;
    bool busy; /* a request is in flight (its callbacks hold this state) */
    bool gone; /* the client left: free when the request completes */
    char in[16 * LINE_MAX_LEN];
    size_t in_len;
    /* The request in flight: outputs the queries write. */
    char item[2 * LINE_MAX_LEN]; /* the Lock's or the Pipe's name */
    wk_token token;
    bool acquired, released;
    wk_token_bucket_outcome limit;
    wk_pipe_receiver *rx; /* "follow": the receiver, and what it received */
    wk_pipe_message msg;
    wk_body body; /* "get": the body the near cache delivered */
    bool from_memory;
    char prefix[LINE_MAX_LEN];
};

static void pump(jobs_conn *c);

static void reply(jobs_conn *c, const char *text)
{
    if (c->gone)
        return;
    char line[LINE_MAX_LEN + 16];
    int n = snprintf(line, sizeof(line), "%s\n", text);
    if (n < 0 || (size_t)n >= sizeof(line)) {
        line[sizeof(line) - 2] = '\n'; /* a long error message, cut */
        n = (int)sizeof(line) - 1;
    }
    c->send(c->io, line, (size_t)n);
}

/* "error <message>" for a failed query (its message, else the status's). */
static void error_text(char *text, size_t len, int status, const char *msg)
{
    snprintf(text, len, "error %s", msg && msg[0] ? msg : wk_strerror(status));
}

static void reply_error(jobs_conn *c, int status, const char *msg)
{
    char text[LINE_MAX_LEN];
    error_text(text, sizeof(text), status, msg);
    reply(c, text);
}

static void conn_release(jobs_conn *c)
{
    wk_body_free(&c->body);
    free(c);
}

/* The request is over: the next line, or the end of a departed client. */
static void request_done(jobs_conn *c)
{
    c->busy = false;
    if (c->gone)
        conn_release(c);
    else
        pump(c);
}

static void on_release(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    jobs_conn *c = arg;
    if (status != WK_OK)
        fprintf(stderr, "release %s: %s\n", c->item, msg); /* the lease runs out */
    request_done(c);
}

/* Reply, then release the lock (the reply is on its way meanwhile). */
static void reply_and_release(jobs_conn *c, const char *text)
{
    reply(c, text);
    int rc = wk_lock_release(wk_async_with(c->a, on_release, c), &jobs_lock, wk_name_str(c->item),
                             &c->token, &c->released);
    if (rc != WK_OK)
        request_done(c); /* not queued (the handle is closing): the lease runs out */
}

static void on_limit(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    jobs_conn *c = arg;
    if (status != WK_OK) {
        char text[LINE_MAX_LEN];
        error_text(text, sizeof(text), status, msg);
        reply_and_release(c, text);
    } else {
        reply_and_release(c, c->limit.allowed ? "ok" : "limited");
    }
}

static void on_lock(wk_async *a, int status, const char *msg, void *arg)
{
    jobs_conn *c = arg;
    if (status != WK_OK) {
        reply_error(c, status, msg);
        request_done(c);
        return;
    }
    if (!c->acquired) {
        reply(c, "busy");
        request_done(c);
        return;
    }
    int rc = wk_token_bucket_acquire(wk_async_with(a, on_limit, c), &jobs_bucket,
                                     wk_name_str(c->prefix), 1, &c->limit);
    if (rc != WK_OK)
        on_limit(a, rc, NULL, c); /* not queued: reply and release the same way */
}

/* "wait": taken (reply, then release) or the deadline passed. */
static void on_wait(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    jobs_conn *c = arg;
    if (status == WK_OK && c->acquired) {
        reply_and_release(c, "ok");
        return;
    }
    if (status != WK_OK)
        reply_error(c, status, msg);
    else
        reply(c, "timeout");
    request_done(c);
}

/* "follow": the receiver's end (closed here, from its own callback). */
static void follow_done(jobs_conn *c, const char *text)
{
    reply(c, text);
    wk_pipe_receiver_close(c->rx);
    c->rx = NULL;
    request_done(c);
}

/* Each message is a line; the next receive starts from here. */
static void on_message(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    jobs_conn *c = arg;
    char text[LINE_MAX_LEN];
    if (status != WK_OK) {
        error_text(text, sizeof(text), status, msg);
        follow_done(c, text);
        return;
    }
    if (c->msg.got != WK_PIPE_MESSAGE) {
        follow_done(c, c->msg.got == WK_PIPE_END    ? "end"
                       : c->msg.got == WK_PIPE_GONE ? "gone"
                                                    : "stopped");
        return;
    }
    snprintf(text, sizeof(text), "msg %.*s", (int)c->msg.len, (const char *)c->msg.body);
    reply(c, text);
    int rc = wk_pipe_recv_async(c->rx, &c->msg, on_message, c);
    if (rc != WK_OK)
        on_message(a, rc, wk_pipe_receiver_errmsg(c->rx), c);
}

/* The receiver is open (its count read) or failed to. */
static void on_follow(wk_async *a, int status, const char *msg, void *arg)
{
    jobs_conn *c = arg;
    if (status == WK_OK && (status = wk_pipe_recv_async(c->rx, &c->msg, on_message, c)) == WK_OK)
        return;
    on_message(a, status, status == WK_OK ? msg : wk_pipe_receiver_errmsg(c->rx), c);
}

/* "get": the body (or its absence), and where it came from. */
static void on_get(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    jobs_conn *c = arg;
    char text[LINE_MAX_LEN];
    if (status != WK_OK)
        error_text(text, sizeof(text), status, msg);
    else if (!c->body.found)
        snprintf(text, sizeof(text), "%s (absent)", c->from_memory ? "hit" : "miss");
    else
        snprintf(text, sizeof(text), "%s %.*s", c->from_memory ? "hit" : "miss", (int)c->body.len,
                 (const char *)c->body.data);
    reply(c, text);
    request_done(c);
}

static int start_get(jobs_conn *c, const char *name)
{
    if (!jobs_nc) {
        reply(c, jobs_nc_err);
        c->busy = false;
        return WK_OK; /* answered */
    }
    snprintf(c->item, sizeof(c->item), "%s:%s", c->prefix, name);
    /* A hit is served at the call itself (a miss by the near cache's
     * reader, later): the hits counter moving across the call says which.
     * (A peek before the call could be overtaken by an invalidation.) */
    wk_near_stats before = {0}, after = {0};
    wk_near_cache_stats(jobs_nc, &before);
    int rc = wk_near_cache_get_async(jobs_nc, c->a, &jobs_cache, wk_name_str(c->item), &c->body,
                                     on_get, c);
    wk_near_cache_stats(jobs_nc, &after);
    c->from_memory = after.hits > before.hits;
    if (rc != WK_OK) {
        char text[LINE_MAX_LEN];
        error_text(text, sizeof(text), rc, wk_near_cache_errmsg());
        reply(c, text);
        c->busy = false;
    }
    return WK_OK;
}

/* A line that is no request (first_query). */
#define NOT_A_REQUEST 1

/* The request of a "job", "wait" or "follow" line: its first query
 * (WK_OK: queued, its callback goes on; a status: refused), or
 * NOT_A_REQUEST. */
static int first_query(jobs_conn *c, const char *line)
{
    long ms = 0;
    char id[LINE_MAX_LEN];
    if (sscanf(line, "wait %255s %ld", id, &ms) == 2 && ms >= 0) {
        snprintf(c->item, sizeof(c->item), "%s:%s", c->prefix, id);
        return wk_lock_acquire(wk_async_with(c->a, on_wait, c), &jobs_lock, wk_name_str(c->item),
                               wk_deadline_in(ms), NULL, &c->token, &c->acquired);
    }
    if (strncmp(line, "follow ", 7) == 0 && line[7]) {
        snprintf(c->item, sizeof(c->item), "%s:%s", c->prefix, line + 7);
        return wk_pipe_receive(wk_async_with(c->a, on_follow, c), &jobs_pipe, wk_name_str(c->item),
                               &c->rx);
    }
    if (strncmp(line, "get ", 4) == 0 && line[4])
        return start_get(c, line + 4);
    if (strncmp(line, "job ", 4) != 0 || !line[4])
        return NOT_A_REQUEST;
    snprintf(c->item, sizeof(c->item), "%s:%s", c->prefix, line + 4);
    return wk_lock_try(wk_async_with(c->a, on_lock, c), &jobs_lock, wk_name_str(c->item), &c->token,
                       &c->acquired);
}

/* Start the request of one line. */
static void start(jobs_conn *c, const char *line)
{
    c->busy = true;
    int rc = first_query(c, line);
    if (rc == NOT_A_REQUEST) {
        c->busy = false;
        reply(c, "error expected \"job <id>\", \"wait <id> <ms>\", \"follow <pipe>\" or "
                 "\"get <name>\"");
        return;
    }
    if (rc != WK_OK) {
        c->busy = false; /* refused at submission: no callback will run */
        reply_error(c, rc, NULL);
    }
}

/* Start the next complete line's request unless one is in flight. */
static void pump(jobs_conn *c)
{
    while (!c->busy && !c->gone) {
        char *nl = memchr(c->in, '\n', c->in_len);
        if (!nl)
            return;
        size_t len = (size_t)(nl - c->in);
        char line[LINE_MAX_LEN];
        size_t keep = len < sizeof(line) - 1 ? len : sizeof(line) - 1;
        memcpy(line, c->in, keep);
        line[keep] = '\0';
        if (keep && line[keep - 1] == '\r')
            line[keep - 1] = '\0';
        memmove(c->in, nl + 1, c->in_len - len - 1);
        c->in_len -= len + 1;
        start(c, line);
    }
}

jobs_conn *jobs_conn_new(wk_async *a, const char *prefix, jobs_send_fn send, void *io)
{
    jobs_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->a = a;
    c->send = send;
    c->io = io;
    snprintf(c->prefix, sizeof(c->prefix), "%s", prefix);
    return c;
}

void jobs_conn_feed(jobs_conn *c, const char *data, size_t len)
{
    while (len) {
        size_t room = sizeof(c->in) - c->in_len;
        if (room == 0) {
            if (memchr(c->in, '\n', c->in_len)) {
                /* Whole lines wait behind the request in flight: the
                 * client sends faster than its requests complete. */
                reply(c, "error too many requests queued");
                return; /* the rest is dropped */
            }
            /* A line longer than the buffer: answer it and drop it. */
            reply(c, "error line too long");
            c->in_len = 0;
            room = sizeof(c->in);
        }
        size_t n = len < room ? len : room;
        memcpy(c->in + c->in_len, data, n);
        c->in_len += n;
        data += n;
        len -= n;
        pump(c);
    }
}

void jobs_conn_free(jobs_conn *c)
{
    if (!c)
        return;
    c->gone = true;
    if (c->rx) /* a follow ends at the next turn (STOPPED): then freed */
        wk_pipe_receiver_stop(c->rx);
    if (!c->busy)
        conn_release(c);
}

int jobs_open(int argc, char **argv, wk_async **a, int *port, const char **prefix)
{
    const char *url = getenv("WK_REDIS_URL");
    const char *p = argc > 1 ? argv[1] : getenv("WK_LOOP_PORT");
    const char *pre = getenv("WK_LOOP_PREFIX");
    char *end = NULL;
    long n = p && p[0] ? strtol(p, &end, 10) : 0;
    if ((end && *end) || n < 0 || n > 65535) {
        fprintf(stderr, "usage: %s [port]   (port 0 or none: a free one)\n", argv[0]);
        return 1;
    }
    *port = (int)n;
    *prefix = pre && pre[0] ? pre : "demo";
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url && url[0] ? url : "redis://127.0.0.1:6379";
    o.capability = wk_cap_read_write();
    o.client_name = "wk-loop-example";
    char err[256];
    int rc = wk_async_open(a, &o, err, sizeof(err));
    if (rc != WK_OK) {
        fprintf(stderr, "wk_async_open: %s\n", err);
        return 1;
    }
    /* The near cache opens from a blocking handle's settings (before the
     * loop runs: it connects and waits), then keeps its own connections. */
    wk_db *db = NULL;
    rc = wk_db_open(&db, &o, err, sizeof(err));
    const wk_entity *ents[] = {&jobs_cache};
    wk_near_cache_options no = WK_NEAR_CACHE_OPTIONS_INIT;
    no.entities = ents;
    no.nentities = 1;
    no.staleness_ms = 5000;
    no.heartbeat_ms = 250;
    if (rc == WK_OK)
        rc = wk_near_cache_open(&jobs_nc, db, &no, err, sizeof(err));
    wk_db_close(db);
    if (rc != WK_OK) {
        snprintf(jobs_nc_err, sizeof(jobs_nc_err), "error near cache: %s", err);
        fprintf(stderr, "%s\n", jobs_nc_err);
    }
    return 0;
}

void jobs_close(void)
{
    wk_near_cache_close(jobs_nc);
    jobs_nc = NULL;
}
