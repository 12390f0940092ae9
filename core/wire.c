/*
 * core/wire.c — the only code that writes commands to a Redis socket and
 * reads replies from it. hiredis connects and parses (its redisReader);
 * the bytes go through here, so that a failed write says how much of it
 * the kernel took (which commands may have reached the server), and every
 * wait is bounded by the command timeout.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/db_internal.h"

/* Record an error on the context (hiredis's fields) and return `status`. */
static int wire_fail(redisContext *c, int status, int err, const char *what)
{
    c->err = err;
    snprintf(c->errstr, sizeof(c->errstr), "%s", what);
    return status;
}

static int ms_of(struct timeval tv)
{
    return (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
}

/* Wait until `fd` is ready for `events` or `timeout_ms` passes. */
static int wait_ready(redisContext *c, short events, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = events};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n > 0)
            return WK_OK;
        if (n == 0)
            return wire_fail(c, WK_ETIMEDOUT, REDIS_ERR_IO, "timed out waiting for Redis");
        if (errno != EINTR)
            return wire_fail(c, WK_EIO, REDIS_ERR_IO, strerror(errno));
    }
}

int wk__wire_write(redisContext *c, const char *data, size_t len, struct timeval timeout,
                   size_t *written)
{
    size_t off = 0;
    int rc = WK_OK;
    while (off < len) {
        ssize_t n = send(c->fd, data + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            rc = wait_ready(c, POLLOUT, ms_of(timeout));
            if (rc)
                break;
            continue;
        }
        rc = wire_fail(c, WK_EIO, REDIS_ERR_IO, n < 0 ? strerror(errno) : "connection closed");
        break;
    }
    *written = off;
    return rc;
}

int wk__wire_read(redisContext *c, struct timeval timeout, redisReply **reply)
{
    *reply = NULL;
    for (;;) {
        void *r = NULL;
        if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
            int status = c->reader->err == REDIS_ERR_OOM ? WK_ENOMEM : WK_EPROTO;
            return wire_fail(c, status, c->reader->err == REDIS_ERR_OOM ? REDIS_ERR_OOM
                                                                        : REDIS_ERR_PROTOCOL,
                             c->reader->errstr[0] ? c->reader->errstr : "protocol error");
        }
        if (r) {
            *reply = r;
            return WK_OK;
        }
        int rc = wait_ready(c, POLLIN, ms_of(timeout));
        if (rc)
            return rc;
        char buf[16 * 1024];
        ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0)
            return wire_fail(c, WK_EIO, REDIS_ERR_EOF, "Server closed the connection");
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            return wire_fail(c, WK_EIO, REDIS_ERR_IO, strerror(errno));
        }
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
            return wire_fail(c, WK_ENOMEM, REDIS_ERR_OOM, "out of memory reading a reply");
    }
}
