/*
 * codegen/main.c — wk-codegen: a wakuwaku schema (JSON) → <service>.h and
 * <service>.c. parse (cg_json.c) → check (check.c) → emit (emit_*.c).
 *
 *   wk-codegen SCHEMA -o OUTDIR [--expect-service NAME]
 *
 * Exit status: 0 written (OUTDIR is created, with its parents, when
 * missing); 1 the schema has errors (each printed as
 * "file:line:col: error: $.json.path: message", then a last line
 * "file: N error(s)"); 2 usage or I/O error.
 */
#define _POSIX_C_SOURCE 200809L /* mkdir, strdup */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "schema.h"

static void usage(FILE *to)
{
    fputs("usage: wk-codegen SCHEMA.json -o OUTDIR [--expect-service NAME]\n"
          "       wk-codegen --version\n"
          "Writes OUTDIR/<service>.h and OUTDIR/<service>.c from the schema\n"
          "(see codegen/SCHEMA.md). --expect-service fails unless the schema's\n"
          "service is NAME (used by CMake's wakuwaku_generate()).\n",
          to);
}

/* Creates dir and its missing parents (mkdir -p). Returns 0 or -1 with
 * errno set. */
static int make_dirs(const char *dir)
{
    char *path = strdup(dir);
    int rc = 0;
    if (!path)
        return -1;
    for (char *p = path + 1; rc == 0; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0) {
            if (errno != EEXIST || stat(path, &st) != 0)
                rc = -1;
            else if (!S_ISDIR(st.st_mode)) {
                errno = ENOTDIR;
                rc = -1;
            }
        }
        *p = c;
        if (!c)
            break;
    }
    free(path);
    return rc;
}

/* The last line of a failed check: "file: N error(s)". */
static void count_line(const char *schema_path, int errors)
{
    fprintf(stderr, "%s: %d error%s\n", schema_path, errors, errors == 1 ? "" : "s");
}

/* Writes data to dir/name through a temporary file renamed into place, so
 * a reader (a parallel build) never sees half a file. */
static int write_file(const char *dir, const char *name, const outbuf *o)
{
    size_t n = strlen(dir) + strlen(name) + 16;
    char *path = malloc(n), *tmp = malloc(n + 8);
    if (!path || !tmp) {
        free(path);
        free(tmp);
        fputs("wk-codegen: out of memory\n", stderr);
        return -1;
    }
    snprintf(path, n, "%s/%s", dir, name);
    snprintf(tmp, n + 8, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int rc = 0;
    if (!f || fwrite(o->data, 1, o->len, f) != o->len || fclose(f) != 0) {
        fprintf(stderr, "wk-codegen: cannot write %s: %s\n", tmp, strerror(errno));
        rc = -1;
    } else if (rename(tmp, path) != 0) {
        fprintf(stderr, "wk-codegen: cannot rename %s to %s: %s\n", tmp, path, strerror(errno));
        rc = -1;
    }
    if (rc)
        remove(tmp);
    free(path);
    free(tmp);
    return rc;
}

int main(int argc, char **argv)
{
    const char *schema_path = NULL, *outdir = NULL, *expect = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            outdir = argv[++i];
        } else if (strcmp(argv[i], "--expect-service") == 0 && i + 1 < argc) {
            expect = argv[++i];
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("wk-codegen %s\n", WK_CODEGEN_VERSION);
            return 0;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "wk-codegen: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!schema_path) {
            schema_path = argv[i];
        } else {
            fprintf(stderr, "wk-codegen: more than one schema given (%s)\n", argv[i]);
            return 2;
        }
    }
    if (!schema_path || !outdir) {
        usage(stderr);
        return 2;
    }

    size_t len;
    char *text = read_file(schema_path, &len);
    if (!text) {
        fprintf(stderr, "wk-codegen: cannot read %s: %s\n", schema_path, strerror(errno));
        return 2;
    }
    char err[256];
    cg_json_pos pos;
    cg_json_doc *doc = cg_json_parse(text, len, err, sizeof(err), &pos);
    free(text);
    if (!doc) {
        fprintf(stderr, "%s:%d:%d: error: $: invalid JSON: %s\n", schema_path, pos.line, pos.col,
                err);
        count_line(schema_path, 1);
        return 1;
    }

    const char *base = strrchr(schema_path, '/');
    base = base ? base + 1 : schema_path;
    diag d = {schema_path, stderr, 0};
    pool *pl = pool_new();
    schema s;
    bool ok = check_schema(cg_json_doc_root(doc), base, pl, &d, &s);
    if (ok && expect && strcmp(expect, s.service) != 0) {
        cg_json_pos top = {1, 1};
        diag_error(&d, top, "$.service",
                   "the service is \"%s\" but the build expects \"%s\" (the SERVICE of "
                   "wakuwaku_generate(), or its TARGET)",
                   s.service, expect);
        ok = false;
    }
    int status = 0;
    if (!ok) {
        count_line(schema_path, d.errors);
        status = 1;
    } else {
        outbuf raw_h = {0}, raw_c = {0}, h = {0}, c = {0};
        emit_header(&s, &raw_h);
        emit_source(&s, &raw_c);
        out_reflow(&h, &raw_h);
        out_reflow(&c, &raw_c);
        h.oom = h.oom || raw_h.oom;
        c.oom = c.oom || raw_c.oom;
        free(raw_h.data);
        free(raw_c.data);
        char name[512];
        if (h.oom || c.oom) {
            fputs("wk-codegen: out of memory\n", stderr);
            status = 2;
        } else if (make_dirs(outdir) != 0) {
            fprintf(stderr, "wk-codegen: cannot create %s: %s\n", outdir, strerror(errno));
            status = 2;
        } else {
            snprintf(name, sizeof(name), "%s.h", s.service);
            if (write_file(outdir, name, &h) != 0)
                status = 2;
            snprintf(name, sizeof(name), "%s.c", s.service);
            if (status == 0 && write_file(outdir, name, &c) != 0)
                status = 2;
        }
        free(h.data);
        free(c.data);
    }
    pool_free(pl);
    cg_json_doc_free(doc);
    return status;
}
