/*
 * wakuwaku/wakuwaku.h — the umbrella header: include this one.
 *
 * wakuwaku lets the replicas of a service coordinate through Redis: lease
 * locks, reader-writer locks, caches, rate limiters and synced settings,
 * each an *entity*, every access a *query* with a declared effect, and
 * every handle a *capability* that dispatch checks before anything reaches
 * Redis.
 */
#ifndef WAKUWAKU_H
#define WAKUWAKU_H

#include <wakuwaku/common.h>
#include <wakuwaku/entity.h>
#include <wakuwaku/clock.h>
#include <wakuwaku/token.h>
#include <wakuwaku/capability.h>
#include <wakuwaku/key.h>
#include <wakuwaku/query.h>
#include <wakuwaku/db.h>
#include <wakuwaku/hooks.h>
#include <wakuwaku/batch.h>
#include <wakuwaku/async.h>
#include <wakuwaku/pool.h>
#include <wakuwaku/lock.h>
#include <wakuwaku/rwlock.h>
#include <wakuwaku/cache.h>
#include <wakuwaku/hashed_cache.h>
#include <wakuwaku/near_cache.h>
#include <wakuwaku/token_bucket.h>
#include <wakuwaku/settings.h>
#include <wakuwaku/live_view.h>
#include <wakuwaku/pipe.h>
#include <wakuwaku/stream_buffer.h>
#include <wakuwaku/fenced_lock.h>
#include <wakuwaku/semaphore.h>
#include <wakuwaku/deadline.h>
#include <wakuwaku/lease_keeper.h>
#include <wakuwaku/cron.h>
#include <wakuwaku/metrics.h>

#endif /* WAKUWAKU_H */
