/*
 * tests/support/proxy.c — a loopback TCP proxy in front of a real
 * redis-server, so a test can lose a reply at an exact point: the command
 * reaches Redis and runs, its reply never reaches the client.
 *
 * One thread polls the listening socket and every session (client socket +
 * server socket). Bytes are forwarded unchanged both ways until the test
 * arms a drop; then the next bytes the server sends on any session are
 * discarded, the test's callback runs (e.g. another client writes), and that
 * session is closed on both sides.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support.h"

#define MAX_SESSIONS 16

typedef struct session {
    int client, server; /* -1 when unused */
} session;

struct wk_test_proxy {
    int listen_fd, wake[2], target_port, port;
    char url[64];
    pthread_t thread;
    pthread_mutex_t mu;
    bool armed;
    void (*on_drop)(void *);
    void *arg;
    atomic_int drops;
    atomic_int accepted; /* sessions opened so far */
    atomic_bool frozen;  /* forward nothing, keep every session open */
    atomic_size_t slice; /* > 0: the server's bytes go out this many at a time */
    session sessions[MAX_SESSIONS];
};

static int connect_target(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

static void session_close(session *s)
{
    if (s->client >= 0)
        close(s->client);
    if (s->server >= 0)
        close(s->server);
    s->client = s->server = -1;
}

/* Forward what `from` has to `to`, at most `slice` bytes per send with a
 * millisecond between sends (0: all at once); false when the session
 * must end. */
static bool forward(int from, int to, size_t slice)
{
    char buf[65536];
    ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0)
        return false;
    for (ssize_t off = 0; off < n;) {
        size_t len = (size_t)(n - off);
        if (slice && off)
            usleep(1000);
        ssize_t w = send(to, buf + off, slice && len > slice ? slice : len, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        off += w;
    }
    return true;
}

/* The server spoke on an armed proxy: swallow it, run the callback, cut. */
static bool take_armed_drop(wk_test_proxy *p, session *s)
{
    pthread_mutex_lock(&p->mu);
    bool armed = p->armed;
    void (*cb)(void *) = p->on_drop;
    void *arg = p->arg;
    p->armed = false;
    pthread_mutex_unlock(&p->mu);
    if (!armed)
        return false;
    char buf[65536];
    (void)!read(s->server, buf, sizeof(buf));
    if (cb)
        cb(arg);
    atomic_fetch_add(&p->drops, 1);
    session_close(s);
    return true;
}

static void *run(void *arg)
{
    wk_test_proxy *p = arg;
    for (;;) {
        struct pollfd fds[2 + 2 * MAX_SESSIONS];
        session *owner[2 + 2 * MAX_SESSIONS];
        nfds_t n = 0;
        fds[n++] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        fds[n++] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
        bool frozen = atomic_load(&p->frozen);
        for (int i = 0; i < MAX_SESSIONS && !frozen; i++) {
            session *s = &p->sessions[i];
            if (s->client < 0)
                continue;
            owner[n] = s;
            fds[n++] = (struct pollfd){.fd = s->client, .events = POLLIN};
            owner[n] = s;
            fds[n++] = (struct pollfd){.fd = s->server, .events = POLLIN};
        }
        if (poll(fds, n, frozen ? 5 : -1) < 0) { /* frozen: look at the flag again soon */
            if (errno == EINTR)
                continue;
            return NULL;
        }
        if (fds[0].revents)
            return NULL; /* stop */
        if (fds[1].revents & POLLIN) {
            int c = accept(p->listen_fd, NULL, NULL);
            int t = c >= 0 ? connect_target(p->target_port) : -1;
            int slot = -1;
            for (int i = 0; i < MAX_SESSIONS && slot < 0; i++)
                if (p->sessions[i].client < 0)
                    slot = i;
            if (c >= 0 && t >= 0 && slot >= 0) {
                p->sessions[slot] = (session){c, t};
                atomic_fetch_add(&p->accepted, 1);
            } else {
                if (c >= 0)
                    close(c);
                if (t >= 0)
                    close(t);
            }
        }
        for (nfds_t k = 2; k < n && !atomic_load(&p->frozen); k++) {
            session *s = owner[k];
            if (!fds[k].revents || s->client < 0 || fds[k].fd < 0)
                continue;
            bool from_server = fds[k].fd == s->server;
            if (from_server && take_armed_drop(p, s))
                continue;
            bool ok = from_server ? forward(s->server, s->client, atomic_load(&p->slice))
                                  : forward(s->client, s->server, 0);
            if (!ok)
                session_close(s);
        }
    }
}

int wk_test_proxy_start(wk_test_proxy **out, int target_port)
{
    wk_test_proxy *p = calloc(1, sizeof(*p));
    if (!p)
        return -1;
    for (int i = 0; i < MAX_SESSIONS; i++)
        p->sessions[i] = (session){-1, -1};
    p->target_port = target_port;
    pthread_mutex_init(&p->mu, NULL);
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(p->listen_fd, 8) != 0 || getsockname(p->listen_fd, (struct sockaddr *)&a, &alen) ||
        pipe(p->wake) != 0) {
        if (p->listen_fd >= 0)
            close(p->listen_fd);
        free(p);
        return -1;
    }
    p->port = ntohs(a.sin_port);
    snprintf(p->url, sizeof(p->url), "redis://127.0.0.1:%d", p->port);
    if (pthread_create(&p->thread, NULL, run, p) != 0) {
        close(p->listen_fd);
        close(p->wake[0]);
        close(p->wake[1]);
        free(p);
        return -1;
    }
    *out = p;
    return 0;
}

void wk_test_proxy_stop(wk_test_proxy *p)
{
    if (!p)
        return;
    (void)!write(p->wake[1], "x", 1);
    pthread_join(p->thread, NULL);
    for (int i = 0; i < MAX_SESSIONS; i++)
        session_close(&p->sessions[i]);
    close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

const char *wk_test_proxy_url(const wk_test_proxy *p)
{
    return p->url;
}

void wk_test_proxy_drop_next_reply(wk_test_proxy *p, void (*on_drop)(void *), void *arg)
{
    pthread_mutex_lock(&p->mu);
    p->armed = true;
    p->on_drop = on_drop;
    p->arg = arg;
    pthread_mutex_unlock(&p->mu);
}

int wk_test_proxy_drops(const wk_test_proxy *p)
{
    return atomic_load(&((wk_test_proxy *)p)->drops);
}

int wk_test_proxy_accepted(const wk_test_proxy *p)
{
    return atomic_load(&((wk_test_proxy *)p)->accepted);
}

void wk_test_proxy_freeze(wk_test_proxy *p, bool frozen)
{
    atomic_store(&p->frozen, frozen); /* the thread looks at it after each poll */
}

void wk_test_proxy_slice(wk_test_proxy *p, size_t bytes)
{
    atomic_store(&p->slice, bytes);
}
