/*
 * codegen/cg_json.c — the position-tracking JSON reader (RFC 8259, strict:
 * no comments, no trailing commas, UTF-8 input only).
 */
#include "cg_json.h"

#include "base/base.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256

/* ------------------------------------------------------------------------
 * Arena: every allocation of a document comes from here.
 * ---------------------------------------------------------------------- */

typedef struct cg_arena_block {
    struct cg_arena_block *next;
    size_t used, size;
    max_align_t data[];
} block;

struct cg_json_doc {
    cg_arena arena;
    cg_json_value *root;
};

void *cg_arena_alloc(cg_arena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    block *b = a->blocks;
    if (!b || b->size - b->used < n) {
        size_t size = n > 65536 ? n : 65536;
        b = malloc(sizeof(block) + size);
        if (!b)
            return NULL;
        b->size = size;
        b->used = 0;
        b->next = a->blocks;
        a->blocks = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

void cg_arena_free(cg_arena *a)
{
    block *b = a->blocks;
    while (b) {
        block *next = b->next;
        free(b);
        b = next;
    }
    a->blocks = NULL;
}

void cg_json_doc_free(cg_json_doc *doc)
{
    if (!doc)
        return;
    cg_arena_free(&doc->arena);
    free(doc);
}

const cg_json_value *cg_json_doc_root(const cg_json_doc *doc)
{
    return doc->root;
}

const char *cg_json_type_name(cg_json_type type)
{
    static const char *const names[] = {
        [CG_JSON_T_NULL] = "null",       [CG_JSON_T_BOOL] = "a boolean",
        [CG_JSON_T_NUMBER] = "a number", [CG_JSON_T_STRING] = "a string",
        [CG_JSON_T_ARRAY] = "an array",  [CG_JSON_T_OBJECT] = "an object"};
    return WK__ENUM_NAME(names, type);
}

/* ------------------------------------------------------------------------
 * The reader
 * ---------------------------------------------------------------------- */

typedef struct reader {
    const char *s;
    size_t len, i;
    int line, col;
    cg_json_doc *doc;
    char *err;
    size_t errlen;
    cg_json_pos errpos;
    bool failed;
} reader;

static cg_json_pos here(const reader *r)
{
    cg_json_pos p = {r->line, r->col};
    return p;
}

static bool fail_at(reader *r, cg_json_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail_at(reader *r, cg_json_pos pos, const char *fmt, ...)
{
    if (r->failed)
        return false;
    r->failed = true;
    r->errpos = pos;
    if (r->err && r->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, r->errlen, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* Advance one byte, keeping line and column (continuation bytes of a UTF-8
 * sequence do not start a new column). */
static void advance(reader *r)
{
    unsigned char c = (unsigned char)r->s[r->i++];
    if (c == '\n') {
        r->line++;
        r->col = 1;
    } else if ((c & 0xC0) != 0x80) {
        r->col++;
    }
}

static void skip_ws(reader *r)
{
    while (r->i < r->len) {
        char c = r->s[r->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        advance(r);
    }
}

static bool at_end(const reader *r)
{
    return r->i >= r->len;
}

static char peek(const reader *r)
{
    return at_end(r) ? '\0' : r->s[r->i];
}

/* Length of a valid UTF-8 sequence starting at s[0] (≤ n bytes), 0 if
 * invalid (overlong forms, surrogates and values past U+10FFFF refused). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t need;
    uint32_t cp;
    if ((s[0] & 0xE0) == 0xC0) {
        need = 2;
        cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        need = 3;
        cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        need = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < need)
        return 0;
    for (size_t k = 1; k < need; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if ((need == 2 && cp < 0x80) || (need == 3 && cp < 0x800) || (need == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return need;
}

static size_t put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex4(reader *r, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = peek(r);
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return fail_at(r, here(r), "expected a hex digit in a \\u escape"), -1;
        v = v * 16 + (uint32_t)d;
        advance(r);
    }
    *out = v;
    return 0;
}

/* Reads a string starting at its opening quote. */
static bool read_string(reader *r, const char **out, size_t *out_len)
{
    cg_json_pos start = here(r);
    advance(r); /* the quote */
    /* The decoded text is never longer than the source text. */
    size_t j = r->i;
    while (j < r->len && r->s[j] != '"')
        j += r->s[j] == '\\' ? 2 : 1;
    size_t cap = j - r->i;
    char *buf = cg_arena_alloc(&r->doc->arena, cap + 1);
    if (!buf)
        return fail_at(r, start, "out of memory");
    size_t n = 0;
    for (;;) {
        if (at_end(r))
            return fail_at(r, start, "unterminated string");
        unsigned char c = (unsigned char)r->s[r->i];
        if (c == '"') {
            advance(r);
            break;
        }
        if (c < 0x20)
            return fail_at(r, here(r), "control character in a string (escape it)");
        if (c == '\\') {
            cg_json_pos esc = here(r);
            advance(r);
            char e = peek(r);
            if (at_end(r))
                return fail_at(r, start, "unterminated string");
            advance(r);
            /* The one-letter escapes and the characters they stand for. */
            static const char letters[] = "\"\\/bfnrt", chars[] = "\"\\/\b\f\n\r\t";
            const char *simple = e ? strchr(letters, e) : NULL;
            if (simple) {
                buf[n++] = chars[simple - letters];
                continue;
            }
            if (e != 'u')
                return fail_at(r, esc, "invalid escape \\%c", e);
            uint32_t cp;
            if (hex4(r, &cp))
                return false;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (peek(r) != '\\')
                    return fail_at(r, esc, "unpaired surrogate in a \\u escape");
                advance(r);
                if (peek(r) != 'u')
                    return fail_at(r, esc, "unpaired surrogate in a \\u escape");
                advance(r);
                if (hex4(r, &lo))
                    return false;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail_at(r, esc, "unpaired surrogate in a \\u escape");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return fail_at(r, esc, "unpaired surrogate in a \\u escape");
            }
            n += put_utf8(buf + n, cp);
            continue;
        }
        size_t k = utf8_seq((const unsigned char *)r->s + r->i, r->len - r->i);
        if (!k)
            return fail_at(r, here(r), "invalid UTF-8 in a string");
        for (size_t b = 0; b < k; b++) {
            buf[n++] = r->s[r->i];
            advance(r);
        }
    }
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return true;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool read_number(reader *r, cg_json_value *v)
{
    size_t start = r->i;
    bool integral = true;
    if (peek(r) == '-')
        advance(r);
    if (peek(r) == '0') {
        advance(r);
    } else if (is_digit(peek(r))) {
        while (is_digit(peek(r)))
            advance(r);
    } else {
        return fail_at(r, v->pos, "invalid number");
    }
    if (peek(r) == '.') {
        integral = false;
        advance(r);
        if (!is_digit(peek(r)))
            return fail_at(r, here(r), "expected a digit after '.'");
        while (is_digit(peek(r)))
            advance(r);
    }
    if (peek(r) == 'e' || peek(r) == 'E') {
        integral = false;
        advance(r);
        if (peek(r) == '+' || peek(r) == '-')
            advance(r);
        if (!is_digit(peek(r)))
            return fail_at(r, here(r), "expected a digit in the exponent");
        while (is_digit(peek(r)))
            advance(r);
    }
    size_t n = r->i - start;
    char *text = cg_arena_alloc(&r->doc->arena, n + 1);
    if (!text)
        return fail_at(r, v->pos, "out of memory");
    memcpy(text, r->s + start, n);
    text[n] = '\0';
    v->num_text = text;
    v->num = strtod(text, NULL);
    if (integral) {
        errno = 0;
        long long ll = strtoll(text, NULL, 10);
        if (errno == 0) {
            v->is_int = true;
            v->int_val = ll;
        }
    }
    return true;
}

static bool read_literal(reader *r, const char *word)
{
    cg_json_pos start = here(r);
    size_t n = strlen(word);
    if (r->len - r->i < n || memcmp(r->s + r->i, word, n) != 0)
        return fail_at(r, start, "unexpected character '%c'", peek(r));
    for (size_t k = 0; k < n; k++)
        advance(r);
    return true;
}

static cg_json_value *read_value(reader *r, int depth);

/* A growable array of pointers or members, copied into the arena at the end. */
typedef struct vec {
    void *items;
    size_t count, cap, size;
} vec;

static bool vec_push(vec *v, const void *item)
{
    if (v->count == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        void *p = realloc(v->items, cap * v->size);
        if (!p)
            return false;
        v->items = p;
        v->cap = cap;
    }
    memcpy((char *)v->items + v->count * v->size, item, v->size);
    v->count++;
    return true;
}

static void *vec_finish(reader *r, vec *v)
{
    void *out = NULL;
    if (v->count) {
        out = cg_arena_alloc(&r->doc->arena, v->count * v->size);
        if (out)
            memcpy(out, v->items, v->count * v->size);
    }
    free(v->items);
    v->items = NULL;
    return out;
}

/* An object member's key and its ':' (the key's position is set). */
static bool read_key(reader *r, const cg_json_value *v, cg_json_member *m)
{
    if (peek(r) != '"') {
        if (at_end(r))
            return fail_at(r, v->pos, "unterminated object");
        return fail_at(r, here(r), "expected a key (a string in double quotes)");
    }
    if (!read_string(r, &m->key, &m->key_len))
        return false;
    skip_ws(r);
    if (peek(r) != ':')
        return fail_at(r, here(r), "expected ':' after the key");
    advance(r);
    skip_ws(r);
    return true;
}

/* After an element: 1 at ',' (another follows), 0 at `close` (the end),
 * -1 once the error is reported. */
static int read_separator(reader *r, const cg_json_value *v, char close, const char *what)
{
    skip_ws(r);
    char c = peek(r);
    if (c == ',' || c == close) {
        advance(r);
        return c == ',';
    }
    if (at_end(r))
        fail_at(r, v->pos, "unterminated %s", what);
    else
        fail_at(r, here(r), "expected ',' or '%c' in an %s", close, what);
    return -1;
}

/* An array or an object (v->type says which), at its '[' or '{': the
 * elements are read into a vec, then copied into the arena. */
static bool read_container(reader *r, cg_json_value *v, int depth)
{
    bool object = v->type == CG_JSON_T_OBJECT;
    char close = object ? '}' : ']';
    vec elems = {NULL, 0, 0, object ? sizeof(cg_json_member) : sizeof(cg_json_value *)};
    advance(r); /* [ or { */
    skip_ws(r);
    if (peek(r) == close) {
        advance(r);
        v->count = 0;
        return true;
    }
    for (;;) {
        skip_ws(r);
        cg_json_member m = {.pos = here(r)};
        if (peek(r) == close && elems.count) {
            free(elems.items);
            return fail_at(r, here(r), "trailing comma: JSON allows no ',' before '%c'", close);
        }
        if (object && !read_key(r, v, &m)) {
            free(elems.items);
            return false;
        }
        m.value = read_value(r, depth + 1);
        if (!m.value || !vec_push(&elems, object ? (const void *)&m : &m.value)) {
            free(elems.items);
            return m.value ? fail_at(r, v->pos, "out of memory") : false;
        }
        int more = read_separator(r, v, close, object ? "object" : "array");
        if (more < 0) {
            free(elems.items);
            return false;
        }
        if (!more)
            break;
    }
    v->count = elems.count;
    void *out = vec_finish(r, &elems);
    if (!out)
        return fail_at(r, v->pos, "out of memory");
    if (object)
        v->members = out;
    else
        v->items = out;
    return true;
}

static cg_json_value *read_value(reader *r, int depth)
{
    if (depth > MAX_DEPTH) {
        fail_at(r, here(r), "nested deeper than %d levels", MAX_DEPTH);
        return NULL;
    }
    cg_json_value *v = cg_arena_alloc(&r->doc->arena, sizeof(*v));
    if (!v) {
        fail_at(r, here(r), "out of memory");
        return NULL;
    }
    memset(v, 0, sizeof(*v));
    v->pos = here(r);
    if (at_end(r)) {
        fail_at(r, here(r), "expected a value, found the end of the file");
        return NULL;
    }
    bool ok;
    char c = peek(r);
    switch (c) {
    case '{':
        v->type = CG_JSON_T_OBJECT;
        ok = read_container(r, v, depth);
        break;
    case '[':
        v->type = CG_JSON_T_ARRAY;
        ok = read_container(r, v, depth);
        break;
    case '"':
        v->type = CG_JSON_T_STRING;
        ok = read_string(r, &v->str, &v->str_len);
        break;
    case 't':
        v->type = CG_JSON_T_BOOL;
        v->boolean = true;
        ok = read_literal(r, "true");
        break;
    case 'f':
        v->type = CG_JSON_T_BOOL;
        ok = read_literal(r, "false");
        break;
    case 'n':
        v->type = CG_JSON_T_NULL;
        ok = read_literal(r, "null");
        break;
    default:
        if (c == '-' || is_digit(c)) {
            v->type = CG_JSON_T_NUMBER;
            ok = read_number(r, v);
        } else if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7F) {
            ok = fail_at(r, v->pos, "unexpected character '%c'", c);
        } else {
            ok = fail_at(r, v->pos, "unexpected byte 0x%02x", (unsigned char)c);
        }
    }
    return ok ? v : NULL;
}

cg_json_doc *cg_json_parse(const char *text, size_t len, char *err, size_t errlen, cg_json_pos *errpos)
{
    cg_json_doc *doc = calloc(1, sizeof(*doc));
    reader r = {text, len, 0, 1, 1, doc, err, errlen, {1, 1}, false};
    if (!doc) {
        fail_at(&r, here(&r), "out of memory");
        if (errpos)
            *errpos = r.errpos;
        return NULL;
    }
    /* A UTF-8 byte order mark is allowed and skipped. */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        r.i = 3;
    skip_ws(&r);
    doc->root = read_value(&r, 0);
    if (doc->root) {
        skip_ws(&r);
        if (!at_end(&r))
            fail_at(&r, here(&r), "unexpected text after the JSON value");
    }
    if (r.failed) {
        if (errpos)
            *errpos = r.errpos;
        cg_json_doc_free(doc);
        return NULL;
    }
    return doc;
}
