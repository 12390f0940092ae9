/*
 * collection/op.c — the operation runner (collection/op.h).
 */
#include <stdio.h>

#include "collection/op.h"

int wk__op_begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                 wk_name name, void *out)
{
    if (out && op->out_size)
        memset(out, 0, op->out_size);
    c->p = p;
    c->op = op;
    c->e = e;
    c->out = out;
    int rc = wk__prepare(p, op->name, e, op->kind, &name, op->suffix[0], c->key[0], &c->key_len[0]);
    if (rc)
        return rc;
    /* The entity and the name passed the checks above. */
    for (c->nkeys = 1; c->nkeys < WK__OP_KEYS_MAX && op->suffix[c->nkeys]; c->nkeys++)
        if ((rc = wk__key_build_checked(c->key[c->nkeys], WK_KEY_MAX, &c->key_len[c->nkeys], e,
                                        &name, op->suffix[c->nkeys])))
            return wk__op_fail(c, rc, "cannot build its key %s", op->suffix[c->nkeys]);
    if (!out && op->out_name)
        return wk__op_fail(c, WK_EINVAL, "%s is required", op->out_name);
    return WK_OK;
}

int wk__op_send(const wk__call *c, const char *const *args, const size_t *lens, int nargs)
{
    const wk__op *op = c->op;
    if (nargs < 0 || nargs > WK__OP_ARGS_MAX)
        return wk__op_fail(c, WK_EINVAL, "%d arguments (the most is %d)", nargs,
                           WK__OP_ARGS_MAX);
    const char *argv[1 + WK__OP_KEYS_MAX + WK__OP_ARGS_MAX];
    size_t argvlen[1 + WK__OP_KEYS_MAX + WK__OP_ARGS_MAX];
    int argc = 0, nkeys = c->nkeys;
    if (!op->script) {
        argv[argc] = op->command;
        argvlen[argc++] = strlen(op->command);
    }
    for (int k = 0; k < nkeys; k++) {
        argv[argc] = c->key[k];
        argvlen[argc++] = c->key_len[k];
    }
    for (int i = 0; i < nargs; i++) {
        argv[argc] = args[i];
        argvlen[argc++] = lens[i];
    }
    wk_access access = {c->e, op->mode};
    wk_query q = {.name = op->name,
                  .effect = WK__EFFECT1(access),
                  .flags = op->flags,
                  .script = op->script,
                  .nkeys = op->script ? nkeys : 0,
                  .argc = argc,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = op->parse,
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

int wk__op_fail(const wk__call *c, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return wk__processor_fail(c->p, status, "%s: %s", c->op->name, msg);
}
