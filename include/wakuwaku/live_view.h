/*
 * wakuwaku/live_view.h — LiveView: a durable body with a linear history of
 * diffs, the latest version read in O(1), followed by subscribers.
 *
 * Redis layout (the Rust crate's, plus one field it ignores):
 *   @@wakuwaku-entity:LiveView:{<ns>:<name>}:h  hash: v = version (decimal,
 *                                                from 1), b = latest body,
 *                                                g = generation (below)
 *   @@wakuwaku-entity:LiveView:{<ns>:<name>}:l  stream, entry IDs
 *                                                <version>-0:
 *       the first base       base <body> g <gen>
 *       a commit             diff <diff> g <gen>
 *       a squash base        base <body> diff <diff> g <gen>   (in this order)
 * No TTL: a view lives until removed.
 *
 * The generation `g` (16 random hex digits) is taken when a view is
 * created here, and every entry written here repeats the head's after the
 * crate's fields; the crate reads fields by name and ignores it. A view
 * the crate created has none and gets none (commits here copy the head's
 * `g` only when it has one), so its keys stay the crate's byte for byte.
 * It is how a subscription tells the view it follows from a later one of
 * the same name (docs/dynamic.md, LiveView, "Re-creation").
 *
 *   wk_live_view_create    script: v=1, g, log = [1-0 base] WRITE  false if it exists
 *   wk_live_view_commit    script: if v == parent …         WRITE  committed / conflict / absent
 *   wk_live_view_get       HMGET h v b                       READ   version + body, or absent
 *   wk_live_view_version   HGET h v                          READ
 *   wk_live_view_history   XRANGE l - +                      READ   base + diffs
 *   wk_live_view_remove    UNLINK h l                        WRITE
 *   wk_live_view_subscribe HMGET h v b g; a subscription     READ
 *   wk_live_view_resume    a subscription from a version     READ   (nothing sent)
 *   wk_live_view_recv      XREAD COUNT 128 BLOCK … on the subscription's own
 *                          connection (HMGET h v g after a quiet poll, or
 *                          after entries without g)          READ
 *
 * Diffs are opaque bytes: the caller gives both the diff and the body it
 * makes, and a function that applies a diff to a body (wk_live_view_apply_fn)
 * wherever the library must rebuild a body (wk_live_view_update(),
 * wk_live_view_log_latest()), so any diff format works.
 *
 * Squashing (the crate's rule): a commit that finds the log already holding
 * more than max_diffs entries (the base counts, so: max_diffs diffs after
 * the base) empties it and writes one squash base at the new version,
 * holding the body and the diff. A subscriber one version behind still
 * reads a diff; one further behind reads the whole body (a snapshot).
 *
 * WARNING: nothing checks that a commit's body is its parent's body with
 * the diff applied. Subscribers apply the diff, readers of the latest
 * version get the body: they disagree if the two do not match.
 *
 * RE-CREATION: a subscription follows one view, never a later one of the
 * same name. Once a view created here is removed, its subscribers get
 * WK_LIVE_VIEW_GONE, however it is re-created (here or by the crate) and
 * whatever version the new one reaches: after the old view's entries
 * already read, at the first entry of another generation (or without one,
 * when the head then has another), or at the next idle poll. A view
 * created by the crate (no generation) is followed as before; its
 * re-creation here is seen (the new entries carry a generation), its
 * re-creation by the crate only when the new view is below the
 * subscriber's version at an idle poll (nothing tells two crate-created
 * views apart: their entries may then be taken for the old view's). The
 * crate's own subscriptions notice no re-creation at all.
 *
 * THREADS: the queries follow their handle's rule (one thread at a time).
 * A subscription owns a connection of its own and is used by one thread at
 * a time; only wk_live_view_sub_stop() may come from any thread.
 *
 * OWNERSHIP: bodies, logs and subscriptions the calls fill belong to the
 * caller, each with its free or close function (all accept NULL); the
 * bytes of an event are borrowed from its subscription until the next
 * recv.
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own. */
#ifndef WAKUWAKU_LIVE_VIEW_ENTITY
#define WAKUWAKU_LIVE_VIEW_ENTITY
#define WK_KIND_LIVE_VIEW "LiveView"
/* A LiveView entity: namespace and the most diffs its history keeps after
 * its base (a whole number 0..2^53, in `capacity`; 0: every commit
 * squashes). */
#define WK_LIVE_VIEW_ENTITY(ns_, max_diffs_) WK__ENTITY(WK_KIND_LIVE_VIEW, ns_, 0, max_diffs_, 0, 0)
/* The rule on max_diffs, written once: wk_entity_check() applies it to
 * descriptors and wk-codegen to schemas, with this text and " (got …)". */
#define WK__LIVE_VIEW_MAX_DIFFS_OK(m)                                                              \
    ((m) >= 0 && (m) <= 9007199254740992.0 && (m) == (double)(long long)(m))
#define WK__LIVE_VIEW_MAX_DIFFS_RULE "max_diffs must be a whole number 0..2^53"
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_LIVE_VIEW_OPS(XX)                                                                       \
    XX(live_view, create, WRITE, (wk_name name, const void *body, size_t len, bool *created),      \
       "create it at version 1 unless it exists")                                                  \
    XX(live_view, commit, WRITE,                                                                   \
       (wk_name name, uint64_t parent, const void *diff, size_t diff_len, const void *body,        \
        size_t body_len, wk_live_view_commit_outcome *outcome),                                    \
       "move it from version parent to the next through diff (conflict if not at parent)")         \
    XX(live_view, get, READ, (wk_name name, wk_live_view_body *out),                               \
       "the latest version and body (free with wk_live_view_body_free())")                         \
    XX(live_view, version, READ, (wk_name name, uint64_t *version, bool *found),                   \
       "the latest version only")                                                                  \
    XX(live_view, history, READ, (wk_name name, wk_live_view_log *out),                            \
       "the base and the diffs after it (free with wk_live_view_log_free())")                      \
    XX(live_view, remove, WRITE, (wk_name name, bool *removed), "delete it and its history")       \
    XX(live_view, subscribe, READ,                                                                 \
       (wk_name name, const wk_live_view_sub_options *opts, wk_live_view_body *head,               \
        wk_live_view_sub **sub),                                                                   \
       "read the head and follow the versions after it on a connection of its own")                \
    XX(live_view, resume, READ,                                                                    \
       (wk_name name, uint64_t version, const wk_live_view_sub_options *opts,                      \
        wk_live_view_sub **sub),                                                                   \
       "follow the versions after version on a connection of its own")
/* What an entity with a body record gets instead, for wk-codegen: the _typed
 * functions (the accessor takes the record for `codec, value`), and the
 * plain rows it words otherwise. */
#define WK_LIVE_VIEW_TYPED_OPS(XX)                                                                 \
    XX(live_view, create_typed, WRITE,                                                             \
       (wk_name name, const wk_codec *codec, const void *value, bool *created),                    \
       "encode the body and create it at version 1 unless it exists")                              \
    XX(live_view, commit_typed, WRITE,                                                             \
       (wk_name name, uint64_t parent, const void *diff, size_t diff_len, const wk_codec *codec,   \
        const void *value, wk_live_view_commit_outcome *outcome),                                  \
       "encode the new body and commit it from parent through diff (bytes)")                       \
    XX(live_view, get_typed, READ,                                                                 \
       (wk_name name, const wk_codec *codec, void *value, uint64_t *version, bool *found),         \
       "read and decode the latest body (free it with BODY_free()); not deferred")                 \
    XX(live_view, history, READ, (wk_name name, wk_live_view_log *out),                            \
       "the base and the diffs after it, as bytes (free with wk_live_view_log_free())")            \
    XX(live_view, subscribe, READ,                                                                 \
       (wk_name name, const wk_live_view_sub_options *opts, wk_live_view_body *head,               \
        wk_live_view_sub **sub),                                                                   \
       "read the head (bytes) and follow the versions after it")
/* The same rule on a schema's entity: its row's check. */
#define WK__LIVE_VIEW_SCHEMA_CHECK(v, why, whylen)                                                 \
    (WK__LIVE_VIEW_MAX_DIFFS_OK((v)[0].num)                                                        \
         ? -1                                                                                      \
         : (snprintf(why, whylen, WK__LIVE_VIEW_MAX_DIFFS_RULE " (got %s)", (v)[0].text), 0))
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). max_diffs is a
 * POSITIVE number there: 0, which the rule allows, is written as the
 * macro's argument by hand. */
#define WK_LIVE_VIEW_SCHEMA(KIND, PARAM)                                                           \
    KIND(LIVE_VIEW, ", history of up to {max_diffs} diffs",                                        \
         BODY, WK__LIVE_VIEW_SCHEMA_CHECK, NO_FAIR, NO_PARTS)                                      \
    PARAM(max_diffs, capacity, POSITIVE, REQUIRED, 0, "only a LiveView has max_diffs")
#endif

#if !defined(WAKUWAKU_LIVE_VIEW_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_LIVE_VIEW_H

#include <wakuwaku/async.h>
#include <wakuwaku/cache.h>
#include <wakuwaku/db.h>
#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The highest parent version a commit accepts: the crate's script does its
 * arithmetic in Lua doubles, exact up to 2^53. */
#define WK_LIVE_VIEW_VERSION_MAX ((uint64_t)1 << 53)

/*
 * A body at a version: the OUT value of get and subscribe, and the local
 * copy a follower keeps up to date with wk_live_view_update().
 *
 *   found    the view exists (get, subscribe); set by update too.
 *   version  the version, from 1.
 *   data     malloc'ed, len + 1 bytes, the last a NUL that is not part of
 *            the body; never NULL when found. NULL otherwise.
 *
 * OWNERSHIP: release with wk_live_view_body_free(); every call that fills
 * one frees what it held first, so one can be reused. Initialise with
 * WK_LIVE_VIEW_BODY_INIT.
 */
typedef struct wk_live_view_body {
    bool found;
    uint64_t version;
    uint8_t *data;
    size_t len;
} wk_live_view_body;

#define WK_LIVE_VIEW_BODY_INIT                                                                     \
    {                                                                                              \
        false, 0, NULL, 0                                                                          \
    }

/* Free body->data and reset it to WK_LIVE_VIEW_BODY_INIT. NULL is a no-op. */
WK_API void wk_live_view_body_free(wk_live_view_body *body);

/*
 * The diff function: the body that `diff` makes of `body` (the body at the
 * version before the diff's). Put a malloc'ed buffer in *out (may stay NULL
 * for an empty body) and its length in *out_len; the library takes it and
 * releases it with free(). Return WK_OK, or a status (WK_ECORRUPT for a
 * diff that does not apply, WK_ENOMEM) after which *out must be NULL or
 * something free() accepts; that status is returned by the caller.
 */
typedef int (*wk_live_view_apply_fn)(void *arg, const uint8_t *body, size_t body_len,
                                     const uint8_t *diff, size_t diff_len, uint8_t **out,
                                     size_t *out_len);

/*
 * wk_live_view_create — create `name` at version 1 with `body` (`len`
 * bytes; NULL only when len is 0) and a new random generation, unless it
 * exists: *created is false and nothing changes. Any old history under
 * the name is deleted.
 *
 * Returns WK_OK (see *created), WK_EINVAL (bad entity, name or argument,
 * len > WK_BODY_MAX), WK_EDENIED, or a connection / server error
 * (WK_EUNKNOWN: sent, reply lost — it may exist now). WRITE effect.
 */
WK_API int wk_live_view_create(wk_processor *p, const wk_entity *view, wk_name name,
                               const void *body, size_t len, bool *created);

/* How a commit ended. */
typedef enum wk_live_view_commit_result {
    WK_LIVE_VIEW_COMMITTED = 0, /* the view moved to `version` */
    WK_LIVE_VIEW_CONFLICT =
        1,                  /* it was not at the parent; `version` is its head; nothing changed */
    WK_LIVE_VIEW_ABSENT = 2 /* there is no view; nothing changed */
} wk_live_view_commit_result;

typedef struct wk_live_view_commit_outcome {
    wk_live_view_commit_result result;
    uint64_t version; /* COMMITTED: the new version; CONFLICT: the head; ABSENT: 0 */
} wk_live_view_commit_outcome;

/*
 * wk_live_view_commit — move `name` from version `parent` to parent + 1,
 * whose body is `body` (`body_len` bytes), through `diff` (`diff_len`
 * bytes), in one script: only if the head is at `parent` (compared as the
 * decimal text, as the crate does). Squashes the history by the rule in
 * the banner.
 *
 *   parent   1..WK_LIVE_VIEW_VERSION_MAX - 1.
 *   outcome  OUT: result and version (written by the parser).
 *
 * Returns WK_OK (see *outcome), WK_EINVAL (bad argument, a body or diff
 * over WK_BODY_MAX), WK_EDENIED, WK_ECORRUPT (a reply of another shape),
 * or a connection / server error. WRITE effect; never re-sent: after
 * WK_EUNKNOWN the commit may have happened — read the version to know
 * (a CONFLICT at parent + 1 with your body there is your own commit). Works
 * in a batch.
 */
WK_API int wk_live_view_commit(wk_processor *p, const wk_entity *view, wk_name name,
                               uint64_t parent, const void *diff, size_t diff_len, const void *body,
                               size_t body_len, wk_live_view_commit_outcome *outcome);

/*
 * wk_live_view_get — the latest version and body of `name` (HMGET).
 * out->found is false when the view is absent. A head that lacks one of
 * its fields, or whose version is not a decimal u64, is WK_ECORRUPT naming
 * the key. READ effect; retry-safe; works in a batch.
 */
WK_API int wk_live_view_get(wk_processor *p, const wk_entity *view, wk_name name,
                            wk_live_view_body *out);

/* wk_live_view_version — only the latest version (HGET): *found false when
 * absent; a version that is not a decimal u64 is WK_ECORRUPT. READ;
 * retry-safe. Refuses a batch (WK_EINVAL). */
WK_API int wk_live_view_version(wk_processor *p, const wk_entity *view, wk_name name,
                                uint64_t *version, bool *found);

/* One diff of a history. */
typedef struct wk_live_view_diff {
    uint8_t *data; /* malloc'ed, len + 1 bytes (NUL-terminated) */
    size_t len;
} wk_live_view_diff;

/*
 * The history: the oldest version kept and the diffs from it to the
 * latest; diffs[i] makes version base.version + i + 1.
 * OWNERSHIP: wk_live_view_log_free(); initialise with
 * WK_LIVE_VIEW_LOG_INIT (a read frees what it held first).
 */
typedef struct wk_live_view_log {
    wk_live_view_body base; /* base.found: the view has a history */
    wk_live_view_diff *diffs;
    size_t ndiffs;
} wk_live_view_log;

#define WK_LIVE_VIEW_LOG_INIT                                                                      \
    {                                                                                              \
        WK_LIVE_VIEW_BODY_INIT, NULL, 0                                                            \
    }

WK_API void wk_live_view_log_free(wk_live_view_log *history);

/*
 * wk_live_view_history — the whole history (XRANGE l - +). An empty log is
 * out->base.found = false. WK_ECORRUPT (naming the key) when the first
 * entry has no base or an ID other than <version>-0, or a later entry is
 * not the next version with a diff (a later entry's base is ignored, as
 * the crate does). READ effect; retry-safe. Refuses a batch (WK_EINVAL).
 */
WK_API int wk_live_view_history(wk_processor *p, const wk_entity *view, wk_name name,
                                wk_live_view_log *out);

/* wk_live_view_log_latest — apply the diffs of `h` to its base into
 * `out` (freed first). Returns WK_OK, WK_EINVAL (no history), or the
 * apply function's status. Touches no network. */
WK_API int wk_live_view_log_latest(const wk_live_view_log *h, wk_live_view_apply_fn apply,
                                   void *arg, wk_live_view_body *out);

/* wk_live_view_remove — delete the view and its history (UNLINK h l);
 * *removed (may be NULL): whether any of them existed. Its subscribers
 * report WK_LIVE_VIEW_GONE at their next idle poll, or at the first entry
 * of a view re-created under the name. WRITE effect. */
WK_API int wk_live_view_remove(wk_processor *p, const wk_entity *view, wk_name name, bool *removed);

/* ------------------------------------------------------------------------
 * Subscriptions
 * ---------------------------------------------------------------------- */

typedef struct wk_live_view_sub wk_live_view_sub;

/* What wk_live_view_recv() gives. */
typedef enum wk_live_view_event_type {
    WK_LIVE_VIEW_DIFF = 1,     /* the previous version became `version` through the diff `data` */
    WK_LIVE_VIEW_SNAPSHOT = 2, /* the whole body `data` at `version` (the diffs before it
                                  were squashed before this subscription read them) */
    WK_LIVE_VIEW_GONE = 3,     /* the view followed was removed (and maybe
                                  re-created: see RE-CREATION); final */
    WK_LIVE_VIEW_STOPPED = 4   /* wk_live_view_sub_stop() was called; final */
} wk_live_view_event_type;

/*
 * One event. For DIFF and SNAPSHOT, `data` (len bytes, followed by a NUL
 * that is not part of them) is BORROWED from the subscription: valid until
 * its next recv or close, so a follower reads it (or copies it, as
 * wk_live_view_update() does) without an allocation per event. NULL for
 * GONE and STOPPED. Nothing to free; initialise with
 * WK_LIVE_VIEW_EVENT_INIT.
 */
typedef struct wk_live_view_event {
    wk_live_view_event_type type;
    uint64_t version;
    const uint8_t *data;
    size_t len;
} wk_live_view_event;

#define WK_LIVE_VIEW_EVENT_INIT                                                                    \
    {                                                                                              \
        WK_LIVE_VIEW_STOPPED, 0, NULL, 0                                                           \
    }

/*
 * Options of a subscription. Start from WK_LIVE_VIEW_SUB_OPTIONS_INIT.
 *
 *   poll_ms  the longest one XREAD blocks (≥ 1). When it ends with nothing
 *            new, the subscription reads the head (HMGET h v g, on its own
 *            connection) to tell a removed or re-created view from a quiet
 *            one, then waits again. It bounds how late WK_LIVE_VIEW_GONE
 *            comes; it does not delay any change. (The crate blocks without
 *            limit and never reports a removed view.)
 */
typedef struct wk_live_view_sub_options {
    int64_t poll_ms;
} wk_live_view_sub_options;

#define WK_LIVE_VIEW_SUB_OPTIONS_INIT                                                              \
    {                                                                                              \
        .poll_ms = 2000                                                                            \
    }

/*
 * wk_live_view_subscribe — read the latest version of `name` into `head`
 * (HMGET h v b g, through `p`) and, when the view exists, open a
 * subscription to the versions after it in *sub: of that view, the one
 * with the generation read (WK_LIVE_VIEW_GONE once it is removed).
 *
 *   p     a processor that is not deferred (a batch is refused, WK_EINVAL),
 *         whose handle the subscription's connection copies: a second
 *         connection opened from the same settings (server, credentials,
 *         TLS, database, client name, timeouts) and with the same
 *         capability, used for nothing else. The handle may be closed
 *         while the subscription lives.
 *   opts  NULL: WK_LIVE_VIEW_SUB_OPTIONS_INIT.
 *   head  OUT: found, version, body (freed first).
 *   sub   OUT: the subscription, NULL when the view is absent or on
 *         failure. Close it with wk_live_view_sub_close().
 *
 * Returns WK_OK (see head->found), WK_EINVAL, WK_EDENIED (the capability
 * does not grant READ: nothing sent), WK_ECORRUPT, or a connection error
 * (also from opening the subscription's connection, with the message in
 * the handle's detail). READ effect: a read-only handle may subscribe.
 */
WK_API int wk_live_view_subscribe(wk_processor *p, const wk_entity *view, wk_name name,
                                  const wk_live_view_sub_options *opts, wk_live_view_body *head,
                                  wk_live_view_sub **sub);

/*
 * wk_live_view_resume — a subscription to the versions of `name` after
 * `version` (0: from the start, which gives a snapshot of the base first).
 * Sends nothing to the view; the capability is checked here (READ:
 * WK_EDENIED otherwise) and by every read of the subscription. A view
 * that does not exist is reported WK_LIVE_VIEW_GONE by recv at its first
 * idle poll (the crate would wait for it to be created). A version does
 * not say which view it was of: the subscription follows the generation
 * of the first entry carrying one, or head, that it reads, so a view
 * re-created before that, past `version`, is taken for the one meant;
 * re-creations after it are GONE. Arguments and returns as
 * wk_live_view_subscribe().
 */
WK_API int wk_live_view_resume(wk_processor *p, const wk_entity *view, wk_name name,
                               uint64_t version, const wk_live_view_sub_options *opts,
                               wk_live_view_sub **sub);

/*
 * wk_live_view_recv — the next change, waiting for it as long as it takes
 * (or until wk_live_view_sub_stop()). It catches up first: every entry
 * after the subscription's version is read before it waits, none is
 * skipped, and diffs squashed away become one SNAPSHOT.
 *
 * For an entry at version w, the subscription being at c:
 *   w == c + 1 with a diff  → WK_LIVE_VIEW_DIFF;
 *   else with a base         → WK_LIVE_VIEW_SNAPSHOT;
 *   else (or an ID other than <w>-0) → WK_ECORRUPT naming the key and the
 *   version: the entry is passed over and c stays (as the crate does), so
 *   the diffs after it fail too until a base comes; resubscribe to start
 *   again from the latest body.
 *
 * Entries of another view (another generation; see RE-CREATION) are never
 * handed out: the entries of the view followed read before them come
 * first, then WK_LIVE_VIEW_GONE.
 *
 * Returns WK_OK (see event->type; after GONE and STOPPED every call gives
 * the same at once, sending nothing), WK_ECORRUPT as above (or a reply of
 * another shape), WK_EDENIED, WK_ENOMEM, or a connection error (WK_EIO,
 * WK_ETIMEDOUT: nothing is lost — the next call reconnects and reads from
 * the same version). READ effect (each XREAD and head read is a query of
 * the handle's capability). One thread at a time per subscription.
 */
WK_API int wk_live_view_recv(wk_live_view_sub *sub, wk_live_view_event *event);

/*
 * wk_live_view_recv_async — wk_live_view_recv() through the event loop:
 * the next change of a subscription opened through an event-loop handle.
 * wk_live_view_subscribe(wk_async_with(a, on_open, arg), …) writes *sub
 * at once and reads the head through the loop: when on_open ran with
 * WK_OK and head->found, the subscription follows the versions after it;
 * otherwise close it (an absent view has nothing to follow; do not close
 * it before on_open ran). wk_live_view_resume() through the loop sends
 * nothing and calls back nothing: the subscription is ready at once.
 *
 *   event  OUT: the change, written before `done` runs (data valid until
 *          the next receive or the close). Keep it valid until then.
 *   done   called once, from wk_async_process() (never inside this
 *          call), as done(a, status, msg_text, arg): the status of
 *          wk_live_view_recv().
 *
 * The subscription reads (XREAD BLOCK poll_ms, the head probe) on a
 * connection of its own, which joins the handle's descriptor
 * (wakuwaku/async.h, 8.), with the blocking form's queries and rules:
 * every entry after its version once, DIFF / SNAPSHOT by the crate's
 * rule, GONE when the view is removed or re-created; a read whose reply
 * is lost (WK_EIO) reads again from the same cursor. One receive at a
 * time. wk_live_view_sub_stop() (on the loop's thread) ends the receive
 * outstanding with STOPPED at the next wk_async_process();
 * wk_live_view_sub_close() drops it (its callback is not called). When
 * the handle closes, the receive outstanding ends with WK_EIO and every
 * later one returns WK_EIO.
 *
 * Returns WK_OK (queued), WK_EINVAL (NULL argument, a blocking
 * subscription, one outstanding, not open: message in
 * wk_live_view_sub_errmsg()), WK_EIO (the handle closed).
 * wk_live_view_recv() on a loop subscription returns WK_EINVAL.
 */
WK_API int wk_live_view_recv_async(wk_live_view_sub *sub, wk_live_view_event *event,
                                   wk_async_done_fn done, void *arg);

/* The version of the last event, or the one the subscription started at. */
WK_API uint64_t wk_live_view_sub_version(const wk_live_view_sub *sub);

/* The detail message of the subscription's last failure; borrowed until
 * its next call. Never NULL. */
WK_API const char *wk_live_view_sub_errmsg(const wk_live_view_sub *sub);

/*
 * wk_live_view_sub_stop — end the subscription's wait in progress at once
 * (its connection is closed) and make every later recv give
 * WK_LIVE_VIEW_STOPPED without sending anything. Thread-safe and
 * async-signal-safe: any thread may call it while the subscription is
 * open (not during or after wk_live_view_sub_close()). NULL is a no-op.
 */
WK_API void wk_live_view_sub_stop(wk_live_view_sub *sub);

/* wk_live_view_sub_close — close the subscription's connection and free
 * it. No recv may be running. NULL is a harmless no-op. */
WK_API void wk_live_view_sub_close(wk_live_view_sub *sub);

/*
 * wk_live_view_update — move the local copy `view` to the version of
 * `event`, as a follower does with each event of recv: a SNAPSHOT replaces
 * it; a DIFF must be for view->version + 1 and goes through `apply`.
 * Returns WK_OK, WK_EINVAL (a DIFF for another version, GONE or STOPPED, a
 * NULL argument: view unchanged), WK_ENOMEM, or apply's status (view
 * unchanged). Touches no network.
 */
WK_API int wk_live_view_update(wk_live_view_body *view, const wk_live_view_event *event,
                               wk_live_view_apply_fn apply, void *arg);

/* ------------------------------------------------------------------------
 * Typed bodies (a wk_codec, wakuwaku/cache.h; diffs stay bytes)
 * ---------------------------------------------------------------------- */

/* wk_live_view_create_typed — encode `value` with the codec, then
 * wk_live_view_create(). An encoder failure is returned, nothing sent. */
WK_API int wk_live_view_create_typed(wk_processor *p, const wk_entity *view, wk_name name,
                                     const wk_codec *codec, const void *value, bool *created);

/* wk_live_view_commit_typed — encode `value` (the new body), then
 * wk_live_view_commit() with the diff bytes. Works in a batch (the batch
 * copies the bytes when the query is queued). */
WK_API int wk_live_view_commit_typed(wk_processor *p, const wk_entity *view, wk_name name,
                                     uint64_t parent, const void *diff, size_t diff_len,
                                     const wk_codec *codec, const void *value,
                                     wk_live_view_commit_outcome *outcome);

/* wk_live_view_get_typed — wk_live_view_get() then decode into `value`
 * (untouched when absent); *version gets its version. A body that does
 * not decode is the decoder's status (WK_ECORRUPT) naming the key and the
 * codec. Refuses a batch (WK_EINVAL). READ effect. */
WK_API int wk_live_view_get_typed(wk_processor *p, const wk_entity *view, wk_name name,
                                  const wk_codec *codec, void *value, uint64_t *version,
                                  bool *found);

WK__OPS(WK_LIVE_VIEW_OPS)
WK__OPS_TYPED(WK_LIVE_VIEW_TYPED_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_LIVE_VIEW_H */
