/*
 * collection/lease_script.c — the query of one lease-kind script
 * (collection/lease_script.h).
 */
#include "collection/lease_script.h"

int wk__lease_script(wk_processor *p, const wk__lease_call *c)
{
    const char *argv[2 + 2 + 5 + 1];
    size_t argvlen[2 + 2 + 5 + 1];
    int n = 0;
    for (int i = 0; i < c->nkeys; i++)
        argv[n] = c->keys[i], argvlen[n++] = c->key_lens[i];
    if (c->wake) {
        argv[n] = c->wake->q, argvlen[n++] = c->wake->q_len;
        argv[n] = c->wake->e, argvlen[n++] = c->wake->e_len;
    }
    int nkeys = n;
    for (int i = 0; i < c->nargs; i++)
        argv[n] = c->args[i], argvlen[n++] = c->arg_lens[i];
    if (c->wake)
        argv[n] = c->wake->w, argvlen[n++] = c->wake->w_len;
    wk_access access = {c->e, c->mode};
    wk_query q = {.name = c->op,
                  .effect = WK__EFFECT1(access),
                  .flags = (c->mode == WK_READ ? WK_QUERY_RETRY_SAFE : 0) |
                           (c->lease ? WK__QUERY_LEASE : 0) |
                           (c->split ? WK__QUERY_SINGLE_KEY : wk__single_key_flag(c->script)),
                  .script = c->script,
                  .nkeys = nkeys,
                  .argc = n,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = c->parse,
                  .out = c->out};
    return wk_process(p, &q);
}
