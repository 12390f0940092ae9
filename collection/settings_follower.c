/*
 * collection/settings_follower.c — the Settings follower: a local mirror of
 * one settings map, kept in sync by a thread of its own. The rules — how
 * a message, a check's head and a load's chunks are judged, the catch-up
 * and the install — are here as steps that never wait
 * (wk__sf_judge_message, wk__sf_load_chunk, wk__sf_catch_up, …:
 * collection/settings_follower_internal.h), shared with the event-loop
 * form (settings_follower_loop.c); the thread only waits between them.
 *
 * The follower owns two connections, both made from the caller's options:
 * a wk_db handle (for loads and checks, through dispatch and so through
 * the capability check) and a subscriber connection (core/subscriber.h) on
 * the channel of its database. Its thread runs this loop:
 *
 *   1. sync: open the subscriber, SUBSCRIBE and wait for the confirmation,
 *      then load the map — in that order, so every change newer than the
 *      load is already on its way to us — and replace the mirror;
 *   2. read messages: of the mirror's epoch, version + 1 is applied, a
 *      version further ahead (a gap) or a message that does not decode
 *      reloads; another epoch, or a version ≤ the mirror's, is never
 *      applied and makes the follower check the version and epoch, which
 *      reloads if they are not the mirror's (a reset, FLUSHALL, a restored
 *      version key) and otherwise ignores the message (forged, relayed from
 *      another deployment, or old news from before the last load);
 *   3. every check_ms, the same check, and a reload if the server's
 *      version stayed ahead of the mirror's since the previous one;
 *   4. a dropped subscriber or a failed load goes back to 1, with a
 *      backoff between failed attempts.
 *
 * A load reads the map in chunks (wk__settings_chunk: HSCAN plus version
 * and epoch, atomically) into a fresh table, tagging each entry with the
 * version of the chunk it came from, while the messages published
 * meanwhile queue up. The chunks may come from different versions v1 ≤ …
 * ≤ vN; every change in (v1, vN] is in the queue, in order (we subscribed
 * before the first chunk). Applying each change at version u to its key,
 * unless the key was read at a version ≥ u, gives exactly the map at vN:
 * a key read at version s is right at s, and every later change to it is
 * applied; a key absent from the scan was absent at some moment of it (HSCAN
 * returns every key present throughout), so each change that made it what
 * it is at vN is after v1 and applied. Only an epoch change between chunks
 * or a missing message starts a load over.
 *
 * The mirror is a hash table (SipHash keyed per follower, so keys cannot be
 * chosen to collide) guarded by a pthread rwlock: readers on any thread copy
 * values out under the read lock; only the follower thread writes. Waiting
 * for a version uses a mutex and a condition variable next to the stats.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "collection/common.h"
#include "core/cluster.h"
#include "core/core_internal.h"
#include "core/subscriber.h"

#include <wakuwaku/settings.h>

#include "collection/bytes_map.h"
#include "collection/settings_internal.h"
#include "collection/settings_follower_internal.h"

#define READ_SLICE_MS 60000 /* a stop request wakes the thread before this */

/* ------------------------------------------------------------------------
 * The follower
 * ---------------------------------------------------------------------- */

/* A check read version v on the server; `reset`: of a new epoch, so what
 * was seen before does not count. */
static void saw(wk_settings_follower *f, int64_t v, bool reset)
{
    pthread_mutex_lock(&f->mu);
    if (reset || v > f->seen)
        f->seen = v;
    pthread_mutex_unlock(&f->mu);
}

void wk__sf_record_failure(wk_settings_follower *f, int status, const char *msg)
{
    pthread_mutex_lock(&f->mu);
    f->stats.synced = false;
    f->stats.last_status = status;
    snprintf(f->errmsg, sizeof(f->errmsg), "%s", msg);
    pthread_mutex_unlock(&f->mu);
}

/* Counters bumped under `mu`. */
enum counter { C_APPLIED, C_IGNORED, C_GAPS, C_FOREIGN, C_CHECKS, C_RESETS, C_CAUGHT_UP };

static void count(wk_settings_follower *f, enum counter c)
{
    pthread_mutex_lock(&f->mu);
    wk_settings_stats *s = &f->stats;
    uint64_t *n[] = {&s->applied, &s->ignored, &s->gaps,     &s->foreign,
                     &s->checks,  &s->resets,  &s->caught_up};
    (*n[c])++;
    pthread_mutex_unlock(&f->mu);
}

/* The mirror reached `version` (waiters wake up). */
static void notify(wk_settings_follower *f, int64_t version)
{
    pthread_mutex_lock(&f->mu);
    f->stats.version = version;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void report(wk_settings_follower *f, wk_settings_op op, int64_t version, const wk__bytes_item *it,
                   const char *key, size_t klen)
{
    if (!f->on_change)
        return;
    wk_settings_change c = {.op = op, .version = version};
    memcpy(c.epoch, f->epoch, sizeof(c.epoch));
    if (it) {
        c.key = wk__bytes_item_key(it);
        c.key_len = it->key_len;
        c.value = wk__bytes_item_value(it);
        c.value_len = it->value_len;
    } else {
        c.key = key;
        c.key_len = klen;
    }
    f->on_change(f->ctx, &c);
}

/* --- the queue of messages read during a load --- */

int wk__sf_queue_push(wk_settings_follower *f, const char *msg, size_t len)
{
    if (len > SIZE_MAX - sizeof(queued))
        return WK_ENOMEM;
    queued *q = malloc(sizeof(queued) + len);
    if (!q)
        return WK_ENOMEM;
    q->next = NULL;
    q->len = len;
    if (len)
        memcpy(q->data, msg, len);
    if (f->queue_tail)
        f->queue_tail->next = q;
    else
        f->queue_head = q;
    f->queue_tail = q;
    return WK_OK;
}

/* Take the first message off the queue; the caller frees it. */
queued *wk__sf_queue_pop(wk_settings_follower *f)
{
    queued *q = f->queue_head;
    if (q) {
        f->queue_head = q->next;
        if (!f->queue_head)
            f->queue_tail = NULL;
    }
    return q;
}

void wk__sf_queue_clear(wk_settings_follower *f)
{
    queued *q;
    while ((q = wk__sf_queue_pop(f)))
        free(q);
}

/* wk__subscriber_next() on the follower's subscriber, woken by its wake
 * pipe; a failure is recorded. */
static int next_message(wk_settings_follower *f, int timeout_ms, const char **msg, size_t *len,
                        bool *got)
{
    int rc = wk__subscriber_next(f->sub, timeout_ms, f->wake[0], msg, len, got);
    if (rc)
        wk__sf_record_failure(f, rc, wk__subscriber_errmsg(f->sub));
    return rc;
}

/* Move what the subscriber already received to the queue, or wait up to
 * timeout_ms for one message (0: no waiting). On failure the reason is
 * recorded. */
static int receive(wk_settings_follower *f, int timeout_ms)
{
    for (;;) {
        const char *msg;
        size_t len;
        bool got;
        int rc = next_message(f, timeout_ms, &msg, &len, &got);
        if (rc)
            return rc;
        if (!got)
            return WK_OK;
        if (wk__sf_queue_push(f, msg, len) != WK_OK) {
            wk__sf_record_failure(f, WK_ENOMEM, "settings follower: out of memory queueing a change");
            return WK_ENOMEM;
        }
        if (timeout_ms > 0)
            return WK_OK;
    }
}

/* --- loading --- */

int wk__sf_load_entry(void *ctx, const wk__settings_head *head, const char *k, size_t klen,
                      const char *v, size_t vlen)
{
    wk__sf_load *l = ctx;
    if (!l->f)
        return WK_OK; /* orphaned: nobody will read it */
    /* Chunks come in order, so a later copy of a key is as new or newer. */
    return wk__bytes_map_put(&l->fresh, wk__bytes_map_hash(l->f->sipkey, k, klen), k, klen, v,
                             vlen, head->version);
}

int wk__sf_load_begin(wk_settings_follower *f, wk__sf_load *l)
{
    *l = (wk__sf_load){.f = f, .cursor = "0"};
    if (wk__bytes_map_init(&l->fresh, 16) != WK_OK) {
        wk__sf_record_failure(f, WK_ENOMEM, "settings follower: out of memory loading the map");
        return WK_ENOMEM;
    }
    return WK_OK;
}

int wk__sf_load_chunk(wk__sf_load *l, bool *done, bool *again)
{
    *done = *again = false;
    if (strcmp(l->cursor, "0") == 0) {
        l->first = l->prev = l->head;
    } else if (strcmp(l->head.epoch, l->first.epoch) != 0 || l->head.version < l->prev.version) {
        /* A reset, or an older copy of the version key restored. */
        *again = true;
        wk__sf_record_failure(l->f, WK_ETIMEDOUT,
                              "settings follower: the map was reset during a load");
        return WK_ETIMEDOUT;
    }
    l->prev = l->head;
    memcpy(l->cursor, l->next, sizeof(l->cursor));
    *done = strcmp(l->cursor, "0") == 0;
    l->expected = l->first.version + 1;
    return WK_OK;
}

int wk__sf_missing(wk__sf_load *l)
{
    char msg[160];
    snprintf(msg, sizeof(msg),
             "settings follower: the change of version %lld never arrived during a load",
             (long long)l->expected);
    wk__sf_record_failure(l->f, WK_ETIMEDOUT, msg);
    return WK_ETIMEDOUT;
}

/*
 * Bring the scanned table from the versions its chunks were read at to
 * the last chunk's version, with the queued changes of the first chunk's
 * epoch in (first, last]. Changes up to `last` are dropped once used (or
 * when the scan already had them); messages of another epoch or
 * undecodable ones met before `last` was reached were published before
 * the last chunk was read, which already shows their effect or lack of
 * it: dropped too. What comes after stays queued for the normal rules.
 */
int wk__sf_catch_up(wk__sf_load *l, bool *wait, bool *again)
{
    wk_settings_follower *f = l->f;
    const char *epoch = l->first.epoch;
    int64_t last = l->head.version;
    *wait = *again = false;
    for (;;) {
        queued *q = f->queue_head;
        if (!q) {
            *wait = l->expected <= last;
            return WK_OK;
        }
        wk_settings_change c;
        bool ours =
            wk_settings_change_decode(q->data, q->len, &c) == WK_OK && strcmp(c.epoch, epoch) == 0;
        if (ours && c.version < l->expected) { /* in the table already */
            free(wk__sf_queue_pop(f));
            continue;
        }
        if (l->expected > last)
            return WK_OK; /* the rest is for the normal rules */
        if (!ours) {
            free(wk__sf_queue_pop(f));
            continue;
        }
        if (c.version > l->expected) {
            *again = true;
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "settings follower: the change of version %lld is missing (got %lld) "
                     "during a load",
                     (long long)l->expected, (long long)c.version);
            wk__sf_record_failure(f, WK_ETIMEDOUT, msg);
            return WK_ETIMEDOUT;
        }
        uint64_t h = wk__bytes_map_hash(f->sipkey, c.key, c.key_len);
        const wk__bytes_item *it = wk__bytes_map_find(&l->fresh, h, c.key, c.key_len);
        if (!it || it->version < c.version) {
            if (c.op == WK_SETTINGS_PUT) {
                if (wk__bytes_map_put(&l->fresh, h, c.key, c.key_len, c.value, c.value_len,
                                      c.version)) {
                    wk__sf_record_failure(f, WK_ENOMEM,
                                          "settings follower: out of memory applying a change");
                    return WK_ENOMEM;
                }
            } else if (it) {
                wk__bytes_map_remove(&l->fresh, h, c.key, c.key_len);
            }
        }
        l->expected++;
        count(f, C_CAUGHT_UP);
        free(wk__sf_queue_pop(f));
    }
}

/* The thread's catch-up: wait for the changes not received yet, up to the
 * command timeout. *again: a change is missing. */
static int catch_up(wk_settings_follower *f, wk__sf_load *l, bool *again)
{
    int64_t deadline = wk__boot_ms() + f->command_timeout_ms;
    for (;;) {
        bool wait;
        int rc = wk__sf_catch_up(l, &wait, again);
        if (rc || !wait)
            return rc;
        int64_t left = deadline - wk__boot_ms();
        if (left <= 0 || atomic_load(&f->stop)) {
            *again = !atomic_load(&f->stop);
            return wk__sf_missing(l);
        }
        rc = receive(f, (int)left);
        if (rc)
            return rc;
    }
}

/*
 * Replace the mirror by the load's table (taken over) at its epoch and
 * version; report the difference to the callback (unless `initial`).
 */
void wk__sf_load_install(wk__sf_load *l, bool initial)
{
    wk_settings_follower *f = l->f;
    const char *epoch = l->first.epoch;
    int64_t version = l->head.version;
    pthread_rwlock_wrlock(&f->lock);
    wk__bytes_map old = f->mirror;
    f->mirror = l->fresh;
    f->mirror_version = version;
    snprintf(f->epoch, sizeof(f->epoch), "%s", epoch);
    pthread_rwlock_unlock(&f->lock);
    l->fresh = (wk__bytes_map){0};
    f->behind = 0;

    /* Only this thread writes the mirror, so both tables stay stable while
     * the callback reads them without the lock. */
    const wk__bytes_map *now = &f->mirror;
    if (!initial && f->on_change) {
        for (size_t b = 0; b < now->nbuckets; b++) {
            for (const wk__bytes_item *it = now->buckets[b]; it; it = it->next) {
                const wk__bytes_item *was = wk__bytes_map_find(&old, it->hash, wk__bytes_item_key(it), it->key_len);
                if (!was || was->value_len != it->value_len ||
                    memcmp(wk__bytes_item_value(was), wk__bytes_item_value(it), it->value_len) != 0)
                    report(f, WK_SETTINGS_PUT, version, it, NULL, 0);
            }
        }
        for (size_t b = 0; b < old.nbuckets; b++) {
            for (const wk__bytes_item *it = old.buckets[b]; it; it = it->next) {
                if (!wk__bytes_map_find(now, it->hash, wk__bytes_item_key(it), it->key_len))
                    report(f, WK_SETTINGS_REMOVE, version, NULL, wk__bytes_item_key(it), it->key_len);
            }
        }
    }
    wk__bytes_map_free(&old);

    pthread_mutex_lock(&f->mu);
    f->stats.version = version;
    f->stats.synced = true;
    f->stats.snapshots++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void wk__sf_load_end(wk__sf_load *l)
{
    wk__bytes_map_free(&l->fresh);
    l->fresh = (wk__bytes_map){0};
}

/* One load: scan in chunks, catch up, install. *again: worth starting
 * over (the epoch changed under the scan, or a change is missing). */
static int load_once(wk_settings_follower *f, bool initial, bool *again)
{
    *again = false;
    wk__sf_load l;
    int rc = wk__sf_load_begin(f, &l);
    for (bool done = false; !rc && !done;) {
        if (atomic_load(&f->stop)) {
            rc = WK_EIO;
            wk__sf_record_failure(f, rc, "settings follower: stopped during a load");
            break;
        }
        rc = wk__settings_chunk(wk_db_processor(f->db), &f->held.entity, &f->held.name, l.cursor,
                                &l.head, l.next, wk__sf_load_entry, &l);
        if (rc)
            wk__sf_record_failure(f, rc, wk_db_errmsg(f->db));
        else
            rc = wk__sf_load_chunk(&l, &done, again);
        if (!rc)
            rc = receive(f, 0); /* keep the server's buffer for us short */
    }
    if (!rc)
        rc = catch_up(f, &l, again);
    if (!rc)
        wk__sf_load_install(&l, initial);
    wk__sf_load_end(&l);
    return rc;
}

/* Load the map, starting over a few times if the epoch changes under the
 * load or a change goes missing. On failure the reason is recorded. */
static int reload(wk_settings_follower *f, bool initial)
{
    int rc = WK_OK;
    for (int i = 0; i < WK__SF_LOAD_ATTEMPTS; i++) {
        bool again;
        rc = load_once(f, initial, &again);
        if (!rc || !again)
            break;
    }
    return rc;
}

static void drop_subscriber(wk_settings_follower *f)
{
    wk__subscriber_close(f->sub);
    f->sub = NULL;
    pthread_mutex_lock(&f->mu);
    f->stats.synced = false;
    pthread_mutex_unlock(&f->mu);
}

/* A reload while subscribed; a failure drops the subscriber (the loop
 * syncs again). */
static int reload_or_drop(wk_settings_follower *f)
{
    int rc = reload(f, false);
    if (rc)
        drop_subscriber(f);
    return rc;
}

const char *wk__sf_slot_owner(const wk_settings_follower *f, const wk_db *db, int *port)
{
    const wk__cluster *c = db->conn->cluster;
    uint16_t n = c ? c->slot_node[wk__key_slot(f->chan, f->chan_len)] : WK__NO_NODE;
    return n == WK__NO_NODE ? NULL : wk__cluster_node_host(db, n, port);
}

/* On a cluster handle the subscriber goes to the primary of the
 * settings' slot — where the scripts publish — found by a head read
 * through the handle first (routed by its map, which a MOVED brings up to
 * date: a failover, a moved slot). WK_OK with f->sub_host set, or with it
 * empty (no cluster handle: the URL's server), or the failure. */
static int locate(wk_settings_follower *f, char *err, size_t errlen)
{
    f->sub_host[0] = '\0';
    if (!f->db->conn->cluster)
        return WK_OK;
    wk__settings_head head;
    int rc = wk__settings_read_head(wk_db_processor(f->db), &f->held.entity, &f->held.name, &head);
    if (rc)
        return wk__errbuf_set(err, errlen, rc, "%s", wk_db_errmsg(f->db));
    const char *host = wk__sf_slot_owner(f, f->db, &f->sub_port);
    if (!host)
        return wk__errbuf_set(err, errlen, WK_EIO, "settings follower: no node serves slot %u",
                              wk__key_slot(f->chan, f->chan_len));
    wk__copy_text(f->sub_host, sizeof(f->sub_host), host);
    return WK_OK;
}

bool wk__sf_owner_moved(const wk_settings_follower *f, const wk_db *db, const char *host,
                        int port)
{
    int now_port = 0;
    const char *now = wk__sf_slot_owner(f, db, &now_port);
    return now && (now_port != port || strcmp(now, host) != 0);
}

/* Step 1 of the loop: subscribe, then load. */
static int sync_mirror(wk_settings_follower *f, bool initial)
{
    drop_subscriber(f);
    wk__sf_queue_clear(f); /* the load covers whatever an old subscription left */
    char err[256];
    int rc = locate(f, err, sizeof(err));
    if (!rc)
        rc = f->sub_host[0] ? wk__subscriber_open_at(&f->sub, f->db, f->sub_host, f->sub_port,
                                                     f->keepalive_ms, err, sizeof(err))
                            : wk__subscriber_open(&f->sub, f->db, f->keepalive_ms, err,
                                                  sizeof(err));
    if (rc) {
        wk__sf_record_failure(f, rc, err);
        return rc;
    }
    wk__sf_subscribing(f);
    rc = wk__subscriber_subscribe(f->sub, f->chan, f->chan_len);
    if (rc) {
        wk__sf_record_failure(f, rc, wk__subscriber_errmsg(f->sub));
        drop_subscriber(f);
        return rc;
    }
    rc = reload(f, initial);
    if (rc)
        drop_subscriber(f);
    f->next_check_ms = wk__boot_ms() + f->check_ms;
    return rc;
}

/*
 * Compare the server's version and epoch with the mirror's: reload when
 * the epoch differs or the version went down (a reset or a restore), or —
 * `periodic` only — when the server's version was already ahead at the
 * last check and the mirror has not caught up since (a change without a
 * message). Returns WK_OK, or a failure after which the subscriber was
 * dropped.
 */
wk__sf_verdict wk__sf_judge_head(wk_settings_follower *f, const wk__settings_head *head,
                                 bool periodic)
{
    count(f, C_CHECKS);
    if (strcmp(head->epoch, f->epoch) != 0 || head->version < f->mirror_version) {
        count(f, C_RESETS);
        saw(f, head->version, true);
        return WK__SF_RELOAD;
    }
    saw(f, head->version, false);
    if (periodic) {
        if (f->behind && f->mirror_version < f->behind) {
            count(f, C_GAPS);
            return WK__SF_RELOAD;
        }
        f->behind = head->version > f->mirror_version ? head->version : 0;
    }
    return WK__SF_OK;
}

static int check(wk_settings_follower *f, bool periodic)
{
    /* On a Sentinel URL the node may have turned replica, perhaps of
     * nobody: its reads and its subscription look healthy while no change
     * of the new primary reaches them. Both connections go, and the
     * sentinels name the primary for the next load. */
    if (periodic && wk__db_left_replica(f->db)) {
        wk__sf_record_failure(f, WK_EIO, "settings follower: the node is no longer the primary");
        drop_subscriber(f);
        return WK_EIO;
    }
    wk__settings_head head;
    int rc = wk__settings_read_head(wk_db_processor(f->db), &f->held.entity, &f->held.name, &head);
    if (rc) {
        wk__sf_record_failure(f, rc, wk_db_errmsg(f->db));
        drop_subscriber(f);
        return rc;
    }
    if (f->sub_host[0] && wk__sf_owner_moved(f, f->db, f->sub_host, f->sub_port)) {
        drop_subscriber(f); /* the loop subscribes on the new owner and loads */
        return WK_OK;
    }
    return wk__sf_judge_head(f, &head, periodic) == WK__SF_RELOAD ? reload_or_drop(f) : WK_OK;
}

wk__sf_verdict wk__sf_judge_message(wk_settings_follower *f, const char *msg, size_t len,
                                    wk_settings_change *c)
{
    if (wk_settings_change_decode(msg, len, c) != WK_OK) {
        /* Not ours to read: the map is the truth. The subscription stays,
         * so nothing newer is missed. */
        count(f, C_GAPS);
        return WK__SF_RELOAD;
    }
    if (strcmp(c->epoch, f->epoch) != 0) {
        count(f, C_FOREIGN);
        return WK__SF_CHECK;
    }
    int64_t current = f->mirror_version;
    if (c->version <= current) {
        count(f, C_IGNORED);
        return WK__SF_CHECK;
    }
    if (c->version > current + 1) {
        count(f, C_GAPS); /* we missed a change */
        return WK__SF_RELOAD;
    }
    return WK__SF_APPLY;
}

int wk__sf_apply(wk_settings_follower *f, const wk_settings_change *c)
{
    uint64_t h = wk__bytes_map_hash(f->sipkey, c->key, c->key_len);
    int rc = WK_OK;
    pthread_rwlock_wrlock(&f->lock);
    if (c->op == WK_SETTINGS_PUT)
        rc = wk__bytes_map_put(&f->mirror, h, c->key, c->key_len, c->value, c->value_len,
                               c->version);
    else
        wk__bytes_map_remove(&f->mirror, h, c->key, c->key_len);
    if (!rc)
        f->mirror_version = c->version;
    pthread_rwlock_unlock(&f->lock);
    if (rc) {
        wk__sf_record_failure(f, rc, "settings follower: out of memory applying a change");
        return rc;
    }
    if (f->on_change)
        f->on_change(f->ctx, c);
    count(f, C_APPLIED);
    notify(f, c->version);
    return WK_OK;
}

/* Step 2: one message. Returns WK_OK, or a failure after which the
 * subscriber was dropped (the loop syncs again). */
static int handle_message(wk_settings_follower *f, const char *msg, size_t len)
{
    wk_settings_change c;
    switch (wk__sf_judge_message(f, msg, len, &c)) {
    case WK__SF_RELOAD:
        return reload_or_drop(f);
    case WK__SF_CHECK:
        return check(f, false);
    default:
        break;
    }
    int rc = wk__sf_apply(f, &c);
    if (rc)
        drop_subscriber(f);
    return rc;
}

/* Sleep up to ms, or until stop is requested. */
static void pause_ms(wk_settings_follower *f, int ms)
{
    struct pollfd p = {.fd = f->wake[0], .events = POLLIN};
    while (poll(&p, 1, ms) < 0 && errno == EINTR && !atomic_load(&f->stop)) {
    }
}

static void *follower_main(void *arg)
{
    wk_settings_follower *f = arg;
    int backoff = WK__SF_RETRY_MIN_MS;
    while (!atomic_load(&f->stop)) {
        if (!f->sub) {
            if (sync_mirror(f, false) != WK_OK) {
                pause_ms(f, backoff);
                backoff = wk__sf_backoff_next(f, backoff);
                continue;
            }
            backoff = WK__SF_RETRY_MIN_MS;
        }
        queued *q = wk__sf_queue_pop(f);
        if (q) { /* left by a load */
            handle_message(f, q->data, q->len);
            free(q);
            continue;
        }
        int timeout = READ_SLICE_MS;
        if (f->check_ms) {
            int64_t left = f->next_check_ms - wk__boot_ms();
            timeout = left < 0 ? 0 : left < timeout ? (int)left : timeout;
        }
        const char *msg;
        size_t len;
        bool got;
        if (next_message(f, timeout, &msg, &len, &got)) {
            drop_subscriber(f);
            continue; /* reconnect at once; back off only if that fails */
        }
        if (got && handle_message(f, msg, len) != WK_OK)
            continue;
        if (f->sub && f->check_ms && wk__boot_ms() >= f->next_check_ms) {
            check(f, true);
            f->next_check_ms = wk__boot_ms() + f->check_ms;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * Public API
 * ---------------------------------------------------------------------- */

void wk__sf_subscribing(wk_settings_follower *f)
{
    if (f->ever_subscribed) {
        pthread_mutex_lock(&f->mu);
        f->stats.reconnects++;
        pthread_mutex_unlock(&f->mu);
    }
    f->ever_subscribed = true;
}

int wk__sf_backoff_next(const wk_settings_follower *f, int backoff)
{
    return backoff > f->retry_max_ms / 2 ? f->retry_max_ms : backoff * 2;
}

void wk__sf_free(wk_settings_follower *f)
{
    wk__sf_loop_free(f);
    wk__sf_queue_clear(f);
    wk__subscriber_close(f->sub);
    wk_db_close(f->db);
    wk__bytes_map_free(&f->mirror);
    if (f->locks_ready) {
        pthread_rwlock_destroy(&f->lock);
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
    }
    if (f->wake[0] >= 0)
        close(f->wake[0]);
    if (f->wake[1] >= 0)
        close(f->wake[1]);
    wk__held_free(&f->held);
    free(f->chan);
    free(f);
}

static int init_locks(wk_settings_follower *f)
{
    if (wk__sync_init(&f->mu, &f->cv) != WK_OK)
        return WK_ENOMEM;
    if (pthread_rwlock_init(&f->lock, NULL) != 0) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        return WK_ENOMEM;
    }
    f->locks_ready = true;
    return WK_OK;
}

static int make_pipe(int fds[2])
{
    if (pipe(fds) != 0)
        return WK_EIO;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    }
    return WK_OK;
}

#define FAIL(status, ...) wk__errbuf_set(err, errlen, (status), "settings follower: " __VA_ARGS__)

/* The checks of start, before anything is allocated. */
static int check_options(const wk_settings_follower_options *opts, char *err, size_t errlen)
{
    if (!opts || !opts->settings)
        return FAIL(WK_EINVAL, "options and options.settings are required");
    if (opts->keepalive_ms < 0 || opts->retry_max_ms <= 0 || opts->check_ms < 0)
        return FAIL(WK_EINVAL, "keepalive_ms and check_ms must be >= 0 and retry_max_ms > 0");
    const wk_entity *e = opts->settings;
    char why[WK_ENTITY_MSG_MAX];
    if (wk_entity_check_msg(e, why, sizeof(why)) != WK_OK)
        return FAIL(WK_EINVAL, "invalid Settings entity: %s", why);
    if (strcmp(e->kind, WK_KIND_SETTINGS) != 0)
        return FAIL(WK_EINVAL, "options.settings is not a valid Settings entity");
    char key[WK_KEY_MAX];
    size_t key_len;
    /* The longest suffix the channel can get (the real one needs the
     * database, known once connected). */
    if (wk_key_build(key, sizeof(key), &key_len, e, &opts->name, ":chan:2147483647") != WK_OK)
        return FAIL(WK_EINVAL, "invalid name (NULL, or too long)");
    return WK_OK;
}

int wk__sf_new(wk_settings_follower **out, const wk_settings_follower_options *opts,
               int command_timeout_ms, char *err, size_t errlen)
{
    int rc = check_options(opts, err, errlen);
    if (rc)
        return rc;
    wk_settings_follower *f = calloc(1, sizeof(*f));
    if (!f)
        return FAIL(WK_ENOMEM, "out of memory");
    f->wake[0] = f->wake[1] = -1;
    atomic_init(&f->stop, false);
    f->on_change = opts->on_change;
    f->ctx = opts->ctx;
    f->keepalive_ms = opts->keepalive_ms;
    f->retry_max_ms = opts->retry_max_ms < WK__SF_RETRY_MIN_MS ? WK__SF_RETRY_MIN_MS : opts->retry_max_ms;
    f->check_ms = opts->check_ms;
    f->command_timeout_ms = command_timeout_ms > 0 ? command_timeout_ms : 2000;
    const wk_entity settings = WK_SETTINGS_ENTITY(opts->settings->ns);
    rc = wk__held_init(&f->held, &settings, WK_KIND_SETTINGS, &opts->name);
    f->chan = malloc(WK_KEY_MAX);
    if (rc || !f->chan)
        rc = FAIL(WK_ENOMEM, "out of memory");
    if (!rc && (rc = init_locks(f)) != WK_OK)
        FAIL(rc, "cannot create locks");
    if (!rc && (rc = make_pipe(f->wake)) != WK_OK)
        FAIL(rc, "cannot create a pipe");
    if (!rc && (rc = wk__bytes_map_init(&f->mirror, 16)) != WK_OK)
        FAIL(rc, "out of memory");
    if (rc) {
        wk__sf_free(f);
        return rc;
    }
    *out = f;
    return WK_OK;
}

int wk_settings_follower_start(wk_settings_follower **out,
                               const wk_settings_follower_options *opts, char *err,
                               size_t errlen)
{
    wk__errbuf_set(err, errlen, WK_OK, "%s", "");
    if (!out)
        return FAIL(WK_EINVAL, "out is NULL");
    *out = NULL;
    if (opts && !opts->db)
        return FAIL(WK_EINVAL, "options.db is required (through an event-loop handle: "
                               "wk_settings_follower_start_async())");
    wk_settings_follower *f = NULL;
    int rc = wk__sf_new(&f, opts, opts ? opts->db->command_timeout_ms : 0, err, errlen);
    if (rc)
        return rc;
    rc = wk_db_open(&f->db, opts->db, err, errlen);
    if (!rc && wk__settings_channel(f->db, &f->held.entity, &f->held.name, f->chan, WK_KEY_MAX,
                                    &f->chan_len) != WK_OK)
        rc = FAIL(WK_EINVAL, "invalid name");
    if (!rc) {
        randombytes_buf(f->sipkey, sizeof(f->sipkey)); /* sodium_init: wk_db_open */
        if ((rc = sync_mirror(f, true)) != WK_OK)
            wk__errbuf_set(err, errlen, rc, "%s", f->errmsg);
    }
    if (!rc && pthread_create(&f->thread, NULL, follower_main, f) != 0)
        rc = FAIL(WK_ENOMEM, "cannot create the follower thread");
    if (rc) {
        wk__sf_free(f);
        return rc;
    }
    f->thread_started = true;
    pthread_mutex_lock(&f->mu);
    f->stats.last_status = WK_OK;
    f->errmsg[0] = '\0';
    pthread_mutex_unlock(&f->mu);
    *out = f;
    return WK_OK;
}

#undef FAIL

/* Stop and join the thread, close both connections; once. Waiters wake. */
static void halt(wk_settings_follower *f)
{
    wk__sf_loop_halt(f);
    if (f->thread_started) {
        atomic_store(&f->stop, true);
        char byte = 1;
        while (write(f->wake[1], &byte, 1) < 0 && errno == EINTR) {
        }
        pthread_join(f->thread, NULL);
        f->thread_started = false;
    }
    wk__sf_queue_clear(f);
    wk__subscriber_close(f->sub);
    f->sub = NULL;
    wk_db_close(f->db);
    f->db = NULL;
    pthread_mutex_lock(&f->mu);
    f->halted = true;
    f->stats.synced = false;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void wk_settings_follower_halt(wk_settings_follower *f)
{
    if (f)
        halt(f);
}

void wk_settings_follower_free(wk_settings_follower *f)
{
    if (!f)
        return;
    halt(f);
    if (!wk__sf_loop_free_later(f))
        wk__sf_free(f);
}

void wk_settings_follower_stop(wk_settings_follower *f)
{
    wk_settings_follower_free(f);
}

int wk_settings_follower_get(wk_settings_follower *f, const void *key, size_t key_len, void *buf,
                             size_t buf_len, size_t *value_len, bool *found)
{
    if (value_len)
        *value_len = 0;
    if (found)
        *found = false;
    if (!f || !found || (!key && key_len) || (!buf && buf_len))
        return WK_EINVAL;
    uint64_t h = wk__bytes_map_hash(f->sipkey, key, key_len);
    pthread_rwlock_rdlock(&f->lock);
    const wk__bytes_item *it = wk__bytes_map_find(&f->mirror, h, key, key_len);
    if (it) {
        *found = true;
        if (value_len)
            *value_len = it->value_len;
        size_t n = it->value_len < buf_len ? it->value_len : buf_len;
        if (n)
            memcpy(buf, wk__bytes_item_value(it), n);
    }
    pthread_rwlock_unlock(&f->lock);
    return WK_OK;
}

int wk_settings_follower_get_dup(wk_settings_follower *f, const void *key, size_t key_len,
                                 char **value, size_t *value_len, bool *found)
{
    if (value)
        *value = NULL;
    if (value_len)
        *value_len = 0;
    if (found)
        *found = false;
    if (!f || !value || !found || (!key && key_len))
        return WK_EINVAL;
    uint64_t h = wk__bytes_map_hash(f->sipkey, key, key_len);
    int rc = WK_OK;
    pthread_rwlock_rdlock(&f->lock);
    const wk__bytes_item *it = wk__bytes_map_find(&f->mirror, h, key, key_len);
    if (it) {
        char *copy = malloc(it->value_len + 1);
        if (copy) {
            memcpy(copy, wk__bytes_item_value(it), it->value_len + 1); /* with its NUL */
            *value = copy;
            *found = true;
            if (value_len)
                *value_len = it->value_len;
        } else {
            rc = WK_ENOMEM;
        }
    }
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

static void items_pair(const void *ctx, size_t i, const char **k, size_t *klen, const char **v,
                       size_t *vlen)
{
    const wk__bytes_item *const *items = ctx;
    *k = wk__bytes_item_key(items[i]);
    *klen = items[i]->key_len;
    *v = wk__bytes_item_value(items[i]);
    *vlen = items[i]->value_len;
}

int wk_settings_follower_snapshot(wk_settings_follower *f, wk_settings_map **out)
{
    if (out)
        *out = NULL;
    if (!f || !out)
        return WK_EINVAL;
    pthread_rwlock_rdlock(&f->lock);
    size_t n = f->mirror.count;
    const wk__bytes_item **items = malloc((n ? n : 1) * sizeof(*items));
    int rc = WK_ENOMEM;
    if (items) {
        size_t i = 0;
        for (size_t b = 0; b < f->mirror.nbuckets; b++) {
            for (const wk__bytes_item *it = f->mirror.buckets[b]; it; it = it->next)
                items[i++] = it;
        }
        rc = wk__settings_build(out, f->epoch, f->mirror_version, n, items_pair, items);
    }
    pthread_rwlock_unlock(&f->lock);
    free(items);
    return rc;
}

int64_t wk_settings_follower_lag(wk_settings_follower *f)
{
    if (!f)
        return -1;
    pthread_mutex_lock(&f->mu);
    int64_t lag = f->seen > f->stats.version ? f->seen - f->stats.version : 0;
    pthread_mutex_unlock(&f->mu);
    return lag;
}

int64_t wk_settings_follower_version(wk_settings_follower *f)
{
    if (!f)
        return -1;
    pthread_mutex_lock(&f->mu);
    int64_t v = f->stats.version;
    pthread_mutex_unlock(&f->mu);
    return v;
}

int wk_settings_follower_wait(wk_settings_follower *f, int64_t version, int timeout_ms,
                              bool *reached)
{
    if (reached)
        *reached = false;
    if (!f || !reached || (f->loop && timeout_ms != 0))
        return WK_EINVAL; /* a loop follower advances only while the loop turns */
    struct timespec deadline = {0, 0};
    if (timeout_ms > 0) /* the condition's clock: CLOCK_MONOTONIC (wk__sync_init) */
        wk__cond_abstime(wk__add_ms(wk__boot_ms(), timeout_ms), &deadline);
    pthread_mutex_lock(&f->mu);
    while (f->stats.version < version && timeout_ms != 0 && !f->halted) {
        int rc = timeout_ms < 0 ? pthread_cond_wait(&f->cv, &f->mu)
                                : pthread_cond_timedwait(&f->cv, &f->mu, &deadline);
        if (rc == ETIMEDOUT)
            break;
    }
    *reached = f->stats.version >= version;
    pthread_mutex_unlock(&f->mu);
    return WK_OK;
}

int wk_settings_follower_stats(wk_settings_follower *f, wk_settings_stats *stats,
                               char *errmsg, size_t errlen)
{
    if (errmsg && errlen)
        errmsg[0] = '\0';
    if (!f || !stats)
        return WK_EINVAL;
    pthread_mutex_lock(&f->mu);
    *stats = f->stats;
    if (errmsg && errlen)
        snprintf(errmsg, errlen, "%s", f->errmsg);
    pthread_mutex_unlock(&f->mu);
    return WK_OK;
}
