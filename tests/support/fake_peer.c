/*
 * tests/support/fake_peer.c — a fake server on loopback that is not Redis:
 * it answers the first command it reads with `first` (the handshake a
 * handle sends at open) and every later one with `reply`, bytes chosen by
 * the test. One connection, one reply per read.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support.h"

static void *serve(void *arg)
{
    wk_test_peer *p = arg;
    int fd = accept(p->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char buf[4096];
    bool first = true;
    while (read(fd, buf, sizeof(buf)) > 0) {
        const char *r = first && p->first ? p->first : p->reply;
        size_t len = first && p->first ? p->first_len : p->reply_len;
        first = false;
        int k = atomic_fetch_add(&p->commands, 1);
        if (p->script) {
            r = p->script[(size_t)k < p->nscript ? (size_t)k : p->nscript - 1];
            len = strlen(r);
        }
        if (len && write(fd, r, len) < 0)
            break;
    }
    close(fd);
    return NULL;
}

int wk_test_peer_start(wk_test_peer *p, const char *first, size_t first_len, const char *reply,
                       size_t reply_len)
{
    *p = (wk_test_peer){
        .first = first, .first_len = first_len, .reply = reply, .reply_len = reply_len};
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(p->listen_fd, 1) != 0 || getsockname(p->listen_fd, (struct sockaddr *)&a, &alen))
        return -1;
    p->port = ntohs(a.sin_port);
    snprintf(p->url, sizeof(p->url), "redis://127.0.0.1:%d", p->port);
    return pthread_create(&p->thread, NULL, serve, p) == 0 ? 0 : -1;
}

void wk_test_peer_stop(wk_test_peer *p)
{
    shutdown(p->listen_fd, SHUT_RDWR);
    close(p->listen_fd);
    pthread_join(p->thread, NULL);
}

void wk_test_peer_script(wk_test_peer *p, const char *const *script, size_t n)
{
    p->nscript = n;
    p->script = script;
}
