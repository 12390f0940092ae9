/*
 * core/wire.c — reading replies off a Redis connection, and the one wait
 * of every blocking driver. hiredis connects and parses (its
 * redisReader); the bytes come through the link's transport (plain or
 * TLS, core/transport.h). Nothing here waits on a socket but
 * wk__poll_until, which every driver calls with the call's deadline: an
 * absolute time (wk__boot_ms()) fixed once when the call started, so a
 * peer that trickles its reply a byte at a time cannot stretch the call
 * by restarting a timeout per byte. Commands are written by the machines
 * (core/exchange.c, the set-up's core/conn_machine.c).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/db_internal.h"
#include "core/core_internal.h"

/* Record an error on the context (hiredis's fields) and return `status`. */
static int wire_fail(redisContext *c, int status, int err, const char *what)
{
    c->err = err;
    snprintf(c->errstr, sizeof(c->errstr), "%s", what);
    return status;
}

int wk__poll_until(struct pollfd *p, unsigned long n, int64_t deadline)
{
    for (;;) {
        /* What is left, re-read after every wake-up (EINTR included). */
        int64_t left = deadline - wk__boot_ms();
        int got = poll(p, (nfds_t)n, left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left);
        if (got >= 0 || errno != EINTR)
            return got;
    }
}

int wk__wire_take(wk__link *link, redisReply **reply)
{
    redisContext *c = link->ctx;
    *reply = NULL;
    for (;;) {
        void *r = NULL;
        if (wk__wire_all_taken(link))
            return WK_OK;
        if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
            bool oom = c->reader->err == REDIS_ERR_OOM;
            return wire_fail(c, oom ? WK_ENOMEM : WK_EPROTO,
                             oom ? REDIS_ERR_OOM : REDIS_ERR_PROTOCOL,
                             c->reader->errstr[0] ? c->reader->errstr : "protocol error");
        }
        if (!r || !link->owed) {
            *reply = r;
            return WK_OK;
        }
        /* The reply of a query the deadline abandoned: nobody waits for
         * it any more. */
        link->owed--;
        freeReplyObject(r);
    }
}

bool wk__reply_is_push(const redisReply *r)
{
#ifdef REDIS_REPLY_PUSH
    if (r->type == REDIS_REPLY_PUSH)
        return true; /* RESP3: pushes have a type of their own */
#endif
    /* RESP2: ["message", channel, payload] or ["pmessage", pattern,
     * channel, payload]; replies to commands never look so on a
     * subscribed connection (it takes no other commands). */
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return false;
    const redisReply *k = r->element[0];
    return (k->len == 7 && memcmp(k->str, "message", 7) == 0) ||
           (k->len == 8 && memcmp(k->str, "pmessage", 8) == 0 && r->elements >= 4);
}

/* One read into the reply reader; *got says whether bytes came. */
static int receive_once(wk__link *link, bool *got)
{
    redisContext *c = link->ctx;
    char buf[16 * 1024];
    short want = POLLIN;
    ssize_t n = link->tx->recv(link, buf, sizeof(buf), &want);
    *got = false;
    link->want = POLLIN;
    if (n == WK__TX_EOF)
        return wire_fail(c, WK_EIO, REDIS_ERR_EOF, "Server closed the connection");
    if (n == WK__TX_AGAIN) {
        link->want = want; /* TLS may need to write before it can read */
        return WK_OK;      /* nothing after all */
    }
    if (n < 0)
        return WK_EIO; /* the transport said why */
    if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
        return wire_fail(c, WK_ENOMEM, REDIS_ERR_OOM, "out of memory reading a reply");
    *got = true;
    return WK_OK;
}

int wk__wire_receive(wk__link *link)
{
    /* What the transport decoded already (the rest of a TLS record) is
     * invisible to poll: take it now, so that the caller's next poll
     * waits only for bytes still on the way. */
    bool got;
    int rc = receive_once(link, &got);
    while (!rc && got && link->tx->pending(link) > 0)
        rc = receive_once(link, &got);
    return rc;
}

bool wk__link_idle_alive(wk__link *link)
{
    while (link->owed) {
        redisReply *r = NULL;
        unsigned before = link->owed;
        if (wk__wire_receive(link) || wk__wire_take(link, &r))
            return false;
        if (r) {
            freeReplyObject(r); /* a reply beyond the owed ones: out of sync */
            return false;
        }
        if (link->owed == before)
            return true; /* not here yet */
    }
    return link->tx->idle_alive(link);
}

