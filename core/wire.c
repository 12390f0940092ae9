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

/* hiredis reads a bulk string's header ('$' and its length), then waits
 * for every byte it announced before building the string: a peer that
 * announces "$99999999999" would have the reader buffer whatever it sends
 * until the deadline. So while the reader waits inside a bulk string, its
 * length is read here (the digits after the '$', at the reader's cursor)
 * and one past WK__REPLY_MAX_BULK is refused as soon as its digits say so
 * (its line need not be complete). Writes a message for wire_fail into
 * `why`; false when the reader is not inside such a string. */
static bool bulk_past_bound(const redisReader *rd, char *why, size_t n)
{
#if HIREDIS_MAJOR == 0
    const redisReadTask *task = rd->ridx >= 0 ? &rd->rstack[rd->ridx] : NULL;
#else
    const redisReadTask *task = rd->ridx >= 0 ? rd->task[rd->ridx] : NULL;
#endif
    if (!task || task->type != REDIS_REPLY_STRING)
        return false;
    /* Up to 19 digits fit; a 20th is past any bound. "-1" (nil) and a
     * bad length are hiredis's to judge once their line is complete. */
    size_t i = rd->pos;
    unsigned long long len = 0;
    for (; i < rd->len && rd->buf[i] >= '0' && rd->buf[i] <= '9' && i - rd->pos < 19; i++)
        len = len * 10 + (unsigned long long)(rd->buf[i] - '0');
    bool more = i < rd->len && rd->buf[i] >= '0' && rd->buf[i] <= '9';
    if (more)
        snprintf(why, n, "the reply announces a bulk string whose length has more than 19 digits");
    else if (len > WK__REPLY_MAX_BULK)
        snprintf(why, n,
                 "the reply announces a bulk string of %s%llu bytes, more than %zu (WK_BODY_MAX)",
                 i < rd->len ? "" : "at least ", len, WK__REPLY_MAX_BULK);
    return more || len > WK__REPLY_MAX_BULK;
}

int wk__wire_take(wk__link *link, redisReply **reply)
{
    redisContext *c = link->ctx;
    *reply = NULL;
    for (;;) {
        void *r = NULL;
        if (wk__wire_all_taken(link))
            return WK_OK;
        char why[128];
        if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
            long long refused = wk__refused_elements;
            wk__refused_elements = 0;
            bool oom = c->reader->err == REDIS_ERR_OOM;
            if (oom && refused) { /* not out of memory: an array too long */
                snprintf(why, sizeof(why),
                         "the reply announces an array of %lld elements, more than %d", refused,
                         WK__REPLY_MAX_ELEMENTS);
                return wire_fail(c, WK_EPROTO, REDIS_ERR_PROTOCOL, why);
            }
            return wire_fail(c, oom ? WK_ENOMEM : WK_EPROTO,
                             oom ? REDIS_ERR_OOM : REDIS_ERR_PROTOCOL,
                             c->reader->errstr[0] ? c->reader->errstr : "protocol error");
        }
        if (!r && bulk_past_bound(c->reader, why, sizeof(why)))
            return wire_fail(c, WK_EPROTO, REDIS_ERR_PROTOCOL, why);
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

