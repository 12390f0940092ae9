/*
 * core/kept.c — queries kept for an exchange that runs later
 * (core/exchange.h): a batch's until wk_batch_exec(), the event-loop
 * handle's until the loop turns.
 */
#include <stdlib.h>
#include <string.h>

#include "core/exchange.h"

int wk__kept_add(wk__kept *k, wk_db *db, const wk_query *q)
{
    /* Room for everything the exchange needs, so it cannot run out. */
    size_t argc = (size_t)q->argc;
    if (wk__grow_array(&k->entries, &k->cap, k->count + 1, sizeof(*k->entries)) ||
        wk__grow_array(&k->slots, &k->slots_cap, k->count + 1, sizeof(*k->slots)) ||
        wk__grow_array(&k->spans, &k->spans_cap, k->nspans + argc, sizeof(*k->spans)) ||
        wk__grow_array(&k->argv, &k->argv_cap, argc, sizeof(*k->argv)) ||
        wk__grow_array(&k->argvlen, &k->argvlen_cap, argc, sizeof(*k->argvlen)))
        return wk__db_fail(db, WK_ENOMEM, "%s: out of memory queuing", q->name);
    size_t mark = k->buf.len, command_end = 0;
    int rc = wk__format_query(db, &k->buf, q, false, k->spans + k->nspans, &command_end);
    if (rc) {
        k->buf.len = mark;
        return rc;
    }
    k->slots[k->count] = (wk__slot){.state = WK__UNSENT,
                                    .writes = wk_effect_is_write(&q->effect),
                                    .keyless = q->effect.count == 0,
                                    .end = command_end};
    k->entries[k->count++] = (wk__kept_entry){.name = q->name,
                                              .flags = q->flags,
                                              .script = q->script,
                                              .nkeys = q->nkeys,
                                              .argc = q->argc,
                                              .start = mark,
                                              .first_span = k->nspans,
                                              .parse = q->parse,
                                              .out = q->out};
    k->nspans += argc;
    return WK_OK;
}

const wk_query *wk__kept_query(void *ctx, size_t i)
{
    wk__kept *k = ctx;
    const wk__kept_entry *e = &k->entries[i];
    for (int a = 0; a < e->argc; a++) {
        const wk__span *s = &k->spans[e->first_span + (size_t)a];
        k->argv[a] = k->buf.data + s->off;
        k->argvlen[a] = s->len;
    }
    k->scratch = (wk_query){.name = e->name,
                            .flags = e->flags,
                            .script = e->script,
                            .nkeys = e->nkeys,
                            .argc = e->argc,
                            .argv = k->argv,
                            .argvlen = k->argvlen,
                            .parse = e->parse,
                            .out = e->out};
    return &k->scratch;
}

void wk__kept_drop_front(wk__kept *k, size_t n)
{
    size_t rest = k->count - n;
    size_t span0 = rest ? k->entries[n].first_span : k->nspans;
    size_t base = rest ? k->entries[n].start : k->buf.len;
    memmove(k->entries, k->entries + n, rest * sizeof(*k->entries));
    memmove(k->slots, k->slots + n, rest * sizeof(*k->slots));
    memmove(k->spans, k->spans + span0, (k->nspans - span0) * sizeof(*k->spans));
    memmove(k->buf.data, k->buf.data + base, k->buf.len - base);
    k->count = rest;
    k->nspans -= span0;
    k->buf.len -= base;
    for (size_t i = 0; i < rest; i++) {
        k->entries[i].start -= base;
        k->entries[i].first_span -= span0;
    }
    for (size_t i = 0; i < k->nspans; i++)
        k->spans[i].off -= base;
}

void wk__kept_free(wk__kept *k)
{
    free(k->entries);
    free(k->slots);
    free(k->spans);
    free(k->buf.data);
    free(k->argv);
    free(k->argvlen);
    *k = (wk__kept){0};
}
