/*
 * core/dial.h — opening the socket of a connection, without blocking: the
 * library's own connect (TCP, every address the host name resolves to in
 * turn, or a unix socket), used by blocking handles (which wait on it
 * within the connect timeout) and by the event-loop handle (which waits on
 * it in the loop). Not installed.
 *
 * Name resolution (getaddrinfo) does block; give an address, or a name
 * the resolver answers from /etc/hosts, where that matters.
 */
#ifndef WK_CORE_DIAL_H
#define WK_CORE_DIAL_H

#include <stdbool.h>
#include <stddef.h>

#include <wakuwaku/db.h>

typedef struct wk__dial {
    int fd;                 /* the socket being connected; -1: none */
    bool connected;         /* connect() completed */
    struct addrinfo *addrs; /* TCP: what the host resolved to */
    struct addrinfo *next;  /* the next address to try */
    char why[160];          /* the last address's failure */
} wk__dial;

/* Start connecting to `url`'s server. WK_OK: d->fd is connecting (wait
 * for it to be writable, then call wk__dial_check) or connected.
 * Otherwise WK_EIO / WK_ENOMEM with msg, and nothing to free. */
int wk__dial_start(wk__dial *d, const wk_url *url, char *msg, size_t msglen);

/* After d->fd became writable (or failed): WK_OK once connected; 1 when
 * this address failed and the next one is being tried (a new d->fd: wait
 * again); WK_EIO with msg when no address is left (the dial is ended:
 * nothing to free). */
int wk__dial_check(wk__dial *d, char *msg, size_t msglen);

/* Give up: close the socket (unless taken) and free the addresses. */
void wk__dial_end(wk__dial *d);

/* The connected socket, now the caller's; the dial is ended. */
int wk__dial_take(wk__dial *d);

#endif /* WK_CORE_DIAL_H */
