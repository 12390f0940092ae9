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
#include <stdlib.h>
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

int wk__wire_command(redisContext *c, struct timeval timeout, int argc, const char *const *argv,
                     const size_t *lens)
{
    /* Set-up and Pub/Sub commands: short, a few arguments (a key at most). */
    char stack[4096], *buf = stack;
    size_t need = 16;
    for (int i = 0; i < argc; i++)
        need += lens[i] + 24;
    if (need > sizeof(stack) && !(buf = malloc(need)))
        return wire_fail(c, WK_ENOMEM, REDIS_ERR_OOM, "out of memory formatting a command");
    size_t len = (size_t)snprintf(buf, need, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        len += (size_t)snprintf(buf + len, need - len, "$%zu\r\n", lens[i]);
        memcpy(buf + len, argv[i], lens[i]);
        len += lens[i];
        memcpy(buf + len, "\r\n", 2);
        len += 2;
    }
    size_t written;
    int rc = wk__wire_write(c, buf, len, timeout, &written);
    if (buf != stack)
        free(buf);
    return rc;
}

int wk__wire_take(redisContext *c, redisReply **reply)
{
    void *r = NULL;
    *reply = NULL;
    if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
        bool oom = c->reader->err == REDIS_ERR_OOM;
        return wire_fail(c, oom ? WK_ENOMEM : WK_EPROTO, oom ? REDIS_ERR_OOM : REDIS_ERR_PROTOCOL,
                         c->reader->errstr[0] ? c->reader->errstr : "protocol error");
    }
    *reply = r;
    return WK_OK;
}

int wk__wire_receive(redisContext *c)
{
    char buf[16 * 1024];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0)
            return wire_fail(c, WK_EIO, REDIS_ERR_EOF, "Server closed the connection");
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return WK_OK; /* nothing after all */
            return wire_fail(c, WK_EIO, REDIS_ERR_IO, strerror(errno));
        }
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
            return wire_fail(c, WK_ENOMEM, REDIS_ERR_OOM, "out of memory reading a reply");
        return WK_OK;
    }
}

int wk__wire_read(redisContext *c, struct timeval timeout, redisReply **reply)
{
    for (;;) {
        int rc = wk__wire_take(c, reply);
        if (rc || *reply)
            return rc;
        rc = wait_ready(c, POLLIN, ms_of(timeout));
        if (!rc)
            rc = wk__wire_receive(c);
        if (rc)
            return rc;
    }
}
