/*
 * tests/support/trickle_server.c — a loopback server that answers slowly
 * (support.h, wk_test_trickle_*): it reads commands and sends each reply
 * one byte every `interval_ms`, so a client whose timeout restarts with
 * every byte would wait for as long as the whole reply takes. In
 * WK_TEST_TRICKLE_AFTER_HELLO mode the first read of each connection (the
 * handshake) is answered at once with Redis 7.0's HELLO reply, so a handle
 * opens and its queries trickle; WK_TEST_TRICKLE_ALL trickles the
 * handshake too; WK_TEST_TRICKLE_SILENT accepts and never answers.
 * Connections are served one after the other (a client reconnects only
 * after closing the previous one).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support.h"

/* A reply long enough to take many intervals: a bulk string. */
static const char slow_reply[] = "$24\r\nxxxxxxxxxxxxxxxxxxxxxxxx\r\n";

static bool stopping(wk_test_trickle *t)
{
    return atomic_load(&t->stop);
}

/* Serve one connection until the client closes it or the server stops. */
static void serve_one(wk_test_trickle *t, int fd)
{
    char buf[4096];
    size_t owed = 0, at = 0; /* bytes of slow_reply still to send, position */
    bool first = true;
    for (;;) {
        if (stopping(t))
            return;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int wait = owed && t->mode != WK_TEST_TRICKLE_SILENT ? t->interval_ms : 50;
        int n = poll(&p, 1, wait);
        if (n < 0 && errno != EINTR)
            return;
        if (n > 0) {
            ssize_t got = read(fd, buf, sizeof(buf));
            if (got <= 0)
                return; /* the client gave up */
            atomic_fetch_add(&t->reads, 1);
            if (first && t->mode == WK_TEST_TRICKLE_AFTER_HELLO) {
                first = false;
                if (send(fd, WK_TEST_HELLO_REPLY, strlen(WK_TEST_HELLO_REPLY), MSG_NOSIGNAL) < 0)
                    return;
                continue;
            }
            first = false;
            owed += sizeof(slow_reply) - 1; /* one reply per read */
            continue;                        /* the next byte after an interval */
        }
        if (owed && t->mode != WK_TEST_TRICKLE_SILENT) {
            if (send(fd, &slow_reply[at], 1, MSG_NOSIGNAL) != 1)
                return;
            at = (at + 1) % (sizeof(slow_reply) - 1);
            owed--;
        }
    }
}

static void *serve(void *arg)
{
    wk_test_trickle *t = arg;
    while (!stopping(t)) {
        struct pollfd p = {.fd = t->listen_fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(t->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&t->accepted, 1);
        serve_one(t, fd);
        close(fd);
    }
    return NULL;
}

int wk_test_trickle_start(wk_test_trickle *t, int mode, int interval_ms)
{
    memset(t, 0, sizeof(*t));
    t->mode = mode;
    t->interval_ms = interval_ms;
    atomic_init(&t->stop, false);
    t->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    if (t->listen_fd < 0 || bind(t->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(t->listen_fd, 8) != 0 || getsockname(t->listen_fd, (struct sockaddr *)&a, &alen))
        return -1;
    t->port = ntohs(a.sin_port);
    snprintf(t->url, sizeof(t->url), "redis://127.0.0.1:%d", t->port);
    return pthread_create(&t->thread, NULL, serve, t) == 0 ? 0 : -1;
}

void wk_test_trickle_stop(wk_test_trickle *t)
{
    atomic_store(&t->stop, true);
    pthread_join(t->thread, NULL);
    close(t->listen_fd);
}
