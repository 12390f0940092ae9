/*
 * tests/tools/test_wk_man.c — docs/wk.1, the manual page, against the
 * command table of tools/wk/main.c as the built wk prints it (`wk
 * --commands`: the rows of the table and the kinds' op lists' own
 * commands): the same kinds, and for each the same commands with the same
 * arguments, so that a command added to one and not the other fails here;
 * `wk --help` shows each of them too. Also: the page documents every exit
 * status, the TLS file's WK_EINVAL among them. Needs no server.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

TestSuite(wk_man, .timeout = 60);

#define MAX_ROWS 256

/* One command of one kind: "Lock" "force-release NAME". */
typedef struct row {
    char kind[32];
    char cmd[96];
} row;

typedef struct rows {
    row v[MAX_ROWS];
    size_t n;
} rows;

static void add(rows *r, const char *kind, const char *cmd)
{
    cr_assert_lt(r->n, MAX_ROWS, "more than %d commands", MAX_ROWS);
    snprintf(r->v[r->n].kind, sizeof(r->v[r->n].kind), "%s", kind);
    snprintf(r->v[r->n].cmd, sizeof(r->v[r->n].cmd), "%s", cmd);
    r->n++;
}

static bool has(const rows *r, const row *x)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->v[i].kind, x->kind) && !strcmp(r->v[i].cmd, x->cmd))
            return true;
    return false;
}

/* `s` with runs of blanks folded to one space and no blank at either end. */
static void fold(char *s)
{
    char *w = s;
    bool blank = true;
    for (char *p = s; *p; p++) {
        if (isspace((unsigned char)*p)) {
            if (!blank)
                *w++ = ' ';
            blank = true;
        } else {
            *w++ = *p;
            blank = false;
        }
    }
    if (w > s && w[-1] == ' ')
        w--;
    *w = '\0';
}

static char *read_all(FILE *f)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    cr_assert(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - 1 - n, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert(buf);
        }
    }
    buf[n] = '\0';
    return buf;
}

/* The output of `wk <option>`. */
static char *wk_out(const char *option)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' %s", WK_CLI_PATH, option);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", cmd);
    char *out = read_all(p);
    cr_assert_eq(pclose(p), 0, "%s failed", cmd);
    return out;
}

static char *man_page(void)
{
    const char *src = getenv("WK_TEST_SOURCE_DIR");
    cr_assert(src, "WK_TEST_SOURCE_DIR is not set (ctest sets it)");
    char path[1024];
    snprintf(path, sizeof(path), "%s/docs/wk.1", src);
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot read %s", path);
    char *text = read_all(f);
    fclose(f);
    return text;
}

/* `wk --commands`: "KIND<TAB>COMMAND ARGS" a line, KIND "*" for every kind
 * (the page's "Every kind"). */
static void table_rows(char *listing, rows *out)
{
    for (char *line = strtok(listing, "\n"); line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        cr_assert(tab, "wk --commands: a line without a tab: %s", line);
        *tab = '\0';
        add(out, !strcmp(line, "*") ? "Every kind" : line, tab + 1);
    }
}

/* A roff text line without its macro, quotes, font escapes and \- \% \e. */
static void roff_text(const char *in, char *out, size_t cap)
{
    const char *p = in;
    if (*p == '.')
        while (*p && !isspace((unsigned char)*p))
            p++;
    size_t n = 0;
    for (; *p && n + 1 < cap; p++) {
        if (*p == '"')
            continue;
        if (*p == '\\' && p[1] == 'f' && p[2]) { /* \fB \fI \fR \fP */
            p += 2;
            continue;
        }
        if (*p == '\\' && (p[1] == '-' || p[1] == '%' || p[1] == 'e')) {
            p++;
            if (*p == '%')
                continue;
            out[n++] = *p == 'e' ? '\\' : '-';
            continue;
        }
        out[n++] = *p;
    }
    out[n] = '\0';
    fold(out);
}

/* The page's COMMANDS section: ".SS Kind", then one ".TP" item a command
 * whose next line is the command as typed. */
static void man_rows(char *page, rows *out)
{
    char *at = strstr(page, "\n.SH COMMANDS\n");
    cr_assert(at, "docs/wk.1 has no COMMANDS section");
    at += strlen("\n.SH COMMANDS\n");
    char kind[32] = "";
    bool tag = false;
    for (char *end; *at && strncmp(at, ".SH", 3); at = end + 1) {
        end = strchr(at, '\n');
        if (!end)
            break;
        *end = '\0';
        if (!strncmp(at, ".SS ", 4)) {
            roff_text(at, kind, sizeof(kind));
        } else if (!strcmp(at, ".TP")) {
            cr_assert(kind[0], "docs/wk.1: a command before the first .SS");
            tag = true;
        } else if (tag) {
            char cmd[256];
            roff_text(at, cmd, sizeof(cmd));
            add(out, kind, cmd);
            tag = false;
        }
    }
}

Test(wk_man, lists_the_commands_of_the_table_and_no_other)
{
    char *listing = wk_out("--commands"), *help = wk_out("--help"), *page = man_page();
    static rows in_table, in_page;
    table_rows(listing, &in_table);
    man_rows(page, &in_page);
    cr_assert_gt(in_table.n, 20, "too few commands from wk --commands (%zu)", in_table.n);
    size_t missing = 0, extra = 0;
    for (size_t i = 0; i < in_table.n; i++) {
        if (!has(&in_page, &in_table.v[i])) {
            cr_log_error("docs/wk.1 lacks %s: %s (in wk's command table)", in_table.v[i].kind,
                         in_table.v[i].cmd);
            missing++;
        }
        /* and --help shows every command the table has */
        cr_expect(strstr(help, in_table.v[i].cmd), "wk --help does not list %s: %s",
                  in_table.v[i].kind, in_table.v[i].cmd);
    }
    for (size_t i = 0; i < in_page.n; i++)
        if (!has(&in_table, &in_page.v[i])) {
            cr_log_error("docs/wk.1 has %s: %s, which wk's command table does not",
                         in_page.v[i].kind, in_page.v[i].cmd);
            extra++;
        }
    cr_expect_eq(missing, 0, "%zu command(s) of wk's table are not in docs/wk.1 (above)", missing);
    cr_expect_eq(extra, 0, "%zu command(s) of docs/wk.1 are not in wk's table (above)", extra);
    cr_expect(strstr(page, "\\%acquire\\-all"), "docs/wk.1 does not name acquire-all");
    free(listing);
    free(help);
    free(page);
}

/* Every exit status of `wk --help`, and the cases it names for 2, are on
 * the page. */
Test(wk_man, documents_every_exit_status)
{
    char *help = wk_out("--help"), *page = man_page();
    char *exits = strstr(page, "\n.SH \"EXIT STATUS\"\n");
    cr_assert(exits, "docs/wk.1 has no EXIT STATUS section");
    for (int st = 0; st <= 4; st++) {
        char item[32];
        snprintf(item, sizeof(item), ".TP\n.B %d\n", st);
        cr_expect(strstr(exits, item), "docs/wk.1 does not document exit status %d", st);
    }
    cr_expect(!strstr(exits, ".TP\n.B 5\n"), "docs/wk.1 documents an exit status 5");
    const char *named[] = {"TLS", "WK_EINVAL", "WK_EDENIED"};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        cr_expect(strstr(help, named[i]), "wk --help's exit status does not name %s", named[i]);
        cr_expect(strstr(exits, named[i]), "docs/wk.1's EXIT STATUS does not name %s", named[i]);
    }
    free(help);
    free(page);
}
