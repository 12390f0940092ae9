/*
 * codegen/names.c — identifier rules, keyword escaping and the table of
 * generated global names (see names.h).
 */
#include "names.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* C11 keywords, and names the generated files' headers define or that a
 * parameter or member of that name would break (macros such as errno,
 * bool, NULL; the standard streams). */
static const char *const reserved[] = {
    "NULL",       "_Alignas",     "_Alignof",  "_Atomic",   "_Bool",          "_Complex",
    "_Generic",   "_Imaginary",   "_Noreturn", "_Pragma",   "_Static_assert", "_Thread_local",
    "alignas",    "alignof",      "asm",       "assert",    "auto",           "bool",
    "break",      "case",         "char",      "complex",   "const",          "continue",
    "default",    "do",           "double",    "else",      "enum",           "errno",
    "extern",     "false",        "float",     "for",       "goto",           "if",
    "imaginary",  "inline",       "int",       "long",      "noreturn",       "offsetof",
    "register",   "restrict",     "return",    "short",     "signed",         "sizeof",
    "static",     "static_assert", "stderr",   "stdin",     "stdout",         "struct",
    "switch",     "thread_local", "true",      "typedef",   "typeof",         "union",
    "unsigned",   "void",         "volatile",  "while",
};

bool ident_valid(const char *s, size_t len)
{
    if (len == 0 || len != strlen(s))
        return false;
    if (!isalpha((unsigned char)s[0]) || (unsigned char)s[0] >= 0x80)
        return false;
    for (size_t i = 1; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80 || !(isalnum(c) || c == '_'))
            return false;
    }
    return true;
}

bool ident_reserved(const char *s)
{
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
        if (strcmp(reserved[i], s) == 0)
            return true;
    }
    return false;
}

const char *ident_escape(pool *pl, const char *s)
{
    return ident_reserved(s) ? pool_printf(pl, "%s_", s) : s;
}

/* Parameters the generated accessors and handle functions use besides the
 * name (kinds.c, emit_*.c). */
static const char *const fixed_params[] = {
    "acquired", "body",  "cost",      "extended", "found", "h",       "hash",
    "key",      "key_len", "known",   "len",      "out",   "outcome", "p",
    "released", "removed", "state",   "token",    "value", "value_len", "version",
    "was_running", "was_used",
};

bool param_clashes(const char *param)
{
    size_t n = sizeof(fixed_params) / sizeof(fixed_params[0]);
    size_t plen = strlen(param);
    for (size_t i = 0; i < n; i++) {
        const char *f = fixed_params[i];
        if (strcmp(f, param) == 0)
            return true;
        /* "<param>_len" against a fixed name */
        size_t flen = strlen(f);
        if (flen == plen + 4 && strncmp(f, param, plen) == 0 && strcmp(f + plen, "_len") == 0)
            return true;
    }
    return false;
}

char *ident_upper(pool *pl, const char *s)
{
    char *u = pool_strdup(pl, s);
    for (char *c = u; *c; c++)
        *c = (char)toupper((unsigned char)*c);
    return u;
}

/* ------------------------------------------------------------------------
 * Generated global names: an open-addressing hash table.
 * ---------------------------------------------------------------------- */

typedef struct name_slot {
    const char *name;
    const char *path;
    const char *what;
    cg_json_pos pos;
} name_slot;

struct name_table {
    pool *pl;
    name_slot *slots;
    size_t cap, count;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

name_table *names_new(pool *pl)
{
    name_table *t = pool_alloc(pl, sizeof(*t));
    t->pl = pl;
    t->cap = 1024;
    t->slots = pool_alloc(pl, t->cap * sizeof(name_slot));
    return t;
}

static name_slot *find_slot(name_slot *slots, size_t cap, const char *name)
{
    size_t i = (size_t)(hash_str(name) & (cap - 1));
    while (slots[i].name && strcmp(slots[i].name, name) != 0)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static void grow(name_table *t)
{
    size_t cap = t->cap * 2;
    /* The old slots stay in the pool until the run ends. */
    name_slot *slots = pool_alloc(t->pl, cap * sizeof(name_slot));
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].name)
            *find_slot(slots, cap, t->slots[i].name) = t->slots[i];
    }
    t->slots = slots;
    t->cap = cap;
}

bool names_claim(name_table *t, diag *d, const char *name, const char *path, cg_json_pos pos,
                 const char *what)
{
    if ((t->count + 1) * 2 > t->cap)
        grow(t);
    name_slot *s = find_slot(t->slots, t->cap, name);
    if (s->name) {
        diag_error(d, pos, path,
                   "the generated name %s (%s) is already generated for %s (%s, line %d:%d); "
                   "rename one of them",
                   name, what, s->path, s->what, s->pos.line, s->pos.col);
        return false;
    }
    s->name = name;
    s->path = path;
    s->what = what;
    s->pos = pos;
    t->count++;
    return true;
}
