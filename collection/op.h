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
 */
#ifndef WK_COLLECTION_OP_H
#define WK_COLLECTION_OP_H

#include "collection/common.h"

/* The most item keys an operation names. */
#define WK__OP_KEYS_MAX 2

typedef struct wk__op {
    const char *name;        /* "cache.get": messages, hooks, metrics */
    const char *kind;        /* WK_KIND_CACHE */
    wk_mode mode;            /* its effect on the entity: WK_READ or WK_WRITE */
    unsigned flags;          /* WK_QUERY_* (WK_QUERY_RETRY_SAFE for reads) */
    const wk_script *script; /* KEYS are the item's keys, ARGV the args; or NULL: */
    const char *command;     /* argv is command, the item's keys, args */
    /* The item's keys in the multi-key layout, by suffix ({":h", ":l"});
     * none: its one key in the single-key layout. */
    const char *suffix[WK__OP_KEYS_MAX];
    wk_parse_fn parse;       /* NULL: any reply but an error is success */
    const char *out_name;    /* the OUT the caller must give, for the message; NULL: optional */
    size_t out_size;         /* bytes of OUT zeroed before anything (0: none) */
} wk__op;

/* The name and mode of operation `op` of `kind` as its kind's op list
 * declares them (wakuwaku/query.h, "Operation lists"): the effect is
 * written once, in the header, beside the prototype. Operations that are
 * not a public call (a subscription's probe) write both by hand. */
#define WK__OP_OF(kind, op) .name = #kind "." #op, .mode = WK__OP_MODE(kind, op)

/* The most arguments after the key an operation passes. */
#define WK__OP_ARGS_MAX 8

/* One call of an operation, between wk__op_begin() and wk__op_send(). A
 * call may be sent more than once (the chunks of one scan), `out`
 * re-pointed between sends. */
typedef struct wk__call {
    wk_processor *p;
    const wk__op *op;
    const wk_entity *e;
    void *out; /* the query's OUT */
    int nkeys;
    size_t key_len[WK__OP_KEYS_MAX];
    char key[WK__OP_KEYS_MAX][WK_KEY_MAX];
} wk__call;

/* Zero out_size bytes of `out` (when given), check p, the entity (of
 * op->kind) and the name, build the item's keys into c->key, and refuse a missing
 * required OUT: WK_OK, or WK_EINVAL with the message on the handle. */
int wk__op_begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                 wk_name name, void *out);

/* Build the query (the command or script over c->key and `nargs` args,
 * at most WK__OP_ARGS_MAX) and process it: the processor's status. */
int wk__op_send(const wk__call *c, const char *const *args, const size_t *lens, int nargs);

/* wk__op_begin() then wk__op_send(). */
int wk__op_run(wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
               const char *const *args, const size_t *lens, int nargs, void *out);

/* "<op name>: <message>" on the handle; returns status. */
int wk__op_fail(const wk__call *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* WK_COLLECTION_OP_H */
