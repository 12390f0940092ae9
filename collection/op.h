/*
 * collection/op.h — one way to run an operation. Each operation of a kind
 * is a static descriptor (wk__op: its name, kind, effect, flags, command or
 * script, key suffix, parser, OUT rule); one runner does what every public
 * kind function used to write out by hand: check the processor, the entity
 * and the name, build the key, check and reset the OUT, build the query and
 * process it. The shape of Redis's setGenericCommand and its thin wrappers.
 * Not installed.
 *
 *   static const wk__op get_op = {"cache.get", WK_KIND_CACHE, WK_READ,
 *                                 WK_QUERY_RETRY_SAFE, NULL, "GET", NULL,
 *                                 parse_get, "out", 0};
 *   return wk__op_run(p, &get_op, cache, name, NULL, NULL, 0, out);
 *
 * An operation that checks its own arguments after the key is built (or
 * builds arguments from it) splits the run in two:
 *
 *   wk__call c;
 *   int rc = wk__op_begin(&c, p, &acquire_op, bucket, name, outcome);
 *   if (rc) return rc;
 *   if (cost < 1) return wk__op_fail(&c, WK_EINVAL, "cost must be >= 1");
 *   return wk__op_send(&c, args, lens, 2);
 *
 * The lease kinds' descriptors also say where the item's wake keys go,
 * what their ARGV is made of (the token, the TTL, …: wk__arg), that the
 * caller's token is required, and which script has a single-key form or
 * is a take a migration may split; their takes, tries and waits are
 * collection/lease_script.h's, over this runner.
 */
#ifndef WK_COLLECTION_OP_H
#define WK_COLLECTION_OP_H

#include "collection/common.h"
#include "collection/wake.h"

/* The most item keys an operation names. */
#define WK__OP_KEYS_MAX 2

/* The most arguments an operation passes (its declared ones and the
 * caller's together). */
#define WK__OP_ARGS_MAX 8

/* What an operation's ARGV is made of, when it declares it (wk__op.args):
 * values the call already has, so the lease kinds' wrappers pass none. */
typedef enum wk__arg {
    WK__ARG_END = 0, /* the end of the list */
    WK__ARG_TOKEN,   /* the call's token (wk__call.token), 16 bytes */
    WK__ARG_TTL,     /* the entity's ttl_ms */
    WK__ARG_PERMITS, /* the entity's capacity, whole (a Semaphore's N) */
    WK__ARG_WAKE,    /* the item's wake prefix w (collection/wake.h; built
                      * also for an op that declares no wake keys) */
    WK__ARG_CAP,     /* the call's cap_ms (-1: a try, which does not wait) */
    WK__ARG_FAIR,    /* "1" for a fair entity (WK_ENTITY_FAIR), else "0" */
} wk__arg;

struct wk__split_steps; /* collection/lease_script.h */

typedef struct wk__op {
    const char *name;        /* "cache.get": messages, hooks, metrics */
    const char *kind;        /* WK_KIND_CACHE */
    wk_mode mode;            /* its effect on the entity: WK_READ or WK_WRITE */
    /* WK_QUERY_* (WK_QUERY_RETRY_SAFE for reads); WK__QUERY_LEASE for one
     * that takes or lengthens a lease (the replica acknowledgment). */
    unsigned flags;
    const wk_script *script; /* KEYS are the item's keys, ARGV the args; or NULL: */
    const char *command;     /* argv is command, the item's keys, args */
    /* The item's keys in the multi-key layout, by suffix ({":h", ":l"});
     * none: its one key in the single-key layout. */
    const char *suffix[WK__OP_KEYS_MAX];
    wk_parse_fn parse;       /* NULL: any reply but an error is success */
    const char *out_name;    /* the OUT the caller must give, for the message; NULL: optional */
    size_t out_size;         /* bytes of OUT zeroed before anything (0: none) */

    /* The lease kinds' part (collection/lease_script.h); zero elsewhere. */
    /* In place of `script`: a script with a single-key form (core's
     * wk__two_forms), sent flagged WK__QUERY_SINGLE_KEY so that a
     * migrating slot runs the single-key form. */
    const wk__two_forms *forms;
    /* A take that a migration may split (with `forms`): through an
     * immediate processor it is flagged and parsed by wk__take_parse (its
     * OUT a wk__take_reply), as lease_script.h's split takes say; through
     * a deferred one it is a plain query. */
    const struct wk__split_steps *steps;
    bool token;              /* it takes the caller's token: a required argument */
    /* The item's wake keys (collection/wake.h): q and e are KEYS[wake]
     * and KEYS[wake + 1], as the scripts number them (0: none); they are
     * of the item's key with suffix `wake_of` (NULL: the first key's). */
    int wake;
    const char *wake_of;
    /* A waiting take of a kind whose release hands the item over: the
     * waiter's leave (collection/wake.h, wk__waiter.leave), sent on the
     * take's keys with the take's token; NULL: the queue-only leave. */
    const struct wk__op *leave;
    wk__arg args[WK__OP_ARGS_MAX]; /* its ARGV, before the caller's args */
} wk__op;

/* The name and mode of operation `op` of `kind` as its kind's op list
 * declares them (wakuwaku/query.h, "Operation lists"): the effect is
 * written once, in the header, beside the prototype. Operations that are
 * not a public call (a subscription's probe) write both by hand. */
#define WK__OP_OF(kind, op) .name = #kind "." #op, .mode = WK__OP_MODE(kind, op)

/* One call of an operation, between wk__op_begin() and wk__op_send(). A
 * call may be sent more than once (the chunks of one scan, the attempts
 * of a wait), `out` and `cap_ms` changed between sends. */
typedef struct wk__call {
    wk_processor *p;
    const wk__op *op;
    const wk_entity *e;
    void *out; /* the query's OUT */
    wk_name name;
    const wk_token *token; /* WK__ARG_TOKEN */
    int64_t cap_ms;        /* WK__ARG_CAP; -1 unless set */
    int nkeys;
    size_t key_len[WK__OP_KEYS_MAX];
    char key[WK__OP_KEYS_MAX][WK_KEY_MAX];
    wk__wake_keys wake; /* built when op->wake */
} wk__call;

/* Zero out_size bytes of `out` (when given), check p, the entity (of
 * op->kind) and the name, build the item's keys into c->key, refuse a
 * missing required OUT, and build the wake keys: WK_OK, or WK_EINVAL
 * with the message on the handle. */
int wk__op_begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                 wk_name name, void *out);

/* wk__op_begin() for an operation that takes the caller's token
 * (op->token): a missing token is refused with the OUT ("token and
 * <out_name> are required"); c->token is `token`. */
int wk__op_begin_token(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                       wk_name name, const wk_token *token, void *out);

/* Build the query (the command or script over c->key, the wake keys
 * where op->wake puts them, op->args and then the `nargs` args; at most
 * WK__OP_ARGS_MAX arguments in all) and process it: the processor's
 * status. */
int wk__op_send(const wk__call *c, const char *const *args, const size_t *lens, int nargs);

/* wk__op_begin() then wk__op_send(). */
int wk__op_run(wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
               const char *const *args, const size_t *lens, int nargs, void *out);

/* wk__op_begin_token() then wk__op_send() of the declared args: the
 * whole of a lease kind's token operation (release, extend, owned). */
int wk__op_run_token(wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
                     const wk_token *token, void *out);

/* The definitions of the public operations that are their descriptor
 * run as it is, written once: `fn(p, e, name, out)` is wk__op_run() of
 * `op` without arguments, `fn(p, e, name, token, out)` wk__op_run_token()
 * (the header's prototype checks the signature). */
#define WK__OP_FN(fn, op, out_type)                                                                \
    int fn(wk_processor *p, const wk_entity *e, wk_name name, out_type *out)                       \
    {                                                                                              \
        return wk__op_run(p, &(op), e, name, NULL, NULL, 0, out);                                  \
    }
#define WK__OP_TOKEN_FN(fn, op, out_type)                                                          \
    int fn(wk_processor *p, const wk_entity *e, wk_name name, const wk_token *token,              \
           out_type *out)                                                                          \
    {                                                                                              \
        return wk__op_run_token(p, &(op), e, name, token, out);                                    \
    }

/* "<op name>: <message>" on the handle; returns status. */
int wk__op_fail(const wk__call *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* WK_COLLECTION_OP_H */
