/*
 * collection/lease_fallback.c — the single-key forms of the lease scripts
 * (collection/lease_script.h), sent by core/exchange.c instead of the full
 * form when a migrating slot answers TRYAGAIN: Redis refuses a script
 * whose declared keys are not all on one node, and a lease's wake keys
 * usually exist on neither. Each touches KEYS[1] only, takes the full
 * form's ARGV and replies in its shape; none wakes or queues a waiter.
 * (The Semaphore acquire's single-key form sits in semaphore.c, beside the
 * take it shares.) wk__single_key_flag() lists every pair.
 */
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
 * fair lock's queue is not looked at while the slot migrates. */
const wk_script wk__lock_acquire_single = {
    "lock.acquire.single_key",
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, 0} end\n"
    "if ARGV[4] == '-1' then return {0, 0} end\n"
    "local left = redis.call('PTTL', KEYS[1])\n"
    "local cap = tonumber(ARGV[4])\n"
    "if left < 1 then left = 1 end\n"
    "if left > cap then left = cap end\n"
    "return {0, left}\n"};

/* A reader's or permit's release: sorted set token → end of its lease
 * (server ms). ARGV: token, w. 1 if its lease was still running. One ZREM
 * (this token and the expired ones) comes last: on a migrating node a
 * command on a key the script has just emptied (deleted) is refused. */
const wk_script wk__reader_release_single = {
    "reader.release.single_key",
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
    "local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)\n"
    "gone[#gone + 1] = ARGV[1]\n"
    "redis.call('ZREM', KEYS[1], unpack(gone))\n"
    "if s and tonumber(s) > now then return 1 end\n"
    "return 0\n"};

/* ARGV: token, w. 1 if the lease hash held the token. */
const wk_script wk__fenced_lock_release_single = {
    "fenced_lock.release.single_key",
    "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 1\n"};

unsigned wk__single_key_flag(const wk_script *script)
{
    static const wk__two_forms *const all[] = {
        &wk__lock_release_forms,        &wk__lock_acquire_forms,
        &wk__rwlock_release_read_forms, &wk__semaphore_release_forms,
        &wk__fenced_lock_release_forms, &wk__semaphore_acquire_forms,
    };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (script == &all[i]->script)
            return WK__QUERY_SINGLE_KEY;
    return 0;
}
