/*
 * wakuwaku/counter.h — Counter: a signed 64-bit count per name, with an
 * optional TTL that every increment restarts. (The scratch kind of
 * tests/scratch_kind: docs/DESIGN.md, "Adding a new entity kind".)
 *
 * Redis layout: @@wakuwaku-entity:Counter:<ns>:<name>   string (INCRBY)
 *
 *   wk_counter_incr   add `by` and restart the TTL   WRITE
 *   wk_counter_get    the value (0 when absent)      READ
 */
#ifndef WAKUWAKU_COUNTER_ENTITY
#define WAKUWAKU_COUNTER_ENTITY
#define WK_KIND_COUNTER "Counter"
/* A Counter entity: namespace and TTL (ttl_ms >= 0; 0: the count never
 * expires). */
#define WK_COUNTER_ENTITY(ns_, ttl_ms_) WK__ENTITY(WK_KIND_COUNTER, ns_, ttl_ms_, 0, 0, 0)
/* Its operations (wakuwaku/query.h, "Operation lists"). */
#define WK_COUNTER_OPS(XX)                                                                         \
    XX(counter, incr, WRITE, (wk_name name, int64_t by, int64_t *value),                           \
       "add by (may be negative) and restart the TTL")                                             \
    XX(counter, get, READ, (wk_name name, int64_t *value), "the value (0 when absent)")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"): the TTL may be
 * left out (then 0, no TTL). */
#define WK_COUNTER_SCHEMA(KIND, PARAM)                                                             \
    KIND(COUNTER, "", NO_BODY, WK__SCHEMA_NO_CHECK, NO_FAIR, NO_PARTS)                             \
    PARAM(ttl, ttl_ms, DURATION, OPTIONAL, 0, "a %s has no TTL")
#endif

#if !defined(WAKUWAKU_COUNTER_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_COUNTER_H

#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * wk_counter_incr — add `by` (may be negative) to the count of `name` and
 * restart its TTL (when the entity has one); *value is the new count.
 * Returns WK_OK, WK_EINVAL (bad entity, name or NULL value: nothing sent),
 * WK_EDENIED, or a connection / server error. WRITE effect.
 */
WK_API int wk_counter_incr(wk_processor *p, const wk_entity *counter, wk_name name, int64_t by,
                           int64_t *value);

/*
 * wk_counter_get — the count of `name` (0 when absent). READ effect,
 * retry-safe; returns as wk_counter_incr().
 */
WK_API int wk_counter_get(wk_processor *p, const wk_entity *counter, wk_name name,
                          int64_t *value);

WK__OPS(WK_COUNTER_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_COUNTER_H */
