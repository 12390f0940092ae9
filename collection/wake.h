/*
 * collection/wake.h — wake on release: the waiting acquires of the lock
 * family (Lock, RwLock, and later kinds) sleep on Redis until the holder
 * releases, instead of polling. Not installed.
 *
 * One mechanism for every kind, in three parts:
 *
 *   1. Companion keys (wk__wake_keys_build, through wk__companion_key in
 *      core/key.c, the one derivation of companion keys): per item, in
 *      the item's cluster slot, A the item's (first) key,
 *        {X}:q<R>        sorted set: waiter id → arrival (server µs); the
 *                        queue order, oldest first (the "head")
 *        {X}:e<R>        sorted set: waiter id → end of its registration
 *                        (server ms); an expired registration is a waiter
 *                        that gave up or crashed, and is pruned
 *        {X}:w:<R><id>   list: the wake-up of one waiter (at most one
 *                        element), BLPOPed by that waiter only
 *      X a tag with A's slot, R "" or A (core/key.c: why no companion key
 *      is another item's key or another item's companion).
 *
 *   2. The Lua contract (WK__WAKE_LUA): local functions that a kind's
 *      scripts start with (string concatenation: WK__WAKE_LUA "body…").
 *      The text may also sit inside a block (`if redis.call('EXISTS', q)
 *      == 1 then` WK__WAKE_LUA_CORE `wk_wake(…) end`), so that a release
 *      nobody waits for creates none of its closures.
 *      Key names are passed to them as arguments; the q and e keys must be
 *      in the script's KEYS, the prefix w travels in ARGV (a waiter's list
 *      name is w .. id, in the same slot).
 *
 *        wk_now()              server time, ms (TIME)
 *        wk_wake(q, e, w, now) (now may be nil: read only when somebody
 *                              waits) prune expired registrations, then wake the
 *                              head: one element into its list unless one
 *                              is already there. Every path that frees the
 *                              item (release, force release, a reader
 *                              release that empties the readers …) calls
 *                              it. Cheap when nobody waits (one EXISTS).
 *        wk_may_take(q, e, w, id, now, fair)
 *                              prune, then whether `id` may take the item
 *                              now: always when not fair; when fair, only
 *                              if the queue is empty or `id` is its head
 *                              (no barging). id '' = a caller that does
 *                              not wait (a plain try).
 *        wk_took(q, e, w, id, now, chain)
 *                              `id` took the item: leave the queue; with
 *                              chain (shared holders: readers, permits),
 *                              wake the next head too, who may also fit.
 *        wk_park(q, e, w, id, now, cap, blocked, reader)
 *                              `id` could not take it: join the queue at
 *                              its tail (or keep its place) and return how
 *                              long to sleep, ms ≥ 1: the head sleeps at
 *                              most `blocked` (the holders' remaining
 *                              lease, ms; < 0: unknown), the others at
 *                              most until the registration of a waiter
 *                              ahead ends (it may have crashed); both at
 *                              most `cap` and WK__WAKE_RENEW_MS (the
 *                              server's bound, whatever the client
 *                              asks). The registration lasts that
 *                              sleep plus WK__WAKE_GRACE_MS; `reader`
 *                              (an RwLock reader) marks its end '.5'.
 *                              cap 0 is the final attempt, made at the
 *                              deadline: not taken, `id` leaves instead
 *                              (as WK__WAKE_LEAVE_LUA) and 0 is
 *                              returned, so that a wait that ends "not
 *                              acquired" is in no queue a release could
 *                              hand it the item from.
 *
 *      A kind's acquire-or-park script is then
 *          local now = wk_now()
 *          if wk_may_take(q, e, w, id, now, fair) and <take it> then
 *            wk_took(q, e, w, id, now, <shared?>) return {1, 0}
 *          end
 *          return {0, wk_park(q, e, w, id, now, cap, <holders' PTTL>)}
 *      (reply parsed by wk__wake_parse_outcome), and its release script
 *      calls wk_wake() after freeing.
 *
 *   3. The waiter loop (wk__wake_wait): attempt (the script above), and
 *      while not acquired and before the deadline, BLPOP the waiter's own
 *      list for the returned sleep on the handle's blocking connection
 *      (core/blocking.h); a handed-over notice (WK__WAKE_LUA_HAND below)
 *      means the item is the waiter's, anything else: attempt again. At
 *      the deadline the final attempt (cap 0) takes the item or leaves
 *      the queue; an exit on an error leaves first (the kind's leave,
 *      passing on a wake-up it got, its turn as head, or an item handed
 *      to it), so a waiter that gives up just as it is woken loses
 *      nobody's wake-up, and an exit that could not leave is WK_EUNKNOWN.
 *
 * Why a handed item is never stranded (the bound B, docs/GUARANTEES.md):
 * a registration ends at most WK__WAKE_RENEW_MS + WK__WAKE_GRACE_MS after
 * its waiter last spoke; the notice carries that end; a live waiter takes
 * its notice at once (blocked in BLPOP, or its next attempt finds the
 * item its own); after that end every script that could take the item
 * takes it back (wk_unclaimed, wk_prune + wk_revoke), and waiters sleep
 * no longer than it (wk_claim_left, wk_bound_handed).
 *
 * Why no wake-up is lost: a release wakes the head; a live head always
 * attempts again after waking (and either takes the item or parks again,
 * to be woken by the next release), or leaves and wakes the next head; a
 * crashed head's registration ends at most its sleep (≤ WK__WAKE_RENEW_MS)
 * + grace later, and every waiter behind it sleeps no longer than that.
 * Expiry of a holder: the head sleeps no longer than the holders'
 * remaining lease.
 *
 * Timeouts: a BLPOP's timeout fires on the server's timer (1/hz, 100 ms by
 * default), so a wake at a lease's end may come that much late; pushes
 * wake at once.
 *
 * The deadline: the caller's deadline D bounds the whole acquire, not
 * each step. The waits — every BLPOP, the open and any reconnect of the
 * blocking connection — end by D itself (wk__db_bound on the blocking
 * handle), not at the server's timer: a pop still unanswered at D is
 * abandoned (WK__QUERY_ABANDON: its reply is dropped when it comes, the
 * blocking connection stays; a wait that starts before that reply came
 * takes a new connection rather than queue behind the pop). The
 * exchanges on the caller's processor — the first try, every attempt,
 * the release of an unacknowledged lease — end by D + WK__WAKE_FINISH_MS
 * (wk__wake_bound); the final attempt, made at D, and a leave made after
 * it end WK__WAKE_FINISH_MS after they are sent (a waiter woken a little
 * late still learns the answer). Each still ends by its own command
 * timeout when that comes first. A waiter past D + WK__WAKE_FINISH_MS
 * (stalled, descheduled, woken late) sends its final attempt all the
 * same, under the command timeout alone (finish_bound in wake.c): only
 * that attempt says whether it holds the item or has left the queue,
 * and an acquire that returned "not acquired" while still queued could
 * be handed the item after it returned. A try or an attempt cut so is
 * LOST (WK_EUNKNOWN: the caller keeps the token to release). A stalled or
 * trickling server thus holds an acquire at most WK__WAKE_FINISH_MS past
 * D, within the 50 ms of docs/GUARANTEES.md.
 *
 * Cost: one BLPOP and one attempt per waiter per wake-up — for a release
 * that hands over (every lease kind's), the release and the BLPOP alone —
 * and, while nothing happens, one of each per waiter per
 * WK__WAKE_RENEW_MS (the renewal). The uncontended acquire is the kind's
 * plain try (no extra round trip, no blocking connection).
 *
 * Cluster slots. Redis hashes the bytes between the first '{' and the
 * first '}' after it, if that is not empty; else the whole key. X is
 *   - A's own tag, when it has one (multi-key items: RwLock …; Lock
 *     names such as "{job}");
 *   - A itself, when A contains no '}' (a Lock key: the whole key becomes
 *     the tag, so the slot is the same); R is then "";
 *   - otherwise (a Lock whose name holds '}' but no tag) the first string
 *     of 1–3 characters of [0-9A-Za-z] (shortest first, in that order)
 *     whose CRC16 slot is A's.
 * Upgrading from the layout before issue 21 (A ":q" when A had a tag,
 * "{T}" A ":q" for the third case): a waiter queued under the old keys is
 * not woken by a new release; it wakes at its own bound (the holder's
 * lease end for the head, a lease otherwise) and re-queues.
 *
 * Thread-safety: as the processor's handle. The blocking connection is
 * the handle's own (wk__blocking_of): opened on the first wait, kept until
 * the handle closes.
 */
#ifndef WK_COLLECTION_WAKE_H
#define WK_COLLECTION_WAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <wakuwaku/clock.h>
#include <wakuwaku/key.h>
#include <wakuwaku/query.h>
#include <wakuwaku/token.h>

#include "core/core_internal.h"

/* Longest companion key (a waiter's list with its 16-byte id). */
#define WK__WAKE_KEY_MAX WK__COMPANION_KEY_MAX

/* How long after the caller's deadline the exchanges of a waiting
 * acquire may still end (see "The deadline" above): the last attempt and
 * the leave, made at the deadline, each take a round trip. Half the
 * 50 ms that docs/GUARANTEES.md promises, the rest for the scheduler. */
#define WK__WAKE_FINISH_MS 25

/* The longest a waiter sleeps between two attempts, whatever its cap:
 * its registration is renewed at least this often while it is alive, so
 * it lasts at most this plus the grace after the waiter last spoke. The
 * server enforces it (wk_park), not the client. With the grace, it is
 * what bounds a lease handed to a waiter that never takes it up (B,
 * docs/GUARANTEES.md): B = WK__WAKE_RENEW_MS + WK__WAKE_GRACE_MS + the
 * server's timer tick (100 ms at hz 10) + a round trip. What it costs:
 * one pop and one attempt per waiter per RENEW_MS while it waits. */
#define WK__WAKE_RENEW_MS 1000

/* How much longer than its announced sleep a waiter's registration
 * lasts: the time a live waiter has to come back (the server's BLPOP
 * timer fires up to a tick, 100 ms, late; two round trips; a scheduler
 * delay) before it counts as gone. A waiter stalled longer loses its
 * place, and a lease handed to it meanwhile may be taken back: never
 * both (a popped notice is never taken back). */
#define WK__WAKE_GRACE_MS 500

/* The end of the message of a wait that ends WK_EUNKNOWN while it may be
 * handed the item (a printf format taking the bound in ms): the blocking
 * and the event-loop waiters say it alike. */
#define WK__WAKE_UNKNOWN_NOTE                                                                      \
    ": the token may hold the item (release it; unless a pop of this wait took it, it goes to "   \
    "the next waiter by itself within %d ms)"

/* wk__crc16 and wk__key_slot (the slot of a key) are core's
 * (core/core_internal.h). */

/* The tag of the third case above (core's wk__key_tag_for_slot; every
 * slot has one: tests/collection/test_wake.c checks all 16384). */
#define wk__wake_tag_for_slot wk__key_tag_for_slot

/* The companion keys of one item. */
typedef struct wk__wake_keys {
    char q[WK__WAKE_KEY_MAX]; /* queue: id → arrival */
    char e[WK__WAKE_KEY_MAX]; /* registrations: id → end */
    char w[WK__WAKE_KEY_MAX]; /* prefix of a waiter's list */
    size_t q_len, e_len, w_len;
} wk__wake_keys;

/* Build the companion keys of the item whose (first) key is
 * item_key[0..len). WK_OK, or WK_EINVAL when len > WK_KEY_MAX. */
int wk__wake_keys_build(wk__wake_keys *k, const char *item_key, size_t len);

/* wk__wake_keys_build() for a query `op` on `p`: a failure is recorded
 * on the handle ("<op>: key too long"). */
int wk__wake_keys_for(wk_processor *p, const char *op, wk__wake_keys *k, const char *item_key,
                      size_t len);

#define WK__WAKE_STR_(x) #x
#define WK__WAKE_STR(x) WK__WAKE_STR_(x)

/* The Lua functions above, string literals to put in front of a script's
 * body (WK__WAKE_LUA "body"), so that scripts stay `static const`.
 * WK__WAKE_LUA_CORE is wk_now, wk_prune and wk_wake alone: release paths
 * need no more, and every `local function` costs a closure per call.
 *
 * Every command on a companion key goes through wk_call: on the source
 * of a migrating slot a script may touch only keys the node still has,
 * and a wake-up list that does not exist there (or a queue the script has
 * just emptied) is refused ("Script attempted to access a non local
 * key"), which would stop the script halfway, after the item was freed.
 * wk_call answers false instead: that wake-up or registration is skipped
 * (the waiter wakes at the end of its sleep, as after a single-key form);
 * any other error is raised. */
#define WK__WAKE_LUA_CORE                                                                          \
    "local wk_revoke\n"                                                                            \
    "local function wk_now()\n"                                                                    \
    "  local t = redis.call('TIME')\n"                                                             \
    "  return t[1] * 1000 + math.floor(t[2] / 1000)\n"                                             \
    "end\n"                                                                                        \
    "local function wk_call(...)\n"                                                                \
    "  local r = redis.pcall(...)\n"                                                               \
    "  if type(r) == 'table' and r.err then\n"                                                     \
    "    if string.find(r.err, 'non local key', 1, true) then return false end\n"                  \
    "    error(r)\n"                                                                               \
    "  end\n"                                                                                      \
    "  return r\n"                                                                                 \
    "end\n"                                                                                        \
    "local function wk_poke(q, e, w, now)\n"                                                       \
    "  local head = (wk_call('ZRANGE', q, 0, 0) or {})[1]\n"                                       \
    "  if head and wk_call('LLEN', w .. head) == 0 then\n"                                         \
    "    wk_call('RPUSH', w .. head, '1')\n"                                                       \
    "    local ends = wk_call('ZSCORE', e, head)\n"                                                \
    "    local left = ends and (tonumber(ends) - now) or 1\n"                                      \
    "    wk_call('PEXPIRE', w .. head, math.max(1, math.floor(left)))\n"                           \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "local function wk_prune(q, e, w, now)\n"                                                      \
    "  local gone = wk_call('ZRANGEBYSCORE', e, '-inf', now) or {}\n"                              \
    "  local freed = false\n"                                                                      \
    "  for i = 1, #gone do\n"                                                                      \
    "    if wk_revoke then\n"                                                                      \
    "      local n = wk_call('LINDEX', w .. gone[i], 0)\n"                                         \
    "      if type(n) == 'string' and string.sub(n, 1, 1) == 'h' then\n"                           \
    "        wk_revoke(gone[i])\n"                                                                 \
    "        freed = true\n"                                                                       \
    "      end\n"                                                                                  \
    "    end\n"                                                                                    \
    "    wk_call('ZREM', q, gone[i])\n"                                                            \
    "    wk_call('ZREM', e, gone[i])\n"                                                            \
    "    wk_call('DEL', w .. gone[i])\n"                                                           \
    "  end\n"                                                                                      \
    "  if freed then wk_poke(q, e, w, now) end\n"                                                  \
    "end\n"                                                                                        \
    "local function wk_wake(q, e, w, now)\n"                                                       \
    "  if wk_call('EXISTS', q) ~= 1 then return end\n"                                             \
    "  now = now or wk_now()\n"                                                                    \
    "  wk_prune(q, e, w, now)\n"                                                                   \
    "  wk_poke(q, e, w, now)\n"                                                                    \
    "end\n"

/* The whole contract: the core plus the waiting side (wk_may_take,
 * wk_took, wk_park) for acquire-or-park scripts. A waiter whose queue
 * entry cannot be written (a migrating source) is not queued and sleeps
 * as the head would. */
#define WK__WAKE_LUA                                                                               \
    WK__WAKE_LUA_CORE                                                                              \
    "local function wk_may_take(q, e, w, id, now, fair)\n"                                         \
    "  if not fair or wk_call('EXISTS', q) ~= 1 then return true end\n"                            \
    "  wk_prune(q, e, w, now)\n"                                                                   \
    "  local head = (wk_call('ZRANGE', q, 0, 0) or {})[1]\n"                                       \
    "  return (not head) or head == id\n"                                                          \
    "end\n"                                                                                        \
    "local function wk_took(q, e, w, id, now, chain)\n"                                            \
    "  if id == '' then return end\n"                                                              \
    "  if wk_call('ZREM', q, id) == 1 then wk_call('ZREM', e, id) end\n"                           \
    "  wk_call('DEL', w .. id)\n"                                                                  \
    "  if chain then wk_wake(q, e, w, now) end\n"                                                  \
    "end\n"                                                                                        \
    "local function wk_park(q, e, w, id, now, cap, blocked, reader)\n"                             \
    "  wk_prune(q, e, w, now)\n"                                                                   \
    "  if cap == 0 then\n"                                                                          \
    "    local rank = wk_call('ZRANK', q, id)\n"                                                   \
    "    local pending = (wk_call('LLEN', w .. id) or 0) > 0\n"                                    \
    "    wk_call('ZREM', q, id)\n"                                                                 \
    "    wk_call('ZREM', e, id)\n"                                                                 \
    "    wk_call('DEL', w .. id)\n"                                                                \
    "    if rank == 0 or pending then wk_wake(q, e, w, now) end\n"                                 \
    "    return 0\n"                                                                               \
    "  end\n"                                                                                      \
    "  if cap > " WK__WAKE_STR(WK__WAKE_RENEW_MS) " then cap = " WK__WAKE_STR(WK__WAKE_RENEW_MS) " end\n" \
    "  if not wk_call('ZSCORE', q, id) then\n"                                                     \
    "    local t = redis.call('TIME')\n"                                                           \
    "    wk_call('ZADD', q, string.format('%.0f', t[1] * 1000000 + t[2]), id)\n"                   \
    "  end\n"                                                                                      \
    "  local rank = wk_call('ZRANK', q, id)\n"                                                     \
    "  local sleep = cap\n"                                                                        \
    "  if not rank or rank == 0 then\n"                                                            \
    "    if blocked >= 0 and blocked < sleep then sleep = blocked end\n"                           \
    "  else\n"                                                                                     \
    "    local ahead = wk_call('ZRANGE', q, 0, rank - 1) or {}\n"                                  \
    "    for i = 1, #ahead do\n"                                                                   \
    "      local ends = wk_call('ZSCORE', e, ahead[i])\n"                                          \
    "      if ends and tonumber(ends) - now < sleep then sleep = tonumber(ends) - now end\n"       \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  sleep = math.floor(sleep)\n"                                                                \
    "  if sleep < 1 then sleep = 1 end\n"                                                          \
    "  local keep = sleep + " WK__WAKE_STR(WK__WAKE_GRACE_MS) "\n"                                 \
    "  local ends = string.format('%.0f', now + keep) .. (reader and '.5' or '')\n"                \
    "  if wk_call('ZADD', e, ends, id) then\n"                                                     \
    "    local pq, pe = wk_call('PTTL', q), wk_call('PTTL', e)\n"                                  \
    "    if pq and pq < keep then wk_call('PEXPIRE', q, keep) end\n"                               \
    "    if pe and pe < keep then wk_call('PEXPIRE', e, keep) end\n"                               \
    "  end\n"                                                                                      \
    "  return sleep\n"                                                                             \
    "end\n"

/* Handing over (issue 24): a release that somebody waits for gives the
 * item to the head of the queue inside its own script instead of freeing
 * it and waking the head to race for it. Text to put after
 * WK__WAKE_LUA_CORE (the release's and the leave's blocks) or
 * WK__WAKE_LUA (the attempts').
 *
 *   wk_hand(q, e, w, now, ttl, give)
 *                         prune, then when a head remains: give(head)
 *                         writes the item for the head's token (the kind's
 *                         own write: SET for a Lock, INCR and HSET for a
 *                         FencedLock) and returns the notice's extra text
 *                         ('' or the fence); the head leaves the queue, and
 *                         its list gets the notice 'h<end>:<extra>' (end:
 *                         the head's registration end, server ms) with the
 *                         lease's TTL. Returns the head, or nil (nobody
 *                         waits: the caller frees the item as before).
 *   wk_unclaimed(w, holder, now)
 *                         whether `holder` (the item's token) is a waiter
 *                         that was handed the item and never took its
 *                         notice although its registration has ended: its
 *                         list still holds the notice (a live waiter pops
 *                         it at once, or finds the item its own on its
 *                         next attempt, which deletes the list), and the
 *                         end written in it has passed. The notice is
 *                         deleted then; the caller frees the item.
 *   wk_claim_left(w, holder, now)
 *                         while `holder` has not taken a notice handed to
 *                         it: ms until the end written in it (at least
 *                         1), after which wk_unclaimed takes it back;
 *                         else nil. A waiter parked behind such a holder
 *                         sleeps no longer (Lock, FencedLock: the handed
 *                         waiter has left e, so nothing else bounds it).
 *
 * The waiter (wk__wake_wait) whose pop returns a notice starting with 'h'
 * holds the item: no second attempt. A notice '1' (a plain wake-up:
 * force release, a reader that got in by an attempt, a release that could
 * not hand over)
 * or a timeout means attempt again, as before; an attempt finds an item
 * already handed to it (its token is the holder) and reports it taken.
 * A Rust client's release only frees the item: the waiter wakes at its
 * own bound and takes it with an attempt. */
#define WK__WAKE_LUA_HAND                                                                          \
    "local function wk_hand(q, e, w, now, ttl, give)\n"                                            \
    "  now = now or wk_now()\n"                                                                    \
    "  wk_prune(q, e, w, now)\n"                                                                   \
    "  local head = (wk_call('ZRANGE', q, 0, 0) or {})[1]\n"                                       \
    "  if not head then return nil end\n"                                                          \
    "  local ends = tonumber(wk_call('ZSCORE', e, head) or (now + " WK__WAKE_STR(                 \
        WK__WAKE_GRACE_MS) "))\n"                                                                 \
    "  local extra = give(head)\n"                                                                 \
    "  wk_call('ZREM', q, head)\n"                                                                 \
    "  wk_call('ZREM', e, head)\n"                                                                 \
    "  wk_call('DEL', w .. head)\n"                                                                \
    "  wk_call('RPUSH', w .. head, 'h' .. string.format('%.0f', ends) .. ':' .. extra)\n"         \
    "  wk_call('PEXPIRE', w .. head, ttl)\n"                                                       \
    "  return head\n"                                                                              \
    "end\n"                                                                                        \
    "local function wk_claim_left(w, holder, now)\n"                                               \
    "  local n = wk_call('LINDEX', w .. holder, 0)\n"                                              \
    "  local ends = type(n) == 'string' and tonumber(string.match(n, '^h(%d+):'))\n"               \
    "  return ends and math.max(1, ends - now + 1)\n"                                              \
    "end\n"                                                                                        \
    "local function wk_unclaimed(w, holder, now)\n"                                                \
    "  local n = wk_call('LINDEX', w .. holder, 0)\n"                                              \
    "  if type(n) ~= 'string' then return false end\n"                                             \
    "  local ends = tonumber(string.match(n, '^h(%d+):'))\n"                                       \
    "  if not ends or ends > now then return false end\n"                                          \
    "  wk_call('DEL', w .. holder)\n"                                                              \
    "  return true\n"                                                                              \
    "end\n"

/* A plain try that found the item taken by `holder` (Lua statements; `w`
 * and `holder` Lua expressions, w the wake prefix): return 0 from the
 * script unless the holder is a waiter that was handed the item and never
 * took its notice by the end written in it (wk_unclaimed, which deletes
 * the notice); then go on, the caller taking the item. Only that rare path
 * defines functions (the Lock's and FencedLock's tries). */
#define WK__WAKE_LUA_TRY_TAKE_BACK(w, holder)                                                      \
    "local notice = " holder " and redis.pcall('LINDEX', " w " .. " holder ", 0)\n"                \
    "if type(notice) ~= 'string' or string.sub(notice, 1, 1) ~= 'h' then return 0 end\n"         \
    "do\n" WK__WAKE_LUA_CORE WK__WAKE_LUA_HAND                                                     \
    "  if not wk_unclaimed(" w ", " holder ", wk_now()) then return 0 end\n"                       \
    "end\n"

/* Handing over to shared holders and to several waiters (issue 24: the
 * RwLock's sides, the Semaphore's permits), after WK__WAKE_LUA_CORE. Such
 * an item has many holders, so a lease handed to a waiter that died is
 * found otherwise than by Lock's wk_unclaimed: a handed waiter leaves the
 * queue q but keeps its registration in e until it ends, and when the
 * prune drops a registration whose list still holds its notice ('h…':
 * never popped), it calls the kind's wk_revoke(id) (the local of
 * WK__WAKE_LUA_CORE, nil for the other kinds), which takes that waiter's
 * lease away, and pokes the new head. A waiter parked after the handoff
 * sleeps no longer than such a registration (wk_bound_handed), so the
 * lease goes on when it ends, not when its TTL does.
 *
 * An RwLock reader marks its registration: its end carries '.5'
 * (wk_park's `reader`), so that a release knows which side each waiter
 * waits for.
 *
 *   wk_reader(ends)       whether a registration end (ZSCORE e) is a
 *                         reader's.
 *   wk_give(q, e, w, id, ends, ttl)
 *                         `id` (registration end `ends`) was handed the
 *                         item by the caller's own write: it leaves q, and
 *                         its list holds only the notice 'h<end>:', with
 *                         the lease's TTL; e lives at least as long (its
 *                         registration there is what a later prune takes
 *                         the lease back by: e expiring with its last
 *                         registration would strand the lease).
 *   wk_bound_handed(q, e, now, blocked)  (WK__WAKE_LUA_BOUND)
 *                         `blocked` (ms, < 0: unknown) shortened to when
 *                         the earliest registration of a handed waiter
 *                         (in e, not in q) ends. */
#define WK__WAKE_LUA_GIVE                                                                          \
    "local function wk_reader(ends)\n"                                                             \
    "  return ends ~= nil and ends ~= false and tonumber(ends) % 1 ~= 0\n"                         \
    "end\n"                                                                                        \
    "local function wk_give(q, e, w, id, ends, ttl)\n"                                             \
    "  wk_call('ZREM', q, id)\n"                                                                   \
    "  local pe = wk_call('PTTL', e)\n"                                                            \
    "  if pe and pe >= 0 and pe < tonumber(ttl) then wk_call('PEXPIRE', e, ttl) end\n"             \
    "  wk_call('DEL', w .. id)\n"                                                                  \
    "  wk_call('RPUSH', w .. id, 'h' .. string.format('%.0f', tonumber(ends)) .. ':')\n"           \
    "  wk_call('PEXPIRE', w .. id, ttl)\n"                                                         \
    "end\n"

/* A release's straight path (Lua statements; no function defined): the
 * notice to waiter `id`'s list (wake prefix `w`; Lua expressions, `ends`
 * its registration end in registrations `e`, kept at least as long as
 * the lease, as wk_give's) with the lease's TTL `ttl`, in front of any plain
 * wake-up (LPUSH: the pop takes it first), its push a pcall as wk_call's:
 * a list the node does not have skips the notice (the waiter finds the
 * lease its own on its next attempt). */
#define WK__WAKE_LUA_NOTICE(e, w, id, ends, ttl)                                                   \
    "local pushed = redis.pcall('LPUSH', " w " .. " id ", 'h' .. string.format('%.0f', "           \
    "tonumber(" ends ")) .. ':')\n"                                                                \
    "if type(pushed) == 'number' then redis.pcall('PEXPIRE', " w " .. " id ", " ttl ") end\n"     \
    "local pe = redis.pcall('PTTL', " e ")\n"                                                      \
    "if type(pe) == 'number' and pe >= 0 and pe < tonumber(" ttl ") then\n"                        \
    "  redis.pcall('PEXPIRE', " e ", " ttl ")\n"                                                   \
    "end\n"

/* wk_bound_handed alone (the attempts', which hand nothing over). */
#define WK__WAKE_LUA_BOUND                                                                         \
    "local function wk_bound_handed(q, e, now, blocked)\n"                                         \
    "  local all = wk_call('ZRANGE', e, 0, -1, 'WITHSCORES') or {}\n"                              \
    "  for i = 1, #all, 2 do\n"                                                                    \
    "    if not wk_call('ZSCORE', q, all[i]) then\n"                                               \
    "      local left = math.floor(tonumber(all[i + 1]) - now) + 1\n"                              \
    "      if blocked < 0 or left < blocked then return left end\n"                                \
    "      return blocked\n"                                                                       \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  return blocked\n"                                                                           \
    "end\n"

/* Whether a popped notice s[0..len) hands the item over ('h<end>:<n>';
 * *n its number: a FencedLock's fence); a plain wake-up ('1') or none
 * (NULL) is not. The blocking and the event-loop waiters read it alike. */
bool wk__wake_notice_handed(const char *s, size_t len, int64_t *n);

/* The queue part of a leave (Lua statements): waiter `id` (a Lua
 * expression) leaves q and e, its list w .. id is deleted, and if it was
 * the head or had a wake-up pending the next head is woken. Needs
 * WK__WAKE_LUA_CORE and a `now`. */
#define WK__WAKE_LEAVE_LUA(q, e, w, id)                                                            \
    "local rank = redis.call('ZRANK', " q ", " id ")\n"                                             \
    "local pending = redis.call('LLEN', " w " .. " id ") > 0\n"                                     \
    "redis.call('ZREM', " q ", " id ")\n"                                                           \
    "redis.call('ZREM', " e ", " id ")\n"                                                           \
    "redis.call('DEL', " w " .. " id ")\n"                                                          \
    "if rank == 0 or pending then wk_wake(" q ", " e ", " w ", now) end\n"

/* The reply of an acquire-or-park script, {1, 0} or {0, sleep_ms}. */
typedef struct wk__wake_outcome {
    bool acquired;
    int64_t sleep_ms;
} wk__wake_outcome;

/* Parser for that reply; `out` is a wk__wake_outcome. */
int wk__wake_parse_outcome(const wk_query *q, const wk_reply *r, wk_diag *d);

/* The `cap` argument of wk_park for a wait ending at `deadline` on an
 * entity whose lease is ttl_ms: min(time left, ttl_ms,
 * WK__WAKE_RENEW_MS), at least 1 (0 is the final attempt's). A waiter
 * re-registers at least once per WK__WAKE_RENEW_MS, so a crashed waiter
 * holds its place for at most that plus the grace. */
int64_t wk__wake_cap_ms(const wk_entity *e, int64_t deadline);

/* One waiting acquire. The kind fills it and calls wk__wake_wait(). */
typedef struct wk__waiter {
    wk_processor *p;           /* the caller's processor (attempts, leave) */
    const char *op;            /* "lock.acquire", for messages */
    const wk_entity *e;        /* the entity (the effect of every query) */
    const wk__wake_keys *keys; /* the item's companion keys */
    const wk_token *id;        /* the waiter's id: the acquire's token */
    int64_t deadline;          /* wk_monotonic_ms() clock */
    /* Run the kind's acquire-or-park script once with this cap (as a
     * query on w->p); fill *out. Returns the query's status. */
    int (*attempt)(struct wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out);
    void *ctx; /* the kind's */
    /* The kind's public release and the item's name: a lease taken while
     * waiting but not acknowledged (WK_ENOTREPLICATED) is given back
     * through wk__lease_settle(), as a try's is. NULL: the kind takes no
     * lease. */
    int (*release)(wk_processor *p, const wk_entity *e, wk_name name, const wk_token *token,
                   bool *released);
    wk_name name;
    /* A kind whose release hands the item over (WK__WAKE_LUA_HAND): its
     * leave, which also passes on an item handed to the waiter as it
     * gives up (NULL: wk__wake_leave, the queue alone). With it, a pop
     * whose reply was lost may have handed the item over: a wait that
     * ends without an attempt after it is WK_EUNKNOWN. */
    int (*leave)(struct wk__waiter *w);
    /* Where a handed-over notice's extra number goes (a FencedLock's
     * fence), or NULL. */
    int64_t *handed_n;
    /* Out: the item came by a handed-over notice (no attempt after it). */
    bool handed;
} wk__waiter;

/*
 * Wait until w->attempt reports acquired or the deadline passes, every
 * step within the deadline (see "The deadline" above). The first attempt
 * is made at once (even with a deadline already past), and one last
 * attempt at the deadline.
 * Returns WK_OK (see *acquired), or the first error of an attempt or of
 * the wait: an attempt's status as is (WK_EUNKNOWN: it may have taken the
 * item, see wakuwaku/deadline.h); a failed wait (its connection) as
 * WK_EIO / WK_ETIMEDOUT (a lost wake-up pop took nothing); the status of
 * opening the blocking connection. Whenever it returns without the item
 * it has left the queue (or its registration runs out by itself).
 */
int wk__wake_wait(wk__waiter *w, bool *acquired);

/*
 * The end of the exchanges of an acquire whose deadline is `deadline`,
 * starting now: WK__WAKE_FINISH_MS after the deadline, or after now when
 * the deadline has already passed (the one try such a call makes).
 */
int64_t wk__wake_end(int64_t deadline);

/*
 * Bound every query on `p` (on the handle behind it; for a pool's shared
 * processor, the calling thread's queries through it, their wait for a
 * connection included) by `until`, a wk__boot_ms() time, unless an
 * enclosing bound ends sooner; returns the previous bound, which
 * wk__wake_unbound() puts back. A processor with no handle: no-op.
 */
int64_t wk__wake_bound(wk_processor *p, int64_t until);
void wk__wake_unbound(wk_processor *p, int64_t prev);

/*
 * The start every waiting acquire shares: check the arguments (processor,
 * token, acquired, backoff, not a batch — 1 <= initial_ms <= max_ms,
 * still checked though waits no longer poll), then one plain try
 * (`try_once`, the kind's non-waiting acquire: the uncontended acquire
 * costs exactly what the try costs), ending by wk__wake_end(deadline)
 * (wk__wake_bound). Returns WK__WAKE_MUST_WAIT when that try did not
 * acquire and the deadline has not passed; otherwise the final status
 * (WK_OK with *acquired set, or an error).
 */
#define WK__WAKE_MUST_WAIT 1
/* … or WK__WAKE_LOOP: p is an event-loop handle's (a deferred processor
 * that can wait: collection/lease_loop.c), nothing was sent. */
#define WK__WAKE_LOOP 2
typedef int (*wk__try_fn)(wk_processor *p, const wk_entity *e, wk_name name, wk_token *token,
                          bool *acquired);
int wk__wake_begin(const char *op, wk__try_fn try_once, wk_processor *p, const wk_entity *e,
                   wk_name name, int64_t deadline, const wk_backoff *backoff, wk_token *token,
                   bool *acquired);

/* Through a deferred processor: WK__WAKE_LOOP for an event-loop
 * handle's, else the batch's refusal (WK_EINVAL, message on p). */
int wk__wake_deferred(wk_processor *p, const char *op);

/*
 * Leave the queue of `keys` as waiter `id` (a WRITE of `e` on `p`),
 * waking the next head if `id` was the head or had a wake-up pending.
 * Used by wk__wake_wait; a kind calls it only for waits of its own.
 */
int wk__wake_leave(wk_processor *p, const wk_entity *e, const wk__wake_keys *keys,
                   const wk_token *id);

#endif /* WK_COLLECTION_WAKE_H */
