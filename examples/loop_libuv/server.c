/*
 * examples/loop_libuv/server.c — a TCP server on a libuv loop whose every
 * request takes a lock and hits a rate limiter in Redis without blocking
 * the loop (wakuwaku/adapters/libuv.h; the request logic is
 * examples/loop_common/jobs.c).
 *
 *   WK_REDIS_URL=redis://127.0.0.1:6379 ./wk_loop_libuv [port]
 *   printf 'job 1\njob 2\n' | nc 127.0.0.1 <port>     → ok, ok
 *
 * Listens on 127.0.0.1 (port from argv[1] or WK_LOOP_PORT; none or 0: a
 * free one), printing "listening on 127.0.0.1:<port>". SIGINT or SIGTERM
 * shuts it down cleanly: exit status 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>
#include <wakuwaku/adapters/libuv.h>
#include <wakuwaku/wakuwaku.h>

#include "../loop_common/jobs.h"

typedef struct client {
    uv_tcp_t tcp; /* first member: the handle is the client */
    jobs_conn *jobs;
    struct client *prev, *next;
} client;

typedef struct write_req {
    uv_write_t req;
    char data[];
} write_req;

static struct {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_signal_t sigint, sigterm;
    wk_async *async;
    wk_async_uv *att;
    const char *prefix;
    client *clients;
} srv;

static void on_written(uv_write_t *req, int status)
{
    (void)status; /* a failed write: the read side sees the error too */
    free(req);
}

static void send_reply(void *io, const char *text, size_t len)
{
    client *c = io;
    write_req *w = malloc(sizeof(*w) + len);
    if (!w)
        return;
    memcpy(w->data, text, len);
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0)
        free(w);
}

static void on_client_closed(uv_handle_t *h)
{
    free(h); /* the client: tcp is its first member */
}

static void drop_client(client *c)
{
    jobs_conn_free(c->jobs); /* its request in flight completes without it */
    if (c->prev)
        c->prev->next = c->next;
    else
        srv.clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->tcp, on_client_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h, (void)suggested;
    static char chunk[16 * 1024]; /* one loop thread; consumed at once */
    *buf = uv_buf_init(chunk, sizeof(chunk));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    client *c = (client *)s;
    if (n > 0)
        jobs_conn_feed(c->jobs, buf->base, (size_t)n);
    else if (n < 0)
        drop_client(c); /* UV_EOF or an error */
}

static void on_connection(uv_stream_t *listener, int status)
{
    if (status < 0)
        return;
    client *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    uv_tcp_init(srv.loop, &c->tcp);
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 ||
        !(c->jobs = jobs_conn_new(srv.async, srv.prefix, send_reply, c))) {
        uv_close((uv_handle_t *)&c->tcp, on_client_closed);
        return;
    }
    c->next = srv.clients;
    if (c->next)
        c->next->prev = c;
    srv.clients = c;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* Close everything; uv_run returns once the close callbacks ran. */
static void on_signal(uv_signal_t *sig, int signum)
{
    (void)sig, (void)signum;
    uv_close((uv_handle_t *)&srv.listener, NULL);
    uv_close((uv_handle_t *)&srv.sigint, NULL);
    uv_close((uv_handle_t *)&srv.sigterm, NULL);
    while (srv.clients)
        drop_client(srv.clients);
    /* Detach first (the attachment's handles close on this turn), then
     * close the handle: what is in flight completes now, with WK_EIO or
     * WK_EUNKNOWN, and the departed clients' states are freed. */
    wk_async_detach_uv(srv.att);
    wk_async_close(srv.async);
    srv.async = NULL;
}

int main(int argc, char **argv)
{
    int port;
    if (jobs_open(argc, argv, &srv.async, &port, &srv.prefix))
        return 1;
    srv.loop = uv_default_loop();
    int rc = wk_async_attach_uv(srv.async, srv.loop, &srv.att);
    if (rc != WK_OK) {
        fprintf(stderr, "wk_async_attach_uv: %s\n", wk_strerror(rc));
        return 1;
    }
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    uv_tcp_init(srv.loop, &srv.listener);
    int err = uv_tcp_bind(&srv.listener, (const struct sockaddr *)&addr, 0);
    if (!err)
        err = uv_listen((uv_stream_t *)&srv.listener, 128, on_connection);
    if (err) {
        fprintf(stderr, "listen on 127.0.0.1:%d: %s\n", port, uv_strerror(err));
        return 1;
    }
    int len = sizeof(addr);
    uv_tcp_getsockname(&srv.listener, (struct sockaddr *)&addr, &len);
    printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
    fflush(stdout);

    uv_signal_init(srv.loop, &srv.sigint);
    uv_signal_init(srv.loop, &srv.sigterm);
    uv_signal_start(&srv.sigint, on_signal, SIGINT);
    uv_signal_start(&srv.sigterm, on_signal, SIGTERM);
    uv_run(srv.loop, UV_RUN_DEFAULT);
    jobs_close(); /* the near cache, after the handle */
    rc = uv_loop_close(srv.loop);
    if (rc != 0) {
        fprintf(stderr, "uv_loop_close: %s\n", uv_strerror(rc));
        return 1;
    }
    return 0;
}
