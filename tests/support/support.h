/*
 * tests/support/support.h — helpers for the criterion suites: a real
 * redis-server on a free 127.0.0.1 port, handles, and raw commands to
 * check what actually reached Redis.
 */
#ifndef WK_TEST_SUPPORT_H
#define WK_TEST_SUPPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>
#include <wakuwaku/wakuwaku.h>

/* A redis-server child process, stopped by pid. */
typedef struct wk_test_server {
    pid_t pid;
    int port;
    char url[64];
    char dir[128];
} wk_test_server;

/* Start redis-server on a free loopback port with optional extra config
 * lines ("maxmemory 1mb", NULL-terminated list). Waits until it answers
 * PING. Returns 0 or -1. */
int wk_test_server_start(wk_test_server *s, const char *const *config);
/* SIGTERM, wait, remove its directory. Safe on a stopped server. */
void wk_test_server_stop(wk_test_server *s);
/* Restart on the same port (after stop). */
int wk_test_server_restart(wk_test_server *s, const char *const *config);

/* The suite's shared server URL: WK_TEST_REDIS_URL, set by the PRE_ALL hook
 * of tests/support/redis_fixture.h. */
const char *wk_test_url(void);

/* Open a handle on the shared server with a capability (NULL = read-write),
 * failing the test on error. */
wk_db *wk_test_open(const wk_cap *cap);
wk_db *wk_test_open_url(const char *url, const wk_cap *cap);

/* A raw hiredis connection to `url`'s server, for checking state. */
redisContext *wk_test_raw(const char *url);
/* Run a raw command and return the reply (caller frees). */
redisReply *wk_test_cmd(redisContext *c, const char *fmt, ...);
/* Total `calls` in INFO commandstats (all commands), from a raw connection. */
long long wk_test_total_calls(redisContext *c);
/* calls of one command ("set", "evalsha"), 0 if never run. */
long long wk_test_cmd_calls(redisContext *c, const char *cmd);

/* A namespace unique to this test process, so parallel tests never share
 * keys: "<prefix>-<pid>-<counter>". Returns a static buffer per call slot
 * (up to 16 live). */
const char *wk_test_ns(const char *prefix);

/* Sleep for ms milliseconds. */
void wk_test_sleep_ms(int ms);
int64_t wk_test_now_ms(void);

#endif /* WK_TEST_SUPPORT_H */
