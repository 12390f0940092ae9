/*
 * collection/rwlock.c — RwLock: a writer key (like a Lock) and a sorted set
 * of reader leases scored by their end (server ms). Every script reads the
 * clock with TIME and counts only running readers; ended ones are dropped
 * by the last command on the set (on a migrating node a script may not
 * touch a key it emptied). Waiters are queued on the writer key's
 * companion keys (collection/wake.h): the writer's release, and the
 * release of the last reader, wake the first; a reader that gets in wakes
 * the next (it may be a reader too). While a slot migrates a take goes on
 * in single-key steps (collection/lease_script.h, split takes).
 */
#include "collection/common.h"
#include "collection/lease_script.h"
#include "collection/lock_scripts.h"
#include "collection/wake.h"

#include <wakuwaku/rwlock.h>

#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(rwlock) = {WK_KIND_RWLOCK, wk__entity_check_ttl};

/* Server time in ms; shared prologue of the scripts below. */
#define NOW_MS "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

/* The readers still running at `now`. */
#define RUNNING(set) "redis.call('ZCOUNT', " set ", '(' .. string.format('%.0f', now), '+inf')"

/* KEYS: w, r. ARGV: token, ttl. 1/0; its split form marks r. */
const wk__two_forms wk__rwlock_try_read_forms = {
    {"rwlock.try_read",
     "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n" NOW_MS
     "local ttl = tonumber(ARGV[2])\n"
     "redis.call('ZADD', KEYS[2], string.format('%.0f', now + ttl), ARGV[1])\n"
     "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
     "if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end\n"
     "return 1\n"},
    &wk__rwlock_read_mark,
    1};

/* KEYS: w, r. ARGV: token, ttl. 1/0; its split form marks w. */
const wk__two_forms wk__rwlock_try_write_forms = {
    {"rwlock.try_write",
     NOW_MS "if " RUNNING("KEYS[2]") " > 0 then return 0 end\n"
            "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end\n"
            "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
            "return 1\n"},
    &wk__rwlock_write_mark,
    0};

/* KEYS: r, q, e. ARGV: token, w. Returns 1 if the lease was still
 * running. The last reader out wakes the first waiter. One ZREM (this
 * token and the ended ones) is the last command on the set. */
const wk__two_forms wk__rwlock_release_read_forms = {
    {"rwlock.release_read",
     NOW_MS "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
            "local others = " RUNNING("KEYS[1]") "\n"
            "if s and tonumber(s) > now then others = others - 1 end\n"
            "local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)\n"
            "gone[#gone + 1] = ARGV[1]\n"
            "redis.call('ZREM', KEYS[1], unpack(gone))\n"
            "if others == 0 and redis.call('EXISTS', KEYS[2]) == 1 then\n" WK__WAKE_LUA_CORE
            "  wk_wake(KEYS[2], KEYS[3], ARGV[2], now)\n"
            "end\n"
            "if s and tonumber(s) > now then return 1 end\n"
            "return 0\n"},
    &wk__reader_release_single,
    0};

/* The acquire-or-park scripts. KEYS: w, q, e, r. ARGV: token, ttl, wake
 * prefix, cap (-1: a plain try of a fair RwLock, does not wait), fair
 * (1/0). {1, 0} acquired, or {0, sleep ms}. Their split forms mark as the
 * tries' do. */
#define ACQUIRE_PROLOGUE                                                                           \
    "local now = wk_now()\n"                                                                       \
    "local id = ARGV[4] == '-1' and '' or ARGV[1]\n"                                               \
    "local ttl = tonumber(ARGV[2])\n"

static const wk__two_forms acquire_read_forms = {
    {"rwlock.acquire_read", WK__WAKE_LUA ACQUIRE_PROLOGUE
     "if wk_may_take(KEYS[2], KEYS[3], ARGV[3], id, now, ARGV[5] == '1') and\n"
     "   redis.call('EXISTS', KEYS[1]) == 0 then\n"
     "  redis.call('ZADD', KEYS[4], string.format('%.0f', now + ttl), ARGV[1])\n"
     "  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)\n"
     "  if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end\n"
     "  wk_took(KEYS[2], KEYS[3], ARGV[3], id, now, true)\n"
     "  return {1, 0}\n"
     "end\n"
     "if id == '' then return {0, 0} end\n"
     "return {0, wk_park(KEYS[2], KEYS[3], ARGV[3], id, now, tonumber(ARGV[4]),\n"
     "                   redis.call('PTTL', KEYS[1]))}\n"},
    &wk__rwlock_read_mark,
    3};

static const wk__two_forms acquire_write_forms = {
    {"rwlock.acquire_write", WK__WAKE_LUA ACQUIRE_PROLOGUE
     "if wk_may_take(KEYS[2], KEYS[3], ARGV[3], id, now, ARGV[5] == '1') and\n"
     "   " RUNNING("KEYS[4]") " == 0 and\n"
     "   redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
     "  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)\n"
     "  wk_took(KEYS[2], KEYS[3], ARGV[3], id, now, false)\n"
     "  return {1, 0}\n"
     "end\n"
     "if id == '' then return {0, 0} end\n"
     "local blocked = redis.call('PTTL', KEYS[1])\n"
     "local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')\n"
     "if last[2] and tonumber(last[2]) - now > blocked then blocked = tonumber(last[2]) - now end\n"
     "return {0, wk_park(KEYS[2], KEYS[3], ARGV[3], id, now, tonumber(ARGV[4]), blocked)}\n"},
    &wk__rwlock_write_mark,
    0};

/* KEYS: w, q, e, r. ARGV: w prefix. Returns 1 if a writer or a running
 * reader held it. */
static const wk_script force_release_script = {
    "rwlock.force_release", WK__WAKE_LUA_CORE NOW_MS
    "local held = redis.call('EXISTS', KEYS[1]) == 1 or " RUNNING("KEYS[4]") " > 0\n"
    "redis.call('DEL', KEYS[1], KEYS[4])\n"
    "wk_wake(KEYS[2], KEYS[3], ARGV[1], now)\n"
    "return held and 1 or 0\n"};

/* KEYS: r. ARGV: token. ms left on that reader's lease, or -2. */
static const wk_script owned_read_script = {
    "rwlock.owned_read", NOW_MS "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
                                "if s and tonumber(s) > now then return tonumber(s) - now end\n"
                                "return -2\n"};

/* KEYS: r. ARGV: token, ttl. Renews only a running lease. */
const wk_script wk__rwlock_extend_read_script = {
    "rwlock.extend_read",
    NOW_MS "local ttl = tonumber(ARGV[2])\n"
           "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
           "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
           "if not s or tonumber(s) <= now then return 0 end\n"
           "redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now + ttl), ARGV[1])\n"
           "if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end\n"
           "return 1\n"};

/* KEYS: w, r. Returns {writer PTTL, running readers}. Writes nothing. */
const wk_script wk__rwlock_inspect_script = {
    "rwlock.inspect", NOW_MS "return {redis.call('PTTL', KEYS[1]), " RUNNING("KEYS[2]") "}\n"};

typedef struct keys {
    char w[WK_KEY_MAX], r[WK_KEY_MAX];
    size_t w_len, r_len;
} keys;

static int prepare(wk_processor *p, const char *op, const wk_entity *e, const wk_name *name,
                   keys *k, const void *arg, const void *out)
{
    int rc = wk__prepare(p, op, e, WK_KIND_RWLOCK, name, ":w", k->w, &k->w_len);
    if (!rc) {
        /* The reader key differs from the writer key in its last byte only
         * ("…}:w" / "…}:r"): copy it rather than validate and build twice. */
        memcpy(k->r, k->w, k->w_len + 1);
        k->r[k->w_len - 1] = 'r';
        k->r_len = k->w_len;
    }
    if (!rc && (!arg || !out))
        rc = wk__processor_fail(p, WK_EINVAL, "%s: token and outcome are required", op);
    return rc;
}

/* The two sides a take is of. */
typedef struct side {
    const wk__two_forms *try_forms;     /* KEYS w, r */
    const wk__two_forms *acquire_forms; /* KEYS w, q, e, r */
    const wk__split_steps *steps;       /* while a migration splits the keys */
    bool reader;
    wk__lease_release_fn release;
} side;

static const side reading = {&wk__rwlock_try_read_forms, &acquire_read_forms,
                             &wk__rwlock_read_steps, true, wk_rwlock_release_read};
static const side writing = {&wk__rwlock_try_write_forms, &acquire_write_forms,
                             &wk__rwlock_write_steps, false, wk_rwlock_release_write};

/*
 * Every take goes through here: a plain try (wake NULL: the try script), a
 * fair try (cap -1) or one attempt of a wait (the acquire-or-park script,
 * KEYS w, q, e, r). The outcome lands in *got, after the steps of a take
 * split by a migration (collection/lease_script.h); through a deferred
 * processor (a batch, which runs no steps) the parser writes *acquired
 * instead, when the batch runs.
 */
static int take(wk_processor *p, const char *op, const side *sd, const wk_entity *e, wk_name name,
                const keys *k, const wk__wake_keys *wk, const wk_token *token, int64_t cap_ms,
                bool *acquired, wk__take_reply *got)
{
    bool split = !wk_processor_is_deferred(p);
    wk_parse_fn parse = split ? wk__take_parse : wk ? wk__parse_first_bool : wk__parse_bool_int;
    void *out = split ? (void *)got : (void *)acquired;
    unsigned flags = WK__QUERY_LEASE | (split ? WK__QUERY_SINGLE_KEY : 0);
    char ttl[24], cap[24];
    size_t ttl_len = wk__fmt_i64(ttl, e->ttl_ms);
    *got = (wk__take_reply){false, false, 0};
    int rc;
    if (wk) {
        const char *args[6] = {k->r, (const char *)token->bytes, ttl, wk->w, cap,
                               (e->flags & WK_ENTITY_FAIR) ? "1" : "0"};
        size_t lens[6] = {k->r_len, WK_TOKEN_LEN, ttl_len, wk->w_len, wk__fmt_i64(cap, cap_ms), 1};
        rc = wk__wake_script(p, op, &sd->acquire_forms->script, flags, WK_WRITE, e, k->w, k->w_len,
                             wk, 1, args, lens, 6, parse, out);
    } else {
        const char *argv[4] = {k->w, k->r, (const char *)token->bytes, ttl};
        size_t argvlen[4] = {k->w_len, k->r_len, WK_TOKEN_LEN, ttl_len};
        wk_access access = {e, WK_WRITE};
        wk_query q = {.name = op,
                      .effect = WK__EFFECT1(access),
                      .flags = flags,
                      .script = &sd->try_forms->script,
                      .nkeys = 2,
                      .argc = 4,
                      .argv = argv,
                      .argvlen = argvlen,
                      .parse = parse,
                      .out = out};
        rc = wk_process(p, &q);
    }
    if (rc == WK_OK && got->marked) {
        wk__split_take t = {.op = op,
                            .e = e,
                            .name = name,
                            .steps = sd->steps,
                            .marked = sd->reader ? k->r : k->w,
                            .other = sd->reader ? k->w : k->r,
                            .marked_len = sd->reader ? k->r_len : k->w_len,
                            .other_len = sd->reader ? k->w_len : k->r_len,
                            .token = token,
                            .cap_ms = cap_ms};
        rc = wk__split_take_finish(p, &t, got);
    }
    if (split && acquired)
        *acquired = got->acquired;
    return rc;
}

/* try_read / try_write: both keys, fresh token, ttl. */
static int try_acquire(wk_processor *p, const char *op, const side *sd, const wk_entity *e,
                       const wk_name *name, wk_token *token, bool *acquired)
{
    keys k;
    int rc = prepare(p, op, e, name, &k, token, acquired);
    if (rc)
        return rc;
    *acquired = false;
    wk_token_random(token);
    wk__take_reply got;
    if (e->flags & WK_ENTITY_FAIR) {
        /* No barging past the waiters: the acquire-or-park script with
         * cap -1, still one round trip. */
        wk__wake_keys wk;
        if ((rc = wk__wake_keys_for(p, op, &wk, k.w, k.w_len)) != WK_OK)
            return rc;
        rc = take(p, op, sd, e, *name, &k, &wk, token, -1, acquired, &got);
    } else {
        rc = take(p, op, sd, e, *name, &k, NULL, token, -1, acquired, &got);
    }
    /* An unacknowledged lease goes back through the public release, which
     * also wakes whoever waits. */
    return wk__lease_settle(p, op, rc, sd->release, e, *name, token);
}

int wk_rwlock_try_read(wk_processor *p, const wk_entity *rwlock, wk_name name, wk_token *token,
                       bool *acquired)
{
    return try_acquire(p, "rwlock.try_read", &reading, rwlock, &name, token, acquired);
}

int wk_rwlock_try_write(wk_processor *p, const wk_entity *rwlock, wk_name name, wk_token *token,
                        bool *acquired)
{
    return try_acquire(p, "rwlock.try_write", &writing, rwlock, &name, token, acquired);
}

/* Reader release/extend: the reader set only. */
static int reader_op(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                     const wk_name *name, const wk_token *token, bool with_ttl, bool *out)
{
    keys k;
    int rc = prepare(p, op, e, name, &k, token, out);
    if (rc)
        return rc;
    *out = false;
    return wk__token_script(p, op, script, e, k.r, k.r_len, token, with_ttl, out);
}

int wk_rwlock_release_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                           const wk_token *token, bool *was_running)
{
    keys k;
    int rc = prepare(p, "rwlock.release_read", rwlock, &name, &k, token, was_running);
    if (rc)
        return rc;
    *was_running = false;
    wk__wake_keys wk;
    if ((rc = wk__wake_keys_for(p, "rwlock.release_read", &wk, k.w, k.w_len)) != WK_OK)
        return rc;
    const char *args[2] = {(const char *)token->bytes, wk.w};
    size_t lens[2] = {WK_TOKEN_LEN, wk.w_len};
    return wk__wake_script(p, "rwlock.release_read", &wk__rwlock_release_read_script, 0, WK_WRITE,
                           rwlock, k.r, k.r_len, &wk, 0, args, lens, 2, wk__parse_bool_int,
                           was_running);
}

int wk_rwlock_extend_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                          const wk_token *token, bool *extended)
{
    return reader_op(p, "rwlock.extend_read", &wk__rwlock_extend_read_script, rwlock, &name, token,
                     true, extended);
}

/* Writer release/extend: the Lock scripts on the writer key. */
static int writer_op(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                     const wk_name *name, const wk_token *token, bool with_ttl, bool *out)
{
    keys k;
    int rc = prepare(p, op, e, name, &k, token, out);
    if (rc)
        return rc;
    *out = false;
    return wk__token_script(p, op, script, e, k.w, k.w_len, token, with_ttl, out);
}

int wk_rwlock_release_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                            const wk_token *token, bool *released)
{
    keys k;
    int rc = prepare(p, "rwlock.release_write", rwlock, &name, &k, token, released);
    if (rc)
        return rc;
    *released = false;
    return wk__release_waking(p, "rwlock.release_write", rwlock, k.w, k.w_len, token, released);
}

int wk_rwlock_extend_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                           const wk_token *token, bool *extended)
{
    return writer_op(p, "rwlock.extend_write", &wk__lock_extend_script, rwlock, &name, token, true,
                     extended);
}

static int parse_inspect(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const wk_reply *pttl = wk_reply_at(r, 0), *readers = wk_reply_at(r, 1);
    if (wk_reply_count(r) != 2 || wk_reply_get_type(pttl) != WK_REPLY_INTEGER ||
        wk_reply_get_type(readers) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {pttl, readers}");
    wk_rwlock_state *st = q->out;
    long long ttl = wk_reply_integer(pttl);
    st->writer_held = ttl != -2;
    st->writer_ttl_ms = ttl == -2 ? 0 : ttl;
    st->readers = wk_reply_integer(readers);
    return WK_OK;
}

int wk_rwlock_inspect(wk_processor *p, const wk_entity *rwlock, wk_name name,
                      wk_rwlock_state *state)
{
    keys k;
    int rc = prepare(p, "rwlock.inspect", rwlock, &name, &k, state, state);
    if (rc)
        return rc;
    const char *argv[2] = {k.w, k.r};
    size_t argvlen[2] = {k.w_len, k.r_len};
    wk_access access = {rwlock, WK_READ};
    wk_query q = {.name = "rwlock.inspect",
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_RETRY_SAFE,
                  .script = &wk__rwlock_inspect_script,
                  .nkeys = 2,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_inspect,
                  .out = state};
    return wk_process(p, &q);
}

/* ------------------------------------------------------------------------
 * Waiting acquires (collection/wake.h), force release, owned
 * ---------------------------------------------------------------------- */

typedef struct rw_wait {
    keys k;
    wk__wake_keys wk;
    const side *sd;
} rw_wait;

static int rw_attempt(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out)
{
    rw_wait *rw = w->ctx;
    wk__take_reply got;
    int rc = take(w->p, w->op, rw->sd, w->e, w->name, &rw->k, &rw->wk, w->id, cap_ms, NULL, &got);
    out->acquired = got.acquired;
    out->sleep_ms = got.acquired ? 0 : got.n;
    return rc;
}

static int acquire_waiting(const char *op, wk__try_fn try_once, const side *sd, wk_processor *p,
                           const wk_entity *e, wk_name name, int64_t deadline,
                           const wk_backoff *backoff, wk_token *token, bool *acquired)
{
    int rc = wk__wake_begin(op, try_once, p, e, name, deadline, backoff, token, acquired);
    if (rc != WK__WAKE_MUST_WAIT)
        return rc;
    rw_wait rw = {.sd = sd};
    rc = prepare(p, op, e, &name, &rw.k, token, acquired);
    if (!rc)
        rc = wk__wake_keys_for(p, op, &rw.wk, rw.k.w, rw.k.w_len);
    if (rc)
        return rc;
    wk__waiter w = {.p = p,
                    .op = op,
                    .e = e,
                    .keys = &rw.wk,
                    .id = token,
                    .deadline = deadline,
                    .attempt = rw_attempt,
                    .ctx = &rw,
                    .release = sd->release,
                    .name = name};
    return wk__wake_wait(&w, acquired);
}

int wk_rwlock_acquire_read(wk_processor *p, const wk_entity *rwlock, wk_name name, int64_t deadline,
                           const wk_backoff *backoff, wk_token *token, bool *acquired)
{
    return acquire_waiting("rwlock.acquire_read", wk_rwlock_try_read, &reading, p, rwlock, name,
                           deadline, backoff, token, acquired);
}

int wk_rwlock_acquire_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                            int64_t deadline, const wk_backoff *backoff, wk_token *token,
                            bool *acquired)
{
    return acquire_waiting("rwlock.acquire_write", wk_rwlock_try_write, &writing, p, rwlock, name,
                           deadline, backoff, token, acquired);
}

int wk_rwlock_force_release(wk_processor *p, const wk_entity *rwlock, wk_name name, bool *was_held)
{
    keys k;
    int rc = prepare(p, "rwlock.force_release", rwlock, &name, &k, was_held, was_held);
    if (rc)
        return rc;
    *was_held = false;
    wk__wake_keys wk;
    if ((rc = wk__wake_keys_for(p, "rwlock.force_release", &wk, k.w, k.w_len)) != WK_OK)
        return rc;
    const char *args[2] = {k.r, wk.w};
    size_t lens[2] = {k.r_len, wk.w_len};
    return wk__wake_script(p, "rwlock.force_release", &force_release_script, 0, WK_WRITE, rwlock, k.w,
                           k.w_len, &wk, 1, args, lens, 2, wk__parse_bool_int, was_held);
}

static int owned(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                 const wk_name *name, bool reader, const wk_token *token, wk_lease_state *state)
{
    keys k;
    int rc = prepare(p, op, e, name, &k, token, state);
    if (rc)
        return rc;
    state->owned = false;
    state->ttl_ms = 0;
    return reader ? wk__owned_script(p, op, script, e, k.r, k.r_len, token, state)
                  : wk__owned_script(p, op, script, e, k.w, k.w_len, token, state);
}

int wk_rwlock_owned_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                          const wk_token *token, wk_lease_state *state)
{
    return owned(p, "rwlock.owned_write", &wk__lock_owned_script, rwlock, &name, false, token,
                 state);
}

int wk_rwlock_owned_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                         const wk_token *token, wk_lease_state *state)
{
    return owned(p, "rwlock.owned_read", &owned_read_script, rwlock, &name, true, token, state);
}
