/*
 * entity/kind.h — the registry of entity kinds: what wk_entity_check()
 * knows about each built-in kind, without entity/ naming any of them.
 * Not installed.
 *
 * Each kind's .c (collection/lock.c, …) defines its descriptor with one
 * line that starts at column 0:
 *
 *     WK__KIND(lock) = {WK_KIND_LOCK, wk__entity_check_ttl};
 *
 * At build time cmake/wk_kinds.cmake collects every such line of the
 * library's sources into <build>/wk_kinds.c, the array wk__kinds[] below:
 * a new kind adds its line to its own .c and nothing else. (A linker
 * section would need no generated file, but a static link drops the
 * objects nobody calls, and their descriptors with them; the generated
 * array refers to every descriptor, so every kind is always linked.)
 */
#ifndef WK_ENTITY_KIND_H
#define WK_ENTITY_KIND_H

#include <wakuwaku/entity.h>

#include "base/base.h"

/* A kind's descriptor. */
typedef struct wk__kind {
    /* The kind as it appears in keys ("Lock"): WK_KIND_X of its header. */
    const char *name;
    /* Checks the parameters of a descriptor of this kind (kind and
     * namespace are already checked): WK_OK, or WK_EINVAL with a message
     * in msg (may be NULL / 0; see wk__entity_fail). NULL: the kind has no
     * parameters. */
    int (*check_params)(const wk_entity *e, char *msg, size_t len);
} wk__kind;

/* Declares and defines kind `id`'s descriptor wk__kind_<id>; follow it
 * with `= {name, check_params};`. Must start its line (the collector
 * reads lines that begin with "WK__KIND("). */
#define WK__KIND(id)                                                                               \
    extern const wk__kind wk__kind_##id;                                                           \
    const wk__kind wk__kind_##id

/* Every kind's descriptor, NULL-terminated (generated: <build>/wk_kinds.c). */
extern const wk__kind *const wk__kinds[];

/* The descriptor of the kind named `name`, or NULL (a custom kind). */
const wk__kind *wk__kind_find(const char *name);

/* The naming rules of wk_entity_check_msg() alone (entity present; kind
 * and namespace present, within their limits, free of ':', '{' and '}'),
 * as wk_key_build() needs them. Same message and return convention; msg
 * may be NULL. */
int wk__entity_names_check(const wk_entity *e, char *msg, size_t len);

/* ------------------------------------------------------------------------
 * Helpers for check_params (entity/entity.c)
 * ---------------------------------------------------------------------- */

/* Formats a message into msg (if msg && len) and returns WK_EINVAL. */
#define wk__entity_fail(msg, len, ...) wk__errbuf_set((msg), (len), WK_EINVAL, __VA_ARGS__)

/* ttl_ms > 0, else "ttl_ms must be > 0 (got N)": the check of every kind
 * whose only parameter is a TTL (Lock, RwLock, Cache, HashedCache). */
int wk__entity_check_ttl(const wk_entity *e, char *msg, size_t len);

/* A finite number > 0 (NaN compares false, so it is refused too). */
bool wk__positive_finite(double v);

#endif /* WK_ENTITY_KIND_H */
