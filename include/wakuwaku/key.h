/*
 * wakuwaku/key.h — Redis key layout, byte-compatible with the Rust
 * wakuwaku-entity crate.
 *
 *   single-key item:  @@wakuwaku-entity:<Kind>:<namespace>:<name>
 *   multi-key item:   @@wakuwaku-entity:<Kind>:{<namespace>:<name>}<suffix>
 *
 * Names appear verbatim (strings and byte strings, any byte) or in decimal
 * (integers). The braces of a multi-key item make all its keys share one
 * cluster hash slot. Kinds and namespaces hold no ':', '{' or '}', and
 * suffixes no '}', so no two (kind, namespace, name) triples build the same
 * key (see wakuwaku/entity.h).
 */
#ifndef WAKUWAKU_KEY_H
#define WAKUWAKU_KEY_H

#include <wakuwaku/entity.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WK_KEY_PREFIX "@@wakuwaku-entity:"
#define WK_KEY_SUFFIX_MAX 16
/* The longest key the library builds; a buffer this big always suffices. */
#define WK_KEY_MAX \
    (sizeof(WK_KEY_PREFIX) + WK_KIND_MAX + WK_NAMESPACE_MAX + WK_NAME_MAX + WK_KEY_SUFFIX_MAX + 8)

/*
 * wk_key_build — write the key of item `name` of `entity` into `buf`.
 *
 *   suffix  NULL: single-key layout. Non-NULL (≤ WK_KEY_SUFFIX_MAX bytes,
 *           may be "", no '}'): multi-key layout with this suffix after
 *           the '}'.
 *   len     OUT: the key's length (the key may contain NUL; it is also
 *           NUL-terminated when it fits).
 *
 * Returns WK_OK, or WK_EINVAL (kind or namespace failing the naming rules
 * of wk_entity_check_msg() — other fields are not looked at —, name NULL or
 * longer than WK_NAME_MAX, suffix too long or holding '}', buffer too
 * small). Thread-safe.
 */
WK_API int wk_key_build(char *buf, size_t cap, size_t *len, const wk_entity *entity,
                        const wk_name *name, const char *suffix);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_KEY_H */
