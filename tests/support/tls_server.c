/*
 * tests/support/tls_server.c — a redis-server with a TLS port, and the
 * certificates it needs, made by the `openssl` command line in a
 * temporary directory: a CA, a server certificate for 127.0.0.1 and
 * localhost, a client certificate, and an unrelated CA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static int make_certs(const char *dir)
{
    static const char script[] =
        "set -e; cd '%s'; EC='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
        "openssl req -x509 $EC -keyout ca.key -out ca.crt -days 2 -subj /CN=wk-test-ca;"
        "openssl req -x509 $EC -keyout other.key -out other.crt -days 2 -subj /CN=wk-other-ca;"
        "openssl req $EC -keyout server.key -out server.csr -subj /CN=localhost;"
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext;"
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
        " -out server.crt -days 2 -extfile server.ext;"
        "openssl req $EC -keyout client.key -out client.csr -subj /CN=wk-client;"
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
        " -out client.crt -days 2";
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "(%s) >/dev/null 2>&1", script);
    char full[2300];
    snprintf(full, sizeof(full), cmd, dir);
    return system(full) == 0 ? 0 : -1;
}

int wk_test_tls_start(wk_test_tls *t, bool auth_clients, const char *extra)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->certs, sizeof(t->certs), "/tmp/wk-test-tls-XXXXXX");
    if (!mkdtemp(t->certs) || make_certs(t->certs) != 0)
        return -1;
    snprintf(t->ca, sizeof(t->ca), "%s/ca.crt", t->certs);
    snprintf(t->other_ca, sizeof(t->other_ca), "%s/other.crt", t->certs);
    snprintf(t->client_crt, sizeof(t->client_crt), "%s/client.crt", t->certs);
    snprintf(t->client_key, sizeof(t->client_key), "%s/client.key", t->certs);
    char port[32], cert[160], key[160], ca[160], auth[64];
    t->tls_port = wk_test_free_port();
    if (t->tls_port <= 0)
        return -1;
    snprintf(port, sizeof(port), "tls-port %d", t->tls_port);
    snprintf(cert, sizeof(cert), "tls-cert-file %s/server.crt", t->certs);
    snprintf(key, sizeof(key), "tls-key-file %s/server.key", t->certs);
    snprintf(ca, sizeof(ca), "tls-ca-cert-file %s", t->ca);
    snprintf(auth, sizeof(auth), "tls-auth-clients %s", auth_clients ? "yes" : "no");
    const char *config[] = {port, cert, key, ca, auth, extra, NULL};
    if (wk_test_server_start(&t->s, config) != 0)
        return -1;
    snprintf(t->url, sizeof(t->url), "rediss://127.0.0.1:%d", t->tls_port);
    return 0;
}

void wk_test_tls_stop(wk_test_tls *t)
{
    wk_test_server_stop(&t->s);
    if (!t->certs[0])
        return;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->certs);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", t->certs);
}

wk_db_options wk_test_tls_options(const wk_test_tls *t)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = t->url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 2000;
    o.tls_ca_file = t->ca;
    return o;
}
