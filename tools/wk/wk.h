/*
 * tools/wk/wk.h — what the files of wk share: main.c (the commands),
 * connect.c (how wk reaches Redis: URL, TLS, credentials) and body.c
 * (an entity's typed body: the check before a put, the fields in help).
 */
#ifndef WK_TOOLS_WK_H
#define WK_TOOLS_WK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <wakuwaku/wakuwaku.h>

#include "codegen/schema.h"

/* ------------------------------------------------------------------------
 * Connection options (connect.c)
 * ---------------------------------------------------------------------- */

/*
 * How wk reaches Redis: each option of connect.c's table, from the
 * command line or else from its environment variable (--tls-ca-file or
 * $WK_TLS_CA_FILE). A password is given as text (an environment
 * variable, or --sentinel-password) or as a file holding it
 * (--password-file, --sentinel-password-file), so that it need not be on
 * a command line other users can read.
 */
typedef enum conn_field {
    CONN_URL,
    CONN_PASSWORD,
    CONN_PASSWORD_FILE,
    CONN_TLS_CA_FILE,
    CONN_TLS_CA_DIR,
    CONN_TLS_CERT,
    CONN_TLS_KEY,
    CONN_TLS_SERVER_NAME,
    CONN_SENTINEL_USER,
    CONN_SENTINEL_PASSWORD,
    CONN_SENTINEL_PASSWORD_FILE,
    CONN_FIELDS
} conn_field;

typedef struct conn_options {
    const char *v[CONN_FIELDS]; /* NULL: not given */
    bool from_cli[CONN_FIELDS]; /* given on the command line */
    char *read[2];              /* the passwords read from files (owned) */
} conn_options;

/* The values of the environment variables (call first). */
void conn_from_env(conn_options *c);

/* Whether `opt` ("--tls-ca-file") is a connection option: 1, and sets it
 * to `value` (a password given on the command line replaces its other
 * form from the environment); 0: not one; -1: the other form of its
 * password was given on the command line too (msg says so). */
int conn_from_cli(conn_options *c, const char *opt, const char *value, char *msg, size_t cap);

/* The options' rows for --help. */
void conn_help(FILE *to);

/*
 * conn_apply — fill the connection fields of `o` (url, password, tls_*,
 * sentinel_*), reading the password files (one trailing newline is
 * stripped). Returns 0, or -1 with the reason in msg (a file that cannot
 * be read: its name and strerror). The strings stay valid until
 * conn_free(c).
 */
int conn_apply(conn_options *c, wk_db_options *o, char *msg, size_t cap);
void conn_free(conn_options *c);

/* ------------------------------------------------------------------------
 * Typed bodies (body.c)
 * ---------------------------------------------------------------------- */

/*
 * body_check — whether `len` bytes at `data` decode as entity e's body
 * record, exactly as a generated client decodes them (the library's JSON
 * codec, wakuwaku/codec.h, over a descriptor built from the schema).
 * Returns WK_OK (also when e has no typed body), WK_ECORRUPT with the
 * decoder's message in msg ("$.name: missing required field"), or
 * WK_ENOMEM.
 */
int body_check(const schema *s, const entity *e, const char *data, size_t len, char *msg,
               size_t cap);

/* body_help — the typed fields of e's body for `help ENTITY`: name, type,
 * required or optional, a nested record's fields indented under it.
 * Prints nothing when e has no typed body. */
void body_help(FILE *to, const entity *e);

#endif /* WK_TOOLS_WK_H */
