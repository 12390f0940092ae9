/*
 * collection/near_cache.c — the near cache (wakuwaku/near_cache.h): Cache
 * and HashedCache bodies held in memory, kept valid by client-side caching.
 *
 * Its own connections: a data handle (a second wk_db with the caller's
 * settings and capability, core/blocking.h) that reads bodies with CLIENT
 * TRACKING on REDIRECT <id>, and a subscriber (core/subscriber.h) on
 * __redis__:invalidate whose CLIENT ID is <id>. Tracking is per
 * connection, so on a Redis Cluster there is one SHARD per primary: the
 * data handle's connection to that node (a handle pinned to it enables
 * its tracking and PINGs it) and a subscriber on the same node. A single
 * server is one shard.
 *
 * A tracking SESSION begins each time tracking is enabled on every
 * shard's data connection for its current subscriber (begin_session). An
 * entry is served from memory only if it was read in the current session,
 * nothing invalidated it since, its TTL runs, and every connection
 * answered a PING sent at most staleness_ms ago (each shard's two
 * "proofs", sub_proof_ms and data_proof_ms: send times of the last
 * answered PINGs, never older than the session's start). Losing any
 * connection, a new connection of the data handle (a reconnect, a node
 * connected for the first time) and any change of the cluster's slot map
 * end the session, which turns every entry unverified at once without
 * touching it; the next get of each revalidates it (HashedCache by hash,
 * through wk_local_copy). After a map change the background thread
 * rebuilds the shards for the new primaries before a session can begin.
 *
 * The race between a read and an invalidation of the same key (the server
 * may announce a change of the key between our read and our storing its
 * reply) is closed by pinning: the entry is marked `fetching` before the
 * read is sent, and an invalidation that finds it so marks it dirty; the
 * body read is then returned to its caller but not trusted.
 *
 * Locks: `io_mu` guards the data connection (reads, the heartbeat,
 * enabling tracking); `mu` guards the table, the session and the proofs;
 * the shards array changes under both. Order: io_mu before mu. The
 * background thread owns the subscribers.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include <wakuwaku/clock.h>
#include <wakuwaku/near_cache.h>

#include "collection/bytes_map.h"
#include "collection/cache_internal.h"
#include "collection/near_cache_internal.h"
#include "core/blocking.h"
#include "core/cluster.h"
#include "core/core_internal.h"
#include "core/subscriber.h"

#define CHANNEL "__redis__:invalidate"
#define RETRY_MIN_MS 50
#define MSG_MAX 512
#define BUCKETS_MAX ((size_t)1 << 20)

/* An entity the near cache serves, copied at open. */
typedef struct wk__near_served {
    wk__held held; /* the entity (kind static, namespace owned) */
    bool hashed;   /* HashedCache (else Cache) */
    bool readable; /* the capability grants READ */
    char *denied;  /* not readable: dispatch's refusal, asked at open */
    int64_t ttl_ms;
    char *prefix; /* its keys' prefix (BCAST PREFIX) */
    size_t prefix_len;
} served;

typedef struct entry {
    struct entry *chain;         /* the bucket's next */
    struct entry *newer, *older; /* LRU list: lru_head is the newest */
    const served *se;
    uint64_t hash;
    uint64_t session; /* the session it was verified in; 0: none */
    int64_t expires_ms;
    size_t bytes;  /* accounted: key + body */
    bool fetching; /* a read of it is in flight: pinned, body not to be read */
    bool dirty;    /* invalidated since it was read */
    wk_local_copy copy;
    size_t key_len;
    char key[];
} entry;

/* One primary's connections (see the banner). */
typedef struct shard {
    wk_db *node;     /* the data handle pinned to the node (cluster); NULL: the handle itself */
    char *host;      /* where its subscriber connects (cluster); NULL: the handle's server */
    int port;
    /* The background thread's own. */
    wk__subscriber *sub;
    int64_t ping_sent_ms; /* of the PING awaiting its PONG */
    bool ping_out;
    int backoff;         /* before connecting its subscriber again (ms) */
    int64_t retry_at;
    /* Under mu. */
    long long sub_id;         /* the subscriber's CLIENT ID; 0: none */
    long long tracked_sub_id; /* the REDIRECT of the session */
    int64_t sub_proof_ms, data_proof_ms;
} shard;

struct wk_near_cache {
    /* Fixed at open. */
    served *served;
    size_t nserved;
    wk_near_mode mode;
    size_t max_entries, max_bytes;
    int staleness_ms, heartbeat_ms, retry_max_ms;
    unsigned char sipkey[crypto_shorthash_KEYBYTES];

    /* The data connection and what belongs to it, under io_mu. */
    pthread_mutex_t io_mu;
    wk_db *db;
    bool cluster;
    uint64_t epoch;         /* of the map the shards were made for (cluster) */
    int64_t map_checked_ms; /* the background thread's last look at it */

    /* The background thread's own. */
    pthread_t thread;
    bool thread_started;
    int wake[2];
    atomic_bool stop;

    /* Under mu. */
    pthread_mutex_t mu;
    entry **buckets;
    size_t nbuckets; /* a power of two */
    entry *lru_head, *lru_tail;
    shard *shards;
    size_t nshards;
    uint64_t session; /* the current session (entries of others are unverified) */
    bool tracking;    /* the current session is alive */
    uint64_t tracked_reconnects; /* the data handle's count when the session began */
    uint64_t tracked_epoch;      /* the map's epoch then */
    wk_near_stats stats;

    wk__near_loop *loop; /* the loop gets' reader (collection/near_cache_loop.c) */
};

/* ------------------------------------------------------------------------
 * Messages: one per thread, as a near cache may be shared by threads.
 * ---------------------------------------------------------------------- */

static _Thread_local char near_msg[MSG_MAX];

static int fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(near_msg, sizeof(near_msg), fmt, ap);
    va_end(ap);
    return status;
}

const char *wk_near_cache_errmsg(void)
{
    return near_msg;
}

int wk__near_fail(int status, const char *msg)
{
    snprintf(near_msg, sizeof(near_msg), "%s", msg);
    return status;
}

/* ------------------------------------------------------------------------
 * The table (mu held)
 * ---------------------------------------------------------------------- */

static entry *find(wk_near_cache *nc, uint64_t h, const char *key, size_t len)
{
    for (entry *en = nc->buckets[h & (nc->nbuckets - 1)]; en; en = en->chain) {
        if (en->hash == h && en->key_len == len && memcmp(en->key, key, len) == 0)
            return en;
    }
    return NULL;
}

static void lru_unlink(wk_near_cache *nc, entry *en)
{
    if (en->newer)
        en->newer->older = en->older;
    else
        nc->lru_head = en->older;
    if (en->older)
        en->older->newer = en->newer;
    else
        nc->lru_tail = en->newer;
    en->newer = en->older = NULL;
}

static void lru_push(wk_near_cache *nc, entry *en)
{
    en->older = nc->lru_head;
    en->newer = NULL;
    if (nc->lru_head)
        nc->lru_head->newer = en;
    else
        nc->lru_tail = en;
    nc->lru_head = en;
}

static void touch(wk_near_cache *nc, entry *en)
{
    if (nc->lru_head != en) {
        lru_unlink(nc, en);
        lru_push(nc, en);
    }
}

static entry *insert(wk_near_cache *nc, const served *se, uint64_t h, const char *key, size_t len)
{
    entry *en = calloc(1, sizeof(*en) + len);
    if (!en)
        return NULL;
    en->se = se;
    en->hash = h;
    en->key_len = len;
    memcpy(en->key, key, len);
    wk_local_copy_init(&en->copy);
    en->bytes = len;
    entry **b = &nc->buckets[h & (nc->nbuckets - 1)];
    en->chain = *b;
    *b = en;
    lru_push(nc, en);
    nc->stats.entries++;
    nc->stats.bytes += en->bytes;
    return en;
}

static void drop(wk_near_cache *nc, entry *en)
{
    for (entry **p = &nc->buckets[en->hash & (nc->nbuckets - 1)]; *p; p = &(*p)->chain) {
        if (*p == en) {
            *p = en->chain;
            break;
        }
    }
    lru_unlink(nc, en);
    nc->stats.entries--;
    nc->stats.bytes -= en->bytes;
    wk_local_copy_clear(&en->copy);
    free(en);
}

/* Drop the least recently used entries (never one being read) until the
 * bounds hold. */
static void evict(wk_near_cache *nc)
{
    entry *en = nc->lru_tail;
    while (en && (nc->stats.entries > nc->max_entries || nc->stats.bytes > nc->max_bytes)) {
        entry *newer = en->newer;
        if (!en->fetching) {
            drop(nc, en);
            nc->stats.evictions++;
        }
        en = newer;
    }
}

/* Every shard's two proofs are recent enough for the staleness bound. */
static bool proven(const wk_near_cache *nc, int64_t now)
{
    if (!nc->tracking || !nc->nshards)
        return false;
    for (size_t i = 0; i < nc->nshards; i++) {
        const shard *sh = &nc->shards[i];
        int64_t proof = sh->sub_proof_ms < sh->data_proof_ms ? sh->sub_proof_ms : sh->data_proof_ms;
        if (now - proof > nc->staleness_ms)
            return false;
    }
    return true;
}

static bool verified(const wk_near_cache *nc, const entry *en, int64_t now)
{
    return !en->fetching && !en->dirty && en->session == nc->session && now < en->expires_ms &&
           proven(nc, now);
}

/* An invalidation names `key`: a held HashedCache body is kept for its
 * revalidation by hash; anything else goes (an entry being read is only
 * marked). */
static void invalidate(wk_near_cache *nc, const char *key, size_t len)
{
    nc->stats.invalidations++;
    entry *en = find(nc, wk__bytes_map_hash(nc->sipkey, key, len), key, len);
    if (!en)
        return;
    if (en->fetching || (en->se->hashed && en->copy.body.found))
        en->dirty = true;
    else
        drop(nc, en);
}

static void flush_all(wk_near_cache *nc)
{
    nc->stats.flushes++;
    for (entry *en = nc->lru_head, *older; en; en = older) {
        older = en->older;
        if (en->fetching)
            en->dirty = true;
        else
            drop(nc, en);
    }
}

/* ------------------------------------------------------------------------
 * The data connection (io_mu held)
 * ---------------------------------------------------------------------- */

/* A command without entity (like PING: no capability check) on the data
 * handle; any non-error reply is success. */
static int run_plain(wk_db *db, const char *name, int argc, const char **argv, const size_t *lens)
{
    wk_query q = {.name = name, .argc = argc, .argv = argv, .argvlen = lens};
    return wk_process(wk_db_processor(db), &q);
}

/* The handle that talks to shard sh's node. */
static wk_db *shard_db(const wk_near_cache *nc, const shard *sh)
{
    return sh->node ? sh->node : nc->db;
}

/*
 * Enable tracking on shard sh's data connection for subscriber `sid`:
 * CLIENT TRACKING off (re-enabling with the same BCAST prefixes would be
 * refused as overlapping), then on REDIRECT <sid> [BCAST PREFIX …].
 */
static int enable_tracking(wk_near_cache *nc, const shard *sh, long long sid)
{
    wk_db *db = shard_db(nc, sh);
    const char *off[3] = {"CLIENT", "TRACKING", "off"};
    const size_t off_lens[3] = {6, 8, 3};
    int rc = run_plain(db, "near_cache.tracking", 3, off, off_lens);
    if (rc)
        return rc;
    size_t n = 5 + (nc->mode == WK_NEAR_BCAST ? 1 + 2 * nc->nserved : 0);
    const char **argv = malloc(n * sizeof(*argv));
    size_t *lens = malloc(n * sizeof(*lens));
    char id[24];
    if (!argv || !lens) {
        rc = fail(WK_ENOMEM, "near_cache: out of memory enabling tracking");
    } else {
        size_t argc = 0;
        const char *head[5] = {"CLIENT", "TRACKING", "on", "REDIRECT", id};
        snprintf(id, sizeof(id), "%lld", sid);
        for (; argc < 5; argc++) {
            argv[argc] = head[argc];
            lens[argc] = strlen(head[argc]);
        }
        if (nc->mode == WK_NEAR_BCAST) {
            argv[argc] = "BCAST";
            lens[argc++] = 5;
            for (size_t i = 0; i < nc->nserved; i++) {
                if (!nc->served[i].readable)
                    continue; /* its key names are not ours to hear */
                argv[argc] = "PREFIX";
                lens[argc++] = 6;
                argv[argc] = nc->served[i].prefix;
                lens[argc++] = nc->served[i].prefix_len;
            }
        }
        rc = run_plain(db, "near_cache.tracking", (int)argc, argv, lens);
    }
    free(argv);
    free(lens);
    return rc;
}

/*
 * Begin a session unless one is alive: tracking enabled on every shard
 * for its current subscriber. A new session begins with every proof at
 * the time the first command was sent: no entry of the session was read
 * before. On a cluster the shards must be those of the handle's map (the
 * background thread makes them anew after a change).
 */
static int begin_session(wk_near_cache *nc)
{
    pthread_mutex_lock(&nc->mu);
    bool need = !nc->tracking;
    bool missing = !nc->nshards;
    for (size_t i = 0; i < nc->nshards; i++) {
        need = need || nc->shards[i].tracked_sub_id != nc->shards[i].sub_id;
        missing = missing || !nc->shards[i].sub_id;
    }
    pthread_mutex_unlock(&nc->mu);
    if (!need)
        return WK_OK;
    if (missing)
        return fail(WK_EIO, "near_cache: no subscriber connection (reconnecting)");
    if (nc->cluster && wk__cluster_epoch(nc->db) != nc->epoch)
        return fail(WK_EIO, "near_cache: the cluster's slot map changed (the near cache "
                            "connects to the new primaries)");
    int64_t t0 = wk_monotonic_ms();
    /* The subscribers change only under io_mu (which the caller holds) and
     * mu: their ids are read once more below, against what was enabled. */
    long long *ids = calloc(nc->nshards, sizeof(*ids));
    if (!ids)
        return fail(WK_ENOMEM, "near_cache: out of memory enabling tracking");
    int rc = WK_OK;
    for (size_t i = 0; !rc && i < nc->nshards; i++) {
        pthread_mutex_lock(&nc->mu);
        ids[i] = nc->shards[i].sub_id;
        pthread_mutex_unlock(&nc->mu);
        rc = ids[i] ? enable_tracking(nc, &nc->shards[i], ids[i]) : WK_EIO;
        if (rc && rc != WK_ENOMEM)
            fail(rc, "near_cache: enabling tracking: %s",
                 ids[i] ? wk_db_errmsg(shard_db(nc, &nc->shards[i])) : "no subscriber");
    }
    uint64_t reconnects = wk__blocking_reconnects(nc->db), epoch = wk__cluster_epoch(nc->db);
    if (!rc && nc->cluster && epoch != nc->epoch)
        rc = fail(WK_EIO, "near_cache: the cluster's slot map changed while enabling tracking");
    if (!rc) {
        pthread_mutex_lock(&nc->mu);
        bool same = true; /* else a subscriber went meanwhile: try again later */
        for (size_t i = 0; i < nc->nshards; i++)
            same = same && nc->shards[i].sub_id == ids[i];
        if (same) {
            nc->session++;
            nc->tracking = true;
            for (size_t i = 0; i < nc->nshards; i++) {
                nc->shards[i].tracked_sub_id = ids[i];
                nc->shards[i].sub_proof_ms = nc->shards[i].data_proof_ms = t0;
            }
            nc->stats.sessions++;
            nc->tracked_reconnects = reconnects;
            nc->tracked_epoch = epoch;
        }
        pthread_mutex_unlock(&nc->mu);
    }
    free(ids);
    return rc;
}

/*
 * After a query on the data connection sent at t0 in `session`: a
 * reconnect or a node connected anew (tracking is per connection), a
 * change of the cluster's map or a lost connection ends the session; a
 * reply in the same session proves shard sh's connection (and its
 * tracking) was alive at t0 (sh NULL: the query's node is not known).
 */
static void after_io(wk_near_cache *nc, shard *sh, int rc, uint64_t session, int64_t t0)
{
    bool reconnected = wk__blocking_reconnects(nc->db) != nc->tracked_reconnects ||
                       wk__cluster_epoch(nc->db) != nc->tracked_epoch;
    pthread_mutex_lock(&nc->mu);
    if (reconnected || wk_is_connection_error(rc))
        nc->tracking = false;
    else if (sh && rc == WK_OK && nc->tracking && nc->session == session && t0 > sh->data_proof_ms)
        sh->data_proof_ms = t0;
    pthread_mutex_unlock(&nc->mu);
}

static void drop_subscriber(wk_near_cache *nc, shard *sh);

/*
 * A cluster shard's heartbeat: ROLE, which proves the connection as a
 * PING does and says whether the node is still a primary. A replica may
 * never hear the writes the bound is about (its primary may be another
 * server, or none), so it ends the session and the map is asked anew. A
 * server that refuses ROLE (an ACL) still proved the connection.
 */
static int role_heartbeat(wk_near_cache *nc, shard *sh)
{
    bool primary;
    int rc = wk__db_still_primary(sh->node, &primary);
    if (rc != WK_OK || primary)
        return rc;
    wk__cluster_mark_stale(nc->db);
    return fail(WK_EIO, "near_cache: node %s:%d is no longer a primary", sh->host, sh->port);
}

/* A single server's heartbeat: a PING; on a Sentinel URL a ROLE, for the
 * same reason, and a node turned replica drops both connections, which
 * the sentinels then point at the new primary. */
static int server_heartbeat(wk_near_cache *nc, shard *sh)
{
    if (!wk__db_left_replica(nc->db))
        return wk_db_ping(nc->db);
    drop_subscriber(nc, sh);
    return fail(WK_EIO, "near_cache: the node the sentinels named is no longer the primary");
}

/* The background thread's PING on each shard's data connection. */
static void data_heartbeat(wk_near_cache *nc)
{
    pthread_mutex_lock(&nc->io_mu);
    begin_session(nc);
    for (size_t i = 0; i < nc->nshards; i++) {
        pthread_mutex_lock(&nc->mu);
        bool on = nc->tracking;
        uint64_t session = nc->session;
        pthread_mutex_unlock(&nc->mu);
        if (!on)
            break;
        shard *sh = &nc->shards[i];
        int64_t t0 = wk_monotonic_ms();
        int rc = sh->node ? role_heartbeat(nc, sh) : server_heartbeat(nc, sh);
        after_io(nc, sh, rc, session, t0);
    }
    pthread_mutex_unlock(&nc->io_mu);
}

/* ------------------------------------------------------------------------
 * The subscriber (the background thread)
 * ---------------------------------------------------------------------- */

static int connect_subscriber(wk_near_cache *nc, shard *sh, char *err, size_t errlen)
{
    wk__subscriber *s = NULL;
    long long id = 0;
    int rc = wk__subscriber_open_at(&s, nc->db, sh->host, sh->port, 0, err, errlen);
    if (rc)
        return rc;
    rc = wk__subscriber_client_id(s, &id);
    if (!rc)
        rc = wk__subscriber_subscribe(s, CHANNEL, strlen(CHANNEL));
    if (rc) {
        wk__errbuf_set(err, errlen, rc, "%s", wk__subscriber_errmsg(s));
        wk__subscriber_close(s);
        return rc;
    }
    sh->sub = s;
    sh->ping_out = false;
    pthread_mutex_lock(&nc->mu);
    sh->sub_id = id;
    nc->tracking = false; /* the REDIRECT must name the new id */
    nc->stats.subscriber_connects++;
    pthread_mutex_unlock(&nc->mu);
    return WK_OK;
}

static void drop_subscriber(wk_near_cache *nc, shard *sh)
{
    wk__subscriber_close(sh->sub);
    sh->sub = NULL;
    pthread_mutex_lock(&nc->mu);
    sh->sub_id = 0;
    nc->tracking = false; /* invalidations may be lost from here on */
    pthread_mutex_unlock(&nc->mu);
}

static void handle_event(wk_near_cache *nc, shard *sh, const wk__sub_event *ev)
{
    pthread_mutex_lock(&nc->mu);
    switch (ev->type) {
    case WK__SUB_KEYS:
        for (size_t i = 0; i < ev->nkeys; i++) {
            size_t len;
            const char *key = wk__subscriber_key(sh->sub, i, &len);
            if (key)
                invalidate(nc, key, len);
        }
        break;
    case WK__SUB_FLUSH:
        flush_all(nc);
        break;
    case WK__SUB_PONG:
        /* Every invalidation queued before this PING was applied above. */
        sh->ping_out = false;
        if (sh->ping_sent_ms > sh->sub_proof_ms)
            sh->sub_proof_ms = sh->ping_sent_ms;
        break;
    default:
        break; /* a string message on the channel: not ours */
    }
    pthread_mutex_unlock(&nc->mu);
}

/* Close every shard's connections (io_mu and mu held, or alone). */
static void shards_free(wk_near_cache *nc)
{
    for (size_t i = 0; i < nc->nshards; i++) {
        wk__subscriber_close(nc->shards[i].sub);
        wk_db_close(nc->shards[i].node);
        free(nc->shards[i].host);
    }
    free(nc->shards);
    nc->shards = NULL;
    nc->nshards = 0;
}

/*
 * The shards of the data handle's map (io_mu held): one per primary of a
 * cluster, with a handle pinned to it; one for a single server. Their
 * subscribers are connected by the caller.
 */
static int shards_make(wk_near_cache *nc, char *err, size_t errlen)
{
    size_t n = nc->cluster ? wk__cluster_primary_nodes(nc->db, NULL, 0) : 1;
    uint16_t *nodes = calloc(n ? n : 1, sizeof(*nodes));
    shard *sh = calloc(n ? n : 1, sizeof(*sh));
    int rc = !n ? WK_EIO : nodes && sh ? WK_OK : WK_ENOMEM;
    if (!rc && nc->cluster && wk__cluster_primary_nodes(nc->db, nodes, n) != n)
        rc = WK_EIO; /* not while io_mu is held: the map does not change */
    for (size_t i = 0; !rc && nc->cluster && i < n; i++) {
        const char *host = wk__cluster_node_host(nc->db, nodes[i], &sh[i].port);
        rc = !host || !(sh[i].host = strdup(host)) ? WK_ENOMEM
                                                   : wk__db_pin_node(&sh[i].node, nc->db, nodes[i]);
    }
    free(nodes);
    pthread_mutex_lock(&nc->mu);
    shards_free(nc);
    if (!rc) {
        nc->shards = sh;
        nc->nshards = n;
    }
    nc->tracking = false;
    pthread_mutex_unlock(&nc->mu);
    if (rc) {
        for (size_t i = 0; sh && i < n; i++) {
            wk_db_close(sh[i].node);
            free(sh[i].host);
        }
        free(sh);
        return wk__errbuf_set(err, errlen, rc, "near_cache: cannot follow the cluster's primaries: %s",
                              wk_strerror(rc));
    }
    return WK_OK;
}

/* A cluster whose map changed gets shards for its new primaries (the
 * background thread, io_mu taken here). While no session is alive the map
 * is looked at once per heartbeat: a PING lets the handle ask for it anew
 * when a MOVED or a node's ROLE marked it stale. */
static void follow_map(wk_near_cache *nc, int64_t now)
{
    if (!nc->cluster)
        return;
    pthread_mutex_lock(&nc->io_mu);
    pthread_mutex_lock(&nc->mu);
    bool alive = nc->tracking;
    pthread_mutex_unlock(&nc->mu);
    bool changed = wk__cluster_epoch(nc->db) != nc->epoch;
    if (changed || (!alive && now - nc->map_checked_ms >= nc->heartbeat_ms)) {
        nc->map_checked_ms = now;
        wk_db_ping(nc->db);
        uint64_t epoch = wk__cluster_epoch(nc->db);
        if (epoch != nc->epoch && shards_make(nc, NULL, 0) == WK_OK)
            nc->epoch = epoch;
    }
    pthread_mutex_unlock(&nc->io_mu);
}

/* Wait up to ms for a stop request or a subscriber's message; true if a
 * stop came. */
static bool wait_events(wk_near_cache *nc, int ms)
{
    struct pollfd fds[1 + 64];
    nfds_t n = 0;
    fds[n++] = (struct pollfd){.fd = nc->wake[0], .events = POLLIN};
    for (size_t i = 0; i < nc->nshards && n < sizeof(fds) / sizeof(fds[0]); i++)
        if (nc->shards[i].sub)
            fds[n++] = (struct pollfd){.fd = wk__subscriber_fd(nc->shards[i].sub), .events = POLLIN};
    /* More shards than fit: look again soon at the others. */
    if (n < 1 + nc->nshards && ms > 10)
        ms = 10;
    while (poll(fds, n, ms < 0 ? 0 : ms) < 0 && errno == EINTR) {
    }
    return atomic_load(&nc->stop);
}

/* Every event each subscriber has, without waiting; a failed one goes. */
static void take_events(wk_near_cache *nc)
{
    for (size_t i = 0; i < nc->nshards; i++) {
        shard *sh = &nc->shards[i];
        while (sh->sub) {
            wk__sub_event ev;
            if (wk__subscriber_poll(sh->sub, 0, -1, &ev) != WK_OK) {
                drop_subscriber(nc, sh); /* reconnect at once; back off if that fails */
                break;
            }
            if (ev.type == WK__SUB_NOTHING)
                break;
            handle_event(nc, sh, &ev);
        }
    }
}

/* Connect the shards whose subscriber is missing and whose pause is
 * over; returns the ms until the next retry (-1: none pending). */
static int connect_missing(wk_near_cache *nc, int64_t now, bool *connected)
{
    int next = -1;
    for (size_t i = 0; i < nc->nshards; i++) {
        shard *sh = &nc->shards[i];
        if (sh->sub)
            continue;
        if (now < sh->retry_at) {
            int left = (int)(sh->retry_at - now);
            next = next < 0 || left < next ? left : next;
            continue;
        }
        if (connect_subscriber(nc, sh, NULL, 0) == WK_OK) {
            sh->backoff = 0;
            *connected = true;
            continue;
        }
        sh->backoff = sh->backoff ? sh->backoff * 2 : RETRY_MIN_MS;
        if (sh->backoff > nc->retry_max_ms)
            sh->backoff = nc->retry_max_ms;
        sh->retry_at = now + sh->backoff;
        next = next < 0 || sh->backoff < next ? sh->backoff : next;
    }
    return next;
}

static void *near_main(void *arg)
{
    wk_near_cache *nc = arg;
    int64_t next_beat = 0;
    while (!atomic_load(&nc->stop)) {
        int64_t now = wk_monotonic_ms();
        follow_map(nc, now);
        bool connected = false;
        int retry = connect_missing(nc, now, &connected);
        if (connected)
            next_beat = 0; /* enable tracking at once */
        if (now >= next_beat) {
            for (size_t i = 0; i < nc->nshards; i++) {
                shard *sh = &nc->shards[i];
                if (!sh->sub || sh->ping_out)
                    continue;
                if (wk__subscriber_ping(sh->sub) != WK_OK) {
                    drop_subscriber(nc, sh);
                    continue;
                }
                sh->ping_sent_ms = now;
                sh->ping_out = true;
            }
            data_heartbeat(nc);
            next_beat = now + nc->heartbeat_ms;
        }
        int ms = (int)(next_beat - wk_monotonic_ms());
        if (retry >= 0 && retry < ms)
            ms = retry;
        if (wait_events(nc, ms))
            break;
        take_events(nc);
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * Open, close
 * ---------------------------------------------------------------------- */

static void near_free(wk_near_cache *nc)
{
    wk__near_loop_free(nc->loop);
    if (nc->buckets) {
        for (entry *en = nc->lru_head, *older; en; en = older) {
            older = en->older;
            wk_local_copy_clear(&en->copy);
            free(en);
        }
        free(nc->buckets);
    }
    for (size_t i = 0; i < nc->nserved; i++) {
        wk__held_free(&nc->served[i].held);
        free(nc->served[i].prefix);
        free(nc->served[i].denied);
    }
    free(nc->served);
    for (int i = 0; i < 2; i++) {
        if (nc->wake[i] >= 0)
            close(nc->wake[i]);
    }
    pthread_mutex_destroy(&nc->mu);
    pthread_mutex_destroy(&nc->io_mu);
    free(nc);
}

void wk_near_cache_close(wk_near_cache *nc)
{
    if (!nc)
        return;
    wk__near_loop_free(nc->loop); /* its reader reads on the data connection */
    nc->loop = NULL;
    if (nc->thread_started) {
        atomic_store(&nc->stop, true);
        char byte = 1;
        while (write(nc->wake[1], &byte, 1) < 0 && errno == EINTR) {
        }
        pthread_join(nc->thread, NULL);
    }
    shards_free(nc);
    wk_db_close(nc->db);
    near_free(nc);
}

/* The served entity `e` names, or NULL. */
static const served *served_of(const wk_near_cache *nc, const wk_entity *e)
{
    if (!e || !e->kind || !e->ns)
        return NULL;
    for (size_t i = 0; i < nc->nserved; i++) {
        const wk_entity *x = &nc->served[i].held.entity;
        if (strcmp(x->ns, e->ns) == 0 && strcmp(x->kind, e->kind) == 0)
            return &nc->served[i];
    }
    return NULL;
}

static int check_options(const wk_near_cache_options *o, char *err, size_t errlen)
{
    const char *why =
        !o->entities || !o->nentities                            ? "entities are required"
        : o->mode != WK_NEAR_DEFAULT && o->mode != WK_NEAR_BCAST ? "mode is not a wk_near_mode"
        : !o->max_entries || !o->max_bytes ? "max_entries and max_bytes must be > 0"
        : o->ttl_ms < 0                    ? "ttl_ms must be >= 0"
        : o->staleness_ms <= 0             ? "staleness_ms must be > 0"
        : o->heartbeat_ms < 0 || (o->heartbeat_ms && o->heartbeat_ms >= o->staleness_ms)
            ? "heartbeat_ms must be >= 0 and < staleness_ms"
        : o->retry_max_ms < RETRY_MIN_MS ? "retry_max_ms must be >= 50"
                                         : NULL;
    if (why)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "near_cache.open: %s", why);
    return WK_OK;
}

/* Copy entity i of the options. */
static int serve(wk_near_cache *nc, const wk_entity *e, const wk_near_cache_options *o,
                 const wk_cap *cap, char *err, size_t errlen)
{
    char msg[256];
    if (wk_entity_check_msg(e, msg, sizeof(msg)) != WK_OK)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "near_cache.open: entity %zu: %s",
                              nc->nserved, msg);
    bool hashed = strcmp(e->kind, WK_KIND_HASHED_CACHE) == 0;
    if (!hashed && strcmp(e->kind, WK_KIND_CACHE) != 0)
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "near_cache.open: entity %zu is a %s, not a Cache or HashedCache",
                              nc->nserved, e->kind);
    served *se = &nc->served[nc->nserved];
    wk_name none = wk_name_bytes("", 0);
    if (wk__held_init(&se->held, e, hashed ? WK_KIND_HASHED_CACHE : WK_KIND_CACHE, &none))
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "near_cache.open: out of memory");
    nc->nserved++;
    se->hashed = hashed;
    wk_access read = {e, WK_READ};
    se->readable = wk_cap_allows(cap, &read);
    se->ttl_ms = o->ttl_ms && o->ttl_ms < e->ttl_ms ? o->ttl_ms : e->ttl_ms;
    /* The key of the empty name is the prefix of every name's key. */
    char key[WK_KEY_MAX];
    if (wk_key_build(key, sizeof(key), &se->prefix_len, e, &none, NULL) != WK_OK ||
        !(se->prefix = malloc(se->prefix_len + 1)))
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "near_cache.open: out of memory");
    memcpy(se->prefix, key, se->prefix_len + 1);
    return WK_OK;
}

/* An entity the capability may not READ: dispatch's refusal, asked once
 * on the data handle (nothing is sent), for every get of it to return. */
static int ask_refusal(wk_near_cache *nc, served *se, char *err, size_t errlen)
{
    if (se->readable)
        return WK_OK;
    wk_processor *p = wk_db_processor(nc->db);
    wk_body none = WK_BODY_INIT;
    wk_name any = wk_name_str("x"); /* the refusal names no item */
    int rc = se->hashed ? wk_hashed_cache_get(p, &se->held.entity, any, &none)
                        : wk_cache_get(p, &se->held.entity, any, &none);
    wk_body_free(&none);
    if (rc != WK_EDENIED || !(se->denied = strdup(wk_db_errmsg(nc->db))))
        return wk__errbuf_set(err, errlen, rc == WK_EDENIED ? WK_ENOMEM : WK_EINVAL,
                              "near_cache.open: entity %s:%s: the capability's refusal: %s",
                              se->held.entity.kind, se->held.entity.ns, wk_strerror(rc));
    return WK_OK;
}

int wk_near_cache_open(wk_near_cache **out, wk_db *db, const wk_near_cache_options *opts, char *err,
                       size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "near_cache.open: out is NULL");
    *out = NULL;
    if (!db || !opts)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "near_cache.open: db and opts are required");
    int rc = check_options(opts, err, errlen);
    if (rc)
        return rc;
    wk_near_cache *nc = calloc(1, sizeof(*nc));
    if (!nc)
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "near_cache.open: out of memory");
    nc->wake[0] = nc->wake[1] = -1;
    pthread_mutex_init(&nc->mu, NULL);
    pthread_mutex_init(&nc->io_mu, NULL);
    nc->mode = opts->mode;
    nc->max_entries = opts->max_entries;
    nc->max_bytes = opts->max_bytes;
    nc->staleness_ms = opts->staleness_ms;
    nc->heartbeat_ms = opts->heartbeat_ms ? opts->heartbeat_ms : opts->staleness_ms / 4;
    if (nc->heartbeat_ms < 1)
        nc->heartbeat_ms = 1;
    nc->retry_max_ms = opts->retry_max_ms;
    nc->session = 1;
    nc->nbuckets = 16;
    while (nc->nbuckets < opts->max_entries && nc->nbuckets < BUCKETS_MAX)
        nc->nbuckets *= 2;
    nc->buckets = calloc(nc->nbuckets, sizeof(*nc->buckets));
    nc->served = calloc(opts->nentities, sizeof(*nc->served));
    if (!nc->buckets || !nc->served)
        rc = wk__errbuf_set(err, errlen, WK_ENOMEM, "near_cache.open: out of memory");
    const wk_cap *cap = wk_db_capability(db);
    bool any_readable = false;
    for (size_t i = 0; !rc && i < opts->nentities; i++) {
        if (served_of(nc, opts->entities[i]))
            continue; /* listed twice: once is enough (BCAST refuses overlapping prefixes) */
        rc = serve(nc, opts->entities[i], opts, cap, err, errlen);
        any_readable = any_readable || (!rc && nc->served[nc->nserved - 1].readable);
    }
    if (!rc && nc->mode == WK_NEAR_BCAST && !any_readable)
        rc = wk__errbuf_set(err, errlen, WK_EDENIED,
                            "near_cache.open: capability \"%s\" may READ none of the entities "
                            "(BCAST without a prefix would announce every key)",
                            wk_cap_name(cap));
    if (!rc && pipe(nc->wake) != 0)
        rc = wk__errbuf_set(err, errlen, WK_EIO, "near_cache.open: pipe: %s", strerror(errno));
    if (!rc) {
        randombytes_buf(nc->sipkey, sizeof(nc->sipkey)); /* sodium_init: wk_db_open */
        rc = wk__blocking_open(&nc->db, db, err, errlen);
    }
    for (size_t i = 0; !rc && i < nc->nserved; i++)
        rc = ask_refusal(nc, &nc->served[i], err, errlen);
    if (!rc)
        rc = wk__near_loop_new(&nc->loop) ? wk__errbuf_set(err, errlen, WK_ENOMEM,
                                                           "near_cache.open: out of memory")
                                          : WK_OK;
    if (!rc) {
        nc->cluster = wk_db_cluster_primaries(nc->db) > 0;
        nc->epoch = wk__cluster_epoch(nc->db);
        pthread_mutex_lock(&nc->io_mu);
        rc = shards_make(nc, err, errlen);
        pthread_mutex_unlock(&nc->io_mu);
    }
    for (size_t i = 0; !rc && i < nc->nshards; i++)
        rc = connect_subscriber(nc, &nc->shards[i], err, errlen);
    if (!rc) {
        pthread_mutex_lock(&nc->io_mu);
        rc = begin_session(nc);
        pthread_mutex_unlock(&nc->io_mu);
        if (rc)
            wk__errbuf_set(err, errlen, rc, "%s", near_msg);
    }
    if (!rc && pthread_create(&nc->thread, NULL, near_main, nc) != 0)
        rc = wk__errbuf_set(err, errlen, WK_ENOMEM, "near_cache.open: cannot create its thread");
    if (rc) {
        shards_free(nc);
        wk_db_close(nc->db);
        near_free(nc);
        return rc;
    }
    nc->thread_started = true;
    *out = nc;
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * Reads
 * ---------------------------------------------------------------------- */

typedef wk__near_sink sink;
typedef wk__near_item item;

/* Copy the entry's body out (mu held). */
static int emit(const entry *en, const sink *s)
{
    const wk_body *b = &en->copy.body;
    if (s->body) {
        if (!b->found)
            return WK_OK;
        if (wk__body_found(s->body, b->data, b->len) != WK_OK)
            return fail(WK_ENOMEM, "near_cache.get: no memory for a body of %zu bytes", b->len);
        memcpy(s->body->hash, b->hash, WK_HASH_LEN);
        return WK_OK;
    }
    s->buf->found = b->found;
    s->buf->len = b->len;
    if (!b->found)
        return WK_OK;
    if (b->len > s->buf->cap)
        return fail(WK_EINVAL, "near_cache.get: the body of %zu bytes does not fit a buffer of %zu",
                    b->len, s->buf->cap);
    if (b->len)
        memcpy(s->buf->data, b->data, b->len);
    return WK_OK;
}

/* Argument checks and the key; WK_OK or WK_EINVAL with the message. */
static int locate(wk_near_cache *nc, const wk_entity *e, const wk_name *name, item *it)
{
    if (!nc)
        return fail(WK_EINVAL, "near_cache.get: the near cache is NULL");
    if (!(it->se = served_of(nc, e)))
        return fail(WK_EINVAL, "near_cache.get: entity %s:%s is not one this near cache serves",
                    e && e->kind ? e->kind : "(null)", e && e->ns ? e->ns : "(null)");
    char why[160];
    if (wk__name_check(name, why, sizeof(why)) != WK_OK)
        return fail(WK_EINVAL, "near_cache.get: %s", why);
    int rc = wk__key_build_checked(it->key, sizeof(it->key), &it->key_len, &it->se->held.entity,
                                   name, NULL);
    if (!rc)
        it->hash = wk__bytes_map_hash(nc->sipkey, it->key, it->key_len);
    return rc;
}

int wk__near_admit(wk_near_cache *nc, const wk_entity *e, const wk_name *name, item *it)
{
    int rc = locate(nc, e, name, it);
    if (!rc && !it->se->readable)
        rc = fail(WK_EDENIED, "%s", it->se->denied); /* never cached, nothing sent */
    return rc;
}

/*
 * A get that could not be served from memory (io_mu held): read (or
 * revalidate) the entry on the data connection, keep it, and copy it out.
 */
static int fetch_locked(wk_near_cache *nc, const item *it, wk_name name, const sink *s)
{
    const served *se = it->se;
    wk_processor *p = wk_db_processor(nc->db);
    if (begin_session(nc) != WK_OK)
        near_msg[0] = '\0'; /* not this get's failure: its body is served, not trusted */

    pthread_mutex_lock(&nc->mu);
    int64_t t0 = wk_monotonic_ms();
    entry *en = find(nc, it->hash, it->key, it->key_len);
    if (en && verified(nc, en, t0)) { /* another thread read it while we waited */
        nc->stats.hits++;
        touch(nc, en);
        int rc = emit(en, s);
        pthread_mutex_unlock(&nc->mu);
        return rc;
    }
    if (!en && !(en = insert(nc, se, it->hash, it->key, it->key_len))) {
        pthread_mutex_unlock(&nc->mu);
        return fail(WK_ENOMEM, "near_cache.get: out of memory");
    }
    en->fetching = true;
    en->dirty = false;
    uint64_t session = nc->session;
    bool trusted = nc->tracking;
    pthread_mutex_unlock(&nc->mu);

    /* Outside mu: the entry is pinned, and only this thread (holding
     * io_mu) touches its body. */
    wk_item_change change = WK_ITEM_CHANGED;
    int rc = se->hashed ? wk_local_copy_refresh(&en->copy, p, &se->held.entity, name, &change)
                        : wk_cache_get(p, &se->held.entity, name, &en->copy.body);
    if (rc)
        fail(rc, "%s", wk_db_errmsg(nc->db));
    /* A single server's one shard is proven by the read; a cluster's node
     * is the map's business (its heartbeat proves it). */
    after_io(nc, nc->cluster ? NULL : &nc->shards[0], rc, session, t0);

    pthread_mutex_lock(&nc->mu);
    en->fetching = false;
    if (rc) {
        /* A HashedCache body still held waits, unverified, for the next
         * get; nothing else is worth keeping. */
        en->dirty = true;
        if (!(se->hashed && en->copy.body.found))
            drop(nc, en);
    } else {
        bool good = trusted && !en->dirty && nc->tracking && nc->session == session;
        en->session = good ? session : 0;
        en->dirty = !good;
        en->expires_ms = wk__add_ms(t0, se->ttl_ms);
        nc->stats.bytes -= en->bytes;
        en->bytes = it->key_len + en->copy.body.len;
        nc->stats.bytes += en->bytes;
        if (change == WK_ITEM_UNCHANGED)
            nc->stats.revalidations++;
        else
            nc->stats.reads++;
        touch(nc, en);
        rc = emit(en, s);
        evict(nc);
    }
    pthread_mutex_unlock(&nc->mu);
    return rc;
}

/* The get's one deadline, fixed as it starts: the wait for the data
 * connection (a heartbeat may be waiting on a stopped server), enabling
 * tracking, the read and any reconnect all end by it. */
int wk__near_fetch(wk_near_cache *nc, const item *it, wk_name name, const sink *s)
{
    int64_t deadline = wk__db_call_deadline(nc->db);
    if (wk__mutex_lock_until(&nc->io_mu, deadline) != 0)
        return fail(WK_ETIMEDOUT, "near_cache.get: the data connection stayed busy until the "
                                  "command timeout (the server does not answer)");
    int64_t outer = wk__db_bound(nc->db, deadline);
    int rc = fetch_locked(nc, it, name, s);
    wk__db_bound(nc->db, outer);
    pthread_mutex_unlock(&nc->io_mu);
    return rc;
}

bool wk__near_hit(wk_near_cache *nc, const item *it, const sink *s, int *rc)
{
    pthread_mutex_lock(&nc->mu);
    entry *en = find(nc, it->hash, it->key, it->key_len);
    bool hit = en && verified(nc, en, wk_monotonic_ms());
    if (hit) {
        nc->stats.hits++;
        touch(nc, en);
        *rc = emit(en, s);
    }
    pthread_mutex_unlock(&nc->mu);
    return hit;
}

static int near_get(wk_near_cache *nc, const wk_entity *e, wk_name name, const sink *s)
{
    near_msg[0] = '\0';
    item it;
    int rc = wk__near_admit(nc, e, &name, &it);
    if (rc || wk__near_hit(nc, &it, s, &rc))
        return rc;
    return wk__near_fetch(nc, &it, name, s);
}

wk__near_loop *wk__near_loop_of(const wk_near_cache *nc)
{
    return nc->loop;
}

int wk_near_cache_get(wk_near_cache *nc, const wk_entity *entity, wk_name name, wk_body *out)
{
    if (!out)
        return fail(WK_EINVAL, "near_cache.get: out is required");
    wk_body_free(out);
    sink s = {out, NULL};
    return near_get(nc, entity, name, &s);
}

int wk_near_cache_get_into(wk_near_cache *nc, const wk_entity *entity, wk_name name, wk_buffer *buf)
{
    if (!buf || (!buf->data && buf->cap))
        return fail(WK_EINVAL, "near_cache.get: buf is required, with data when cap > 0");
    buf->len = 0;
    buf->found = false;
    sink s = {NULL, buf};
    return near_get(nc, entity, name, &s);
}

int wk_near_cache_peek(wk_near_cache *nc, const wk_entity *entity, wk_name name,
                       wk_near_state *state)
{
    if (!state)
        return fail(WK_EINVAL, "near_cache.peek: state is required");
    *state = WK_NEAR_ABSENT;
    item it;
    int rc = locate(nc, entity, &name, &it);
    if (rc)
        return rc;
    pthread_mutex_lock(&nc->mu);
    const entry *en = find(nc, it.hash, it.key, it.key_len);
    if (en)
        *state = verified(nc, en, wk_monotonic_ms()) ? WK_NEAR_VERIFIED : WK_NEAR_UNVERIFIED;
    pthread_mutex_unlock(&nc->mu);
    return WK_OK;
}

int wk_near_cache_stats(wk_near_cache *nc, wk_near_stats *out)
{
    if (!nc || !out)
        return WK_EINVAL;
    pthread_mutex_lock(&nc->mu);
    *out = nc->stats;
    out->verified = proven(nc, wk_monotonic_ms());
    pthread_mutex_unlock(&nc->mu);
    return WK_OK;
}
