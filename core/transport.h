/*
 * core/transport.h — how the bytes of a connection move: plain on the
 * socket, or TLS over it (core/tls.c). hiredis connects the socket and
 * parses replies; core/wire.c moves the bytes through a link's transport,
 * so queries, batches and the Pub/Sub subscriber do not know which one
 * they use. Not installed: nothing of OpenSSL leaves core/.
 */
#ifndef WK_CORE_TRANSPORT_H
#define WK_CORE_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

typedef struct wk__link wk__link;

/* What a transport's send/recv returns besides a byte count (> 0). */
#define WK__TX_EOF 0      /* recv: the peer closed the connection */
#define WK__TX_AGAIN (-1) /* not now: poll the socket for *want, then retry */
#define WK__TX_FAIL (-2)  /* failed; the reason is in link->ctx->errstr */

typedef struct wk__transport {
    const char *name;
    /* Move up to `len` bytes without blocking. On WK__TX_AGAIN, *want is
     * the poll event to wait for (TLS may need to read to write). */
    ssize_t (*send)(wk__link *link, const void *data, size_t len, short *want);
    ssize_t (*recv)(wk__link *link, void *buf, size_t len, short *want);
    /* Non-zero while bytes already taken off the socket wait in the
     * transport (TLS: a decoded record not returned whole, or data read
     * ahead): poll would not see them, so recv must be called again. */
    size_t (*pending)(const wk__link *link);
    /* An idle connection: true if nothing arrived (no EOF, no stray
     * bytes), without consuming what did. */
    bool (*idle_alive)(wk__link *link);
    /* Release the transport's state (the socket is hiredis's). */
    void (*close)(wk__link *link);
} wk__transport;

/* A connection: hiredis's context (socket, reply reader, err/errstr)
 * plus the transport its bytes go through. ctx NULL: not connected. */
struct wk__link {
    redisContext *ctx;
    const wk__transport *tx;
    void *state; /* the transport's (TLS: the SSL object) */
    short want;  /* poll event the last recv waited for (0: POLLIN) */
    int wake_fd; /* waits also end when this is readable (-1: none) */
    /* Replies owed to queries the deadline abandoned (WK__QUERY_ABANDON,
     * core/core_internal.h): the next ones read are dropped. */
    unsigned owed;
};

extern const wk__transport wk__plain_transport;

/* One send (MSG_NOSIGNAL: never SIGPIPE) or recv on socket `fd` that does
 * not block, repeated when a signal interrupts it: the count, or -1 with
 * errno (EAGAIN / EWOULDBLOCK: it would block). The plain transport and
 * TLS's socket BIO both move their bytes with these. */
ssize_t wk__sock_send(int fd, const void *data, size_t len);
ssize_t wk__sock_recv(int fd, void *buf, size_t len);

/* Close the transport, then the context; the link is left empty.
 * An empty link is a harmless no-op. */
void wk__link_close(wk__link *link);

/* ---- TLS (core/tls.c) ---------------------------------------------- */

/* A handle's TLS settings: one OpenSSL context built at open from the
 * options, shared by its reconnects, its subscriber connections and a
 * cluster's nodes. The name a certificate must carry is each
 * connection's own (see wk__tls_start). */
typedef struct wk__tls_config wk__tls_config;

typedef struct wk__tls_options {
    const char *ca_file, *ca_dir, *cert_file, *key_file;
    /* options.tls_server_name: the name every server's certificate must
     * carry (and SNI); NULL: each connection's own host. */
    const char *server_name;
} wk__tls_options;

/* Build the settings; WK_OK, WK_EINVAL (unreadable CA, certificate or
 * key: msg names the file and OpenSSL's reason) or WK_ENOMEM. */
int wk__tls_config_new(wk__tls_config **out, const wk__tls_options *opts, char *msg, size_t msglen);
void wk__tls_config_free(wk__tls_config *cfg);

/*
 * The TLS handshake, in steps (core/conn_machine.c drives it for every
 * handle): start on link->ctx's connected socket, then step whenever the
 * socket is ready for *want, until a step returns WK_OK (the link's
 * transport is TLS now) or a failure (the link is plain again; the caller
 * closes it). The server's certificate chain and name are verified: the
 * settings' server_name, or else `host`, the host this socket was dialed
 * by (the URL's, a seed's, the endpoint CLUSTER SLOTS, MOVED or ASK named,
 * the primary a sentinel named) — a DNS name is also sent as SNI, an IP
 * address is checked as one. `addr` names the server in messages.
 * Failures: WK_EAUTH (the certificate was refused: msg names addr,
 * X509_verify_cert_error_string's reason and the name required; or the
 * server refused ours), WK_EIO (not a TLS port, connection closed,
 * protocol error), WK_EINVAL (no name to check), WK_ENOMEM. The caller
 * keeps the deadline (the connect timeout's).
 */
#define WK__TLS_AGAIN 1
int wk__tls_start(const wk__tls_config *cfg, wk__link *link, const char *host, char *msg,
                  size_t msglen);
int wk__tls_step(wk__link *link, short *want, const char *addr, char *msg, size_t msglen);

/* True when the link is TLS and the server asked for a client
 * certificate that the options do not give (tls-auth-clients): a failure
 * right after the handshake is then the server refusing us. */
bool wk__tls_lacks_client_cert(const wk__link *link);
/* Whether this TLS link's handshake resumed a kept session (tests). */
bool wk__tls_resumed(const wk__link *link);

#endif /* WK_CORE_TRANSPORT_H */
