/*
 * tests/support/redis_server.c — start and stop a private redis-server on
 * a free 127.0.0.1 port (or valkey-server: WK_TEST_SERVER=valkey). Servers
 * are stopped by pid, never by name.
 * Needs no criterion, so the soak and the benchmarks use it too.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

int wk_test_free_port(void)
{
    return free_port();
}

pid_t wk_test_spawn(const char *const *argv)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* Quiet child: the tests read state through Redis, not its log; and
     * it must not hold the test's stdout pipe open. */
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
        _exit(127);
    /* A test that dies (failed assertion, crash) takes its servers along. */
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* SIGTERM stays pending in a SIGSTOPped server */
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

redisContext *wk_test_raw_port(int port, const char *password)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (password) {
        redisReply *r = redisCommand(c, "AUTH %s", password);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

static bool answers_ping(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ok = false;
    if (c && !c->err) {
        redisReply *r = redisCommand(c, "PING");
        /* A server with requirepass answers NOAUTH: it is up. */
        ok = r && (r->type == REDIS_REPLY_STATUS ||
                   (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0));
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

/* $WK_TEST_SERVER's index in servers[] (support.h). */
static int server_kind(void)
{
    static const char *const names[] = {"redis", "valkey"};
    const char *v = getenv("WK_TEST_SERVER");
    if (!v || !*v)
        return 0;
    for (int i = 0; i < 2; i++)
        if (!strcmp(v, names[i]))
            return i;
    fprintf(stderr, "WK_TEST_SERVER=%s: expected redis or valkey\n", v);
    exit(2);
}

static const struct {
    const char *server, *cli;
} servers[] = {{"redis-server", "redis-cli"}, {"valkey-server", "valkey-cli"}};

const char *wk_test_server_binary(void)
{
    return servers[server_kind()].server;
}

const char *wk_test_cli_binary(void)
{
    return servers[server_kind()].cli;
}

static int spawn(wk_test_server *s, const char *const *config)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", s->port);
    const char *bin = wk_test_server_binary();
    const char *argv[64] = {
        bin,  "--port",       port,      "--bind",    "127.0.0.1", "--save",
        "",   "--appendonly", "no",      "--dir",     s->dir,      "--daemonize",
        "no", "--loglevel",   "warning", "--logfile", ""};
    int argc = 17;
    /* Extra config lines "name value" become "--name value". */
    char extra[16][128];
    for (int i = 0; config && config[i] && i < 16; i++) {
        snprintf(extra[i], sizeof(extra[i]), "--%s", config[i]);
        char *space = strchr(extra[i], ' ');
        argv[argc++] = extra[i];
        if (space) {
            *space = '\0';
            argv[argc++] = space + 1;
        }
    }
    argv[argc] = NULL;
    pid_t pid = wk_test_spawn(argv);
    if (pid < 0)
        return -1;
    s->pid = pid;
    for (int i = 0; i < 250; i++) {
        if (answers_ping(s->port))
            return 0;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            s->pid = 0;
            return -1;
        }
        wk_test_sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    s->pid = 0;
    return -1;
}

int wk_test_server_start(wk_test_server *s, const char *const *config)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/wk-test-redis-XXXXXX");
    if (!mkdtemp(s->dir))
        return -1;
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = free_port();
        if (s->port > 0 && spawn(s, config) == 0) {
            snprintf(s->url, sizeof(s->url), "redis://127.0.0.1:%d", s->port);
            return 0;
        }
    }
    rmdir(s->dir);
    return -1;
}

int wk_test_server_restart(wk_test_server *s, const char *const *config)
{
    mkdir(s->dir, 0700); /* stop removed it */
    return spawn(s, config);
}

void wk_test_server_stop(wk_test_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGCONT); /* in case a test left it stopped */
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->dir[0]) {
        char path[256];
        snprintf(path, sizeof(path), "%s/dump.rdb", s->dir);
        unlink(path);
        rmdir(s->dir);
    }
}

void wk_test_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int64_t wk_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
