/*
 * tests/support/fake_peer.c — a fake server on loopback that is not Redis:
 * it answers the first command it reads with `first` (the handshake a
 * handle sends at open) and every later one with `reply`, bytes chosen by
 * the test. One connection, one reply per read — or, after
 * wk_test_peer_many(), every connection at once (each one's first read
 * gets `first`; a script counts the reads of all of them). With `flood`,
 * a reply is followed by that many bytes of filler, sent as fast as the
 * client reads them: a reply that never ends.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support.h"

/* p->flood bytes of filler after a reply, until the client closes (or
 * the peer is stopped): false once it did. */
static bool flood(wk_test_peer *p, int fd)
{
    char filler[64 * 1024];
    memset(filler, 'x', sizeof(filler));
    for (size_t sent = 0; sent < p->flood && !atomic_load(&p->stop);) {
        size_t n = p->flood - sent < sizeof(filler) ? p->flood - sent : sizeof(filler);
        ssize_t w = send(fd, filler, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            sent += (size_t)w;
            atomic_fetch_add(&p->flooded, (size_t)w);
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            atomic_store(&p->hung_up, true);
            return false;
        } else {
            struct pollfd out = {.fd = fd, .events = POLLOUT};
            poll(&out, 1, 20); /* a look at stop now and then */
        }
    }
    return true;
}

/* The reply to a read (the first of its connection or a later one). */
static bool answer(wk_test_peer *p, int fd, bool first)
{
    const char *r = first && p->first ? p->first : p->reply;
    size_t len = first && p->first ? p->first_len : p->reply_len;
    int k = atomic_fetch_add(&p->commands, 1);
    if (p->script) {
        r = p->script[(size_t)k < p->nscript ? (size_t)k : p->nscript - 1];
        len = strlen(r);
    }
    if (len && write(fd, r, len) < 0)
        return false;
    return first || !p->flood || flood(p, fd);
}

#define MANY_MAX 8

/* wk_test_peer_many(): the listening socket and every connection polled
 * together, until the peer is stopped. */
static void *serve_many(wk_test_peer *p)
{
    struct pollfd fds[1 + MANY_MAX] = {{.fd = p->listen_fd, .events = POLLIN}};
    bool first[1 + MANY_MAX];
    nfds_t n = 1;
    char buf[4096];
    while (!atomic_load(&p->stop)) {
        if (poll(fds, n, 20) <= 0)
            continue; /* a look at stop now and then */
        if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL))
            break;
        if ((fds[0].revents & POLLIN) && n < 1 + MANY_MAX) {
            int fd = accept(p->listen_fd, NULL, NULL);
            if (fd < 0)
                break;
            first[n] = true;
            fds[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
        }
        for (nfds_t i = 1; i < n; i++) {
            if (!fds[i].revents)
                continue;
            if (read(fds[i].fd, buf, sizeof(buf)) <= 0 || !answer(p, fds[i].fd, first[i])) {
                close(fds[i].fd);
                fds[i] = fds[--n];
                first[i] = first[n];
                i--;
                continue;
            }
            first[i] = false;
        }
    }
    for (nfds_t i = 1; i < n; i++)
        close(fds[i].fd);
    return NULL;
}

static void *serve(void *arg)
{
    wk_test_peer *p = arg;
    if (p->many)
        return serve_many(p);
    int fd = accept(p->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char buf[4096];
    bool first = true;
    while (read(fd, buf, sizeof(buf)) > 0) {
        if (!answer(p, fd, first))
            break;
        first = false;
    }
    close(fd);
    return NULL;
}

int wk_test_peer_start(wk_test_peer *p, const char *first, size_t first_len, const char *reply,
                       size_t reply_len)
{
    return wk_test_peer_start_many(p, first, first_len, reply, reply_len, false);
}

int wk_test_peer_start_many(wk_test_peer *p, const char *first, size_t first_len,
                            const char *reply, size_t reply_len, bool many)
{
    *p = (wk_test_peer){.first = first,
                        .first_len = first_len,
                        .reply = reply,
                        .reply_len = reply_len,
                        .many = many};
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(p->listen_fd, 1) != 0 || getsockname(p->listen_fd, (struct sockaddr *)&a, &alen))
        return -1;
    p->port = ntohs(a.sin_port);
    snprintf(p->url, sizeof(p->url), "redis://127.0.0.1:%d", p->port);
    return pthread_create(&p->thread, NULL, serve, p) == 0 ? 0 : -1;
}

void wk_test_peer_stop(wk_test_peer *p)
{
    atomic_store(&p->stop, true);
    shutdown(p->listen_fd, SHUT_RDWR);
    close(p->listen_fd);
    pthread_join(p->thread, NULL);
}

void wk_test_peer_script(wk_test_peer *p, const char *const *script, size_t n)
{
    p->nscript = n;
    p->script = script;
}
