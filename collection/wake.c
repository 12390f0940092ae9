/*
 * collection/wake.c — wake on release (collection/wake.h): companion keys
 * in the item's cluster slot, the waiter loop on the handle's blocking
 * connection, and the leave script.
 */
#include <stdio.h>

#include "collection/common.h"
#include "collection/wake.h"
#include "core/blocking.h"
#include "core/db_internal.h"

/* ------------------------------------------------------------------------
 * Slots and companion keys
 * ---------------------------------------------------------------------- */

int wk__wake_keys_build(wk__wake_keys *k, const char *item_key, size_t len)
{
    if (!k || !item_key)
        return WK_EINVAL;
    /* core/key.c derives every companion key (and proves them injective). */
    static const wk__key_role roles[3] = {WK__ROLE_WAKE_QUEUE, WK__ROLE_WAKE_REGS,
                                          WK__ROLE_WAKE_LIST};
    char *const bufs[3] = {k->q, k->e, k->w};
    const size_t caps[3] = {sizeof(k->q), sizeof(k->e), sizeof(k->w) - WK_TOKEN_LEN};
    size_t lens[3] = {0, 0, 0};
    int rc = wk__companion_keys(item_key, len, roles, 3, bufs, caps, lens);
    k->q_len = lens[0], k->e_len = lens[1], k->w_len = lens[2];
    return rc;
}

int wk__wake_keys_for(wk_processor *p, const char *op, wk__wake_keys *k, const char *item_key,
                      size_t len)
{
    int rc = wk__wake_keys_build(k, item_key, len);
    return rc ? wk__processor_fail(p, rc, "%s: key too long", op) : WK_OK;
}

/* ------------------------------------------------------------------------
 * Queries of the wait
 * ---------------------------------------------------------------------- */

int wk__wake_parse_outcome(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const wk_reply *got = wk_reply_at(r, 0), *sleep = wk_reply_at(r, 1);
    if (wk_reply_count(r) != 2 || wk_reply_get_type(got) != WK_REPLY_INTEGER ||
        wk_reply_get_type(sleep) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {acquired, sleep_ms}");
    wk__wake_outcome *out = q->out;
    out->acquired = wk_reply_integer(got) == 1;
    out->sleep_ms = wk_reply_integer(sleep);
    return wk__lease_acknowledged(d, &out->acquired);
}

int64_t wk__wake_cap_ms(const wk_entity *e, int64_t deadline)
{
    int64_t left = deadline - wk__boot_ms();
    if (left > e->ttl_ms)
        left = e->ttl_ms;
    if (left > WK__WAKE_RENEW_MS) /* wk_park's bound too */
        left = WK__WAKE_RENEW_MS;
    return left < 1 ? 1 : left;
}

int64_t wk__wake_end(int64_t deadline)
{
    int64_t now = wk__boot_ms();
    return wk__add_ms(deadline > now ? deadline : now, WK__WAKE_FINISH_MS);
}

int64_t wk__wake_bound(wk_processor *p, int64_t until)
{
    if (!p || !p->db)
        return 0;
    int64_t prev = wk__db_bound(p->db, until);
    if (prev && prev < until) /* an enclosing call ends sooner: keep its */
        wk__db_bound(p->db, prev);
    return prev;
}

void wk__wake_unbound(wk_processor *p, int64_t prev)
{
    if (p && p->db)
        wk__db_bound(p->db, prev);
}

/* KEYS: q, e. ARGV: w, id. */
static const wk_script leave_script = {
    "wake.leave",
    WK__WAKE_LUA_CORE "local now = wk_now()\n" WK__WAKE_LEAVE_LUA("KEYS[1]", "KEYS[2]", "ARGV[1]",
                                                                 "ARGV[2]") "return 1\n"};

int wk__wake_leave(wk_processor *p, const wk_entity *e, const wk__wake_keys *keys,
                   const wk_token *id)
{
    const char *argv[4] = {keys->q, keys->e, keys->w, (const char *)id->bytes};
    size_t argvlen[4] = {keys->q_len, keys->e_len, keys->w_len, WK_TOKEN_LEN};
    wk_access access = {e, WK_WRITE};
    wk_query q = {.name = "wake.leave",
                  .effect = WK__EFFECT1(access),
                  .script = &leave_script,
                  .nkeys = 2,
                  .argc = 4,
                  .argv = argv,
                  .argvlen = argvlen};
    return wk_process(p, &q);
}

/* What a pop brought: nothing (its timeout), a plain wake-up, or the
 * item handed over ('h<end>:<n>', n the notice's number: a fence). */
typedef struct popped {
    bool handed;
    int64_t n;
} popped;

bool wk__wake_notice_handed(const char *s, size_t len, int64_t *n)
{
    *n = 0;
    if (!s || len < 2 || s[0] != 'h')
        return false; /* a timeout or a plain wake-up */
    const char *colon = memchr(s, ':', len);
    for (const char *c = colon ? colon + 1 : s + len; c < s + len && *c >= '0' && *c <= '9'; c++)
        *n = *n * 10 + (*c - '0');
    return colon != NULL;
}

static int parse_pop(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    (void)d;
    popped *out = q->out;
    const wk_reply *el = wk_reply_at(r, 1);
    size_t len = 0;
    const char *s = wk_reply_get_type(el) == WK_REPLY_STRING ? wk_reply_str(el, &len) : NULL;
    out->handed = wk__wake_notice_handed(s, len, &out->n);
    return WK_OK;
}

/* BLPOP <w><id> for sleep_ms on the blocking handle, the wait (and a
 * reconnect inside it) ending by the acquire's deadline at the latest:
 * the server's own timeout may fire up to a timer tick late. Still
 * unanswered then, the pop is abandoned (WK_ETIMEDOUT; its reply is
 * dropped when it comes and the connection stays for the next wait). A
 * plain wake-up or a timeout means attempt again; a handed-over notice
 * means the item is the waiter's (*got). */
static int wait_wake(wk_db *b, const wk__waiter *w, int64_t sleep_ms, popped *got)
{
    char list[WK__WAKE_KEY_MAX], secs[32];
    memcpy(list, w->keys->w, w->keys->w_len);
    memcpy(list + w->keys->w_len, w->id->bytes, WK_TOKEN_LEN);
    snprintf(secs, sizeof(secs), "%lld.%03lld", (long long)(sleep_ms / 1000),
             (long long)(sleep_ms % 1000));
    const char *argv[3] = {"BLPOP", list, secs};
    size_t argvlen[3] = {5, w->keys->w_len + WK_TOKEN_LEN, strlen(secs)};
    wk_access access = {w->e, WK_WRITE}; /* a pop removes */
    *got = (popped){false, 0};
    /* Not answered by the deadline, it is abandoned, not cut: the
     * connection stays for the next wait (core/core_internal.h). */
    wk_query q = {.name = "wake.wait",
                  .effect = WK__EFFECT1(access),
                  .flags = WK__QUERY_ABANDON,
                  .argc = 3,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_pop,
                  .out = got};
    int64_t outer = wk__db_bound(b, w->deadline);
    int rc = wk__blocking_process(b, &q, sleep_ms);
    wk__db_bound(b, outer);
    return rc;
}

/* The bound of an exchange made at or past the deadline (the final
 * attempt, a leave): WK__WAKE_FINISH_MS from when it is sent, so that a
 * waiter woken a few milliseconds late (a loaded machine) still learns
 * the answer; past the acquire's end (`late`: a waiter stalled, or
 * descheduled) the command timeout alone, since only that exchange says
 * whether it holds the item, and a wait that cannot say so must report
 * WK_EUNKNOWN. An enclosing call's sooner bound stays. Returns whether it
 * set one, with *outer the bound to put back. */
static bool finish_bound(wk__waiter *w, int64_t now, int64_t end, int64_t *outer)
{
    if (now < w->deadline || !w->p->db)
        return false;
    int64_t own = now >= end ? 0 : wk__add_ms(now, WK__WAKE_FINISH_MS);
    *outer = wk__db_bound(w->p->db, own);
    if (*outer && *outer < end) /* an enclosing call ends sooner: keep its */
        wk__db_bound(w->p->db, *outer);
    return true;
}

/* A wait that ends without the item while it may still be handed it (its
 * registration runs, a pop's reply was lost, a leave failed): WK_EUNKNOWN,
 * the token in the caller's OUT. Within the bound B of docs/GUARANTEES.md
 * such a lease goes to the next waiter by itself. */
static int unknown_outcome(wk__waiter *w, const char *why)
{
    return wk__processor_fail(w->p, WK_EUNKNOWN, "%s: %s" WK__WAKE_UNKNOWN_NOTE, w->op, why,
                              WK__WAKE_RENEW_MS + WK__WAKE_GRACE_MS);
}

/* Leave the queue without the item (the kind's leave also passes on an
 * item handed to the waiter meanwhile), then end with `rc`. Sent however
 * late: only the leave says the waiter holds nothing, and a leave that
 * fails makes the outcome WK_EUNKNOWN. */
static int give_up(wk__waiter *w, int64_t end, int rc)
{
    char why[WK__ERRMSG_MAX];
    wk__copy_text(why, sizeof(why), rc != WK_OK ? wk_processor_errmsg(w->p) : "");
    int64_t outer = 0;
    bool rebound = finish_bound(w, wk__boot_ms(), end, &outer);
    int lrc = w->leave ? w->leave(w) : wk__wake_leave(w->p, w->e, w->keys, w->id);
    if (rebound)
        wk__db_bound(w->p->db, outer);
    if (lrc != WK_OK && w->leave)
        return unknown_outcome(w, "it could not leave the queue");
    if (rc != WK_OK) /* the caller's news, not the leave's */
        return wk__processor_fail(w->p, rc, "%s", why);
    return rc;
}

/* Waits cut off in a row before the acquire fails with the connection's
 * error. */
#define MAX_LOST_WAITS 3

/* Whether a handed-over lease must still be acknowledged by replicas
 * (lease_replicas): then the waiter attempts as after a plain wake-up —
 * the attempt finds the item its own, and its WAIT says whether replicas
 * have it. */
static bool acks_leases(const wk__waiter *w)
{
    return w->p->db && w->p->db->conn && w->p->db->conn->lease_replicas > 0;
}

/* The waiting loop; *b is the blocking handle once opened. Every exit
 * tells the truth (collection/wake.h): the wait ends with the final
 * attempt (cap 0: take, or leave the queue), made at the deadline however
 * late the waiter is; an exit on an error leaves first; and where neither
 * could be learnt the outcome is WK_EUNKNOWN. */
static int wait_loop(wk__waiter *w, int64_t end, bool *acquired, bool *slept, wk_db **b,
                     bool *close_b)
{
    int lost_waits = 0;
    /* An attempt parked the waiter: a release may hand it the item until
     * it has left. */
    bool queued = false;
    for (bool first = true;; first = false) {
        int64_t now = wk__boot_ms();
        bool final = !first && now >= w->deadline;
        int64_t outer = 0;
        bool rebound = !first && finish_bound(w, now, end, &outer);
        wk__wake_outcome out = {false, 0};
        int rc = w->attempt(w, final ? 0 : wk__wake_cap_ms(w->e, w->deadline), &out);
        if (rebound)
            wk__db_bound(w->p->db, outer);
        if (rc == WK_ENOTREPLICATED && w->release) /* taken, not acknowledged: give it back */
            return wk__lease_settle(w->p, w->op, rc, w->release, w->e, w->name, w->id);
        if (rc == WK_EUNKNOWN || (rc != WK_OK && !queued))
            return rc; /* lost (it keeps the token), or never queued */
        if (rc != WK_OK)
            return give_up(w, end, rc); /* not sent: still queued */
        if (out.acquired) {
            *acquired = true;
            return WK_OK;
        }
        if (final)
            return WK_OK; /* it has left the queue */
        queued = true;
        int64_t left = w->deadline - wk__boot_ms();
        if (left <= 0)
            continue; /* the final attempt */
        int64_t sleep_ms = out.sleep_ms < left ? out.sleep_ms : left;
        if (sleep_ms < 1)
            sleep_ms = 1;
        if (!w->p->db) {
            /* A processor with no handle behind it: no blocking
             * connection to open; sleep the same bound instead. */
            wk__sleep_until_ms(wk__add_ms(wk__boot_ms(), sleep_ms));
            continue;
        }
        if (!*b)
            rc = wk__blocking_of(w->p->db, w->deadline, b, close_b);
        popped got = {false, 0};
        if (rc == WK_OK) {
            *slept = true;
            rc = wait_wake(*b, w, sleep_ms, &got);
        }
        if (rc == WK_OK && got.handed && !acks_leases(w)) {
            /* Handed over by the release: the item is the waiter's. */
            if (w->handed_n)
                *w->handed_n = got.n;
            w->handed = true;
            *acquired = true;
            return WK_OK;
        }
        /* The deadline ended the wait (or the open of its connection):
         * the final attempt comes now, whatever the connection said — a
         * pop left unanswered (WK__QUERY_ABANDON) may still take a
         * notice, and the attempt finds such an item its own. */
        if (rc != WK_OK && wk__boot_ms() >= w->deadline)
            continue;
        if (!*b)
            return give_up(w, end, rc);
        /* A lost pop took at most a wake-up or a handed-over item (which
         * the next attempt finds its own), and that attempt comes at
         * once: a wait cut off (a killed connection, a failover) is only
         * waited again, on a new connection — a few times in a row, not
         * while the server refuses every one. */
        if (rc != WK_OK && wk_is_connection_error(rc) && !wk__blocking_interrupted(*b) &&
            ++lost_waits <= MAX_LOST_WAITS)
            continue;
        if (rc != WK_OK) {
            /* A lost pop may have taken a handed-over item: the leave,
             * which passes it on, says whether the waiter holds nothing. */
            int status = rc == WK_EUNKNOWN ? WK_EIO : rc;
            char why[256];
            snprintf(why, sizeof(why), "%s", wk_db_errmsg(*b));
            /* The pop "write" note of the blocking handle says nothing here. */
            char *note = strstr(why, " (the write may");
            if (note)
                *note = '\0';
            if (give_up(w, end, WK_OK) == WK_EUNKNOWN)
                return WK_EUNKNOWN;
            return wk__processor_fail(w->p, status, "%s: waiting for a wake-up: %s", w->op, why);
        }
        lost_waits = 0;
    }
}

int wk__wake_wait(wk__waiter *w, bool *acquired)
{
    *acquired = false;
    wk_db *b = NULL;
    bool close_b = false;
    /* Every exchange on the caller's processor — attempts, the leave —
     * ends by the acquire's end (collection/wake.h, "The deadline"). */
    int64_t end = wk__wake_end(w->deadline);
    int64_t outer = wk__wake_bound(w->p, end);
    uint64_t start = wk__count_wait_begin(w->p);
    bool slept = false;
    int rc = wait_loop(w, end, acquired, &slept, &b, &close_b);
    wk__count_wait_end(w->p, start, rc, *acquired, slept);
    wk__wake_unbound(w->p, outer);
    if (close_b) /* a pool's: this wait's alone, kept for the next one */
        wk__blocking_done(w->p->db, b);
    return rc;
}
