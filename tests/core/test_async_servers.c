/*
 * tests/core/test_async_servers.c — the event-loop example servers
 * (examples/loop_libuv, examples/loop_libevent) as a client meets them:
 * each is started against the test redis-server on a free port, sent
 * request lines over TCP, and must answer "ok", "busy" while the test
 * holds the job's lock, "limited" once the test emptied the bucket; a
 * "wait" that times out and one woken by the test's release; a "follow"
 * that relays a pipe's messages in order, then its end, while another
 * client is served; a "get" through the near cache, read from Redis then
 * served from memory, seeing another handle's put; and exit 0 on SIGTERM
 * (in the sanitized build: with nothing leaked).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "examples/loop_common/jobs.h"
#include "redis_fixture.h"

typedef struct client {
    int sock; /* a client connection */
    FILE *in; /* replies on it */
} client;

typedef struct server {
    pid_t pid;
    int port;
    FILE *out; /* its stdout */
    client c;  /* the first client */
} server;

static void client_connect(client *c, int port)
{
    c->sock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(c->sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
    c->in = fdopen(dup(c->sock), "r");
}

static void client_close(client *c)
{
    fclose(c->in);
    close(c->sock);
}

/* Send one request line; its reply lines are read with answer(). */
static void tell(client *c, const char *request)
{
    char line[128];
    int n = snprintf(line, sizeof(line), "%s\n", request);
    cr_assert_eq(write(c->sock, line, (size_t)n), n);
}

/* The next reply line (without the newline). */
static const char *answer(client *c)
{
    static char reply[512];
    cr_assert_not_null(fgets(reply, sizeof(reply), c->in), "no reply");
    reply[strcspn(reply, "\n")] = '\0';
    return reply;
}

static void server_start(server *s, const char *binary, const char *prefix)
{
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    pid_t parent = getpid();
    s->pid = fork();
    cr_assert_geq(s->pid, 0);
    if (s->pid == 0) {
        /* A test that fails before server_stop() must not leave the
         * server running: it would keep ctest's output pipe open, and
         * ctest would wait for it for ever. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        setenv("WK_REDIS_URL", wk_test_url(), 1);
        setenv("WK_LOOP_PREFIX", prefix, 1);
        unsetenv("WK_LOOP_PORT");
        execl(binary, binary, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    s->out = fdopen(pipefd[0], "r");
    char line[128];
    cr_assert_not_null(fgets(line, sizeof(line), s->out), "%s printed nothing", binary);
    cr_assert_eq(sscanf(line, "listening on 127.0.0.1:%d", &s->port), 1, "%s", line);
    client_connect(&s->c, s->port);
}

/* Send one request line, return its reply line. */
static const char *ask(server *s, const char *request)
{
    tell(&s->c, request);
    return answer(&s->c);
}

static void server_stop(server *s)
{
    client_close(&s->c);
    kill(s->pid, SIGTERM);
    int status;
    cr_assert_eq(waitpid(s->pid, &status, 0), s->pid);
    fclose(s->out);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the server exited with %d",
              WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
}

/* One request on a second client connection while the first waits. */
static const char *ask_other(server *s, const char *request)
{
    client other;
    client_connect(&other, s->port);
    tell(&other, request);
    static char reply[512];
    snprintf(reply, sizeof(reply), "%s", answer(&other));
    client_close(&other);
    return reply;
}

static void run_example(const char *binary)
{
    const char *prefix = wk_test_ns("example");
    server s;
    server_start(&s, binary, prefix);
    wk_db *db = wk_test_open(NULL);

    cr_assert_str_eq(ask(&s, "job 1"), "ok");
    /* The lock was released after the reply: the same job again is ok. */
    cr_assert_str_eq(ask(&s, "job 1"), "ok");
    cr_assert_str_eq(ask(&s, "nonsense"), "error expected \"job <id>\", \"wait <id> <ms>\", "
                                          "\"follow <pipe>\" or \"get <name>\"");

    /* Another replica holds job 7's lock: busy. */
    char lock_name[128];
    snprintf(lock_name, sizeof(lock_name), "%s:7", prefix);
    wk_token token;
    bool acquired = false;
    cr_assert_eq(
        wk_lock_try(wk_db_processor(db), &jobs_lock, wk_name_str(lock_name), &token, &acquired),
        WK_OK);
    cr_assert(acquired);
    cr_assert_str_eq(ask(&s, "job 7"), "busy");
    /* Waiting for it: until the deadline, or woken by the release. */
    cr_assert_str_eq(ask(&s, "wait 7 200"), "timeout");
    tell(&s.c, "wait 7 20000");
    cr_assert_str_eq(ask_other(&s, "job 70"), "ok", "the loop serves others meanwhile");
    bool released = false;
    cr_assert_eq(
        wk_lock_release(wk_db_processor(db), &jobs_lock, wk_name_str(lock_name), &token, &released),
        WK_OK);
    cr_assert(released);
    cr_assert_str_eq(answer(&s.c), "ok");
    cr_assert_str_eq(ask(&s, "job 7"), "ok", "released after the wait's reply");

    /* Following a pipe: its messages in order, then the end. */
    char pipe_name[128];
    snprintf(pipe_name, sizeof(pipe_name), "%s:p1", prefix);
    wk_processor *p = wk_db_processor(db);
    cr_assert_eq(wk_pipe_send(p, &jobs_pipe, wk_name_str(pipe_name), "first", 5), WK_OK);
    tell(&s.c, "follow p1");
    cr_assert_str_eq(answer(&s.c), "msg first");
    cr_assert_str_eq(ask_other(&s, "job 71"), "ok", "the loop serves others meanwhile");
    cr_assert_eq(wk_pipe_send(p, &jobs_pipe, wk_name_str(pipe_name), "second", 6), WK_OK);
    cr_assert_eq(wk_pipe_finish(p, &jobs_pipe, wk_name_str(pipe_name)), WK_OK);
    cr_assert_str_eq(answer(&s.c), "msg second");
    cr_assert_str_eq(answer(&s.c), "end");

    /* The near cache through the loop: read, then from memory; another
     * handle's put is heard (normally at once, at the latest within the
     * near cache's staleness bound), and the new body read. */
    char cache_name[128];
    snprintf(cache_name, sizeof(cache_name), "%s:c1", prefix);
    cr_assert_str_eq(ask(&s, "get c1"), "miss (absent)");
    cr_assert_str_eq(ask(&s, "get c1"), "hit (absent)");
    cr_assert_eq(wk_cache_put(p, &jobs_cache, wk_name_str(cache_name), "one", 3), WK_OK);
    const char *got;
    while (strcmp(got = ask(&s, "get c1"), "hit (absent)") == 0)
        wk_test_sleep_ms(5);
    cr_assert_str_eq(got, "miss one");
    cr_assert_str_eq(ask(&s, "get c1"), "hit one");
    cr_assert_eq(wk_cache_put(p, &jobs_cache, wk_name_str(cache_name), "two", 3), WK_OK);
    while (strcmp(got = ask(&s, "get c1"), "hit one") == 0)
        wk_test_sleep_ms(5);
    cr_assert_str_eq(got, "miss two");
    cr_assert_str_eq(ask(&s, "get c1"), "hit two");
    tell(&s.c, "get c1");
    cr_assert_str_eq(ask_other(&s, "get c1"), "hit two", "another client on the same loop");
    cr_assert_str_eq(answer(&s.c), "hit two");

    /* Other replicas used up the shared bucket: limited (it refills one
     * token per JOBS_BUCKET_PERIOD_MS). */
    wk_token_bucket_outcome out = {.allowed = true};
    for (int i = 0; i <= JOBS_BUCKET_CAPACITY && out.allowed; i++)
        cr_assert_eq(wk_token_bucket_acquire(wk_db_processor(db), &jobs_bucket, wk_name_str(prefix),
                                             1, &out),
                     WK_OK);
    cr_assert_not(out.allowed);
    cr_assert_str_eq(ask(&s, "job 8"), "limited");
    /* …and job 8's lock was released after that reply too. */
    snprintf(lock_name, sizeof(lock_name), "%s:8", prefix);
    cr_assert_str_eq(ask(&s, "job 9"), "limited");
    cr_assert_eq(
        wk_lock_try(wk_db_processor(db), &jobs_lock, wk_name_str(lock_name), &token, &acquired),
        WK_OK);
    cr_assert(acquired);

    wk_db_close(db);
    server_stop(&s);
}

Test(async_servers, the_libuv_example_serves_jobs_waits_and_follows, .timeout = 60)
{
    run_example(WK_LOOP_LIBUV_PATH);
}

Test(async_servers, the_libevent_example_serves_jobs_waits_and_follows, .timeout = 60)
{
    run_example(WK_LOOP_LIBEVENT_PATH);
}
