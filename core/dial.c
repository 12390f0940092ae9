/*
 * core/dial.c — non-blocking connect (core/dial.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/dial.h"

static int fail(char *msg, size_t msglen, int rc, const char *what)
{
    snprintf(msg, msglen, "%s", what);
    return rc;
}

/* Begin connect() on a new non-blocking socket; false when it failed at
 * once (d->why says why). */
static bool begin(wk__dial *d, int family, const struct sockaddr *sa, socklen_t salen)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(d->why, sizeof(d->why), "socket: %s", strerror(errno));
        return false;
    }
    if (family != AF_UNIX) {
        /* Commands are small and each is a whole write: no Nagle delay. */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    }
    int r;
    do
        r = connect(fd, sa, salen);
    while (r < 0 && errno == EINTR);
    if (r < 0 && errno != EINPROGRESS) {
        snprintf(d->why, sizeof(d->why), "%s", strerror(errno));
        close(fd);
        return false;
    }
    d->fd = fd;
    d->connected = r == 0;
    return true;
}

/* Try the remaining addresses until one starts connecting. */
static bool try_next(wk__dial *d)
{
    while (d->next) {
        struct addrinfo *a = d->next;
        d->next = a->ai_next;
        if (begin(d, a->ai_family, a->ai_addr, a->ai_addrlen))
            return true;
    }
    return false;
}

int wk__dial_start(wk__dial *d, const wk_url *url, char *msg, size_t msglen)
{
    memset(d, 0, sizeof(*d));
    d->fd = -1;
    if (url->path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(url->path) >= sizeof(sa.sun_path))
            return fail(msg, msglen, WK_EIO, "unix socket path too long");
        memcpy(sa.sun_path, url->path, strlen(url->path) + 1);
        if (!begin(d, AF_UNIX, (const struct sockaddr *)&sa, sizeof(sa)))
            return fail(msg, msglen, WK_EIO, d->why);
        return WK_OK;
    }
    char port[16];
    snprintf(port, sizeof(port), "%d", url->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int g = getaddrinfo(url->host, port, &hints, &d->addrs);
    if (g != 0) {
        char why[200];
        snprintf(why, sizeof(why), "cannot resolve %s: %s", url->host,
                 g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return fail(msg, msglen, g == EAI_MEMORY ? WK_ENOMEM : WK_EIO, why);
    }
    d->next = d->addrs;
    if (!try_next(d)) {
        char why[sizeof(d->why)];
        memcpy(why, d->why, sizeof(why));
        wk__dial_end(d);
        return fail(msg, msglen, WK_EIO, why);
    }
    return WK_OK;
}

int wk__dial_check(wk__dial *d, char *msg, size_t msglen)
{
    if (d->connected)
        return WK_OK;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(d->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err == 0) {
        d->connected = true;
        return WK_OK;
    }
    if (err == EINPROGRESS || err == EALREADY)
        return 1; /* not yet: wait again on the same socket */
    snprintf(d->why, sizeof(d->why), "%s", strerror(err));
    close(d->fd);
    d->fd = -1;
    if (try_next(d))
        return 1;
    wk__dial_end(d); /* no address left: free them (the reason stays in d->why) */
    return fail(msg, msglen, WK_EIO, d->why);
}

void wk__dial_end(wk__dial *d)
{
    if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
    if (d->addrs)
        freeaddrinfo(d->addrs);
    d->addrs = d->next = NULL;
}

int wk__dial_take(wk__dial *d)
{
    int fd = d->fd;
    d->fd = -1;
    wk__dial_end(d);
    return fd;
}
