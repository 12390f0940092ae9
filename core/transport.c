/*
 * core/transport.c — the plain transport: bytes straight on the socket
 * (see core/transport.h), and closing a link.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/transport.h"

static ssize_t tx_fail(wk__link *link, int err, const char *what)
{
    link->ctx->err = err;
    snprintf(link->ctx->errstr, sizeof(link->ctx->errstr), "%s", what);
    return WK__TX_FAIL;
}

ssize_t wk__sock_send(int fd, const void *data, size_t len)
{
    ssize_t n;
    do
        n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n;
}

ssize_t wk__sock_recv(int fd, void *buf, size_t len)
{
    ssize_t n;
    do
        n = recv(fd, buf, len, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n;
}

static ssize_t plain_send(wk__link *link, const void *data, size_t len, short *want)
{
    ssize_t n = wk__sock_send(link->ctx->fd, data, len);
    if (n > 0)
        return n;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        *want = POLLOUT;
        return WK__TX_AGAIN;
    }
    return tx_fail(link, REDIS_ERR_IO, n < 0 ? strerror(errno) : "connection closed");
}

static ssize_t plain_recv(wk__link *link, void *buf, size_t len, short *want)
{
    ssize_t n = wk__sock_recv(link->ctx->fd, buf, len);
    if (n >= 0)
        return n; /* 0: WK__TX_EOF */
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        *want = POLLIN;
        return WK__TX_AGAIN;
    }
    return tx_fail(link, REDIS_ERR_IO, strerror(errno));
}

static size_t plain_pending(const wk__link *link)
{
    (void)link;
    return 0;
}

static bool plain_idle_alive(wk__link *link)
{
    char byte;
    ssize_t n = recv(link->ctx->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK;
    return false; /* EOF, or bytes nobody asked for: out of sync */
}

static void plain_close(wk__link *link)
{
    (void)link;
}

const wk__transport wk__plain_transport = {
    .name = "tcp",
    .send = plain_send,
    .recv = plain_recv,
    .pending = plain_pending,
    .idle_alive = plain_idle_alive,
    .close = plain_close,
};

void wk__link_close(wk__link *link)
{
    if (!link)
        return;
    if (link->tx)
        link->tx->close(link);
    if (link->ctx)
        redisFree(link->ctx);
    link->ctx = NULL;
    link->tx = NULL;
    link->state = NULL;
    link->owed = 0;
}
