/*
 * wakuwaku/entity.h — entity descriptors, item names, accesses and effects.
 *
 * An *entity* is a family of Redis items of one kind under one namespace:
 * "the invoice locks" (Lock:invoice), "the login limiters"
 * (TokenBucket:login). An item of the entity is picked by a *name* (a
 * string, a byte string or an integer). Capabilities grant access per
 * entity, identified by kind + namespace.
 *
 * Every query declares its *effect*: the list of entities it touches and
 * whether it reads or writes each. Dispatch compares the effect with the
 * handle's capability before anything is sent.
 *
 * Descriptors are plain values, usually `static const` and shared by every
 * thread; the library never modifies or frees them, and keeps no pointer to
 * them after a call returns.
 */
#ifndef WAKUWAKU_ENTITY_H
#define WAKUWAKU_ENTITY_H

#include <wakuwaku/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Limits, enforced with WK_EINVAL. */
#define WK_KIND_MAX 64        /* bytes in a kind */
#define WK_NAMESPACE_MAX 128  /* bytes in a namespace */
#define WK_NAME_MAX 2048      /* bytes in an item name */

/*
 * An entity descriptor. Only the fields of its kind matter; the others stay
 * zero. Use the WK_*_ENTITY() initialiser of the kind's header
 * (WK_LOCK_ENTITY() in wakuwaku/lock.h, …) or WK_CUSTOM_ENTITY() below.
 *
 *   kind       "Lock", "RwLock", … or a kind of your own (custom queries);
 *              1..WK_KIND_MAX bytes, no ':', '{' or '}'.
 *   ns         the namespace, 1..WK_NAMESPACE_MAX bytes, no ':', '{' or
 *              '}' (any other byte but NUL).
 *   ttl_ms     Lock / RwLock: lease length; Cache / HashedCache: expiry of
 *              a put. Must be > 0 for those kinds.
 *   capacity   TokenBucket: tokens when full (> 0).
 *   rate       TokenBucket: tokens added per `period_ms` (> 0), continuously.
 *   period_ms  TokenBucket: the period of `rate` (> 0).
 *   flags      WK_ENTITY_* below; 0 for the default behaviour. Other bits
 *              are refused (WK_EINVAL); WK_ENTITY_FAIR means nothing to
 *              kinds that do not wait.
 */
typedef struct wk_entity {
    const char *kind;
    const char *ns;
    int64_t ttl_ms;
    double capacity;
    double rate;
    int64_t period_ms;
    unsigned flags;
} wk_entity;

/* Entity flags */
#define WK_ENTITY_FAIR (1u << 0) /* Lock, RwLock: first come, first served (lock.h) */

/*
 * WK__ENTITY — every field of a descriptor, in declaration order, for the
 * initialisers of the kinds (WK_LOCK_ENTITY() of wakuwaku/lock.h, …) and
 * WK_CUSTOM_ENTITY(). Spelling every field in order keeps them valid,
 * warning-free C++20 (-Wextra warns about designated initialisers that
 * leave a field out). In C++ the numbers are cast (a braced initialiser
 * refuses an int variable as a double); in C they are not, so C keeps
 * diagnosing a wrong argument. A new field of wk_entity is added here, and
 * to each call (`flags` was added through WK__ENTITY_FLAGS instead, so the
 * existing calls did not change).
 */
#ifdef __cplusplus
#define WK__ENTITY_NUM(type_, v_) static_cast<type_>(v_)
#else
#define WK__ENTITY_NUM(type_, v_) (v_)
#endif
#define WK__ENTITY(kind_, ns_, ttl_ms_, capacity_, rate_, period_ms_)                         \
    WK__ENTITY_FLAGS(kind_, ns_, ttl_ms_, capacity_, rate_, period_ms_, 0)
/* WK__ENTITY with flags (WK_ENTITY_FAIR …), for the initialisers that set
 * them (WK_LOCK_FAIR_ENTITY …); WK__ENTITY is this with flags 0, so the
 * calls written before `flags` existed stay as they are. */
#define WK__ENTITY_FLAGS(kind_, ns_, ttl_ms_, capacity_, rate_, period_ms_, flags_)           \
    {.kind = (kind_), .ns = (ns_), .ttl_ms = WK__ENTITY_NUM(int64_t, ttl_ms_),                \
     .capacity = WK__ENTITY_NUM(double, capacity_), .rate = WK__ENTITY_NUM(double, rate_),    \
     .period_ms = WK__ENTITY_NUM(int64_t, period_ms_), .flags = WK__ENTITY_NUM(unsigned, flags_)}

/* A descriptor of a kind of your own (custom queries): no parameters. The
 * built-in kinds have theirs in their headers: WK_LOCK_ENTITY (lock.h),
 * WK_RWLOCK_ENTITY (rwlock.h), WK_CACHE_ENTITY (cache.h),
 * WK_HASHED_CACHE_ENTITY (hashed_cache.h), WK_TOKEN_BUCKET_ENTITY
 * (token_bucket.h), WK_SETTINGS_ENTITY (settings.h), WK_LIVE_VIEW_ENTITY
 * (live_view.h), each with its WK_KIND_X name. */
#define WK_CUSTOM_ENTITY(kind_, ns_) WK__ENTITY(kind_, ns_, 0, 0, 0, 0)

/*
 * Schema rows. Each kind's header gives wk-codegen (and so wk) its row,
 * beside its op list, as one X-macro of two callbacks:
 *
 *     #define WK_SEMAPHORE_SCHEMA(KIND, PARAM)                            \
 *         KIND(SEMAPHORE, ", {permits} permits, lease {ttl}", NO_BODY,    \
 *              WK__SEMAPHORE_SCHEMA_CHECK, NO_FAIR, NO_PARTS)             \
 *         PARAM(permits, capacity, POSITIVE, REQUIRED, 0,                 \
 *               "only a Semaphore has permits")                           \
 *         WK__SCHEMA_TTL(PARAM)
 *
 * KIND(X, wording, body, check, fair, parts): X is the kind's prefix, from
 * which
 * the generator takes WK_KIND_X (its name in schemas), WK_X_ENTITY (the
 * initialiser, taking the namespace and the parameters in PARAM order),
 * WK_X_OPS and, with BODY (else NO_BODY), WK_X_TYPED_OPS; `wording` is
 * the generated header comment after "names are …", {key} standing for a
 * parameter's value (durations as "30 s"); `check` is a rule over the
 * parameters, a macro check(v, why, whylen) over v[i].num (POSITIVE),
 * v[i].ms (DURATION) and v[i].text (the number as written) that returns
 * -1, or the index of the parameter to blame after writing why
 * (WK__SCHEMA_NO_CHECK: none); FAIR (else NO_FAIR) gives the kind's
 * "fair": true as WK_X_FAIR_ENTITY; PARTS (else NO_PARTS) reads WK_X_PARTS,
 * rows XX(k, part, type, field, params, summary) of constructors the
 * generator gives each entity of the kind, <service>_<entity>_<part>(name,
 * params…): `type` is a struct whose `field` points at the entity and
 * whose other fields are named as the params ("(wk_name name, uint64_t
 * cost)"), e.g. the TokenBucket's take for wk_token_bucket_acquire_all().
 * A part sends nothing, so it is not bound to a capability handle.
 *
 * PARAM(key, field, rule, presence, default_ms, elsewhere), one per
 * parameter: its schema key, the wk_entity field it fills, DURATION
 * ("30s", whole ms; > 0) or POSITIVE (a number > 0), REQUIRED or OPTIONAL
 * (then default_ms applies to a DURATION, and may be outside the rule: an
 * optional TTL left out is 0), and the reason given when another kind is
 * given this key (%s: that kind). A key several kinds take has one reason.
 *
 * Read by wk-codegen (codegen/kinds.c), which finds the kinds through the
 * generated <wakuwaku/kinds.h> (cmake/wk_kinds.cmake): every public
 * header with a WK_X_SCHEMA is a kind, and no list names them.
 */
#define WK__SCHEMA_TTL(PARAM) PARAM(ttl, ttl_ms, DURATION, REQUIRED, 0, "a %s has no TTL")
#define WK__SCHEMA_NO_CHECK(v, why, whylen) ((void)(v), (void)(why), (void)(whylen), -1)

/*
 * Why a namespace (or a kind) may not contain ':', '{' or '}'.
 *
 * Keys are "@@wakuwaku-entity:<Kind>:<namespace>:<name>" and, for items of
 * several keys, "@@wakuwaku-entity:<Kind>:{<namespace>:<name>}<suffix>"
 * (wakuwaku/key.h), and a name may hold any byte. With a ':' in namespaces,
 * Lock "jobs:billing" + name "daily" and Lock "jobs" + name "billing:daily"
 * would be the same key — but capabilities grant per kind + namespace, so a
 * handle refused on Lock:jobs:billing could take that lock through
 * Lock:jobs. A '{' would let a single-key item spell a multi-key one
 * ("{a" + "b}:w" is "{a:b}:w"), and braces would move the cluster hash
 * tag. Without these bytes in kinds and namespaces (and without '}' in
 * suffixes), the first ':' after the kind ends the namespace, and no two
 * (kind, namespace, name) triples build the same key: each key belongs to
 * exactly one entity, the one whose grant the capability checks.
 *
 * The Rust crate builds keys the same way without checking; every
 * namespace legal here gives the same bytes there.
 */

/* A buffer this big holds every message of wk_entity_check_msg(). */
#define WK_ENTITY_MSG_MAX 256

/*
 * wk_entity_check_msg — validate a descriptor for use by queries of its
 * kind, and say what is wrong.
 *
 *   msg, len  OUT, may be NULL / 0: on WK_EINVAL, a NUL-terminated message
 *             naming the field and the rule (cut to fit `len`; see
 *             WK_ENTITY_MSG_MAX); "" on WK_OK. For example:
 *               entity is NULL
 *               namespace is NULL / namespace is empty
 *               namespace is 129 bytes, more than WK_NAMESPACE_MAX (128)
 *               namespace "jobs:billing" contains ':' (':', '{' and '}'
 *                 separate the parts of a key, so such a namespace would
 *                 share keys with another one)
 *               kind … (the same rules, with WK_KIND_MAX)
 *               ttl_ms must be > 0 (got 0)             Lock, RwLock, Cache,
 *                                                      HashedCache
 *               capacity must be a finite number > 0 (got nan)  TokenBucket
 *               rate must be a finite number > 0 (got 0)        TokenBucket
 *               period_ms must be > 0 (got -5)                  TokenBucket
 *               flags 0x80 has bits no WK_ENTITY_* flag defines
 *
 * The built-in queries put this message in the handle's detail message
 * (wk_db_errmsg()) when they refuse a descriptor. Returns WK_OK or
 * WK_EINVAL. Thread-safe.
 */
WK_API int wk_entity_check_msg(const wk_entity *entity, char *msg, size_t len);

/*
 * wk_entity_check — wk_entity_check_msg() without the message. Returns
 * WK_OK, or WK_EINVAL (NULL entity; NULL, empty, over-long kind or
 * namespace, or one holding ':', '{' or '}'; a missing or out-of-range
 * parameter of a built-in kind). Thread-safe.
 */
WK_API int wk_entity_check(const wk_entity *entity);

/* ------------------------------------------------------------------------
 * Item names
 * ---------------------------------------------------------------------- */

typedef enum wk_name_type {
    WK_NAME_BYTES = 0, /* `bytes`/`len`, used verbatim */
    WK_NAME_U64 = 1,   /* `u64`, written in decimal */
    WK_NAME_I64 = 2    /* `i64`, written in decimal */
} wk_name_type;

/*
 * The name of one item of an entity. A value type: pass it by value. The
 * bytes of a WK_NAME_BYTES name are borrowed for the duration of the call.
 * Strings and byte strings appear in keys verbatim (NUL, '}' and any other
 * byte included), integers in decimal — byte-compatible with the Rust crate.
 */
typedef struct wk_name {
    wk_name_type type;
    const void *bytes;
    size_t len;
    uint64_t u64;
    int64_t i64;
} wk_name;

/* A NUL-terminated string name. wk_name_str(NULL) gives a name that every
 * query rejects with WK_EINVAL. */
static inline wk_name wk_name_str(const char *s)
{
    wk_name n = {WK_NAME_BYTES, s, 0, 0, 0};
    if (s) {
        while (s[n.len])
            n.len++;
    }
    return n;
}

/* A byte-string name of `len` bytes (may contain NUL). */
static inline wk_name wk_name_bytes(const void *bytes, size_t len)
{
    wk_name n = {WK_NAME_BYTES, bytes, len, 0, 0};
    return n;
}

/* An unsigned integer name ("42"). */
static inline wk_name wk_name_u64(uint64_t v)
{
    wk_name n = {WK_NAME_U64, NULL, 0, v, 0};
    return n;
}

/* A signed integer name ("-7"). */
static inline wk_name wk_name_i64(int64_t v)
{
    wk_name n = {WK_NAME_I64, NULL, 0, 0, v};
    return n;
}

/* ------------------------------------------------------------------------
 * Accesses and effects
 * ---------------------------------------------------------------------- */

/* How a query touches an entity. WRITE implies READ. */
typedef enum wk_mode {
    WK_READ = 1,
    WK_WRITE = 2
} wk_mode;

/* One entity touched by a query, and how. */
typedef struct wk_access {
    const wk_entity *entity;
    wk_mode mode;
} wk_access;

/* The effect of a query: the entities it touches. Borrowed arrays. */
typedef struct wk_effect {
    const wk_access *accesses;
    size_t count;
} wk_effect;

/* wk_effect_is_write — true if any access of the effect writes. */
WK_API bool wk_effect_is_write(const wk_effect *effect);

/* wk_mode_name — "READ" or "WRITE" (static; "?" for other values). */
WK_API const char *wk_mode_name(wk_mode mode);

#ifdef __cplusplus
}
#endif

/*
 * The names and initialisers of the six kinds that were declared here
 * before each moved to its own header (WK_KIND_LOCK, WK_LOCK_ENTITY, …),
 * for code that includes this header alone. Only each header's entity
 * part is read: plain macros, nothing else of the kind. Kinds added later
 * are not listed here; include their header.
 */
#define WK__ENTITY_MACROS_ONLY
#include <wakuwaku/lock.h>
#include <wakuwaku/rwlock.h>
#include <wakuwaku/cache.h>
#include <wakuwaku/hashed_cache.h>
#include <wakuwaku/token_bucket.h>
#include <wakuwaku/settings.h>
#undef WK__ENTITY_MACROS_ONLY

#endif /* WAKUWAKU_ENTITY_H */
