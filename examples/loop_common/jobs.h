/*
 * examples/loop_common/jobs.h — the request logic of the two event-loop
 * example servers (examples/loop_libuv, examples/loop_libevent), which
 * differ only in how they move bytes.
 *
 * A client sends lines "job <id>". For each, one at a time per connection:
 *
 *   1. wk_lock_try on the Lock "loopjobs" named "<prefix>:<id>";
 *      not acquired → "busy";
 *   2. wk_token_bucket_acquire of 1 token from the TokenBucket "loopjobs"
 *      named "<prefix>" (shared by every client and every replica);
 *      denied → "limited", allowed → "ok";
 *   3. the reply is sent, then the lock released.
 *
 * "wait <id> <ms>" waits for that Lock instead, up to <ms> ms
 * (wk_lock_acquire through the loop: woken by the holder's release):
 * "ok" once it is taken (then released), "timeout" at the deadline.
 *
 * "follow <pipe>" follows the Pipe "loopjobs" named "<prefix>:<pipe>"
 * (wk_pipe_receive and wk_pipe_recv_async through the loop, on a
 * connection of the receiver's own): one line "msg <body>" per message,
 * in order, then "end" when the sender finished the pipe ("gone" after
 * a TTL without a message); the connection's next request waits until
 * then.
 *
 * "get <name>" reads the Cache "loopjobs" named "<prefix>:<name>" through
 * the server's near cache (wk_near_cache_get_async: a verified copy from
 * memory, else a read by the near cache's reader thread, neither blocking
 * the loop): "hit <body>" when it was served from memory, "miss <body>"
 * when it was read from Redis ("(absent)" for no body). Another handle's
 * put is seen within the near cache's staleness bound (normally at once).
 *
 * Any failure replies "error <message>". All steps go through the
 * server's wk_async, chained in its callbacks: the loop never waits.
 */
#ifndef EXAMPLES_LOOP_JOBS_H
#define EXAMPLES_LOOP_JOBS_H

#include <stddef.h>

#include <wakuwaku/wakuwaku.h>

/* The entities, declared once for both servers (and their test). */
#define JOBS_LOCK_TTL_MS 10000
#define JOBS_BUCKET_CAPACITY 20
/* One token back per minute: an emptied bucket stays empty for a while. */
#define JOBS_BUCKET_PERIOD_MS 60000

#define JOBS_PIPE_TTL_MS 30000
#define JOBS_CACHE_TTL_MS 60000

extern const wk_entity jobs_lock;
extern const wk_entity jobs_bucket;
extern const wk_entity jobs_pipe;
extern const wk_entity jobs_cache;

/* Writes `len` bytes of reply to the client behind `io`. */
typedef void (*jobs_send_fn)(void *io, const char *text, size_t len);

typedef struct jobs_conn jobs_conn;

/* A client connection's request state, replying through send(io, …).
 * `prefix` (copied) names the lock and bucket. NULL when out of memory. */
jobs_conn *jobs_conn_new(wk_async *a, const char *prefix, jobs_send_fn send, void *io);

/* Bytes the client sent; complete lines start requests. */
void jobs_conn_feed(jobs_conn *c, const char *data, size_t len);

/* The client is gone: send() is never called again. The state is freed
 * now, or when its request in flight completes (at the latest in
 * wk_async_close()). NULL is a no-op. */
void jobs_conn_free(jobs_conn *c);

/* The server's configuration from argv and the environment: the Redis
 * URL (WK_REDIS_URL, default redis://127.0.0.1:6379), the port (argv[1],
 * else WK_LOOP_PORT, else 0: a free one) and the names' prefix
 * (WK_LOOP_PREFIX, default "demo"). Opens the handle, and the near cache
 * of "get" (when Redis cannot be reached now, "get" answers an error); 0,
 * or 1 with a message on stderr. */
int jobs_open(int argc, char **argv, wk_async **a, int *port, const char **prefix);

/* Close the near cache, after the handle was closed (its gets completed). */
void jobs_close(void);

#endif /* EXAMPLES_LOOP_JOBS_H */
