/*
 * collection/lease_script.c — the takes, tries and waits of the lease
 * kinds over the operation runner (collection/lease_script.h).
 */
#include "collection/lease_script.h"

int wk__lease_take(wk__call *c, wk__take_reply *got)
{
    *got = (wk__take_reply){false, false, false, 0};
    if (!c->op->steps || wk_processor_is_deferred(c->p))
        return wk__op_send(c, NULL, NULL, 0);
    /* Parsed here (wk__op_send picks wk__take_parse): a mark is finished
     * before the caller sees an outcome. */
    void *out = c->out;
    c->out = got;
    int rc = wk__op_send(c, NULL, NULL, 0);
    c->out = out;
    got->parsed = true;
    if (rc == WK_OK && got->marked)
        rc = wk__split_take_finish(c, got);
    return rc;
}

int wk__lease_try(wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
                  wk_token *token, bool *acquired, wk__lease_release_fn release)
{
    wk__call c;
    int rc = wk__op_begin_token(&c, p, op, e, name, token, acquired);
    if (rc)
        return rc;
    wk_token_random(token);
    wk__take_reply got;
    rc = wk__lease_take(&c, &got);
    if (got.parsed)
        *acquired = got.acquired;
    /* An unacknowledged lease goes back through the public release, which
     * also wakes whoever waits. */
    return wk__lease_settle(p, op->name, rc, release, e, name, token);
}

int wk__lease_attempt(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out)
{
    wk__call *c = w->ctx;
    c->cap_ms = cap_ms;
    c->out = out; /* op->parse: wk__wake_parse_outcome */
    wk__take_reply got;
    int rc = wk__lease_take(c, &got);
    if (got.parsed) {
        out->acquired = got.acquired;
        out->sleep_ms = got.acquired ? 0 : got.n;
    }
    return rc;
}

int wk__lease_leave_call(const wk__call *c, wk_processor *p)
{
    if (!c->op->leave)
        return wk__wake_leave(p, c->e, &c->wake, c->token);
    wk__call l = *c;
    l.p = p;
    l.op = c->op->leave;
    l.out = NULL;
    return wk__op_send(&l, NULL, NULL, 0);
}

static int lease_leave(wk__waiter *w)
{
    return wk__lease_leave_call(w->ctx, w->p);
}

int wk__lease_wait(wk__call *c, int64_t deadline, wk__lease_release_fn release,
                   int (*attempt)(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out),
                   int64_t *handed_n, bool *acquired)
{
    wk__waiter w = {.p = c->p,
                    .op = c->op->name,
                    .e = c->e,
                    .keys = &c->wake,
                    .id = c->token,
                    .deadline = deadline,
                    .attempt = attempt,
                    .ctx = c,
                    .release = release,
                    .name = c->name,
                    .leave = c->op->leave ? lease_leave : NULL,
                    .handed_n = handed_n};
    return wk__wake_wait(&w, acquired);
}

int wk__lease_acquire(const wk__op *acquire, wk__try_fn try_once, wk__lease_release_fn release,
                      wk_processor *p, const wk_entity *e, wk_name name, int64_t deadline,
                      const wk_backoff *backoff, wk_token *token, bool *acquired)
{
    int rc = wk__wake_begin(acquire->name, try_once, p, e, name, deadline, backoff, token,
                            acquired);
    if (rc == WK__WAKE_LOOP)
        return wk__lease_loop_acquire(acquire, p, e, name, deadline, token, acquired, NULL,
                                      release);
    if (rc != WK__WAKE_MUST_WAIT)
        return rc;
    /* The try's token, which took nothing, is the waiter's place in the
     * queue, and the lease's once taken. */
    wk__call c;
    if ((rc = wk__op_begin_token(&c, p, acquire, e, name, token, NULL)) != WK_OK)
        return rc;
    return wk__lease_wait(&c, deadline, release, wk__lease_attempt, NULL, acquired);
}
