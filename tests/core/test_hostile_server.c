/*
 * tests/core/test_hostile_server.c — a fake peer on loopback that answers
 * every command with bytes chosen by the test: a broken or hostile server,
 * not Redis. Replies of the wrong shape must give clear errors, never a
 * crash, a hang or a huge allocation.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "support.h"

typedef struct peer {
    int listen_fd, port;
    const char *reply; /* sent once per command received */
    size_t reply_len;
    pthread_t thread;
} peer;

static void *serve(void *arg)
{
    peer *p = arg;
    int fd = accept(p->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char buf[4096];
    ssize_t n;
    /* One reply per read: enough for one command per round trip. */
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        if (write(fd, p->reply, p->reply_len) < 0)
            break;
    }
    close(fd);
    return NULL;
}

static void peer_start(peer *p, const char *reply, size_t len)
{
    p->reply = reply;
    p->reply_len = len;
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    cr_assert_eq(bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(p->listen_fd, 1), 0);
    getsockname(p->listen_fd, (struct sockaddr *)&a, &alen);
    p->port = ntohs(a.sin_port);
    pthread_create(&p->thread, NULL, serve, p);
}

static void peer_stop(peer *p)
{
    shutdown(p->listen_fd, SHUT_RDWR);
    close(p->listen_fd);
    pthread_join(p->thread, NULL);
}

static int inspect_against(const char *reply, size_t len, wk_lock_state *st, char *msg, size_t n)
{
    peer p;
    peer_start(&p, reply, len);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", p.port);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_only();
    o.command_timeout_ms = 500;
    wk_db *db;
    cr_assert_eq(wk_db_open(&db, &o, NULL, 0), WK_OK);
    wk_entity lock = WK_LOCK_ENTITY("hostile", 1000);
    int rc = wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("x"), st);
    snprintf(msg, n, "%s", wk_db_errmsg(db));
    wk_db_close(db);
    peer_stop(&p);
    return rc;
}

#define INSPECT(lit, st, msg) inspect_against(lit, sizeof(lit) - 1, st, msg, sizeof(msg))

Test(hostile_server, huge_array_header_is_refused_not_allocated, .timeout = 20)
{
    wk_lock_state st;
    char msg[512];
    int rc = INSPECT("*233333333\r\n:5\r\n", &st, msg);
    cr_assert(rc == WK_ENOMEM || rc == WK_EPROTO, "got %s: %s", wk_err_name(rc), msg);
}

Test(hostile_server, wrong_reply_types_are_eproto, .timeout = 20)
{
    wk_lock_state st;
    char msg[512];
    cr_assert_eq(INSPECT("$5\r\nhello\r\n", &st, msg), WK_EPROTO);
    cr_assert(strstr(msg, "lock.inspect"), "%s", msg);
    cr_assert_eq(INSPECT("*0\r\n", &st, msg), WK_EPROTO);
    cr_assert_eq(INSPECT("$-1\r\n", &st, msg), WK_EPROTO);
    cr_assert_eq(INSPECT(":42\r\n", &st, msg), WK_OK, "a good reply still parses");
    cr_assert(st.held && st.ttl_ms == 42);
}

Test(hostile_server, garbage_is_a_protocol_error, .timeout = 20)
{
    wk_lock_state st;
    char msg[512];
    int rc = INSPECT("!!!! not resp\r\n", &st, msg);
    cr_assert_eq(rc, WK_EPROTO, "got %s: %s", wk_err_name(rc), msg);
}

Test(hostile_server, silence_is_a_timeout, .timeout = 20)
{
    wk_lock_state st;
    char msg[512];
    int64_t t0 = wk_test_now_ms();
    int rc = inspect_against("", 0, &st, msg, sizeof(msg));
    cr_assert_eq(rc, WK_ETIMEDOUT, "got %s: %s", wk_err_name(rc), msg);
    cr_assert_lt(wk_test_now_ms() - t0, 5000);
}
