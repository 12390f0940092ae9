/*
 * collection/lease_fallback.c — the lease scripts while a slot migrates
 * (collection/lease_script.h): the single-key forms core/exchange.c sends
 * instead of the full form when a migrating slot answers TRYAGAIN (Redis
 * refuses a script whose declared keys are not all on one node, and a
 * lease's wake keys usually exist on neither), and the split takes of the
 * two-key kinds, which go on in single-key steps. Each single-key form
 * touches its KEYS[1] only, takes the full form's ARGV and replies in its
 * shape (a split take's mark: in the shape wk__take_parse() reads); none
 * wakes or queues a waiter. (The Semaphore acquire's single-key form sits
 * in semaphore.c, beside the take it shares.) The descriptors that send a
 * full form name its pair (wk__op.forms).
 *
 * On a migrating source a script may touch only keys that exist there:
 * a command on a key it has just emptied (deleted) is refused ("Script
 * attempted to access a non local key") and the script stops halfway. So
 * these scripts prune a sorted set in their last command on it, or after
 * adding to it.
 */
#include <stdio.h>

#include <wakuwaku/fenced_lock.h>
#include <wakuwaku/rwlock.h>

#include "collection/lease_script.h"
#include "collection/lock_scripts.h"

/* ARGV: token, w. 1 if it held the token (and the lock is gone). */
const wk_script wk__lock_release_single = {"lock.release.single_key",
                                           "if redis.call('GET', KEYS[1]) ~= ARGV[1] then "
                                           "return 0 end\n"
                                           "redis.call('DEL', KEYS[1])\n"
                                           "return 1\n"};

/* ARGV: token, ttl, w, cap (-1: a try), fair. {1, 0}, or {0, sleep ms}:
 * the lock's PTTL within cap, since no release will wake the waiter. A
 * fair lock's queue is not looked at while the slot migrates. A lock
 * handed to this waiter before the migration began is its own; one
 * handed to another waiter that never took its notice by the end written
 * in it is taken back (as lock.acquire's wk_unclaimed; a list the node no
 * longer has reads as none), and until that end the waiter sleeps no
 * longer. */
const wk_script wk__lock_acquire_single = {
    "lock.acquire.single_key",
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, 0} end\n"
    "local holder = redis.call('GET', KEYS[1])\n"
    "if holder == ARGV[1] then return {1, 0} end\n"
    "local n = holder and redis.pcall('LINDEX', ARGV[3] .. holder, 0)\n"
    "local ends = type(n) == 'string' and tonumber(string.match(n, '^h(%d+):'))\n"
    "local claim = nil\n"
    "if ends then\n"
    "  local t = redis.call('TIME')\n"
    "  claim = ends - (t[1] * 1000 + math.floor(t[2] / 1000)) + 1\n"
    "  if claim <= 1 then\n"
    "    redis.pcall('DEL', ARGV[3] .. holder)\n"
    "    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "    return {1, 0}\n"
    "  end\n"
    "end\n"
    "if ARGV[4] == '-1' then return {0, 0} end\n"
    "local left = redis.call('PTTL', KEYS[1])\n"
    "if claim and claim < left then left = claim end\n"
    "local cap = tonumber(ARGV[4])\n"
    "if left < 1 then left = 1 end\n"
    "if left > cap then left = cap end\n"
    "return {0, left}\n"};

/* A reader's or permit's release: sorted set token → end of its lease
 * (server ms). ARGV: token, w. 1 if its lease was still running. One ZREM
 * (this token and the expired ones) comes last: on a migrating node a
 * command on a key the script has just emptied (deleted) is refused. */
const wk_script wk__reader_release_single = {
    "reader.release.single_key", WK__NOW_MS WK__ZLEASE_END WK__ZLEASE_DROP WK__ZLEASE_RAN};

/* ARGV: token, w. 1 if the lease hash held the token. */
const wk_script wk__fenced_lock_release_single = {
    "fenced_lock.release.single_key",
    "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 1\n"};

/* ------------------------------------------------------------------------
 * Split takes (lease_script.h)
 * ---------------------------------------------------------------------- */


/* Not taken: {0, ms to sleep}, `left` (a Lua expression, ms the holder
 * stays) within the wait's cap `cap` (an ARGV element, absent or -1 in a
 * try: {0, 0}). */
#define NOT_TAKEN(cap, left)                                                                       \
    "local cap = tonumber(" cap " or '-1')\n"                                                      \
    "if cap < 0 then return {0, 0} end\n"                                                          \
    "local left = " left "\n"                                                                      \
    "if left < 1 then left = 1 end\n"                                                              \
    "if left > cap then left = cap end\n"                                                          \
    "return {0, left}\n"

/* A writer lease handed to this waiter before the migration began is its
 * own: {1, 0}. */
const wk_script wk__rwlock_write_mark = {
    "rwlock.write.mark", "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return "
                         "{2, 0} end\n"
                         "if redis.call('GET', KEYS[1]) == ARGV[1] then return {1, 0} end\n" NOT_TAKEN(
                             "ARGV[4]", "redis.call('PTTL', KEYS[1])")};

/* A reader always marks: the writer is on the other key. Added before the
 * ended readers are dropped, so the set is never emptied here. */
const wk_script wk__rwlock_read_mark = {
    "rwlock.read.mark",
    WK__NOW_MS "local ttl = tonumber(ARGV[2])\n"
           "redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])\n"
           "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
           "if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end\n"
           "return {2, 0}\n"};

/* The lease with fence "0": taken, its fence not drawn yet. A lease
 * handed to this waiter (a fence drawn) before the migration began is
 * its own: {1, fence}. */
const wk_script wk__fenced_lock_mark = {
    "fenced_lock.mark",
    "local v = redis.call('HMGET', KEYS[1], 'token', 'fence')\n"
    "if v[1] == ARGV[1] and tonumber(v[2] or '0') > 0 then return {1, tonumber(v[2])} end\n"
    "if redis.call('EXISTS', KEYS[1]) == 0 then\n"
    "  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', '0')\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {2, 0}\n"
    "end\n" NOT_TAKEN("ARGV[3]", "redis.call('PTTL', KEYS[1])")};

/* A writer's check, on r: a reader lease still running? Reads only. */
static const wk_script readers_check = {
    "rwlock.readers.check",
    WK__NOW_MS "local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')\n"
           "if last[2] and tonumber(last[2]) > now then return {0, tonumber(last[2]) - now} end\n"
           "return {1, 0}\n"};

/* A reader's check, on w: a writer? (One without expiry counts as a
 * lease of ttl.) Reads only. */
static const wk_script writer_check = {"rwlock.writer.check",
                                       "local left = redis.call('PTTL', KEYS[1])\n"
                                       "if left == -2 then return {1, 0} end\n"
                                       "if left < 0 then left = tonumber(ARGV[2]) end\n"
                                       "return {0, left}\n"};

/* A FencedLock's draw, on the counter. */
static const wk_script fence_draw = {"fenced_lock.draw",
                                     "return {1, redis.call('INCR', KEYS[1])}\n"};

/* Its commit, on the lease: the fence in, if the token still holds it. */
static const wk_script fence_commit = {
    "fenced_lock.commit", "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
                          "redis.call('HSET', KEYS[1], 'fence', ARGV[2])\n"
                          "return tonumber(ARGV[2])\n"};

/* The marked key by the index of its suffix: RwLock's ":w", ":r";
 * FencedLock's ":lease", ":fence". */
const wk__split_steps wk__rwlock_write_steps = {0, &readers_check, false, NULL,
                                                wk_rwlock_release_write};
const wk__split_steps wk__rwlock_read_steps = {1, &writer_check, false, NULL,
                                               wk_rwlock_release_read};
const wk__split_steps wk__fenced_lock_steps = {0, &fence_draw, true, &fence_commit,
                                               wk_fenced_lock_release};

int wk__take_parse(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk__take_reply *out = q->out;
    long long state, n;
    if (wk_reply_get_type(r) == WK_REPLY_INTEGER) {
        /* A try's full form (1/0, a fence or 0) or a commit. */
        n = wk_reply_integer(r);
        state = n > 0;
    } else {
        const wk_reply *a = wk_reply_at(r, 0), *b = wk_reply_at(r, 1);
        if (wk_reply_count(r) != 2 || wk_reply_get_type(a) != WK_REPLY_INTEGER ||
            wk_reply_get_type(b) != WK_REPLY_INTEGER)
            return wk_diag_fail(d, WK_EPROTO, "expected {taken, n} or an integer");
        state = wk_reply_integer(a);
        n = wk_reply_integer(b);
    }
    if (state < 0 || state > 2 || n < 0)
        return wk_diag_fail(d, WK_EPROTO, "unexpected take reply {%lld, %lld}", state, n);
    out->acquired = state == 1;
    out->marked = state == 2;
    out->n = n;
    bool held = out->acquired || out->marked;
    int rc = wk__lease_acknowledged(d, &held);
    if (!held)
        out->acquired = out->marked = false;
    return rc;
}

/* One step of the take of call c: `script` on its item key `key`
 * (KEYS[1]), ARGV token then `arg`, under the take's name. */
static int step(const wk__call *c, const wk_script *script, int key, bool writes,
                const char *arg, size_t arg_len, wk__take_reply *out)
{
    const wk__op op = {.name = c->op->name,
                       .kind = c->op->kind,
                       .mode = writes ? WK_WRITE : WK_READ,
                       .flags = writes ? WK__QUERY_LEASE : WK_QUERY_RETRY_SAFE,
                       .script = script,
                       .parse = wk__take_parse,
                       .args = {WK__ARG_TOKEN}};
    wk__call s;
    s.p = c->p;
    s.op = &op;
    s.e = c->e;
    s.out = out;
    s.token = c->token;
    s.nkeys = 1;
    s.key_len[0] = c->key_len[key];
    memcpy(s.key[0], c->key[key], c->key_len[key]);
    *out = (wk__take_reply){true, false, false, 0};
    return wk__op_send(&s, &arg, &arg_len, 1);
}

/* Give the mark back after step 2 or 3 answered `rc` (WK_OK: the other
 * side holds it). */
static int give_back(const wk__call *c, int rc)
{
    char why[WK_ENTITY_MSG_MAX * 2];
    snprintf(why, sizeof(why), "%s", rc ? wk_processor_errmsg(c->p) : "");
    bool released = false;
    int rrc = c->op->steps->give_back(c->p, c->e, c->name, c->token, &released);
    if (rrc)
        return wk__processor_fail(c->p, WK_EUNKNOWN,
                                  "%s: %s%sgiving back what its first step took in a migrating "
                                  "slot failed (%s): it may be held under the token until its "
                                  "TTL runs out",
                                  c->op->name, why, rc ? "; " : "", wk_err_name(rrc));
    if (rc == WK_OK)
        return WK_OK;
    /* Nothing is held now, whatever the lost reply was. */
    return wk__processor_fail(c->p, rc == WK_EUNKNOWN ? WK_EIO : rc,
                              "%s; what its first step took was given back, not acquired", why);
}

int wk__split_take_finish(const wk__call *c, wk__take_reply *out)
{
    const wk__split_steps *s = c->op->steps;
    out->acquired = out->marked = false;
    out->n = 0;
    char ttl[24], n[24];
    wk__take_reply seen, done;
    int rc = step(c, s->check, 1 - s->marked, s->draws, ttl, wk__fmt_i64(ttl, c->e->ttl_ms),
                  &seen);
    if (rc == WK_OK && !seen.acquired) {
        /* The other side holds it: not acquired, sleep what it has left. */
        int64_t left = seen.n < 1 ? 1 : seen.n;
        out->n = c->cap_ms < 0 ? 0 : left < c->cap_ms ? left : c->cap_ms;
        return give_back(c, WK_OK);
    }
    if (rc == WK_OK && s->commit) {
        rc = step(c, s->commit, s->marked, true, n, wk__fmt_i64(n, seen.n), &done);
        if (rc == WK_OK && !done.acquired) {
            /* The mark ran out (or was forced) in between: nothing held,
             * the drawn fence never handed out. */
            out->n = c->cap_ms < 0 ? 0 : 1;
            return WK_OK;
        }
    }
    if (rc == WK_ENOTREPLICATED)
        return rc; /* the caller gives the lease back (wk__lease_settle) */
    if (rc != WK_OK)
        return give_back(c, rc);
    out->acquired = true;
    out->n = seen.n;
    return WK_OK;
}
