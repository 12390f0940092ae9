/*
 * collection/receiver.c — the blocking receivers' shared lifecycle and
 * their XREAD (collection/receiver.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "collection/receiver.h"
#include "core/async_internal.h"
#include "core/blocking.h"

int wk__receiver_open(wk__receiver *r, wk_db *db, const wk_entity *e, const char *kind,
                      const wk_name *name, char *err, size_t errlen)
{
    atomic_init(&r->stop, false);
    if (wk__held_init(&r->held, e, kind, name) != WK_OK) {
        snprintf(err, errlen, "out of memory");
        return WK_ENOMEM;
    }
    return wk__blocking_open(&r->b, db, err, errlen);
}

void wk__receiver_stop(wk__receiver *r)
{
    atomic_store(&r->stop, true);
    wk__blocking_interrupt(r->b);
}

bool wk__receiver_stopped(const wk__receiver *r)
{
    return atomic_load(&r->stop);
}

const char *wk__receiver_errmsg(const wk__receiver *r)
{
    if (r->sub)
        return r->msg;
    return r->b ? wk_db_errmsg(r->b) : "";
}

int wk__receiver_fail(wk__receiver *r, int status, const char *fmt, ...)
{
    char msg[sizeof(r->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!r->sub)
        return wk__processor_fail(wk_db_processor(r->b), status, "%s", msg);
    memcpy(r->msg, msg, sizeof(msg));
    return status;
}

void wk__receiver_close(wk__receiver *r)
{
    wk__async_sub_close(r->sub);
    r->sub = NULL;
    wk_db_close(r->b);
    r->b = NULL;
    wk__held_free(&r->held);
}

int wk__receiver_xread(wk__receiver *r, const char *op, const char *key, size_t key_len,
                       uint64_t after_ms, uint64_t after_seq, int64_t block_ms, wk_parse_fn parse,
                       void *out)
{
    char count[24], block[24], after[48];
    const char *argv[8] = {"XREAD", "COUNT", count, "BLOCK", block, "STREAMS", key, after};
    size_t argvlen[8] = {5,
                         5,
                         (size_t)snprintf(count, sizeof(count), "%d", WK__RECEIVER_BATCH),
                         5,
                         (size_t)snprintf(block, sizeof(block), "%lld", (long long)block_ms),
                         7,
                         key_len,
                         (size_t)snprintf(after, sizeof(after), "%llu-%llu",
                                          (unsigned long long)after_ms,
                                          (unsigned long long)after_seq)};
    wk_access access = {&r->held.entity, WK_READ};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_PARSE_ERRORS,
                  .argc = 8,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse,
                  .out = out};
    return wk__receiver_send(r, &q, block_ms);
}

int wk__receiver_run(wk__receiver *r, const wk__op *op, const char *const *args, const size_t *lens,
                     int nargs, void *out)
{
    wk_processor *p = r->sub ? wk__async_sub_processor(r->sub) : wk_db_processor(r->b);
    return wk__op_run(p, op, &r->held.entity, r->held.name, args, lens, nargs, out);
}
