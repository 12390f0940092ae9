/*
 * collection/deadline.h — the waiting loop of the deadline acquires
 * (collection/deadline.c), for kinds whose try has a signature of its own
 * (FencedLock, Semaphore). Not installed.
 */
#ifndef WK_COLLECTION_DEADLINE_H
#define WK_COLLECTION_DEADLINE_H

#include <wakuwaku/clock.h>
#include <wakuwaku/query.h>

/*
 * Call try_once(ctx, acquired) until it sets *acquired, fails, or the
 * deadline passes, sleeping with backoff between tries (as
 * wakuwaku/deadline.h says). `p` is the processor the tries use: it is
 * checked (not deferred) and gets the messages. Returns WK_OK (see
 * *acquired), WK_EINVAL, or the first failing try's status.
 */
int wk__deadline_acquire(const char *op, wk_processor *p, int64_t deadline,
                         const wk_backoff *backoff, int (*try_once)(void *ctx, bool *acquired),
                         void *ctx, bool *acquired);

#endif /* WK_COLLECTION_DEADLINE_H */
