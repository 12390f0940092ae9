/*
 * wakuwaku/settings.h — Settings: a named map of byte-string keys to
 * byte-string values, kept in Redis and mirrored by every replica.
 *
 * Redis layout (one cluster slot per settings name):
 *   @@wakuwaku-entity:Settings:{<ns>:<name>}:map        hash: the master copy
 *   @@wakuwaku-entity:Settings:{<ns>:<name>}:version    hash: `version` (a
 *                          decimal counter bumped by every change) and
 *                          `epoch` (32 random hex digits, made by the first
 *                          change after the key was missing)
 *   @@wakuwaku-entity:Settings:{<ns>:<name>}:chan:<db>  Pub/Sub channel (a
 *                          channel name, not a key); <db> is the database
 *                          number, as Pub/Sub is server-wide
 *
 *   wk_settings_put       set key → value, bump, publish (one script)  WRITE
 *   wk_settings_remove    delete key, bump, publish (one script)       WRITE
 *   wk_settings_snapshot  map + version, read consistently in chunks  READ
 *
 * Keys and values are byte strings: any byte, NUL and ':' included, any
 * length from 0 up to Redis's bulk limit (512 MB).
 *
 * The epoch names one history of the version counter. Whatever resets the
 * counter — FLUSHALL, a deleted or evicted version key, a new server —
 * also loses the epoch, and the next change makes a new one; an older
 * copy of the key coming back (a restored backup) brings back a version
 * below the one followers reached. Versions compare only within an epoch.
 *
 * Every change is published on the channel as one binary message carrying
 * the epoch (see wk_settings_change_decode()). A *follower*
 * (wk_settings_follower_start()) keeps a local mirror of one settings map
 * on a thread and connections of its own: it subscribes first, then loads
 * the snapshot, applies changes of its epoch in version order, and
 * reloads after any gap, reconnect or reset (see the follower's rules
 * below), so no change is lost when its subscriber connection drops and
 * no other database's or deployment's change is applied. Local reads
 * (wk_settings_follower_get()) never touch the network.
 *
 * Thread-safety: the queries follow the handle's rule (one thread at a
 * time); a follower's reading functions may be called from any thread.
 *
 * WARNING: change settings only through wk_settings_put()/_remove(). A
 * direct HSET or HDEL on the map publishes nothing and bumps no version:
 * followers will not see it until they next reload. Likewise, removing the
 * map key alone (DEL, or eviction under an allkeys-* maxmemory policy)
 * leaves followers with its entries; the keys have no TTL, so noeviction
 * and volatile-* policies never evict them.
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own, which
 * wakuwaku/entity.h reads alone (WK__ENTITY_MACROS_ONLY). */
#ifndef WAKUWAKU_SETTINGS_ENTITY
#define WAKUWAKU_SETTINGS_ENTITY
#define WK_KIND_SETTINGS "Settings"
/* A Settings entity: a namespace; no parameters. */
#define WK_SETTINGS_ENTITY(ns_) WK__ENTITY(WK_KIND_SETTINGS, ns_, 0, 0, 0, 0)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_SETTINGS_OPS(XX)                                                                        \
    XX(settings, put, WRITE,                                                                       \
       (wk_name name, const void *key, size_t key_len, const void *value, size_t value_len,        \
        int64_t *version),                                                                         \
       "set key to value, bump the version, publish")                                              \
    XX(settings, remove, WRITE,                                                                    \
       (wk_name name, const void *key, size_t key_len, wk_settings_removal *out),                  \
       "delete key; if it was there, bump the version and publish")                                \
    XX(settings, snapshot, READ, (wk_name name, wk_settings_map **out),                            \
       "the whole map and its version (free with wk_settings_map_free())")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_SETTINGS_SCHEMA(KIND, PARAM)                                                            \
    KIND(SETTINGS, "", NO_BODY, WK__SCHEMA_NO_CHECK, NO_FAIR, NO_PARTS)
#endif

#if !defined(WAKUWAKU_SETTINGS_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_SETTINGS_H

#include <wakuwaku/async.h>
#include <wakuwaku/db.h>
#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

/*
 * wk_settings_put — set `key` to `value` in settings `name`, bump the
 * version and publish the change, all in one script (atomic).
 *
 *   p          the processor (a handle's, or a wrapper).
 *   settings   a Settings entity (WK_SETTINGS_ENTITY(ns)).
 *   name       which settings map of the entity.
 *   key, key_len      the key, any bytes (key may be NULL when key_len 0).
 *   value, value_len  the value, any bytes (NULL allowed when value_len 0).
 *   version    OUT, may be NULL: the version this change got.
 *
 * OUT parameters are written when the reply is parsed: at once through a
 * handle, during wk_batch_exec() through a batch (keep them valid until
 * then).
 *
 * Every put is a change (a new version and a message), even when the value
 * is the one already stored.
 *
 * Returns WK_OK; WK_EINVAL (bad entity, name or NULL argument);
 * WK_EDENIED (nothing sent); WK_ECORRUPT (the keys hold something else than
 * a hash and a counter; nothing written); or a connection / server error.
 * After WK_EUNKNOWN the change may or may not have happened. WRITE effect;
 * not retry-safe (a second run would be a second version).
 * Thread-safety: as the processor's handle (one thread at a time).
 */
WK_API int wk_settings_put(wk_processor *p, const wk_entity *settings, wk_name name,
                           const void *key, size_t key_len, const void *value, size_t value_len,
                           int64_t *version);

/* What wk_settings_remove() did. */
typedef struct wk_settings_removal {
    bool removed;    /* the key was there (and is gone now) */
    int64_t version; /* the new version when removed, else the current one
                      * (0 for a map never written) */
} wk_settings_removal;

/*
 * wk_settings_remove — delete `key` from settings `name`; if it was there,
 * bump the version and publish the removal, in one script. Removing an
 * absent key changes nothing and publishes nothing.
 *
 *   out   OUT, may be NULL: see wk_settings_removal.
 *
 * Returns as wk_settings_put(). WRITE effect; not retry-safe.
 */
WK_API int wk_settings_remove(wk_processor *p, const wk_entity *settings, wk_name name,
                              const void *key, size_t key_len, wk_settings_removal *out);

/* Length of an epoch: 32 lowercase hex digits (16 random bytes). */
#define WK_SETTINGS_EPOCH_LEN 32

/* One key → value pair of a snapshot. Both strings are also NUL-terminated
 * (key[key_len] == '\0'), for convenience with text; they may contain NUL. */
typedef struct wk_settings_entry {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
} wk_settings_entry;

/*
 * A copy of a whole settings map at one version: one allocation, freed with
 * wk_settings_map_free(). Entries are sorted by key (bytewise, like
 * memcmp; a prefix sorts first), so two snapshots of equal maps list the
 * same entries in the same order.
 */
typedef struct wk_settings_map {
    int64_t version; /* 0 for a map never written */
    size_t count;
    const wk_settings_entry *entries;
    char epoch[WK_SETTINGS_EPOCH_LEN + 1]; /* the version's epoch; "" for a
                                            * map never written */
} wk_settings_map;

/*
 * wk_settings_snapshot — read the map, its version and epoch: the map as
 * it was at that version.
 *
 * Through a handle (or wrappers around one) the map is read in chunks of
 * about 1000 entries, one short read-only script each (HSCAN plus the
 * version and epoch), so no single command holds the server up for long,
 * whatever the map's size. If a chunk sees another version or epoch than
 * the first one, the map changed meanwhile and the read starts over; after
 * 8 such attempts it fails with WK_ETIMEDOUT. A map read in one chunk
 * (small maps) cannot fail that way. A follower's load does not start
 * over: it repairs a changing read with the change messages.
 *
 * Through a batch (WK_PROCESSOR_DEFERRED) there is one command, so the
 * whole map is read by it — only for a map of at most 1000 entries; a
 * bigger one fails with WK_EINVAL (in wk_batch_exec()) rather than block
 * the server.
 *
 *   out  OUT: a new snapshot, freed by the caller with
 *        wk_settings_map_free(); NULL on failure. Set to NULL at once and
 *        filled when the reply is parsed (in a batch: by wk_batch_exec()).
 *
 * Returns WK_OK; WK_EINVAL; WK_EDENIED; WK_ECORRUPT (the keys hold
 * something else than a hash and a version); WK_ETIMEDOUT (the map
 * changed during every attempt); WK_ENOMEM; or a connection / server
 * error. READ effect; every chunk is retry-safe (re-sent once after a
 * drop). Each query the processor sees is named "settings.snapshot".
 */
WK_API int wk_settings_snapshot(wk_processor *p, const wk_entity *settings, wk_name name,
                                wk_settings_map **out);

/* wk_settings_map_free — free a snapshot. NULL is a harmless no-op. */
WK_API void wk_settings_map_free(wk_settings_map *snap);

/*
 * wk_settings_map_find — the entry of `key` (binary search), or NULL
 * when absent or snap is NULL. Borrowed: valid while the snapshot lives.
 * Thread-safe (a snapshot is immutable).
 */
WK_API const wk_settings_entry *wk_settings_map_find(const wk_settings_map *snap,
                                                     const void *key, size_t key_len);

/* ------------------------------------------------------------------------
 * Change messages
 * ---------------------------------------------------------------------- */

typedef enum wk_settings_op {
    WK_SETTINGS_PUT = 1,   /* key now holds value */
    WK_SETTINGS_REMOVE = 2 /* key is gone; value is empty */
} wk_settings_op;

/* One change: a published message, or a change a follower reports. The
 * pointers are borrowed (see the function that hands it out). */
typedef struct wk_settings_change {
    wk_settings_op op;
    int64_t version;
    const char *key;
    size_t key_len;
    const char *value; /* NULL for WK_SETTINGS_REMOVE */
    size_t value_len;
    char epoch[WK_SETTINGS_EPOCH_LEN + 1]; /* the epoch of `version` */
} wk_settings_change;

/*
 * wk_settings_change_decode — decode a message published on the channel.
 *
 * The format (binary, unambiguous for any bytes) is an op byte followed by
 * netstrings ("<decimal length>:<bytes>,"):
 *
 *     'P' netstring(epoch) netstring(version) netstring(key) netstring(value)
 *     'R' netstring(epoch) netstring(version) netstring(key)
 *
 * e.g. put "a:b" = "x\0y" at version 7 of epoch 0123…cdef is
 *     P32:0123456789abcdef0123456789abcdef,1:7,3:a:b,3:x\0y,
 * The epoch is 32 lowercase hex digits; the version is decimal digits
 * (≥ 1); lengths have no leading zeros. A message applies to a map only
 * if its epoch is the map's (compare with wk_settings_map.epoch): the
 * epoch is not a secret (every message shows it), so it tells histories
 * apart but does not authenticate a publisher — restrict PUBLISH on the
 * channels with Redis ACLs for that.
 *
 *   msg, len   the message (NULL only with len 0).
 *   change     OUT: key and value point into `msg` (borrowed from it);
 *              the epoch is copied.
 *
 * Returns WK_OK, or WK_ECORRUPT for anything not exactly in this format
 * (trailing bytes included); WK_EINVAL if change is NULL. Thread-safe; no
 * allocation.
 */
WK_API int wk_settings_change_decode(const void *msg, size_t len, wk_settings_change *change);

/* ------------------------------------------------------------------------
 * Follower: a local mirror kept in sync on a thread of its own
 * ---------------------------------------------------------------------- */

typedef struct wk_settings_follower wk_settings_follower;

/*
 * Change callback: called on the follower's own thread after each change
 * reached the mirror (so wk_settings_follower_get() from inside it already
 * sees the change). `change` and its bytes are borrowed for the duration of
 * the call only. When a snapshot is (re)loaded, the callback receives the
 * difference with the previous mirror as PUT/REMOVE changes carrying the
 * snapshot's version and epoch (nothing for keys whose value did not
 * change); the first load at start-up reports no changes. After a reset
 * the versions start again from a lower number with a new epoch.
 *
 * WARNING: the callback runs on the follower thread and holds it up: keep it
 * short, never block on something that waits for the follower, and never
 * call wk_settings_follower_halt(), _free() or _stop() from inside it. It must not call
 * longjmp() or throw.
 */
typedef void (*wk_settings_change_fn)(void *ctx, const wk_settings_change *change);

/*
 * Options of wk_settings_follower_start(). Start from
 * WK_SETTINGS_FOLLOWER_OPTIONS_INIT.
 *
 *   db            required: how to connect, and with what capability (READ
 *                 on the Settings entity is enough). The follower opens its
 *                 own handle and its own subscriber connection from these;
 *                 strings are copied during the call.
 *   settings      required: the Settings entity (kind and ns are copied).
 *   name          which settings map (bytes copied).
 *   on_change     optional callback (see wk_settings_change_fn), with `ctx`.
 *   keepalive_ms  after this long without any traffic the subscriber sends
 *                 a PING; no answer within db->command_timeout_ms counts as
 *                 a dropped connection. 0 disables; default 5000.
 *   retry_max_ms  reconnect attempts back off from 50 ms, doubling up to
 *                 this (> 0; default 2000).
 *   check_ms      every this long the follower reads the map's version and
 *                 epoch (one O(1) read-only script) and reloads if they
 *                 are not the mirror's: a reset that no change follows
 *                 (FLUSHALL, a deleted or restored version key) shows no
 *                 message, so this bounds how long the mirror can serve a
 *                 wiped map. It also reloads when the server's version
 *                 stayed ahead of the mirror's from one check to the next
 *                 (a version bumped without a message). On a
 *                 redis-sentinel:// handle it first asks ROLE: a node
 *                 that turned replica drops both connections, and the
 *                 follower loads from the primary the sentinels name.
 *                 0 disables; default 5000.
 */
typedef struct wk_settings_follower_options {
    const wk_db_options *db;
    const wk_entity *settings;
    wk_name name;
    wk_settings_change_fn on_change;
    void *ctx;
    int keepalive_ms;
    int retry_max_ms;
    int check_ms;
} wk_settings_follower_options;

#define WK_SETTINGS_FOLLOWER_OPTIONS_INIT                                                  \
    {.db = NULL, .settings = NULL, .name = {WK_NAME_BYTES, NULL, 0, 0, 0}, .on_change = NULL, \
     .ctx = NULL, .keepalive_ms = 5000, .retry_max_ms = 2000, .check_ms = 5000}

/*
 * wk_settings_follower_start — start following one settings map.
 *
 * The follower's rules, for a message on its channel (the channel carries
 * its database's number, so other databases' changes never arrive):
 *   - of the mirror's epoch and version + 1: applied;
 *   - of the mirror's epoch, version further ahead (a change was missed),
 *     or not decodable: reload;
 *   - of another epoch (a reset, another deployment's message relayed to
 *     this server, a forged one), or of a version the mirror already has:
 *     never applied; the follower reads the version and epoch (O(1)) and
 *     reloads if they are not the mirror's (the map was reset or restored),
 *     else ignores the message.
 * Besides, every check_ms it compares the version and epoch (see the
 * options). So a reset followed by a change is noticed at that change; a
 * reset alone within check_ms (plus one load).
 *
 * A load reads the map in chunks of about 1000 entries (each with the
 * version and epoch, as wk_settings_snapshot()) while the subscription
 * buffers the changes made meanwhile; chunks read at different versions
 * are then brought to the last chunk's version with those changes, so a
 * load completes even while writers keep changing the map. A load starts
 * over (up to 4 times, then the follower backs off and syncs again) only
 * when the epoch changed under it or a change message is missing.
 *
 * Before returning, on the caller's thread, it connects, subscribes and
 * loads the first snapshot, so the mirror is complete when it returns and
 * configuration errors show at once. Then a thread of the follower's own
 * keeps the mirror in sync, reconnecting and reloading as needed for as
 * long as the follower runs (connection failures after start are retried
 * forever; see wk_settings_follower_stats()).
 *
 * REDIS CLUSTER: on a cluster URL the subscriber is a plain connection to
 * the primary of the settings' slot (where the scripts publish), found by
 * a head read through the follower's handle before each subscription (the
 * handle's slot map, which that read brings up to date), not a node of the
 * URL: the follower goes on when the URL's nodes are gone. When a periodic
 * check's head read leaves the map naming another node for the slot (a
 * failover, the slot moved) the follower subscribes there and loads.
 *
 *   out   OUT: the follower; NULL on failure.
 *   opts  see wk_settings_follower_options.
 *   err   OUT, may be NULL: a message on failure (at most errlen bytes,
 *         NUL-terminated). Passwords never appear.
 *
 * Returns WK_OK; WK_EINVAL (bad options, entity or name); WK_EDENIED (the
 * capability does not grant READ on the entity); WK_EIO, WK_ETIMEDOUT,
 * WK_EAUTH (cannot connect); WK_ECORRUPT (the stored map is not a
 * settings map); WK_ENOMEM. End it with wk_settings_follower_halt() and
 * wk_settings_follower_free().
 */
WK_API int wk_settings_follower_start(wk_settings_follower **out,
                                      const wk_settings_follower_options *opts, char *err,
                                      size_t errlen);

/*
 * wk_settings_follower_start_async — the same follower on an event loop:
 * `p` is an event-loop handle's processor, wk_async_with(a, done, arg)
 * (wakuwaku/async.h, 10.). Nothing blocks the loop and no thread is made:
 * the subscription is a hidden connection of the handle (its settings and
 * capability, set up through the loop, its socket in the handle's epoll
 * set: the loop still watches one descriptor), the loads and checks are
 * queries on the handle's connection, and the follower's every step —
 * the change callback included — runs from wk_async_process(). The rules
 * are the thread form's (above): subscribe first, then load in chunks
 * (the changes made meanwhile applied from the queued messages); apply
 * changes of the mirror's epoch in version order; reload after a gap, a
 * lost or killed subscriber connection (a new one, then a load), or a
 * message of another epoch whose check finds the server's epoch or
 * version changed; the check every check_ms; a PING after keepalive_ms
 * without traffic (unanswered within the command timeout: a new
 * subscriber). opts->db is not used (the handle's settings are).
 * Through Sentinel it keeps no failover notice of its own: it follows a
 * failover when the old primary closes its subscriber, or at the next
 * check, which asks ROLE as the thread form's does: a node that turned
 * replica drops the handle's connection, and the follower subscribes and
 * loads again from the primary the sentinels name. wk_async_pending() counts the follower as one while its start or
 * a wait (wk_settings_follower_wait_async()) is outstanding, and its loads
 * and checks as queries; they are the handle's own (a wrapper around the
 * processor sees none of them).
 *
 * *out is written at once; the mirror is loaded when `done(a, status,
 * msg, arg)` runs (once, from wk_async_process() or wk_async_close()):
 * WK_OK, or the first sync's failure (WK_EIO, WK_ETIMEDOUT, WK_EAUTH:
 * cannot connect; WK_ECORRUPT; WK_EIO when the handle closed first) —
 * the follower is then halted. After the first sync, failures are retried
 * forever with the backoff of the options (see stats). Closing the handle
 * halts the follower (readable, stats.synced false): free it after.
 * _get(), _get_dup(), _snapshot(), _version(), _lag() and _stats() work
 * unchanged (no I/O); _wait() with a timeout would block the loop that
 * advances the mirror: on a loop follower only timeout_ms 0 (a check) is
 * accepted, else WK_EINVAL — wk_settings_follower_wait_async() is its
 * form for the loop. Halt and free it from the loop's thread; from its
 * callbacks too (start, change, wait: a free there is finished when the
 * follower's step returns). A follower halted before its start completed
 * never calls `done`. On a cluster handle the subscriber is a plain
 * connection to the primary of the settings' slot (the handle's slot map
 * names it); after a failover or a slot move it moves there at the next
 * check whose read the handle saw redirected.
 *
 * Returns WK_OK; WK_EINVAL (bad options, entity or name; p not an
 * event-loop handle's processor);
 * WK_EDENIED (the handle's capability does not grant READ on the entity;
 * nothing was sent); WK_EIO (the handle is closing); WK_ENOMEM.
 */
WK_API int wk_settings_follower_start_async(wk_settings_follower **out, wk_processor *p,
                                            const wk_settings_follower_options *opts, char *err,
                                            size_t errlen);

/*
 * LIFECYCLE: start / halt / free. wk_settings_follower_start() creates the
 * follower and starts its thread; wk_settings_follower_halt() stops the
 * thread and never frees; wk_settings_follower_free() frees (halting first
 * if need be). wk_settings_follower_stop(), which halts AND frees, is the
 * old name of _free(): a deprecated alias kept for one release (0.1.x),
 * with unchanged behaviour. (The library's rule is start/stop for threads,
 * where stopping never frees; `stop` keeps its 0.1 meaning here until the
 * alias is gone, so the verb that only stops is `halt` meanwhile.)
 */

/*
 * wk_settings_follower_halt — stop the thread (waits for it, and so for a
 * running callback) and close its connections; the follower is not freed.
 * The mirror stays as it was: _get(), _get_dup(), _snapshot(), _version()
 * and _stats() keep answering from it (stats.synced is false), and a
 * _wait() for a version not reached returns at once with *reached false.
 * A second call does nothing. NULL is a harmless no-op. Call it from any
 * thread but the follower's own (never from the change callback). A thread
 * blocked in the middle of a reconnect finishes that step first, which
 * takes at most about the connect plus the command timeout of the options.
 */
WK_API void wk_settings_follower_halt(wk_settings_follower *f);

/*
 * wk_settings_follower_free — halt the follower if it still runs (as
 * wk_settings_follower_halt()), then free it and its mirror. Call it once,
 * when no other thread uses the follower, never from the change callback.
 * NULL is a harmless no-op.
 */
WK_API void wk_settings_follower_free(wk_settings_follower *f);

/*
 * wk_settings_follower_stop — DEPRECATED alias of
 * wk_settings_follower_free(), kept for one release: stops the thread,
 * closes the connections and frees the follower. New code: _halt() when
 * the follower should stop but stay readable, _free() to end it.
 */
WK_API void wk_settings_follower_stop(wk_settings_follower *f);

/*
 * wk_settings_follower_get — look `key` up in the local mirror; never
 * touches the network.
 *
 *   buf, buf_len  where the value is copied: the first min(buf_len,
 *                 *value_len) bytes. buf may be NULL when buf_len is 0
 *                 (to learn the length first).
 *   value_len     OUT, may be NULL: the value's full length (0 when not
 *                 found). A value longer than buf_len was truncated.
 *   found         OUT, required: whether the key is in the mirror.
 *
 * Returns WK_OK or WK_EINVAL (f or found NULL, key NULL with key_len > 0).
 * Thread-safe: callable from any thread, concurrently with the follower
 * (the mirror is guarded by a reader-writer lock; the value is copied out
 * under it, so nothing borrowed outlives the call).
 */
WK_API int wk_settings_follower_get(wk_settings_follower *f, const void *key, size_t key_len,
                                    void *buf, size_t buf_len, size_t *value_len, bool *found);

/*
 * wk_settings_follower_get_dup — as wk_settings_follower_get(), but the
 * value is copied into a new allocation: *value gets malloc()ed bytes
 * (value_len of them plus a terminating NUL) that the caller frees with
 * free(); NULL when not found. Returns WK_OK, WK_EINVAL or WK_ENOMEM.
 * Thread-safe as wk_settings_follower_get().
 */
WK_API int wk_settings_follower_get_dup(wk_settings_follower *f, const void *key,
                                        size_t key_len, char **value, size_t *value_len,
                                        bool *found);

/*
 * wk_settings_follower_snapshot — a copy of the whole mirror and its
 * version, in the same form as wk_settings_snapshot() (sorted entries);
 * free it with wk_settings_map_free(). Never touches the network.
 * Returns WK_OK, WK_EINVAL or WK_ENOMEM (*out NULL on failure).
 * Thread-safe as wk_settings_follower_get().
 */
WK_API int wk_settings_follower_snapshot(wk_settings_follower *f, wk_settings_map **out);

/* wk_settings_follower_version — the mirror's version (0 when the map was
 * never written). It goes down when the map was reset (a new epoch).
 * Thread-safe; returns -1 for NULL. */
WK_API int64_t wk_settings_follower_version(wk_settings_follower *f);

/* wk_settings_follower_lag — how many versions the mirror was behind the
 * server at the follower's last check of the server's version (periodic,
 * and after a message it did not apply), less the changes applied since:
 * 0 when caught up. Messages alone never raise it (they may be forged).
 * Thread-safe; returns -1 for NULL. */
WK_API int64_t wk_settings_follower_lag(wk_settings_follower *f);

/*
 * wk_settings_follower_wait — wait until the mirror's version is ≥
 * `version`, or `timeout_ms` passed (0: just check; negative: wait
 * without limit). *reached (required) says which; when reached, the
 * change callbacks of every version up to `version` have returned.
 * Returns WK_OK or WK_EINVAL. Thread-safe; meant for tests and for
 * read-your-writes (wait for the version your put returned). Versions
 * compare within one epoch: if the map is reset meanwhile, the mirror may
 * stay below `version` and the wait times out. Do not call
 * it from the change callback (the mirror cannot advance while the
 * callback runs).
 */
WK_API int wk_settings_follower_wait(wk_settings_follower *f, int64_t version, int timeout_ms,
                                     bool *reached);

/*
 * wk_settings_follower_wait_async — the wait of a follower started with
 * wk_settings_follower_start_async(), without blocking the loop:
 * `done(a, status, msg, arg)` runs once, from wk_async_process() (never
 * inside this call), when the mirror's version is ≥ `version` (WK_OK;
 * the change callbacks of every version up to it have returned) or when
 * `timeout_ms` passed (WK_ETIMEDOUT; negative: no limit); WK_EIO when
 * the handle closes first (from wk_async_close()). Versions compare
 * within one epoch, as for _wait(). For read-your-writes: wait in the
 * callback of your put for the version it returned. A follower halted or
 * freed drops its waits: their callbacks never run. Returns WK_OK,
 * WK_EINVAL (f NULL or not a loop follower, done NULL), WK_EIO (the
 * follower is halted) or WK_ENOMEM; the callback runs only after WK_OK.
 * From the loop's thread.
 */
WK_API int wk_settings_follower_wait_async(wk_settings_follower *f, int64_t version,
                                           int timeout_ms, wk_async_done_fn done, void *arg);

/* Counters and health of a follower (wk_settings_follower_stats()). */
typedef struct wk_settings_stats {
    int64_t version;      /* the mirror's version */
    bool synced;          /* subscribed and mirror loaded; false while
                           * reconnecting (the mirror is then stale) */
    uint64_t snapshots;   /* snapshots loaded, the first one included */
    uint64_t applied;     /* changes applied from messages */
    uint64_t ignored;     /* messages of the mirror's epoch with a version
                           * ≤ the mirror's */
    uint64_t gaps;        /* reloads because a version was skipped, a
                           * message did not decode, or the server's
                           * version stayed ahead of the mirror's */
    uint64_t reconnects;  /* subscriber connections opened after the first */
    int last_status;      /* status of the last failure; WK_OK if none */
    uint64_t foreign;     /* messages of another epoch (never applied) */
    uint64_t checks;      /* reads of the version and epoch (periodic, or
                           * after a message that was not applied) */
    uint64_t resets;      /* reloads because the server's epoch or version
                           * was no longer the mirror's (a reset, FLUSHALL,
                           * a restored version key) */
    uint64_t caught_up;   /* changes made during loads, applied to them
                           * from the queued messages */
} wk_settings_stats;

/*
 * wk_settings_follower_stats — copy the follower's counters into *stats;
 * `errmsg` (may be NULL) gets the last failure's message (at most errlen
 * bytes, NUL-terminated; "" if none). Returns WK_OK or WK_EINVAL.
 * Thread-safe.
 */
WK_API int wk_settings_follower_stats(wk_settings_follower *f, wk_settings_stats *stats,
                                      char *errmsg, size_t errlen);

WK__OPS(WK_SETTINGS_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_SETTINGS_H */
