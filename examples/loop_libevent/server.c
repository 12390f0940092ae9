/*
 * examples/loop_libevent/server.c — a TCP server on a libevent
 * event_base whose every request takes a lock and hits a rate limiter in
 * Redis without blocking the loop (wakuwaku/adapters/libevent.h; the
 * request logic is examples/loop_common/jobs.c).
 *
 *   WK_REDIS_URL=redis://127.0.0.1:6379 ./wk_loop_libevent [port]
 *   printf 'job 1\njob 2\n' | nc 127.0.0.1 <port>     → ok, ok
 *
 * Listens on 127.0.0.1 (port from argv[1] or WK_LOOP_PORT; none or 0: a
 * free one), printing "listening on 127.0.0.1:<port>". SIGINT or SIGTERM
 * shuts it down cleanly: exit status 0.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <wakuwaku/adapters/libevent.h>
#include <wakuwaku/wakuwaku.h>

#include "../loop_common/jobs.h"

typedef struct client {
    struct bufferevent *bev;
    jobs_conn *jobs;
    struct client *prev, *next;
} client;

static struct {
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *sigint, *sigterm;
    wk_async *async;
    wk_async_event *att;
    const char *prefix;
    client *clients;
} srv;

static void send_reply(void *io, const char *text, size_t len)
{
    client *c = io;
    bufferevent_write(c->bev, text, len);
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
    bufferevent_free(c->bev); /* closes the socket (BEV_OPT_CLOSE_ON_FREE) */
    free(c);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    client *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    char chunk[4096];
    int n;
    while ((n = evbuffer_remove(in, chunk, sizeof(chunk))) > 0)
        jobs_conn_feed(c->jobs, chunk, (size_t)n);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        drop_client(arg);
}

static void on_connection(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                          int salen, void *arg)
{
    (void)l, (void)sa, (void)salen, (void)arg;
    client *c = calloc(1, sizeof(*c));
    if (c)
        c->bev = bufferevent_socket_new(srv.base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (c && c->bev)
        c->jobs = jobs_conn_new(srv.async, srv.prefix, send_reply, c);
    if (!c || !c->bev || !c->jobs) {
        if (c && c->bev)
            bufferevent_free(c->bev);
        else
            evutil_closesocket(fd);
        free(c);
        return;
    }
    c->next = srv.clients;
    if (c->next)
        c->next->prev = c;
    srv.clients = c;
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* Free everything; event_base_dispatch returns once no event is left. */
static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig, (void)what, (void)arg;
    evconnlistener_free(srv.listener);
    event_free(srv.sigint);
    event_free(srv.sigterm);
    while (srv.clients)
        drop_client(srv.clients);
    /* Detach first (frees the attachment's events), then close the
     * handle: what is in flight completes now, with WK_EIO or
     * WK_EUNKNOWN, and the departed clients' states are freed. */
    wk_async_detach_event(srv.att);
    wk_async_close(srv.async);
    srv.async = NULL;
}

int main(int argc, char **argv)
{
    int port;
    if (jobs_open(argc, argv, &srv.async, &port, &srv.prefix))
        return 1;
    srv.base = event_base_new();
    if (!srv.base) {
        fprintf(stderr, "event_base_new failed\n");
        return 1;
    }
    int rc = wk_async_attach_event(srv.async, srv.base, &srv.att);
    if (rc != WK_OK) {
        fprintf(stderr, "wk_async_attach_event: %s\n", wk_strerror(rc));
        return 1;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    srv.listener = evconnlistener_new_bind(srv.base, on_connection, NULL,
                                           LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
                                           (struct sockaddr *)&addr, sizeof(addr));
    if (!srv.listener) {
        fprintf(stderr, "listen on 127.0.0.1:%d: %s\n", port,
                evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        return 1;
    }
    socklen_t len = sizeof(addr);
    getsockname(evconnlistener_get_fd(srv.listener), (struct sockaddr *)&addr, &len);
    printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
    fflush(stdout);

    srv.sigint = evsignal_new(srv.base, SIGINT, on_signal, NULL);
    srv.sigterm = evsignal_new(srv.base, SIGTERM, on_signal, NULL);
    if (!srv.sigint || !srv.sigterm || event_add(srv.sigint, NULL) ||
        event_add(srv.sigterm, NULL)) {
        fprintf(stderr, "cannot watch signals\n");
        return 1;
    }
    event_base_dispatch(srv.base);
    event_base_free(srv.base);
    jobs_close(); /* the near cache, after the handle */
    return 0;
}
