/*
 * codegen/kinds.c — the built-in kinds: one row each with everything the
 * generator knows about the kind (its names in schemas and C, its entity
 * macro and parameters, the wording of its header comment, whether it has
 * a body, a rule across its parameters) and, for each, the queries an
 * entity of that kind gets as typed accessors: the runtime function each
 * one wraps, its extra parameters and its effect. The effect here decides
 * which capability handles get the accessor, so it must be the runtime's
 * (each header documents it; tests/codegen checks the handles against the
 * runtime's own refusals).
 *
 * check.c, emit_header.c and emit_source.c read these rows and hold no
 * per-kind code. In `params`/`args`, "BODY" stands for the entity's body
 * type.
 */
#include <stdio.h>

#include "../collection/token_bucket_units.h"
#include "schema.h"

/* The entity part of the header alone: WK_SEMAPHORE_PERMITS_MAX. */
#define WK__ENTITY_MACROS_ONLY
#include "../include/wakuwaku/semaphore.h"

/* The parameters, shared by the kinds that take them. */
static const param_desc param_ttl = {"ttl", "ttl_ms", RULE_DURATION, true, 0, "a %s has no TTL"};
static const param_desc param_capacity = {"capacity", "capacity", RULE_POSITIVE, true, 0,
                                          "only a TokenBucket has capacity, rate and period"};
static const param_desc param_rate = {"rate", "rate", RULE_POSITIVE, true, 0,
                                      "only a TokenBucket has capacity, rate and period"};
static const param_desc param_permits = {"permits", "capacity", RULE_POSITIVE, true, 0,
                                         "only a Semaphore has permits"};
static const param_desc param_period = {"period", "period_ms", RULE_DURATION, false, 1000,
                                        "only a TokenBucket has capacity, rate and period"};

/* LiveView: max_diffs is a whole number (0, which the crate allows, is
 * written as the runtime macro's argument by hand: a schema gives >= 1). */
static const param_desc param_max_diffs = {"max_diffs", "capacity", RULE_POSITIVE, true, 0,
                                           "only a LiveView has max_diffs"};

static int live_view_check(const entity *e, char *why, size_t whylen)
{
    double m = e->params[0].num;
    if (m == (double)(int64_t)m && m <= 9007199254740992.0)
        return -1;
    snprintf(why, whylen, "max_diffs must be a whole number up to 2^53 (got %s)",
             e->params[0].text);
    return 0;
}

/* TokenBucket: the limiter's exact arithmetic refuses what it cannot
 * represent (collection/token_bucket_units.h), so the generator does too. */
static int bucket_check(const entity *e, char *why, size_t whylen)
{
    wk__tb_units units;
    int bad = wk__tb_units_derive(e->params[0].num, e->params[1].num, e->params[2].ms, &units,
                                  why, whylen);
    return !bad ? -1 : bad == WK__TB_BAD_CAPACITY ? 0 : 1;
}

/* Semaphore: permits are whole (entity/kind rule of collection/semaphore.c);
 * the runtime refuses the rest, so the generator does too. */
static int semaphore_check(const entity *e, char *why, size_t whylen)
{
    double n = e->params[0].num;
    if (n >= 1 && n <= WK_SEMAPHORE_PERMITS_MAX && n == (double)(int64_t)n)
        return -1;
    snprintf(why, whylen, "permits must be a whole number from 1 to %d (got %s)",
             WK_SEMAPHORE_PERMITS_MAX, e->params[0].text);
    return 0;
}

#define OPS(a) (sizeof(a) / sizeof((a)[0]))

static const op_desc lock_ops[] = {
    {"try", true, "wk_lock_try", "wk_token *token, bool *acquired", "token, acquired",
     "take the lock if nobody holds it; never waits", NULL},
    {"release", true, "wk_lock_release", "const wk_token *token, bool *released",
     "token, released", "release the lock if it still holds token", NULL},
    {"extend", true, "wk_lock_extend", "const wk_token *token, bool *extended",
     "token, extended", "restart the lease for one more TTL if it still holds token", NULL},
    {"owned", false, "wk_lock_owned", "const wk_token *token, wk_lease_state *state",
     "token, state", "whether token still holds the lease and for how long; writes nothing",
     NULL},
    {"force_release", true, "wk_lock_force_release", "bool *was_held", "was_held",
     "free the lock whoever holds it and wake its first waiter (operators)", NULL},
    {"inspect", false, "wk_lock_inspect", "wk_lock_state *state", "state",
     "is it held, and for how much longer", NULL},
};

static const op_desc rwlock_ops[] = {
    {"try_read", true, "wk_rwlock_try_read", "wk_token *token, bool *acquired",
     "token, acquired", "take a reader lease unless a writer holds it", NULL},
    {"try_write", true, "wk_rwlock_try_write", "wk_token *token, bool *acquired",
     "token, acquired", "take the writer lease unless anyone holds it", NULL},
    {"release_read", true, "wk_rwlock_release_read", "const wk_token *token, bool *was_running",
     "token, was_running", "drop a reader lease", NULL},
    {"extend_read", true, "wk_rwlock_extend_read", "const wk_token *token, bool *extended",
     "token, extended", "renew a running reader lease", NULL},
    {"release_write", true, "wk_rwlock_release_write", "const wk_token *token, bool *released",
     "token, released", "release the writer lease", NULL},
    {"extend_write", true, "wk_rwlock_extend_write", "const wk_token *token, bool *extended",
     "token, extended", "renew the writer lease", NULL},
    {"owned_write", false, "wk_rwlock_owned_write", "const wk_token *token, wk_lease_state *state",
     "token, state", "whether token still holds the writer lease; writes nothing", NULL},
    {"owned_read", false, "wk_rwlock_owned_read", "const wk_token *token, wk_lease_state *state",
     "token, state", "whether the reader lease of token still runs; writes nothing", NULL},
    {"force_release", true, "wk_rwlock_force_release", "bool *was_held", "was_held",
     "free the writer and every reader lease and wake the first waiter (operators)", NULL},
    {"inspect", false, "wk_rwlock_inspect", "wk_rwlock_state *state", "state",
     "whether a writer holds it, and how many readers", NULL},
};

static const op_desc cache_bytes_ops[] = {
    {"get", false, "wk_cache_get", "wk_body *out", "out",
     "read the body into out (found, data, len; free it with wk_body_free())", NULL},
    {"put", true, "wk_cache_put", "const void *body, size_t len", "body, len",
     "store the body with the entity's TTL", NULL},
    {"remove", true, "wk_cache_remove", "bool *removed", "removed", "delete the body", NULL},
};

static const op_desc cache_typed_ops[] = {
    {"get", false, "wk_cache_get_typed", "BODY *body, bool *found", "CODEC, body, found",
     "read and decode the body (free it with BODY_free()); needs a processor that is not "
     "deferred",
     NULL},
    {"put", true, "wk_cache_put_typed", "const BODY *body", "CODEC, body",
     "encode and store the body with the entity's TTL", NULL},
    {"remove", true, "wk_cache_remove", "bool *removed", "removed", "delete the body", NULL},
};

static const op_desc hashed_bytes_ops[] = {
    {"get", false, "wk_hashed_cache_get", "wk_body *out", "out",
     "read body and hash into out (free it with wk_body_free())", NULL},
    {"hash", false, "wk_hashed_cache_hash", "wk_body *out", "out",
     "read only the hash (out->hash; no body crosses the network)", NULL},
    {"get_if_changed", false, "wk_hashed_cache_get_if_changed",
     "const uint8_t known[WK_HASH_LEN], wk_body *out", "known, out",
     "send the body only if its hash differs from known (out->change)", NULL},
    {"put", true, "wk_hashed_cache_put",
     "const void *body, size_t len, uint8_t hash[WK_HASH_LEN]", "body, len, hash",
     "store body and hash with the entity's TTL", NULL},
    {"remove", true, "wk_hashed_cache_remove", "bool *removed", "removed", "delete the item", NULL},
};

static const op_desc hashed_typed_ops[] = {
    {"get", false, "wk_hashed_cache_get_typed", "BODY *body, uint8_t hash[WK_HASH_LEN], bool *found",
     "CODEC, body, hash, found",
     "read the body and its hash (hash may be NULL), and decode the body (free it with "
     "BODY_free()); needs a processor that is not deferred (a batch gives WK_EINVAL)",
     NULL},
    {"hash", false, "wk_hashed_cache_hash", "wk_body *out", "out",
     "read only the hash (out->hash; no body crosses the network)", NULL},
    {"get_if_changed", false, "wk_hashed_cache_get_if_changed_typed",
     "const uint8_t known[WK_HASH_LEN], BODY *body, uint8_t hash[WK_HASH_LEN], "
     "wk_item_change *outcome",
     "known, CODEC, body, hash, outcome",
     "decode the body only if its hash differs from known (WK_ITEM_CHANGED); not deferred",
     NULL},
    {"put", true, "wk_hashed_cache_put_typed", "const BODY *body, uint8_t hash[WK_HASH_LEN]",
     "CODEC, body, hash", "encode the body, store it and its hash with the entity's TTL",
     NULL},
    {"remove", true, "wk_hashed_cache_remove", "bool *removed", "removed", "delete the item",
     NULL},
};

static const op_desc bucket_ops[] = {
    {"acquire", true, "wk_token_bucket_acquire", "uint64_t cost, wk_token_bucket_outcome *outcome",
     "cost, outcome", "refill, then take cost tokens if there", NULL},
    {"peek", false, "wk_token_bucket_peek", "wk_token_bucket_state *state", "state",
     "tokens now, without taking any", NULL},
    {"reset", true, "wk_token_bucket_reset", "bool *was_used", "was_used",
     "refill at once (delete the key)", NULL},
};

static const op_desc settings_ops[] = {
    {"put", true, "wk_settings_put",
     "const void *key, size_t key_len, const void *value, size_t value_len, int64_t *version",
     "key, key_len, value, value_len, version", "set key to value, bump the version, publish", NULL},
    {"remove", true, "wk_settings_remove",
     "const void *key, size_t key_len, wk_settings_removal *out", "key, key_len, out",
     "delete key; if it was there, bump the version and publish", NULL},
    {"snapshot", false, "wk_settings_snapshot", "wk_settings_map **out", "out",
     "the whole map and its version (free with wk_settings_map_free())", NULL},
};

static const op_desc live_view_bytes_ops[] = {
    {"create", true, "wk_live_view_create", "const void *body, size_t len, bool *created",
     "body, len, created", "create it at version 1 unless it exists", NULL},
    {"commit", true, "wk_live_view_commit",
     "uint64_t parent, const void *diff, size_t diff_len, const void *body, size_t body_len, "
     "wk_live_view_commit_outcome *outcome",
     "parent, diff, diff_len, body, body_len, outcome",
     "move it from version parent to the next through diff (conflict if not at parent)", NULL},
    {"get", false, "wk_live_view_get", "wk_live_view_body *out", "out",
     "the latest version and body (free with wk_live_view_body_free())", NULL},
    {"version", false, "wk_live_view_version", "uint64_t *version, bool *found", "version, found",
     "the latest version only", NULL},
    {"history", false, "wk_live_view_history", "wk_live_view_log *out", "out",
     "the base and the diffs after it (free with wk_live_view_log_free())", NULL},
    {"remove", true, "wk_live_view_remove", "bool *removed", "removed",
     "delete it and its history", NULL},
    {"subscribe", false, "wk_live_view_subscribe",
     "const wk_live_view_sub_options *opts, wk_live_view_body *head, wk_live_view_sub **sub",
     "opts, head, sub", "read the head and follow the versions after it on a connection of its own",
     NULL},
    {"resume", false, "wk_live_view_resume",
     "uint64_t version, const wk_live_view_sub_options *opts, wk_live_view_sub **sub",
     "version, opts, sub", "follow the versions after version on a connection of its own", NULL},
};

static const op_desc live_view_typed_ops[] = {
    {"create", true, "wk_live_view_create_typed", "const BODY *body, bool *created",
     "CODEC, body, created", "encode the body and create it at version 1 unless it exists",
     NULL},
    {"commit", true, "wk_live_view_commit_typed",
     "uint64_t parent, const void *diff, size_t diff_len, const BODY *body, "
     "wk_live_view_commit_outcome *outcome",
     "parent, diff, diff_len, CODEC, body, outcome",
     "encode the new body and commit it from parent through diff (bytes)", NULL},
    {"get", false, "wk_live_view_get_typed", "BODY *body, uint64_t *version, bool *found",
     "CODEC, body, version, found",
     "read and decode the latest body (free it with BODY_free()); not deferred", NULL},
    {"version", false, "wk_live_view_version", "uint64_t *version, bool *found", "version, found",
     "the latest version only", NULL},
    {"history", false, "wk_live_view_history", "wk_live_view_log *out", "out",
     "the base and the diffs after it, as bytes (free with wk_live_view_log_free())", NULL},
    {"remove", true, "wk_live_view_remove", "bool *removed", "removed",
     "delete it and its history", NULL},
    {"subscribe", false, "wk_live_view_subscribe",
     "const wk_live_view_sub_options *opts, wk_live_view_body *head, wk_live_view_sub **sub",
     "opts, head, sub", "read the head (bytes) and follow the versions after it", NULL},
    {"resume", false, "wk_live_view_resume",
     "uint64_t version, const wk_live_view_sub_options *opts, wk_live_view_sub **sub",
     "version, opts, sub", "follow the versions after version on a connection of its own", NULL},
};

static const op_desc pipe_bytes_ops[] = {
    {"send", true, "wk_pipe_send", "const void *body, size_t len", "body, len",
     "append a message and restart the pipe's TTL", NULL},
    {"close", true, "wk_pipe_close", "", "", "close the pipe: its receiver ends after the messages",
     NULL},
    {"receive", true, "wk_pipe_receive", "wk_pipe_receiver **receiver", "receiver",
     "open the receiver (its own connection; wk_pipe_recv(), wk_pipe_receiver_close())", NULL},
};

static const op_desc pipe_typed_ops[] = {
    {"send", true, "wk_pipe_send_typed", "const BODY *body", "CODEC, body",
     "encode and append a message, restart the pipe's TTL", NULL},
    {"close", true, "wk_pipe_close", "", "", "close the pipe: its receiver ends after the messages",
     NULL},
    {"receive", true, "wk_pipe_receive", "wk_pipe_receiver **receiver", "receiver",
     "open the receiver (decode with wk_pipe_recv_typed() and the body's codec)", NULL},
};

static const op_desc stream_buffer_bytes_ops[] = {
    {"append", true, "wk_stream_buffer_append", "const void *body, size_t len, int64_t *index",
     "body, len, index", "append a body (index -1: the buffer was finished)", NULL},
    {"finish", true, "wk_stream_buffer_finish", "bool *finished_now", "finished_now",
     "end the buffer: subscribers end after its last body", NULL},
    {"read", false, "wk_stream_buffer_read", "uint64_t from, wk_stream_buffer_contents *out",
     "from, out", "the bodies from index from on (free with wk_stream_buffer_contents_free())",
     NULL},
    {"remove", true, "wk_stream_buffer_remove", "bool *removed", "removed", "delete the buffer",
     NULL},
    {"subscribe", false, "wk_stream_buffer_subscribe",
     "uint64_t from, wk_stream_buffer_subscription **subscription", "from, subscription",
     "follow the buffer from index from on (its own connection; wk_stream_buffer_recv())", NULL},
};

static const op_desc stream_buffer_typed_ops[] = {
    {"append", true, "wk_stream_buffer_append_typed", "const BODY *body, int64_t *index",
     "CODEC, body, index", "encode and append a body (index -1: the buffer was finished)", NULL},
    {"finish", true, "wk_stream_buffer_finish", "bool *finished_now", "finished_now",
     "end the buffer: subscribers end after its last body", NULL},
    {"read", false, "wk_stream_buffer_read", "uint64_t from, wk_stream_buffer_contents *out",
     "from, out",
     "the encoded bodies from index from on (free with "
     "wk_stream_buffer_contents_free())",
     NULL},
    {"remove", true, "wk_stream_buffer_remove", "bool *removed", "removed", "delete the buffer",
     NULL},
    {"subscribe", false, "wk_stream_buffer_subscribe",
     "uint64_t from, wk_stream_buffer_subscription **subscription", "from, subscription",
     "follow the buffer (decode with wk_stream_buffer_recv_typed() and the body's codec)", NULL},
};

static const op_desc fenced_lock_ops[] = {
    {"try", true, "wk_fenced_lock_try", "wk_fenced_lease *lease", "lease",
     "take the lock if nobody holds it, with the next fence; never waits", NULL},
    {"release", true, "wk_fenced_lock_release", "const wk_token *token, bool *released",
     "token, released", "release the lock if it still holds token", NULL},
    {"extend", true, "wk_fenced_lock_extend", "const wk_token *token, bool *extended",
     "token, extended", "restart the lease for one more TTL if it still holds token", NULL},
    {"owned", false, "wk_fenced_lock_owned",
     "const wk_token *token, wk_fenced_lock_ownership *state", "token, state",
     "does token still hold it, for how long, under which fence (extends nothing)", NULL},
    {"inspect", false, "wk_fenced_lock_inspect", "wk_fenced_lock_state *state", "state",
     "is it held, for how much longer, and the last fence", NULL},
    {"force_release", true, "wk_fenced_lock_force_release", "bool *freed", "freed",
     "free it whoever holds it (operators); the fence counter is kept", NULL},
};

static const op_desc semaphore_ops[] = {
    {"try", true, "wk_semaphore_try", "wk_token *token, bool *acquired", "token, acquired",
     "take a permit if fewer than the permits run; never waits", NULL},
    {"release", true, "wk_semaphore_release", "const wk_token *token, bool *was_running",
     "token, was_running", "give back the permit of token", NULL},
    {"extend", true, "wk_semaphore_extend", "const wk_token *token, bool *extended",
     "token, extended", "renew the running permit of token for one TTL", NULL},
    {"owned", false, "wk_semaphore_owned", "const wk_token *token, wk_lease_state *state",
     "token, state", "does token still hold a permit, for how long (extends nothing)", NULL},
    {"inspect", false, "wk_semaphore_inspect", "wk_semaphore_state *state", "state",
     "running and free permits", NULL},
    {"force_release", true, "wk_semaphore_force_release", "int64_t *freed", "freed",
     "free every permit whoever holds them (operators)", NULL},
};

/* The rows: one per kind, in the order schemas list them in messages. A
 * new kind is one row here, with its op tables above. */
static const kind_desc kinds[] = {
    {"Lock", "WK_KIND_LOCK", "WK_LOCK_ENTITY", {&param_ttl, NULL}, ", lease {ttl}", false, NULL,
     lock_ops, NULL, OPS(lock_ops), 0, "WK_LOCK_FAIR_ENTITY"},
    {"RwLock", "WK_KIND_RWLOCK", "WK_RWLOCK_ENTITY", {&param_ttl, NULL}, ", lease {ttl}", false,
     NULL, rwlock_ops, NULL, OPS(rwlock_ops), 0, "WK_RWLOCK_FAIR_ENTITY"},
    {"Cache", "WK_KIND_CACHE", "WK_CACHE_ENTITY", {&param_ttl, NULL}, ", TTL {ttl}", true, NULL,
     cache_bytes_ops, cache_typed_ops, OPS(cache_bytes_ops), OPS(cache_typed_ops), NULL},
    {"HashedCache", "WK_KIND_HASHED_CACHE", "WK_HASHED_CACHE_ENTITY", {&param_ttl, NULL},
     ", TTL {ttl}", true, NULL, hashed_bytes_ops, hashed_typed_ops, OPS(hashed_bytes_ops),
     OPS(hashed_typed_ops), NULL},
    {"TokenBucket", "WK_KIND_TOKEN_BUCKET", "WK_TOKEN_BUCKET_ENTITY",
     {&param_capacity, &param_rate, &param_period, NULL},
     ", {capacity} tokens, refilled at {rate} per {period}", false, bucket_check, bucket_ops,
     NULL, OPS(bucket_ops), 0, NULL},
    {"Settings", "WK_KIND_SETTINGS", "WK_SETTINGS_ENTITY", {NULL}, "", false, NULL, settings_ops,
     NULL, OPS(settings_ops), 0, NULL},
    {"LiveView", "WK_KIND_LIVE_VIEW", "WK_LIVE_VIEW_ENTITY", {&param_max_diffs, NULL},
     ", history of up to {max_diffs} diffs", true, live_view_check, live_view_bytes_ops,
     live_view_typed_ops, OPS(live_view_bytes_ops), OPS(live_view_typed_ops), NULL},
    {"Pipe", "WK_KIND_PIPE", "WK_PIPE_ENTITY", {&param_ttl, NULL}, ", TTL {ttl}", true, NULL,
     pipe_bytes_ops, pipe_typed_ops, OPS(pipe_bytes_ops), OPS(pipe_typed_ops), NULL},
    {"StreamBuffer", "WK_KIND_STREAM_BUFFER", "WK_STREAM_BUFFER_ENTITY", {&param_ttl, NULL},
     ", TTL {ttl}", true, NULL, stream_buffer_bytes_ops, stream_buffer_typed_ops,
     OPS(stream_buffer_bytes_ops), OPS(stream_buffer_typed_ops), NULL},
    {"FencedLock", "WK_KIND_FENCED_LOCK", "WK_FENCED_LOCK_ENTITY", {&param_ttl, NULL},
     ", lease {ttl}, fenced", false, NULL, fenced_lock_ops, NULL, OPS(fenced_lock_ops), 0, NULL},
    {"Semaphore", "WK_KIND_SEMAPHORE", "WK_SEMAPHORE_ENTITY", {&param_permits, &param_ttl, NULL},
     ", {permits} permits, lease {ttl}", false, semaphore_check, semaphore_ops, NULL,
     OPS(semaphore_ops), 0, NULL},
};

#define NKINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))
_Static_assert(NKINDS <= KIND_MAX, "raise KIND_MAX");

int kind_count(void)
{
    return NKINDS;
}

const kind_desc *kind_info(kind k)
{
    return &kinds[k];
}

const param_desc *const *kind_all_params(void)
{
    static const param_desc *all[KIND_MAX * KIND_PARAMS_MAX + 1];
    static bool done;
    if (!done) {
        size_t n = 0;
        for (int k = 0; k < NKINDS; k++) {
            for (const param_desc *const *p = kinds[k].params; *p; p++) {
                bool seen = false;
                for (size_t i = 0; i < n; i++)
                    seen = seen || all[i] == *p;
                if (!seen)
                    all[n++] = *p;
            }
        }
        done = true;
    }
    return all;
}

const op_desc *kind_ops(const entity *e, size_t *count)
{
    const kind_desc *kd = &kinds[e->kind];
    bool typed = e->body && kd->typed_ops;
    *count = typed ? kd->ntyped_ops : kd->nops;
    return typed ? kd->typed_ops : kd->ops;
}
