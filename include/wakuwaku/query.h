/*
 * wakuwaku/query.h — queries, replies and the processor interface.
 *
 * A *query* is a value describing one Redis round trip: a name, an effect
 * (which entities it reads or writes), how it executes (a command, or a Lua
 * script run by EVALSHA) and how its reply becomes a typed outcome. Every
 * built-in operation is a query, and you can define your own on your own
 * entities; all of them go through the same dispatch:
 *
 *     caller → wk_processor (hooks, metrics, …) → the handle's processor:
 *         capability covers the effect?  no → WK_EDENIED, nothing sent
 *         → command on the connection → reply → parse → outcome
 *
 * Queries are built on the caller's stack; every pointer in one is borrowed
 * for the duration of the process() call only.
 */
#ifndef WAKUWAKU_QUERY_H
#define WAKUWAKU_QUERY_H

#include <wakuwaku/capability.h>
#include <wakuwaku/entity.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Replies: a read-only view of one server reply, valid only inside the
 * parse callback that receives it. The library never exposes hiredis types.
 * ---------------------------------------------------------------------- */

typedef struct wk_reply wk_reply;

typedef enum wk_reply_type {
    WK_REPLY_STRING = 1,
    WK_REPLY_ARRAY = 2,
    WK_REPLY_INTEGER = 3,
    WK_REPLY_NIL = 4,
    WK_REPLY_STATUS = 5,
    WK_REPLY_ERROR = 6,
    WK_REPLY_OTHER = 7 /* a type this version does not know */
} wk_reply_type;

WK_API wk_reply_type wk_reply_get_type(const wk_reply *reply);
/* The integer of an INTEGER reply; 0 for other types. */
WK_API long long wk_reply_integer(const wk_reply *reply);
/* The bytes of a STRING, STATUS or ERROR reply (not NUL-safe to print);
 * NULL for other types. *len (if not NULL) gets the length. */
WK_API const char *wk_reply_str(const wk_reply *reply, size_t *len);
/* Number of elements of an ARRAY reply; 0 for other types. */
WK_API size_t wk_reply_count(const wk_reply *reply);
/* Element i of an ARRAY reply; NULL when out of range or not an array. */
WK_API const wk_reply *wk_reply_at(const wk_reply *reply, size_t i);

/* ------------------------------------------------------------------------
 * Diagnostics: where a parser explains a failure. The text goes to the
 * handle's detail message (wk_db_errmsg()).
 * ---------------------------------------------------------------------- */

typedef struct wk_diag wk_diag;

/* wk_diag_fail — record a printf-style detail message and return `status`,
 * so a parser can write `return wk_diag_fail(d, WK_ECORRUPT, "…");`. */
WK_API int wk_diag_fail(wk_diag *diag, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------
 * Scripts
 * ---------------------------------------------------------------------- */

/*
 * A Lua script. Declare it `static const`; the handle computes and caches
 * its SHA-1, runs it by EVALSHA and loads it (SCRIPT LOAD) the first time
 * the server answers NOSCRIPT — after a restart, SCRIPT FLUSH or failover —
 * then re-sends the query. NOSCRIPT means the script did not run, so the
 * re-send never repeats an effect.
 */
typedef struct wk_script {
    const char *name;   /* for messages, e.g. "lock.release" */
    const char *source; /* the Lua text */
} wk_script;

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

typedef struct wk_query wk_query;

/*
 * Parse callback: turn `reply` into the query's typed outcome at
 * `query->out`. Return WK_OK or a status (use wk_diag_fail for the text).
 * Called once per successful round trip; never called for refused or
 * failed queries. Error replies are turned into WK_EREDIS before the parser
 * is called unless the query sets WK_QUERY_PARSE_ERRORS.
 */
typedef int (*wk_parse_fn)(const wk_query *query, const wk_reply *reply, wk_diag *diag);

/* Query flags */
#define WK_QUERY_RETRY_SAFE (1u << 0)   /* may be re-sent once after a dropped connection */
#define WK_QUERY_PARSE_ERRORS (1u << 1) /* error replies go to the parser, not WK_EREDIS */
/* Bits 16 and up are reserved for the library's own queries (how their
 * leases are acknowledged, how they cross a slot migration): leave them 0. */

/*
 * One query. Fill it with designated initialisers on the stack.
 *
 *   name      short dotted name for messages and hooks ("lock.try").
 *   effect    the entities it touches and how; checked before sending.
 *             An empty effect touches no entity and every capability
 *             allows it: use it only for commands that touch no data
 *             (PING, CLIENT …), never to get around a capability.
 *   flags     WK_QUERY_* above.
 *   script    NULL: argv is a full command ("SET", key, …).
 *             non-NULL: argv is the script's keys then its arguments, and
 *             `nkeys` says how many keys come first.
 *   argc, argv, argvlen   the arguments (binary-safe; argvlen may not be
 *             NULL).
 *   parse     the reply parser (NULL: any non-error reply is success).
 *   out       where the parser writes the outcome (its type is the
 *             query's business).
 *
 * Retry safety: a query may be sent twice only if a second execution
 * cannot change the data or another client's view of it: pure READs. No
 * built-in write is retry-safe — not even a cache put, since a re-send
 * after a lost reply could overwrite a newer value another client wrote in
 * between. A write whose reply is lost reports WK_EUNKNOWN ("the outcome
 * is unknown"); see wakuwaku/db.h, OUTCOMES. Setting the flag on your own
 * write is a promise that a second run is harmless whatever others did.
 */
struct wk_query {
    const char *name;
    wk_effect effect;
    unsigned flags;
    const wk_script *script;
    int nkeys;
    int argc;
    const char *const *argv;
    const size_t *argvlen;
    wk_parse_fn parse;
    void *out;
};

/* ------------------------------------------------------------------------
 * Processors
 * ---------------------------------------------------------------------- */

typedef struct wk_db wk_db;
typedef struct wk_processor wk_processor;

/*
 * The processor interface: one operation, process(query). A handle's
 * processor (wk_db_processor()) sends queries to Redis; wrappers (hooks,
 * metrics, your own) take an inner processor, do their part and pass the
 * query on. They nest.
 *
 *   process   runs the query; returns WK_OK or a status.
 *   db        the handle at the end of the chain, where detail messages
 *             live. A wrapper copies its inner processor's `db`.
 *   flags     WK_PROCESSOR_DEFERRED when queries only get queued (a
 *             batch): process() then returns WK_OK once the query is
 *             queued and its parser runs later. A wrapper copies its inner
 *             processor's flags.
 *
 * Rule for every query builder (built-in or yours): OUT parameters are
 * written only by the parser (or before process() is called), never after
 * process() returns, and `query->out` points at the caller's memory, not
 * at locals of the builder — so the same builder works immediately and
 * in a batch.
 *
 * To write a wrapper, embed a wk_processor as the first member of your
 * struct and recover the struct from `self` in process().
 */
struct wk_processor {
    int (*process)(wk_processor *self, wk_query *query);
    wk_db *db;
    unsigned flags;
};

#define WK_PROCESSOR_DEFERRED (1u << 0) /* queries are queued, parsed later */

/* wk_processor_is_deferred — whether `processor` queues queries instead of
 * running them (helpers that need an outcome at once refuse such a
 * processor with WK_EINVAL). */
WK_API bool wk_processor_is_deferred(const wk_processor *processor);

/*
 * wk_process — run `query` through `processor`. Returns the processor's
 * status; WK_EINVAL if either is NULL.
 */
WK_API int wk_process(wk_processor *processor, wk_query *query);

/*
 * wk_processor_errmsg — the detail message of the last failure on the
 * handle behind `processor`; borrowed until the next call on that handle.
 * Never NULL.
 */
WK_API const char *wk_processor_errmsg(const wk_processor *processor);

/* ------------------------------------------------------------------------
 * Operation lists. Each kind's header lists its operations once, beside
 * their prototypes, as an X-macro (like WK_STATUS_MAP):
 *
 *     #define WK_LOCK_OPS(XX)                                            \
 *         XX(lock, try, WRITE, (wk_name name, wk_token *token, bool *acquired), \
 *            "take the lock if nobody holds it; never waits")             \
 *         …
 *
 * A row is (kind, op, mode, params, summary): the function
 * wk_<kind>_<op>(wk_processor *p, const wk_entity *e, <params>), the mode
 * of its access to the entity (READ or WRITE), its parameters after the
 * entity, and a one-line summary (NULL: wk-codegen makes no accessor for
 * it). The query's name is "<kind>.<op>". A kind with a body type has a
 * second list, WK_<KIND>_TYPED_OPS: the rows an entity with a body record
 * gets instead (wk_<kind>_<op>_typed, whose `codec, value` the generated
 * accessor turns into the record; and other wordings of plain rows).
 *
 * Read by: the header itself (WK__OPS below), wk-codegen (codegen/kinds.c:
 * the typed accessors), the test rows (tests/kinds/: the effect of each
 * row, and a row for every operation) and wk (tools/wk: its commands).
 * ---------------------------------------------------------------------- */

/*
 * WK__OPS(WK_LOCK_OPS) — after a kind's prototypes: declares each row's
 * function again from the row, so a row that disagrees with the documented
 * prototype is a conflicting redeclaration (a compile error), and gives
 * each row's mode as WK__OP_MODE(kind, op). WK__OPS_TYPED: the
 * redeclarations alone (a typed list repeats some plain rows).
 */
#define WK__OPS(list) WK__OPS_TYPED(list) enum { list(WK__OP_ENUM) };
#define WK__OPS_TYPED(list) WK__REDECL_BEGIN list(WK__OP_DECL) WK__REDECL_END
#define WK__OP_MODE(kind, op) ((wk_mode)WK__MODE_##kind##_##op)

#define WK__OP_DECL(k, op, mode, params, summary)                                                  \
    WK_API int wk_##k##_##op(wk_processor *, const wk_entity *, WK__UNPAREN params);
#define WK__OP_ENUM(k, op, mode, params, summary) WK__MODE_##k##_##op = WK_##mode,
#define WK__UNPAREN(...) __VA_ARGS__
#if defined(__GNUC__) /* the redeclarations are on purpose */
#define WK__REDECL_BEGIN                                                                           \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wredundant-decls\"")
#define WK__REDECL_END _Pragma("GCC diagnostic pop")
#else
#define WK__REDECL_BEGIN
#define WK__REDECL_END
#endif

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_QUERY_H */
