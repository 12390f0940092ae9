/*
 * core/tls.c — the TLS transport (core/transport.h) on OpenSSL: a
 * handle's settings (one SSL_CTX: the CA is loaded once), the handshake
 * within the connect timeout with certificate and name verification, and
 * non-blocking SSL_read / SSL_write for core/wire.c. The only file that
 * includes OpenSSL.
 *
 * The name a certificate must carry is set per connection, on its SSL
 * object: the host that connection was dialed by (a cluster's nodes, a
 * primary a sentinel named, each has its own), or options.tls_server_name
 * for all of them.
 *
 * Sessions are resumed: the settings keep the last session each server
 * (its name and address) gave, and a new connection to it offers that
 * session, so a reconnect — after a failover, a restart, an idle drop —
 * costs an abbreviated handshake instead of a full one with certificate
 * verification. The server may decline; the handshake is then a full one.
 *
 * The socket is hiredis's (connected, left blocking); every call here is
 * non-blocking anyway: a BIO of our own sends with MSG_DONTWAIT and
 * MSG_NOSIGNAL (OpenSSL's socket BIO write()s, and a peer that hung up
 * would raise SIGPIPE in the application).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <wakuwaku/clock.h>

#include "core/db_internal.h"
#include "core/transport.h"

/* The sessions kept for resumption: one per server (name and address),
 * the oldest replaced when full. */
#define SESSIONS 16
#define SESSION_KEY_MAX 320

typedef struct kept_session {
    char key[SESSION_KEY_MAX]; /* "" : free */
    SSL_SESSION *session;
} kept_session;

struct wk__tls_config {
    SSL_CTX *ctx;
    char *server_name; /* options.tls_server_name; NULL: each connection's host */
    /* Shared by every connection made with these settings, whatever its
     * thread (a pool's handles, blocking connections). */
    pthread_mutex_t mu;
    kept_session sessions[SESSIONS];
    size_t next; /* the entry to replace next when none is free */
};

/* ---- a socket BIO that cannot raise SIGPIPE ----------------------- */

static BIO_METHOD *bio_method;
static CRYPTO_ONCE bio_once = CRYPTO_ONCE_STATIC_INIT;

/* A send's or recv's result as the BIO's: the count, or -1 with the
 * retry flags for `direction` (BIO_FLAGS_WRITE / _READ) set when the
 * socket would block. */
static int bio_result(BIO *b, ssize_t n, int direction)
{
    if (n >= 0)
        return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        BIO_set_flags(b, direction | BIO_FLAGS_SHOULD_RETRY);
    return -1;
}

/* The socket, straight from the BIO's data (BIO_get_fd would go through
 * BIO_ctrl and its callback checks on every record). */
static int bio_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int bio_write(BIO *b, const char *data, int len)
{
    BIO_clear_retry_flags(b);
    return bio_result(b, wk__sock_send(bio_fd(b), data, (size_t)len), BIO_FLAGS_WRITE);
}

static int bio_read(BIO *b, char *buf, int len)
{
    BIO_clear_retry_flags(b);
    return bio_result(b, wk__sock_recv(bio_fd(b), buf, (size_t)len), BIO_FLAGS_READ);
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    switch (cmd) {
    case BIO_C_SET_FD:
        BIO_set_data(b, (void *)(intptr_t) * (int *)ptr);
        BIO_set_init(b, 1);
        (void)num;
        return 1;
    case BIO_C_GET_FD:
        if (ptr)
            *(int *)ptr = (int)(intptr_t)BIO_get_data(b);
        return (long)(intptr_t)BIO_get_data(b);
    case BIO_CTRL_FLUSH:
        return 1;
    default:
        return 0;
    }
}

static void bio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "wakuwaku socket");
    if (m && (!BIO_meth_set_write(m, bio_write) || !BIO_meth_set_read(m, bio_read) ||
              !BIO_meth_set_ctrl(m, bio_ctrl))) {
        BIO_meth_free(m);
        m = NULL;
    }
    bio_method = m;
}

static BIO *bio_new(int fd)
{
    if (!CRYPTO_THREAD_run_once(&bio_once, bio_method_init) || !bio_method)
        return NULL;
    BIO *b = BIO_new(bio_method);
    if (b)
        BIO_set_fd(b, fd, BIO_NOCLOSE);
    return b;
}

/* ---- messages -------------------------------------------------------- */

/* OpenSSL's reason for the last failure on this thread ("" if none). */
static const char *ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    buf[0] = '\0';
    if (e) {
        const char *r = ERR_reason_error_string(e);
        if (r)
            snprintf(buf, len, "%s", r);
        else
            ERR_error_string_n(e, buf, len);
    }
    ERR_clear_error();
    return buf;
}

static int cfg_fail(char *msg, size_t msglen, int status, const char *what, const char *file)
{
    char why[200];
    ssl_reason(why, sizeof(why));
    snprintf(msg, msglen, "TLS: %s %s: %s", what, file, why[0] ? why : "failed");
    return status;
}

/* A file the options name that cannot be read, said with the file's own
 * reason ("No such file or directory") rather than OpenSSL's ("system
 * lib"): WK_EINVAL with the message, or WK_OK when it looks readable
 * (OpenSSL then judges its contents). */
static int unreadable(char *msg, size_t msglen, const char *what, const char *path, bool dir)
{
    struct stat st;
    const char *why = NULL;
    if (stat(path, &st) != 0 || access(path, dir ? R_OK | X_OK : R_OK) != 0)
        why = strerror(errno);
    else if (dir && !S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (!dir && S_ISDIR(st.st_mode))
        why = "is a directory";
    if (!why)
        return WK_OK;
    snprintf(msg, msglen, "TLS: cannot load %s %s: %s", what, path, why);
    return WK_EINVAL;
}

/* ---- settings -------------------------------------------------------- */

static bool is_ip_address(const char *name)
{
    unsigned char ip[16];
    return inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
}

/* Make `param` require `name` in the certificate: as an IP address
 * (subjectAltName IP) when it is one, else as a DNS name. 1 on success. */
static int expect_name(X509_VERIFY_PARAM *param, const char *name)
{
    return is_ip_address(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name)
                               : X509_VERIFY_PARAM_set1_host(param, name, 0);
}

static int no_client_cert(SSL *ssl, X509 **x509, EVP_PKEY **pkey);
static int on_new_session(SSL *ssl, SSL_SESSION *session);

int wk__tls_config_new(wk__tls_config **out, const wk__tls_options *o, char *msg, size_t msglen)
{
    *out = NULL;
    if (!o->cert_file != !o->key_file) {
        snprintf(msg, msglen, "TLS: options.%s is set without options.%s",
                 o->cert_file ? "tls_cert_file" : "tls_key_file",
                 o->cert_file ? "tls_key_file" : "tls_cert_file");
        return WK_EINVAL;
    }
    if (o->server_name && !o->server_name[0]) {
        snprintf(msg, msglen, "TLS: options.tls_server_name is empty (NULL: each server's host)");
        return WK_EINVAL;
    }
    wk__tls_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg || (o->server_name && !(cfg->server_name = strdup(o->server_name))) ||
        pthread_mutex_init(&cfg->mu, NULL)) {
        if (cfg)
            free(cfg->server_name);
        free(cfg);
        snprintf(msg, msglen, "out of memory");
        return WK_ENOMEM;
    }
    ERR_clear_error();
    int rc = WK_OK;
    cfg->ctx = SSL_CTX_new(TLS_client_method());
    if (!cfg->ctx) {
        rc = cfg_fail(msg, msglen, WK_ENOMEM, "cannot create the context", "");
        goto done;
    }
    SSL_CTX_set_min_proto_version(cfg->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(cfg->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Read whole socket buffers, not a record header then its body: one
     * recv per reply instead of two (wk__wire_receive drains what is
     * buffered, SSL_has_pending, so poll stays right). */
    SSL_CTX_set_read_ahead(cfg->ctx, 1);
    SSL_CTX_set_verify(cfg->ctx, SSL_VERIFY_PEER, NULL);
    /* Sessions are kept here, per server (see the banner), not in
     * OpenSSL's cache, which a client does not look up by itself. */
    SSL_CTX_set_app_data(cfg->ctx, cfg);
    SSL_CTX_set_session_cache_mode(cfg->ctx,
                                   SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(cfg->ctx, on_new_session);
    if (!o->cert_file)
        SSL_CTX_set_client_cert_cb(cfg->ctx, no_client_cert);
    if ((o->ca_file &&
         (rc = unreadable(msg, msglen, "the CA certificates from", o->ca_file, false))) ||
        (o->ca_dir &&
         (rc = unreadable(msg, msglen, "the CA certificates from", o->ca_dir, true))) ||
        (o->cert_file &&
         (rc = unreadable(msg, msglen, "the client certificate", o->cert_file, false))) ||
        (o->key_file && (rc = unreadable(msg, msglen, "the client key", o->key_file, false))))
        goto done;
    if (o->ca_file || o->ca_dir) {
        if (SSL_CTX_load_verify_locations(cfg->ctx, o->ca_file, o->ca_dir) != 1) {
            rc = cfg_fail(msg, msglen, WK_EINVAL, "cannot load the CA certificates from",
                          o->ca_file ? o->ca_file : o->ca_dir);
            goto done;
        }
    } else if (SSL_CTX_set_default_verify_paths(cfg->ctx) != 1) {
        rc = cfg_fail(msg, msglen, WK_EINVAL, "cannot load", "the system's CA certificates");
        goto done;
    }
    if (o->cert_file) {
        if (SSL_CTX_use_certificate_chain_file(cfg->ctx, o->cert_file) != 1) {
            rc = cfg_fail(msg, msglen, WK_EINVAL, "cannot load the client certificate",
                          o->cert_file);
            goto done;
        }
        if (SSL_CTX_use_PrivateKey_file(cfg->ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
            rc = cfg_fail(msg, msglen, WK_EINVAL, "cannot load the client key", o->key_file);
            goto done;
        }
        if (SSL_CTX_check_private_key(cfg->ctx) != 1) {
            rc = cfg_fail(msg, msglen, WK_EINVAL, "the client key does not match", o->cert_file);
            goto done;
        }
    }
    /* The override is every connection's name: refused here, at open, if
     * OpenSSL cannot take it (each connection sets it again on its own). */
    if (cfg->server_name && expect_name(SSL_CTX_get0_param(cfg->ctx), cfg->server_name) != 1)
        rc = cfg_fail(msg, msglen, WK_EINVAL, "cannot verify the name", cfg->server_name);
done:
    if (rc) {
        wk__tls_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return WK_OK;
}

void wk__tls_config_free(wk__tls_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < SESSIONS; i++)
        if (cfg->sessions[i].session)
            SSL_SESSION_free(cfg->sessions[i].session);
    pthread_mutex_destroy(&cfg->mu);
    SSL_CTX_free(cfg->ctx);
    free(cfg->server_name);
    free(cfg);
}

/* ---- the transport --------------------------------------------------- */

static const struct wk__transport tls_transport;
typedef struct tls_state {
    SSL *ssl;
    bool failed;                      /* a fatal error: no close_notify */
    bool cert_requested;              /* the server asked for a client certificate we lack */
    const struct wk__tls_config *cfg; /* while handshaking: the settings */
    char *name;                       /* while handshaking: the name required */
    char key[SESSION_KEY_MAX];        /* the server's, for its sessions: name@address */
} tls_state;

/* ---- sessions ---------------------------------------------------------- */

/* The server `name` at the other end of `fd`, as a session key. */
static void session_key(char *key, const char *name, int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char addr[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in->sin_addr, addr, sizeof(addr));
            port = ntohs(in->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
            port = ntohs(in6->sin6_port);
        }
    }
    snprintf(key, SESSION_KEY_MAX, "%s@%s:%d", name, addr, port);
}

/* The entry of `key`, or NULL. Under cfg->mu. */
static kept_session *session_of(wk__tls_config *cfg, const char *key)
{
    for (size_t i = 0; i < SESSIONS; i++)
        if (cfg->sessions[i].key[0] && !strcmp(cfg->sessions[i].key, key))
            return &cfg->sessions[i];
    return NULL;
}

/* OpenSSL's new-session callback: keep a copy of the server's latest
 * session. A copy, because OpenSSL marks the connection's own session
 * not resumable when the connection ends without a close_notify — a
 * killed connection, a failover: the very reconnects resumption is for. */
static int on_new_session(SSL *ssl, SSL_SESSION *session)
{
    wk__tls_config *cfg = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    const tls_state *t = SSL_get_app_data(ssl);
    SSL_SESSION *copy = cfg && t && t->key[0] ? SSL_SESSION_dup(session) : NULL;
    if (!copy)
        return 0;
    pthread_mutex_lock(&cfg->mu);
    kept_session *k = session_of(cfg, t->key);
    if (!k)
        for (size_t i = 0; i < SESSIONS && !k; i++)
            if (!cfg->sessions[i].key[0])
                k = &cfg->sessions[i];
    if (!k) {
        k = &cfg->sessions[cfg->next];
        cfg->next = (cfg->next + 1) % SESSIONS;
    }
    if (k->session)
        SSL_SESSION_free(k->session);
    k->session = copy;
    snprintf(k->key, sizeof(k->key), "%s", t->key);
    pthread_mutex_unlock(&cfg->mu);
    return 0; /* the original stays OpenSSL's */
}

/* Offer the server's kept session, if any, on a new connection. */
static void offer_session(wk__tls_config *cfg, tls_state *t)
{
    pthread_mutex_lock(&cfg->mu);
    kept_session *k = session_of(cfg, t->key);
    if (k && k->session)
        SSL_set_session(t->ssl, k->session); /* takes its own reference */
    pthread_mutex_unlock(&cfg->mu);
}

bool wk__tls_resumed(const wk__link *link)
{
    const tls_state *t = link->state;
    return link->tx == &tls_transport && t && SSL_session_reused(t->ssl) == 1;
}

/* Called by OpenSSL when the server asks for a client certificate and
 * none is configured: send none, but remember it, so that the server
 * hanging up afterwards (TLS 1.3 refuses after the handshake) can be
 * told apart from an I/O failure. */
static int no_client_cert(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
    (void)x509;
    (void)pkey;
    tls_state *t = SSL_get_app_data(ssl);
    if (t)
        t->cert_requested = true;
    return 0;
}

bool wk__tls_lacks_client_cert(const wk__link *link)
{
    const tls_state *t = link->state;
    return link->tx && strcmp(link->tx->name, "tls") == 0 && t && t->cert_requested;
}

static ssize_t tls_fail(wk__link *link, tls_state *t, int ret, const char *what)
{
    int sys_errno = errno; /* before anything else can change it */
    int e = SSL_get_error(t->ssl, ret);
    char why[120];
    ssl_reason(why, sizeof(why));
    t->failed = true;
    link->ctx->err = REDIS_ERR_IO;
    if (e == SSL_ERROR_ZERO_RETURN)
        return WK__TX_EOF;
    if (e == SSL_ERROR_SYSCALL && sys_errno && sys_errno != EAGAIN)
        snprintf(link->ctx->errstr, sizeof(link->ctx->errstr), "TLS %s: %s", what,
                 strerror(sys_errno));
    else if (e == SSL_ERROR_SYSCALL || strstr(why, "unexpected eof"))
        return WK__TX_EOF;
    else
        snprintf(link->ctx->errstr, sizeof(link->ctx->errstr), "TLS %s: %s", what,
                 why[0] ? why : "failed");
    return WK__TX_FAIL;
}

/* What an SSL_read or SSL_write that returned n means: the bytes moved,
 * a wait for the socket (*want), or the failure. */
static ssize_t tls_result(wk__link *link, tls_state *t, int n, short *want, const char *what)
{
    if (n > 0)
        return n;
    switch (SSL_get_error(t->ssl, n)) {
    case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        return WK__TX_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        return WK__TX_AGAIN;
    default:
        return tls_fail(link, t, n, what);
    }
}

/* Empty this thread's error queue before an SSL_read or SSL_write, so
 * that SSL_get_error judges only that call. Failures here leave it empty
 * (ssl_reason), so it is nearly always empty already: peeking costs a
 * fraction of clearing, which walks every slot of the queue. */
static void clear_errors(void)
{
    if (ERR_peek_error())
        ERR_clear_error();
}

static ssize_t tls_send(wk__link *link, const void *data, size_t len, short *want)
{
    tls_state *t = link->state;
    clear_errors();
    errno = 0;
    ssize_t r = tls_result(link, t, SSL_write(t->ssl, data, len > INT32_MAX ? INT32_MAX : (int)len),
                           want, "write");
    if (r == WK__TX_EOF) {
        snprintf(link->ctx->errstr, sizeof(link->ctx->errstr), "connection closed");
        return WK__TX_FAIL;
    }
    return r;
}

static ssize_t tls_recv(wk__link *link, void *buf, size_t len, short *want)
{
    tls_state *t = link->state;
    clear_errors();
    errno = 0;
    return tls_result(link, t, SSL_read(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len), want,
                      "read");
}

static size_t tls_pending(const wk__link *link)
{
    const tls_state *t = link->state;
    /* Decoded bytes, or (read-ahead) raw ones not yet decoded. */
    return SSL_pending(t->ssl) > 0 || SSL_has_pending(t->ssl) ? 1 : 0;
}

static bool tls_idle_alive(wk__link *link)
{
    tls_state *t = link->state;
    if (SSL_pending(t->ssl) > 0)
        return false; /* decoded bytes nobody asked for */
    char byte;
    ERR_clear_error();
    /* SSL_peek processes what arrived (a session ticket is handled
     * inside) without consuming application data. */
    int n = SSL_peek(t->ssl, &byte, 1);
    if (n > 0)
        return false;
    int e = SSL_get_error(t->ssl, n);
    ERR_clear_error();
    if (e == SSL_ERROR_WANT_READ)
        return true;
    t->failed = true;
    return false;
}

static void tls_close(wk__link *link)
{
    tls_state *t = link->state;
    if (!t)
        return;
    if (!t->failed) {
        /* One try at close_notify: non-blocking, the answer not awaited. */
        ERR_clear_error();
        SSL_shutdown(t->ssl);
        ERR_clear_error();
    }
    SSL_free(t->ssl);
    free(t->name);
    free(t);
    link->state = NULL;
}

static const wk__transport tls_transport = {
    .name = "tls",
    .send = tls_send,
    .recv = tls_recv,
    .pending = tls_pending,
    .idle_alive = tls_idle_alive,
    .close = tls_close,
};

/* ---- the handshake --------------------------------------------------- */

int wk__tls_start(const wk__tls_config *cfg, wk__link *link, const char *host, char *msg,
                  size_t msglen)
{
    const char *name = cfg->server_name ? cfg->server_name : host;
    if (!name || !name[0]) {
        snprintf(msg, msglen, "TLS: no host name to verify (set options.tls_server_name)");
        return WK_EINVAL;
    }
    tls_state *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(msg, msglen, "out of memory starting TLS");
        return WK_ENOMEM;
    }
    ERR_clear_error();
    BIO *bio = NULL;
    t->ssl = SSL_new(cfg->ctx);
    t->name = strdup(name);
    if (t->ssl && t->name)
        bio = bio_new(link->ctx->fd);
    if (!t->ssl || !bio) {
        BIO_free(bio);
        SSL_free(t->ssl);
        free(t->name);
        free(t);
        snprintf(msg, msglen, "out of memory starting TLS");
        return WK_ENOMEM;
    }
    SSL_set_bio(t->ssl, bio, bio);
    SSL_set_app_data(t->ssl, t);
    /* This connection's name, on its own SSL object (the context is
     * shared by every node of the handle): the certificate must carry
     * it, and SNI asks for it unless it is an address. */
    if (expect_name(SSL_get0_param(t->ssl), name) != 1) {
        char why[200];
        ssl_reason(why, sizeof(why));
        snprintf(msg, msglen, "TLS: cannot verify the name %s: %s", name, why[0] ? why : "failed");
        SSL_free(t->ssl);
        free(t->name);
        free(t);
        return WK_EINVAL;
    }
    if (!is_ip_address(name))
        SSL_set_tlsext_host_name(t->ssl, name);
    session_key(t->key, name, link->ctx->fd);
    offer_session((wk__tls_config *)cfg, t); /* the kept sessions only change */
    /* Until the handshake completes: no close_notify on close. */
    t->failed = true;
    t->cfg = cfg;
    link->state = t;
    link->tx = &tls_transport; /* so that closing the link frees it */
    return WK_OK;
}

/* Drop a handshake that failed: the link is plain again. */
static void handshake_abort(wk__link *link)
{
    tls_state *t = link->state;
    SSL_free(t->ssl);
    free(t->name);
    free(t);
    link->state = NULL;
    link->tx = &wk__plain_transport;
}

int wk__tls_step(wk__link *link, short *want, const char *addr, char *msg, size_t msglen)
{
    tls_state *t = link->state;
    const wk__tls_config *cfg = t->cfg;
    ERR_clear_error();
    errno = 0;
    int r = SSL_connect(t->ssl);
    if (r == 1) {
        t->failed = false;
        free(t->name);
        t->name = NULL;
        return WK_OK;
    }
    int sys_errno = errno;
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return WK__TLS_AGAIN;
    }
    int rc;
    long verify = SSL_get_verify_result(t->ssl);
    char why[200];
    ssl_reason(why, sizeof(why));
    if (verify != X509_V_OK) {
        /* The certificate was refused: a matter of trust, not I/O. */
        snprintf(msg, msglen,
                 "TLS: the certificate of %s was not accepted: %s (it must name %s: %s)", addr,
                 X509_verify_cert_error_string(verify), t->name,
                 cfg->server_name ? "options.tls_server_name" : "the host it was reached by");
        rc = WK_EAUTH;
    } else if (strstr(why, "alert") && strstr(why, "certificate")) {
        /* The server refused ours (or its absence): tls-auth-clients. */
        snprintf(msg, msglen,
                 "TLS: %s refused the client certificate (%s); set options.tls_cert_file "
                 "and options.tls_key_file",
                 addr, why);
        rc = WK_EAUTH;
    } else if (e == SSL_ERROR_SYSCALL && sys_errno) {
        snprintf(msg, msglen, "TLS handshake with %s failed: %s", addr, strerror(sys_errno));
        rc = WK_EIO;
    } else if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN || !why[0] ||
               strstr(why, "unexpected eof")) {
        snprintf(msg, msglen,
                 "TLS handshake with %s failed: the server closed the connection (is it "
                 "a TLS port?)",
                 addr);
        rc = WK_EIO;
    } else {
        snprintf(msg, msglen, "TLS handshake with %s failed: %s (is it a TLS port?)", addr, why);
        rc = WK_EIO;
    }
    handshake_abort(link);
    return rc;
}
