/*
 * tests/core/test_async_servers.c — the event-loop example servers
 * (examples/loop_libuv, examples/loop_libevent) as a client meets them:
 * each is started against the test redis-server on a free port, sent
 * request lines over TCP, and must answer "ok", "busy" while the test
 * holds the job's lock, "limited" once the test emptied the bucket, and
 * exit 0 on SIGTERM (in the sanitized build: with nothing leaked).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "examples/loop_common/jobs.h"
#include "redis_fixture.h"

typedef struct server {
    pid_t pid;
    int port;
    FILE *out; /* its stdout */
    int sock;  /* a client connection */
    FILE *in;  /* replies on it */
} server;

static void server_start(server *s, const char *binary, const char *prefix)
{
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    s->pid = fork();
    cr_assert_geq(s->pid, 0);
    if (s->pid == 0) {
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
    s->sock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(s->sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
    s->in = fdopen(dup(s->sock), "r");
}

/* Send one request line, return its reply line (without the newline). */
static const char *ask(server *s, const char *request)
{
    static char reply[512];
    char line[128];
    int n = snprintf(line, sizeof(line), "%s\n", request);
    cr_assert_eq(write(s->sock, line, (size_t)n), n);
    cr_assert_not_null(fgets(reply, sizeof(reply), s->in), "no reply to %s", request);
    reply[strcspn(reply, "\n")] = '\0';
    return reply;
}

static void server_stop(server *s)
{
    fclose(s->in);
    close(s->sock);
    kill(s->pid, SIGTERM);
    int status;
    cr_assert_eq(waitpid(s->pid, &status, 0), s->pid);
    fclose(s->out);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the server exited with %d",
              WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
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
    cr_assert_str_eq(ask(&s, "nonsense"), "error expected \"job <id>\"");

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
    bool released = false;
    cr_assert_eq(
        wk_lock_release(wk_db_processor(db), &jobs_lock, wk_name_str(lock_name), &token, &released),
        WK_OK);
    cr_assert(released);
    cr_assert_str_eq(ask(&s, "job 7"), "ok");

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

Test(async_servers, the_libuv_example_replies_ok_busy_limited, .timeout = 60)
{
    run_example(WK_LOOP_LIBUV_PATH);
}

Test(async_servers, the_libevent_example_replies_ok_busy_limited, .timeout = 60)
{
    run_example(WK_LOOP_LIBEVENT_PATH);
}
