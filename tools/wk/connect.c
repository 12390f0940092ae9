/*
 * tools/wk/connect.c — how wk reaches Redis: the URL, the TLS files and
 * the credentials, each an option and an environment variable (one table
 * below), mapped onto the library's wk_db_options (wakuwaku/db.h).
 *
 * Passwords: the data nodes' one is the URL's, or $WK_PASSWORD, or the
 * contents of --password-file; the sentinels' one is --sentinel-password,
 * $WK_SENTINEL_PASSWORD or --sentinel-password-file. A file's one
 * trailing newline is not part of the password (echo and editors add it).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools/wk/wk.h"

/* One option. `pair`: the other form of the same password (text / file),
 * or -1. `cli`: NULL when it is an environment variable only (a data
 * password is never typed on a command line: the URL holds it there). */
static const struct {
    const char *cli, *env, *arg;
    int pair;
    const char *help;
} rows[CONN_FIELDS] = {
    [CONN_URL] = {"--url", "WK_URL", "URL", -1,
                  "redis://, rediss:// or redis-sentinel://[user:password@]…"},
    [CONN_PASSWORD] = {NULL, "WK_PASSWORD", NULL, CONN_PASSWORD_FILE,
                       "the data nodes' password (replaces the URL's)"},
    [CONN_PASSWORD_FILE] = {"--password-file", "WK_PASSWORD_FILE", "FILE", CONN_PASSWORD,
                            "the same, read from FILE"},
    [CONN_TLS_CA_FILE] = {"--tls-ca-file", "WK_TLS_CA_FILE", "FILE", -1,
                          "PEM CA certificates to trust (rediss://)"},
    [CONN_TLS_CA_DIR] = {"--tls-ca-dir", "WK_TLS_CA_DIR", "DIR", -1,
                         "a directory of hashed CA certificates (c_rehash)"},
    [CONN_TLS_CERT] = {"--tls-cert", "WK_TLS_CERT", "FILE", -1,
                       "PEM client certificate, for tls-auth-clients yes"},
    [CONN_TLS_KEY] = {"--tls-key", "WK_TLS_KEY", "FILE", -1, "its private key (PEM)"},
    [CONN_TLS_SERVER_NAME] = {"--tls-server-name", "WK_TLS_SERVER_NAME", "NAME", -1,
                              "the name the server's certificate must carry"},
    [CONN_SENTINEL_USER] = {"--sentinel-user", "WK_SENTINEL_USER", "USER", -1,
                            "the sentinels' ACL user (redis-sentinel://)"},
    [CONN_SENTINEL_PASSWORD] = {"--sentinel-password", "WK_SENTINEL_PASSWORD", "PASSWORD",
                                CONN_SENTINEL_PASSWORD_FILE, "the sentinels' password"},
    [CONN_SENTINEL_PASSWORD_FILE] = {"--sentinel-password-file", "WK_SENTINEL_PASSWORD_FILE",
                                     "FILE", CONN_SENTINEL_PASSWORD, "the same, read from FILE"},
};

void conn_from_env(conn_options *c)
{
    memset(c, 0, sizeof(*c));
    for (int f = 0; f < CONN_FIELDS; f++)
        c->v[f] = getenv(rows[f].env);
}

int conn_from_cli(conn_options *c, const char *opt, const char *value, char *msg, size_t cap)
{
    for (int f = 0; f < CONN_FIELDS; f++) {
        if (!rows[f].cli || strcmp(rows[f].cli, opt))
            continue;
        int pair = rows[f].pair;
        if (pair >= 0 && c->from_cli[pair] && rows[pair].cli) {
            snprintf(msg, cap, "give %s or %s, not both", rows[pair].cli, opt);
            return -1;
        }
        if (pair >= 0) /* the command line's form wins over the environment's */
            c->v[pair] = NULL;
        c->v[f] = value;
        c->from_cli[f] = true;
        return 1;
    }
    return 0;
}

void conn_help(FILE *to)
{
    for (int f = 0; f < CONN_FIELDS; f++) {
        if (rows[f].cli)
            fprintf(to, "  %s %s ($%s)\n", rows[f].cli, rows[f].arg, rows[f].env);
        else
            fprintf(to, "  $%s\n", rows[f].env);
        fprintf(to, "%22s%s\n", "", rows[f].help);
    }
}

/* The password in file `path` (malloc'ed), one trailing newline stripped;
 * NULL with the reason in msg. */
static char *read_password(const char *opt, const char *path, char *msg, size_t cap)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        snprintf(msg, cap, "%s %s: %s", opt, path, strerror(errno));
        return NULL;
    }
    if (len && text[len - 1] == '\n')
        text[--len] = '\0';
    if (len && text[len - 1] == '\r')
        text[--len] = '\0';
    if (strlen(text) != len) {
        snprintf(msg, cap, "%s %s: the password holds a NUL byte", opt, path);
        free(text);
        return NULL;
    }
    return text;
}

/* The password of the pair (text, file): the text, or the file's. */
static int password_of(conn_options *c, conn_field text, conn_field file, char **slot,
                       const char **out, char *msg, size_t cap)
{
    *out = c->v[text];
    if (!c->v[file])
        return 0;
    if (*out) { /* both from the environment (the command line's form replaces the other) */
        snprintf(msg, cap, "give $%s or $%s, not both", rows[text].env, rows[file].env);
        return -1;
    }
    const char *opt = c->from_cli[file] ? rows[file].cli : rows[file].env;
    *slot = read_password(opt, c->v[file], msg, cap);
    *out = *slot;
    return *slot ? 0 : -1;
}

int conn_apply(conn_options *c, wk_db_options *o, char *msg, size_t cap)
{
    o->url = c->v[CONN_URL];
    o->tls_ca_file = c->v[CONN_TLS_CA_FILE];
    o->tls_ca_dir = c->v[CONN_TLS_CA_DIR];
    o->tls_cert_file = c->v[CONN_TLS_CERT];
    o->tls_key_file = c->v[CONN_TLS_KEY];
    o->tls_server_name = c->v[CONN_TLS_SERVER_NAME];
    o->sentinel_username = c->v[CONN_SENTINEL_USER];
    if (password_of(c, CONN_PASSWORD, CONN_PASSWORD_FILE, &c->read[0], &o->password, msg, cap))
        return -1;
    return password_of(c, CONN_SENTINEL_PASSWORD, CONN_SENTINEL_PASSWORD_FILE, &c->read[1],
                       &o->sentinel_password, msg, cap);
}

void conn_free(conn_options *c)
{
    for (size_t i = 0; i < 2; i++) {
        free(c->read[i]);
        c->read[i] = NULL;
    }
}
