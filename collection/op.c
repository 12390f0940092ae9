/*
 * collection/op.c — the operation runner (collection/op.h).
 */
#include <stdio.h>

#include "collection/lease_script.h"
#include "collection/op.h"

/* Whether `op`'s ARGV names `arg` (a try may pass the wake prefix w
 * without declaring the queue's keys). */
static bool uses_arg(const wk__op *op, wk__arg arg)
{
    for (int i = 0; i < WK__OP_ARGS_MAX && op->args[i] != WK__ARG_END; i++)
        if (op->args[i] == arg)
            return true;
    return false;
}

/* The checks and keys of every call; `token` is checked when op->token. */
static int begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
                 const wk_token *token, void *out)
{
    if (out && op->out_size)
        memset(out, 0, op->out_size);
    c->p = p;
    c->op = op;
    c->e = e;
    c->out = out;
    c->name = name;
    c->token = token;
    c->cap_ms = -1;
    int rc = wk__prepare(p, op->name, e, op->kind, &name, op->suffix[0], c->key[0], &c->key_len[0]);
    if (rc)
        return rc;
    /* The entity and the name passed the checks above. */
    for (c->nkeys = 1; c->nkeys < WK__OP_KEYS_MAX && op->suffix[c->nkeys]; c->nkeys++)
        if ((rc = wk__key_build_checked(c->key[c->nkeys], WK_KEY_MAX, &c->key_len[c->nkeys], e,
                                        &name, op->suffix[c->nkeys])))
            return wk__op_fail(c, rc, "cannot build its key %s", op->suffix[c->nkeys]);
    if (op->token && (!token || !out) && op->out_name)
        return wk__op_fail(c, WK_EINVAL, "token and %s are required", op->out_name);
    if (op->token && !token)
        return wk__op_fail(c, WK_EINVAL, "token is required");
    if (!out && op->out_name)
        return wk__op_fail(c, WK_EINVAL, "%s is required", op->out_name);
    if (!op->wake && !uses_arg(op, WK__ARG_WAKE))
        return WK_OK;
    if (!op->wake_of)
        return wk__wake_keys_for(p, op->name, &c->wake, c->key[0], c->key_len[0]);
    char of[WK_KEY_MAX];
    size_t of_len;
    if ((rc = wk__key_build_checked(of, sizeof(of), &of_len, e, &name, op->wake_of)))
        return wk__op_fail(c, rc, "cannot build its key %s", op->wake_of);
    return wk__wake_keys_for(p, op->name, &c->wake, of, of_len);
}

int wk__op_begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                 wk_name name, void *out)
{
    return begin(c, p, op, e, name, NULL, out);
}

int wk__op_begin_token(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                       wk_name name, const wk_token *token, void *out)
{
    return begin(c, p, op, e, name, token, out);
}

/* A declared argument of the call into *s, *len; `buf` (24 bytes) holds
 * a number. */
static inline void declared_arg(const wk__call *c, wk__arg a, char *buf, const char **s, size_t *len)
{
    switch (a) {
    case WK__ARG_TOKEN:
        *s = (const char *)c->token->bytes, *len = WK_TOKEN_LEN;
        return;
    case WK__ARG_TTL:
        *s = buf, *len = wk__fmt_i64(buf, c->e->ttl_ms);
        return;
    case WK__ARG_PERMITS:
        *s = buf, *len = wk__fmt_i64(buf, (int64_t)c->e->capacity);
        return;
    case WK__ARG_WAKE:
        *s = c->wake.w, *len = c->wake.w_len;
        return;
    case WK__ARG_CAP:
        *s = buf, *len = wk__fmt_i64(buf, c->cap_ms);
        return;
    case WK__ARG_FAIR:
        *s = (c->e->flags & WK_ENTITY_FAIR) ? "1" : "0", *len = 1;
        return;
    case WK__ARG_END:
        break;
    }
    *s = "", *len = 0;
}

int wk__op_send(const wk__call *c, const char *const *args, const size_t *lens, int nargs)
{
    const wk__op *op = c->op;
    const char *argv[1 + WK__OP_KEYS_MAX + 2 + WK__OP_ARGS_MAX];
    size_t argvlen[1 + WK__OP_KEYS_MAX + 2 + WK__OP_ARGS_MAX];
    char num[WK__OP_ARGS_MAX][24];
    const wk_script *script = op->forms ? &op->forms->script : op->script;
    int argc = 0;
    if (!script) {
        argv[argc] = op->command;
        argvlen[argc++] = strlen(op->command);
    }
    int first_key = argc;
    for (int k = 0; k < c->nkeys; k++) {
        if (k == op->wake - 1) {
            argv[argc] = c->wake.q, argvlen[argc++] = c->wake.q_len;
            argv[argc] = c->wake.e, argvlen[argc++] = c->wake.e_len;
        }
        argv[argc] = c->key[k];
        argvlen[argc++] = c->key_len[k];
    }
    if (op->wake && op->wake - 1 == c->nkeys) { /* after the item's keys */
        argv[argc] = c->wake.q, argvlen[argc++] = c->wake.q_len;
        argv[argc] = c->wake.e, argvlen[argc++] = c->wake.e_len;
    }
    int nkeys = argc - first_key, ndeclared = 0;
    for (; ndeclared < WK__OP_ARGS_MAX && op->args[ndeclared] != WK__ARG_END; ndeclared++, argc++)
        declared_arg(c, op->args[ndeclared], num[ndeclared], &argv[argc], &argvlen[argc]);
    if (nargs < 0 || ndeclared + nargs > WK__OP_ARGS_MAX)
        return wk__op_fail(c, WK_EINVAL, "%d arguments (the most is %d)", ndeclared + nargs,
                           WK__OP_ARGS_MAX);
    for (int i = 0; i < nargs; i++) {
        argv[argc] = args[i];
        argvlen[argc++] = lens[i];
    }
    /* A split take is flagged, and parsed as one, only where its steps
     * can run (lease_script.h): through a deferred processor it waits out
     * TRYAGAIN as any query does. */
    bool split = op->steps && !wk_processor_is_deferred(c->p);
    bool single_key = op->forms && (!op->steps || split);
    wk_access access = {c->e, op->mode};
    wk_query q = {.name = op->name,
                  .effect = WK__EFFECT1(access),
                  .flags = op->flags | WK__QUERY_OP | (single_key ? WK__QUERY_SINGLE_KEY : 0),
                  .script = script,
                  .nkeys = script ? nkeys : 0,
                  .argc = argc,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = split ? wk__take_parse : op->parse,
                  .out = c->out};
    return wk_process(c->p, &q);
}

int wk__op_run(wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
               const char *const *args, const size_t *lens, int nargs, void *out)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, op, e, name, out);
    return rc ? rc : wk__op_send(&c, args, lens, nargs);
}

int wk__op_run_token(wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
                     const wk_token *token, void *out)
{
    wk__call c;
    int rc = wk__op_begin_token(&c, p, op, e, name, token, out);
    return rc ? rc : wk__op_send(&c, NULL, NULL, 0);
}

int wk__op_fail(const wk__call *c, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return wk__processor_fail(c->p, status, "%s: %s", c->op->name, msg);
}
