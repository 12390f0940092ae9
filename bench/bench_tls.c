/*
 * bench/bench_tls.c — what `bench_redis --tls` needs besides the library:
 * a CA and a server certificate made with `openssl`, and the raw floor of
 * TLS, a minimal client on OpenSSL (blocking socket, one SSL_write per
 * round trip, read-ahead and 16 KiB reads, hiredis's reader to parse)
 * that the raw side's bench_raw_append / bench_raw_reply use when the
 * context has one (bench_ctx.raw_tls). So the same raw lock cycle runs
 * over TLS and over plain TCP, and the table can say how far TLS itself
 * is from TCP on this machine, next to the library's own ratio.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "bench/bench_cases.h"
#include "support.h" /* tests/support: wk_test_free_port */

struct bench_tls_raw {
    SSL_CTX *ctx;
    SSL *ssl;
    int fd;
    redisReader *reader;
    char *out; /* queued commands, sent at the next reply */
    size_t len, cap;
};

static void fail(const char *what)
{
    char why[256] = "";
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, why, sizeof(why));
    fprintf(stderr, "bench: raw TLS: %s %s\n", what, why);
    exit(1);
}

void bench_tls_certs(char *dir, size_t dirlen, const char **lines)
{
    snprintf(dir, dirlen, "/tmp/wk-bench-tls-XXXXXX");
    if (!mkdtemp(dir))
        fail("mkdtemp");
    char cmd[1400];
    snprintf(cmd, sizeof(cmd),
             "(set -e; cd '%s'; EC='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
             "openssl req -x509 $EC -keyout ca.key -out ca.crt -days 2 -subj /CN=wk-bench-ca;"
             "openssl req $EC -keyout server.key -out server.csr -subj /CN=localhost;"
             "printf 'subjectAltName=IP:127.0.0.1\\n' > server.ext;"
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
             " -out server.crt -days 2 -extfile server.ext) >/dev/null 2>&1",
             dir);
    if (system(cmd) != 0)
        fail("openssl could not make the certificates");
    static char port[32], cert[128], key[128];
    snprintf(port, sizeof(port), "tls-port %d", wk_test_free_port());
    snprintf(cert, sizeof(cert), "tls-cert-file %s/server.crt", dir);
    snprintf(key, sizeof(key), "tls-key-file %s/server.key", dir);
    lines[0] = port;
    lines[1] = cert;
    lines[2] = key;
    lines[3] = "tls-auth-clients no";
    lines[4] = NULL;
}

bench_tls_raw *bench_tls_raw_open(int port, const char *ca_file)
{
    bench_tls_raw *t = calloc(1, sizeof(*t));
    if (!t || !(t->reader = redisReaderCreate()))
        fail("out of memory");
    t->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int one = 1;
    if (t->fd < 0 || connect(t->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        setsockopt(t->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        fail("connect");
    /* The library's settings: TLS 1.2 at least, the certificate and its
     * address verified, read-ahead (one recv per reply). */
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx || !SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION) ||
        SSL_CTX_load_verify_locations(t->ctx, ca_file, NULL) != 1)
        fail("context");
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_read_ahead(t->ctx, 1);
    t->ssl = SSL_new(t->ctx);
    if (!t->ssl || !SSL_set_fd(t->ssl, t->fd) ||
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), "127.0.0.1") != 1 ||
        SSL_connect(t->ssl) != 1)
        fail("handshake");
    return t;
}

void bench_tls_raw_close(bench_tls_raw *t)
{
    if (!t)
        return;
    SSL_shutdown(t->ssl);
    SSL_free(t->ssl);
    SSL_CTX_free(t->ctx);
    close(t->fd);
    redisReaderFree(t->reader);
    free(t->out);
    free(t);
}

void bench_tls_raw_append(bench_tls_raw *t, int argc, const char **argv, const size_t *lens)
{
    char *cmd = NULL;
    long long n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (n < 0)
        fail("format");
    if (t->len + (size_t)n > t->cap) {
        t->cap = (t->len + (size_t)n) * 2;
        if (!(t->out = realloc(t->out, t->cap)))
            fail("out of memory");
    }
    memcpy(t->out + t->len, cmd, (size_t)n);
    t->len += (size_t)n;
    free(cmd);
}

redisReply *bench_tls_raw_reply(bench_tls_raw *t)
{
    if (t->len) {
        /* Everything queued in one SSL_write: one record, one send. */
        if (SSL_write(t->ssl, t->out, (int)t->len) != (int)t->len)
            fail("write");
        t->len = 0;
    }
    for (;;) {
        void *r = NULL;
        if (redisReaderGetReply(t->reader, &r) != REDIS_OK)
            fail("protocol");
        if (r)
            return r;
        char buf[16 * 1024];
        int n = SSL_read(t->ssl, buf, sizeof(buf));
        if (n <= 0 || redisReaderFeed(t->reader, buf, (size_t)n) != REDIS_OK)
            fail("read");
    }
}
