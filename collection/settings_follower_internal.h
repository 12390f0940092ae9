/*
 * collection/settings_follower_internal.h — what the two forms of the
 * settings follower share: the thread form (collection/settings_follower.c)
 * and the event-loop form (collection/settings_follower_loop.c). One
 * struct, one mirror, and the same rules: how a message, a check's head
 * and a load's chunks are judged, and how a load is caught up and
 * installed, live in settings_follower.c; each form only moves the bytes
 * (blocking reads on its thread, or callbacks of the loop). Not installed.
 */
#ifndef WK_COLLECTION_SETTINGS_FOLLOWER_INTERNAL_H
#define WK_COLLECTION_SETTINGS_FOLLOWER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <sodium.h>

#include "collection/bytes_map.h"
#include "collection/common.h"
#include "collection/settings_internal.h"
#include "core/subscriber.h"

#define WK__SF_RETRY_MIN_MS 50
#define WK__SF_LOAD_ATTEMPTS 4 /* loads started over before a sync fails */

/* A message taken from the subscriber but not handled yet (FIFO). */
typedef struct queued {
    struct queued *next;
    size_t len;
    char data[];
} queued;

struct wk_settings_follower {
    /* Fixed at start. */
    wk__held held; /* the Settings entity and the map's name, copied */
    char *chan;
    size_t chan_len;
    wk_settings_change_fn on_change;
    void *ctx;
    int keepalive_ms;
    int retry_max_ms;
    int check_ms;
    int command_timeout_ms;
    unsigned char sipkey[crypto_shorthash_KEYBYTES];

    /* The follower thread's own (and the caller's during start). */
    wk_db *db;
    wk__subscriber *sub;
    /* A cluster handle's: the node the subscriber is on (the primary of
     * the settings' slot when it subscribed), and its port. */
    char sub_host[256];
    int sub_port;
    pthread_t thread;
    bool thread_started; /* and not joined yet */
    bool halted;         /* under `mu`: wk_settings_follower_halt() ran */
    bool ever_subscribed;
    int wake[2]; /* stop writes a byte to wake[1] */
    atomic_bool stop;
    queued *queue_head, *queue_tail; /* messages read during a load */
    int64_t next_check_ms;           /* wk__boot_ms() of the next check */
    int64_t behind;                  /* server version seen ahead of the
                                      * mirror at the last check; 0: none */

    /* The mirror, under `lock` (written by the follower thread only, so
     * that thread reads it without the lock). */
    pthread_rwlock_t lock;
    wk__bytes_map mirror;
    int64_t mirror_version;
    char epoch[WK_SETTINGS_EPOCH_LEN + 1];

    /* Stats and the version waiters see, under `mu`; `cv` on each change. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    wk_settings_stats stats;
    int64_t seen; /* the server's version at the last check (messages may be
                   * forged: only what was read from the server counts) */
    char errmsg[512];
    bool locks_ready;

    /* The event-loop form's state (collection/settings_follower_loop.c);
     * NULL for the thread form. */
    struct wk__sf_loop *loop;
};

struct wk__sf_loop; /* collection/settings_follower_loop.c */

/* Record a failure (stats.synced false, last_status, the message). */
void wk__sf_record_failure(wk_settings_follower *f, int status, const char *msg);

/* The queue of messages received but not handled yet (FIFO). push:
 * WK_OK or WK_ENOMEM; pop: the caller frees what it gets. */
int wk__sf_queue_push(wk_settings_follower *f, const char *msg, size_t len);
queued *wk__sf_queue_pop(wk_settings_follower *f);
void wk__sf_queue_clear(wk_settings_follower *f);

/* A follower with its copies, locks, pipe and empty mirror (no connection
 * yet), after checking opts (all but opts->db, which is the caller's);
 * replies are due within command_timeout_ms (the catch-up's wait). */
int wk__sf_new(wk_settings_follower **out, const wk_settings_follower_options *opts,
               int command_timeout_ms, char *err, size_t errlen);
/* Free it (its connections, mirror, locks). */
void wk__sf_free(wk_settings_follower *f);
/* A subscription is being made: counts a reconnect after the first. */
void wk__sf_subscribing(wk_settings_follower *f);
/* The pause after `backoff` ms, doubled up to retry_max_ms. */
int wk__sf_backoff_next(const wk_settings_follower *f, int backoff);

/* What a message or a check asks for. */
typedef enum wk__sf_verdict {
    WK__SF_OK,     /* nothing to do (a check found the mirror current) */
    WK__SF_APPLY,  /* the next change of the mirror's epoch: wk__sf_apply() */
    WK__SF_RELOAD, /* a gap, garbage or a reset: load the map again */
    WK__SF_CHECK   /* another epoch or an old version: read the head */
} wk__sf_verdict;

/* Judge a message by the follower's rules (counted in the stats); *c is
 * the decoded change when APPLY. */
wk__sf_verdict wk__sf_judge_message(wk_settings_follower *f, const char *msg, size_t len,
                                    wk_settings_change *c);
/* Apply change c (APPLY's) to the mirror, then the callback and waiters.
 * WK_OK or WK_ENOMEM (recorded). */
int wk__sf_apply(wk_settings_follower *f, const wk_settings_change *c);
/* Judge the head a check read (counted): OK or RELOAD. `periodic`: the
 * every-check_ms check (a version that stayed ahead reloads). */
wk__sf_verdict wk__sf_judge_head(wk_settings_follower *f, const wk__settings_head *head,
                                 bool periodic);

/* One load: chunks read into `fresh` (each entry tagged with its chunk's
 * version), then the queued changes bring it to the last chunk's version. */
typedef struct wk__sf_load {
    wk_settings_follower *f; /* NULL: orphaned (its follower went): entries dropped */
    wk__bytes_map fresh;
    wk__settings_head first, prev, head; /* head: the chunk just read */
    char cursor[24], next[24];           /* next: the chunk's next cursor */
    int64_t expected;                    /* catching up: the version wanted next */
} wk__sf_load;

/* Begin a load (cursor "0"). WK_OK or WK_ENOMEM (recorded). */
int wk__sf_load_begin(wk_settings_follower *f, wk__sf_load *l);
/* A chunk's entries (wk__settings_entry_fn, ctx the load). */
int wk__sf_load_entry(void *ctx, const wk__settings_head *head, const char *k, size_t klen,
                      const char *v, size_t vlen);
/* A chunk was read (head, next): WK_OK, *done once the scan is complete
 * (then catch up); or a failure (recorded) with *again: the map was reset
 * under the load, start over. */
int wk__sf_load_chunk(wk__sf_load *l, bool *done, bool *again);
/* Catch up with what is queued: WK_OK with *wait when a change is not
 * received yet (call again when more came; wk__sf_missing() after the
 * command timeout); WK_OK, !*wait: done, install; or a failure (recorded;
 * *again: a change is missing, start over). */
int wk__sf_catch_up(wk__sf_load *l, bool *wait, bool *again);
/* Record that the change l->expected never arrived: WK_ETIMEDOUT. */
int wk__sf_missing(wk__sf_load *l);
/* Install the caught-up map as the mirror (taken from l): the callback
 * gets the difference unless `initial`; waiters wake. */
void wk__sf_load_install(wk__sf_load *l, bool initial);
/* Free what the load still holds. */
void wk__sf_load_end(wk__sf_load *l);

/* The event-loop form's part of _halt() and _free() (settings_follower_loop.c). */
void wk__sf_loop_halt(wk_settings_follower *f);
void wk__sf_loop_free(wk_settings_follower *f);
/* _free() from one of a loop follower's callbacks: true when the free is
 * left to the end of its steps (it was halted). */
bool wk__sf_loop_free_later(wk_settings_follower *f);

/* On a cluster handle `db`: the node its map names for the settings'
 * slot (the channel's), and its port; NULL when db is no cluster handle
 * or no node serves the slot. The address is the map's (borrowed). */
const char *wk__sf_slot_owner(const wk_settings_follower *f, const wk_db *db, int *port);
/* Whether db's map names another node for the slot than host:port, the
 * node the subscriber is on (seen after a head read: a failover, the
 * slot moved). */
bool wk__sf_owner_moved(const wk_settings_follower *f, const wk_db *db, const char *host,
                        int port);

#endif /* WK_COLLECTION_SETTINGS_FOLLOWER_INTERNAL_H */
