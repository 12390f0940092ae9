/*
 * capability/capability.c — capability tables, the covers check and
 * intersection.
 *
 * A capability is one allocation: the header, the rows, then the strings
 * they point to. Lookups are a linear scan; services have a handful of
 * entities, and the scan first compares pointers, which hit whenever the
 * entity descriptor and the table share string literals (generated code).
 */
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/capability.h>

#include "base/base.h"
#include "entity/kind.h"

struct wk_cap {
    const char *name;
    wk_grant default_grant;
    size_t count;
    bool is_static;
    wk_cap_entry *entries;
};

static wk_cap read_only_cap = {"read-only", WK_GRANT_READ, 0, true, NULL};
static wk_cap read_write_cap = {"read-write", WK_GRANT_WRITE, 0, true, NULL};

const wk_cap *wk_cap_read_only(void)
{
    return &read_only_cap;
}

const wk_cap *wk_cap_read_write(void)
{
    return &read_write_cap;
}

static bool grant_ok(wk_grant g)
{
    return g == WK_GRANT_NONE || g == WK_GRANT_READ || g == WK_GRANT_WRITE;
}

static bool text_ok(const char *s, size_t max)
{
    return s && s[0] && strnlen(s, max + 1) <= max;
}

static bool same_text(const char *a, const char *b)
{
    return a == b || strcmp(a, b) == 0;
}

/* Index of the row for kind:ns, or -1. The last matching row wins. */
static long find_row(const wk_cap *cap, const char *kind, const char *ns)
{
    for (size_t i = cap->count; i-- > 0;) {
        if (same_text(cap->entries[i].kind, kind) && same_text(cap->entries[i].ns, ns))
            return (long)i;
    }
    return -1;
}

/* Allocate a capability with room for `count` rows and `text` string bytes. */
static wk_cap *cap_alloc(size_t count, size_t text, char **strings)
{
    size_t size = sizeof(wk_cap) + count * sizeof(wk_cap_entry) + text;
    wk_cap *cap = calloc(1, size);
    if (!cap)
        return NULL;
    cap->entries = (wk_cap_entry *)(cap + 1);
    *strings = (char *)(cap->entries + count);
    return cap;
}

static const char *copy_text(char **strings, const char *s)
{
    size_t n = strlen(s) + 1;
    char *dst = *strings;
    memcpy(dst, s, n);
    *strings += n;
    return dst;
}

int wk_cap_new(wk_cap **out, const char *name, wk_grant default_grant,
               const wk_cap_entry *entries, size_t count)
{
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!text_ok(name, WK_CAP_NAME_MAX) || !grant_ok(default_grant) || (count && !entries))
        return WK_EINVAL;
    size_t text = strlen(name) + 1;
    for (size_t i = 0; i < count; i++) {
        const wk_cap_entry *e = &entries[i];
        /* The naming rules of descriptors: a row for a namespace no query
         * accepts (one with ':', '{' or '}') would protect nothing, and
         * for Lock:jobs:billing the key belongs to Lock:jobs. */
        wk_entity named = WK_CUSTOM_ENTITY(e->kind, e->ns);
        if (wk__entity_names_check(&named, NULL, 0) != WK_OK || !grant_ok(e->grant))
            return WK_EINVAL;
        text += strlen(e->kind) + strlen(e->ns) + 2;
    }
    char *strings;
    wk_cap *cap = cap_alloc(count, text, &strings);
    if (!cap)
        return WK_ENOMEM;
    cap->name = copy_text(&strings, name);
    cap->default_grant = default_grant;
    cap->count = count;
    for (size_t i = 0; i < count; i++) {
        cap->entries[i].kind = copy_text(&strings, entries[i].kind);
        cap->entries[i].ns = copy_text(&strings, entries[i].ns);
        cap->entries[i].grant = entries[i].grant;
    }
    *out = cap;
    return WK_OK;
}

int wk_cap_new_table(wk_cap **out, const wk_cap_table *t)
{
    if (!t) {
        if (out)
            *out = NULL;
        return WK_EINVAL;
    }
    return wk_cap_new(out, t->name, t->default_grant, t->entries, t->count);
}

static wk_grant min_grant(wk_grant a, wk_grant b)
{
    return a < b ? a : b;
}

int wk_cap_intersect(wk_cap **out, const wk_cap *a, const wk_cap *b, const char *name)
{
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!a || !b)
        return WK_EINVAL;
    if (!name)
        name = b->name;
    /* Every entity either side lists gets a row with the smaller grant;
     * everything else falls to the smaller default. */
    size_t count = a->count + b->count;
    wk_cap_entry *rows = count ? malloc(count * sizeof(*rows)) : NULL;
    if (count && !rows)
        return WK_ENOMEM;
    size_t n = 0;
    for (int side = 0; side < 2; side++) {
        const wk_cap *src = side == 0 ? a : b;
        for (size_t i = 0; i < src->count; i++) {
            const wk_cap_entry *e = &src->entries[i];
            rows[n].kind = e->kind;
            rows[n].ns = e->ns;
            rows[n].grant = min_grant(wk_cap_grant_of(a, e->kind, e->ns),
                                      wk_cap_grant_of(b, e->kind, e->ns));
            n++;
        }
    }
    int rc = wk_cap_new(out, name, min_grant(a->default_grant, b->default_grant), rows, n);
    free(rows);
    return rc;
}

void wk_cap_free(wk_cap *cap)
{
    if (cap && !cap->is_static)
        free(cap);
}

const char *wk_cap_name(const wk_cap *cap)
{
    return cap ? cap->name : "(none)";
}

wk_grant wk_cap_grant_of(const wk_cap *cap, const char *kind, const char *ns)
{
    if (!cap || !kind || !ns)
        return WK_GRANT_NONE;
    long row = find_row(cap, kind, ns);
    return row < 0 ? cap->default_grant : cap->entries[row].grant;
}

bool wk_cap_allows(const wk_cap *cap, const wk_access *access)
{
    if (!cap || !access || !access->entity)
        return false;
    wk_grant g = wk_cap_grant_of(cap, access->entity->kind, access->entity->ns);
    switch (access->mode) {
    case WK_READ:
        return g >= WK_GRANT_READ;
    case WK_WRITE:
        return g >= WK_GRANT_WRITE;
    }
    return false;
}

bool wk_cap_covers(const wk_cap *cap, const wk_effect *effect, size_t *denied)
{
    if (!effect)
        return true;
    for (size_t i = 0; i < effect->count; i++) {
        if (!wk_cap_allows(cap, &effect->accesses[i])) {
            if (denied)
                *denied = i;
            return false;
        }
    }
    return true;
}

const char *wk_grant_name(wk_grant grant)
{
    static const char *const names[] = {
        [WK_GRANT_NONE] = "none", [WK_GRANT_READ] = "read", [WK_GRANT_WRITE] = "write"};
    return WK__ENUM_NAME(names, grant);
}
