/*
 * wakuwaku/capability.h — what a handle may do.
 *
 * A capability grants NONE, READ or WRITE (WRITE implies READ) per entity,
 * identified by kind + namespace ("Lock:invoice"), plus a default grant for
 * every entity it does not list, and carries a name used in refusal
 * messages: `capability "replica" may not WRITE Lock:invoice`.
 *
 * A handle (wk_db) holds a private copy of its capability; nothing can
 * widen it afterwards. wk_db_narrow() hands a module a handle whose grants
 * are the intersection of the handle's and a smaller capability.
 *
 * Ownership: wk_cap_new() and wk_cap_intersect() return objects the caller
 * frees with wk_cap_free(). The built-ins wk_cap_read_only() and
 * wk_cap_read_write() are static and must not be freed (freeing them is a
 * harmless no-op). A capability is immutable once built; reading one from
 * several threads is safe.
 */
#ifndef WAKUWAKU_CAPABILITY_H
#define WAKUWAKU_CAPABILITY_H

#include <wakuwaku/entity.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wk_grant {
    WK_GRANT_NONE = 0,
    WK_GRANT_READ = 1, /* READ queries only */
    WK_GRANT_WRITE = 2 /* READ and WRITE queries */
} wk_grant;

/* One row of a capability table: a grant for the entity kind:ns. */
typedef struct wk_cap_entry {
    const char *kind;
    const char *ns;
    wk_grant grant;
} wk_cap_entry;

typedef struct wk_cap wk_cap;

/*
 * WK_NOT_GRANTED(why) — an expression that fails the compile with the
 * message `why` (a string literal), through a C11 _Static_assert: an error
 * in every C11 compiler, with no flags needed. The code generator defines
 * each query a capability does not grant as a macro over it, so
 * `billing_replica_invoice_try(&h, …)` stops the build with "static
 * assertion failed: …" instead of compiling (the handle's runtime
 * capability would refuse it anyway). Not for use in C++.
 */
#define WK_NOT_GRANTED(why) ((int)sizeof(struct { _Static_assert(0, why); int wk_not_granted; }))

#define WK_CAP_NAME_MAX 64

/*
 * wk_cap_new — build a capability from a table.
 *
 *   out            OUT: the new capability; NULL on failure.
 *   name           1..WK_CAP_NAME_MAX bytes, copied.
 *   default_grant  grant for entities not in `entries`.
 *   entries        `count` rows (may be NULL when count is 0); strings
 *                  are copied. A later row for the same kind:ns wins.
 *                  Kinds and namespaces follow the rules of entity
 *                  descriptors (wakuwaku/entity.h): a row for a namespace
 *                  holding ':', '{' or '}' is refused, since no query can
 *                  use it and its keys would be another namespace's.
 *
 * Returns WK_OK, WK_EINVAL (bad name, grant, kind or namespace) or
 * WK_ENOMEM.
 */
WK_API int wk_cap_new(wk_cap **out, const char *name, wk_grant default_grant,
                      const wk_cap_entry *entries, size_t count);

/*
 * wk_cap_intersect — a capability granting, for every entity, the smaller
 * of what `a` and `b` grant: never more than either. `name` (copied) names
 * the result; NULL uses `b`'s name. Returns WK_OK, WK_EINVAL or WK_ENOMEM;
 * *out is NULL on failure.
 */
WK_API int wk_cap_intersect(wk_cap **out, const wk_cap *a, const wk_cap *b, const char *name);

/*
 * A capability written as data: what wk_cap_new() takes, in one struct, so
 * it can be a `static const` table (the code generator writes one per
 * schema capability). wk_cap_new_table() builds it; wk_db_open_granted()
 * and wk_db_narrow_granted() (wakuwaku/db.h) open or narrow a handle with
 * it.
 */
typedef struct wk_cap_table {
    const char *name;
    wk_grant default_grant;
    const wk_cap_entry *entries; /* count rows; may be NULL when count is 0 */
    size_t count;
} wk_cap_table;

/* wk_cap_new_table — wk_cap_new(out, t->name, t->default_grant,
 * t->entries, t->count). NULL t is WK_EINVAL (*out NULL). */
WK_API int wk_cap_new_table(wk_cap **out, const wk_cap_table *t);

/* wk_cap_free — free a capability. NULL and the built-ins are no-ops. */
WK_API void wk_cap_free(wk_cap *cap);

/* Built-in capabilities: "read-only" (default READ) and "read-write"
 * (default WRITE). Static; never NULL. */
WK_API const wk_cap *wk_cap_read_only(void);
WK_API const wk_cap *wk_cap_read_write(void);

/* wk_cap_name — the capability's name; borrowed, valid while it lives. */
WK_API const char *wk_cap_name(const wk_cap *cap);

/* wk_cap_grant_of — the grant for entity kind:ns (the default if unlisted). */
WK_API wk_grant wk_cap_grant_of(const wk_cap *cap, const char *kind, const char *ns);

/* wk_cap_allows — whether `cap` permits one access. */
WK_API bool wk_cap_allows(const wk_cap *cap, const wk_access *access);

/*
 * wk_cap_covers — whether `cap` permits every access of `effect`.
 * When it does not and `denied` is not NULL, *denied is set to the index of
 * the first refused access. An empty effect is covered.
 */
WK_API bool wk_cap_covers(const wk_cap *cap, const wk_effect *effect, size_t *denied);

/* wk_grant_name — "none", "read" or "write" (static). */
WK_API const char *wk_grant_name(wk_grant grant);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_CAPABILITY_H */
