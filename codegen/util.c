/*
 * codegen/util.c — the generator's small plumbing: the model's memory
 * pool, error reporting and the output buffer.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

/* ------------------------------------------------------------------------
 * Pool: every allocation of the model, freed at once.
 * ---------------------------------------------------------------------- */

struct pool {
    cg_arena arena;
};

static void out_of_memory(void)
{
    fputs("wk-codegen: out of memory\n", stderr);
    exit(2);
}

pool *pool_new(void)
{
    pool *p = calloc(1, sizeof(*p));
    if (!p)
        out_of_memory();
    return p;
}

void pool_free(pool *p)
{
    if (!p)
        return;
    cg_arena_free(&p->arena);
    free(p);
}

void *pool_alloc(pool *p, size_t n)
{
    if (n == 0)
        n = 1;
    void *mem = cg_arena_alloc(&p->arena, n);
    if (!mem)
        out_of_memory();
    memset(mem, 0, n);
    return mem;
}

char *pool_strdup(pool *p, const char *s)
{
    size_t n = strlen(s);
    char *d = pool_alloc(p, n + 1);
    memcpy(d, s, n + 1);
    return d;
}

char *pool_printf(pool *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        out_of_memory();
    char *s = pool_alloc(p, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* ------------------------------------------------------------------------
 * Diagnostics
 * ---------------------------------------------------------------------- */

void diag_error(diag *d, cg_json_pos pos, const char *path, const char *fmt, ...)
{
    va_list ap;
    fprintf(d->to, "%s:%d:%d: error: %s: ", d->file, pos.line, pos.col, path);
    va_start(ap, fmt);
    vfprintf(d->to, fmt, ap);
    va_end(ap);
    fputc('\n', d->to);
    d->errors++;
}

/* ------------------------------------------------------------------------
 * Output buffer
 * ---------------------------------------------------------------------- */

static void reserve(outbuf *o, size_t more)
{
    if (o->oom || o->len + more + 1 <= o->cap)
        return;
    size_t cap = o->cap ? o->cap : 65536;
    while (cap < o->len + more + 1)
        cap *= 2;
    char *d = realloc(o->data, cap);
    if (!d) {
        o->oom = true;
        return;
    }
    o->data = d;
    o->cap = cap;
}

void out_puts(outbuf *o, const char *s)
{
    size_t n = strlen(s);
    reserve(o, n);
    if (o->oom)
        return;
    memcpy(o->data + o->len, s, n + 1);
    o->len += n;
}

char *text_vprintf(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *t = n < 0 ? NULL : malloc((size_t)n + 1);
    if (t)
        vsnprintf(t, (size_t)n + 1, fmt, again);
    va_end(again);
    return t;
}

char *text_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *t = text_vprintf(fmt, ap);
    va_end(ap);
    return t;
}

/*
 * Writes `text` as comment lines "<indent> * …", wrapping at 76 columns
 * and keeping the author's line breaks. Bytes that could end the comment
 * ("*" followed by "/") or confuse a reader (control characters) are
 * replaced, so a description can never break out of its comment.
 * Likewise "/" "*" (a nested comment start, -Wcomment) and "??" (a
 * trigraph in -std=c11) get a space between.
 */
void out_comment_text(outbuf *o, const char *indent, const char *text)
{
    const char *p = text;
    while (*p) {
        /* One source line. */
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        size_t start = 0;
        /* a line that starts with spaces keeps them, and its wrapped
         * continuation lines are indented two more */
        size_t lead = 0;
        while (lead < n && p[lead] == ' ')
            lead++;
        do {
            size_t hang = start == 0 ? 0 : (lead ? lead + 2 : 0);
            size_t width = 76 - strlen(indent) - hang;
            size_t take = n - start;
            if (take > width) {
                /* break at the last space within the width */
                size_t cut = width;
                while (cut > 0 && p[start + cut] != ' ')
                    cut--;
                take = cut ? cut : width;
                while (take > 1 && ((unsigned char)p[start + take] & 0xC0) == 0x80)
                    take--; /* never split a UTF-8 sequence */
            }
            out_printf(o, "%s *", indent);
            if (take)
                out_puts(o, " ");
            for (size_t i = 0; i < hang; i++)
                out_puts(o, " ");
            for (size_t i = 0; i < take; i++) {
                char c = p[start + i];
                if ((unsigned char)c < 0x20 || c == 0x7F)
                    c = ' ';
                else if (i > 0 && ((c == '/' && p[start + i - 1] == '*') ||
                                   (c == '*' && p[start + i - 1] == '/') ||
                                   (c == '?' && p[start + i - 1] == '?')))
                    out_puts(o, " "); /* no comment end, nested start or trigraph */
                char s[2] = {c, '\0'};
                out_puts(o, s);
            }
            out_puts(o, "\n");
            start += take;
            while (start < n && p[start] == ' ')
                start++;
        } while (start < n);
        p += n;
        if (*p == '\n')
            p++;
    }
}

/* ------------------------------------------------------------------------
 * Line wrapping for declarations and comments
 * ---------------------------------------------------------------------- */

#define LINE_MAX_COLS 100

/*
 * Writes a one-line declaration (or definition head), wrapping at the
 * commas between parameters when it is longer than 100 columns;
 * continuation lines line up after the opening parenthesis (as
 * clang-format does). A trailing newline in the text is kept. `s` is
 * changed on the way (and restored, but for the newline).
 */
static void out_decl(outbuf *o, char *s)
{
    size_t n = strlen(s);
    bool nl = n > 0 && s[n - 1] == '\n';
    if (nl)
        s[--n] = '\0';
    /* Wrap inside the first parenthesis that holds a comma at its own
     * level: "f(a, b)" in "if ((rc = f(a, b)) != 0)". */
    const char *open = NULL;
    for (const char *c = strchr(s, '('); c && !open; c = strchr(c + 1, '(')) {
        int depth = 0;
        bool quoted = false;
        for (const char *q = c; *q; q++) {
            if (*q == '"' && q[-1] != '\\')
                quoted = !quoted;
            if (quoted)
                continue;
            if (*q == '(' || *q == '[')
                depth++;
            else if (*q == ')' || *q == ']') {
                if (--depth == 0)
                    break;
            } else if (*q == ',' && depth == 1) {
                open = c;
                break;
            }
        }
    }
    if (n <= LINE_MAX_COLS || !open) {
        out_puts(o, s);
    } else {
        /* continuation lines line up after the parenthesis of the
         * outermost call: skip the leading indentation and "return " */
        size_t indent = (size_t)(open - s) + 1;
        if (indent > 60)
            indent = 8;
        /* the head up to and including '(' */
        char *head = s;
        char *p = (char *)open + 1;
        char saved = *p;
        *p = '\0';
        out_puts(o, head);
        *p = saved;
        size_t col = indent;
        bool first = true;
        int depth = 1;
        while (*p) {
            /* one parameter: up to ", " at depth 1, or the rest */
            char *q = p;
            bool quoted = false;
            while (*q) {
                if (*q == '"' && (q == p || q[-1] != '\\'))
                    quoted = !quoted;
                if (quoted) {
                    q++;
                    continue;
                }
                if (*q == '(' || *q == '[')
                    depth++;
                else if (*q == ')' || *q == ']')
                    depth--;
                else if (*q == ',' && depth == 1 && q[1] == ' ')
                    break;
                q++;
            }
            size_t len = (size_t)(q - p) + (*q ? 1 : 0); /* with its comma */
            if (!first) {
                if (col + 2 + len > LINE_MAX_COLS) {
                    out_puts(o, ",\n");
                    for (size_t i = 0; i < indent; i++)
                        out_puts(o, " ");
                    col = indent;
                } else {
                    out_puts(o, ", ");
                    col += 2;
                }
            }
            char c = *q;
            *q = '\0';
            out_puts(o, p);
            *q = c;
            col += len - (*q ? 1 : 0);
            first = false;
            p = *q ? q + 2 : q;
        }
    }
    if (nl)
        out_puts(o, "\n");
}

/* The printf text of `fmt`, written as it is or (decl) by out_decl(). */
static void out_vformat(outbuf *o, bool decl, const char *fmt, va_list ap)
{
    char *s = text_vprintf(fmt, ap);
    if (!s)
        o->oom = true;
    else if (decl)
        out_decl(o, s);
    else
        out_puts(o, s);
    free(s);
}

void out_printf(outbuf *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_vformat(o, false, fmt, ap);
    va_end(ap);
}

void out_declf(outbuf *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_vformat(o, true, fmt, ap);
    va_end(ap);
}

/* "/ * text * /" on one line when it fits, else a wrapped block. */
void out_note(outbuf *o, const char *indent, const char *text)
{
    if (strlen(indent) + strlen(text) + 6 <= LINE_MAX_COLS && !strchr(text, '\n') &&
        !strstr(text, "*/") && !strstr(text, "/*") && !strstr(text, "??")) {
        out_printf(o, "%s/* %s */\n", indent, text);
        return;
    }
    out_printf(o, "%s/*\n", indent);
    out_comment_text(o, indent, text);
    out_printf(o, "%s */\n", indent);
}

void out_reflow(outbuf *dst, const outbuf *src)
{
    const char *p = src->data ? src->data : "";
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (n <= LINE_MAX_COLS + 1) {
            char *line = malloc(n + 1);
            if (!line) {
                dst->oom = true;
                return;
            }
            memcpy(line, p, n);
            line[n] = '\0';
            out_puts(dst, line);
            free(line);
        } else {
            out_declf(dst, "%.*s", (int)n, p);
        }
        p += n;
    }
}

/* ------------------------------------------------------------------------
 * Files
 * ---------------------------------------------------------------------- */

char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) {
            if (ferror(f)) {
                free(buf);
                buf = NULL;
            }
            break;
        }
        cap *= 2;
        char *grown = realloc(buf, cap);
        if (!grown) {
            free(buf);
            buf = NULL;
            errno = ENOMEM;
        }
        buf = grown;
    }
    fclose(f);
    if (buf) /* n < cap here: room for a NUL after the text */
        buf[n] = '\0';
    *len = n;
    return buf;
}
