/*
 * tests/core/test_token.c — lease tokens (core/token.c): each thread draws
 * from a stream of its own, and a child process never repeats the tokens
 * its parent draws (two holders with one token), whatever made it: fork(),
 * glibc's _Fork() or a raw fork/clone system call, none of which but the
 * first runs pthread_atfork handlers.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <wakuwaku/wakuwaku.h>

#include "core/core_internal.h"

/* Enough tokens to cross several refills of a thread's block. */
#define DRAWS 200

static int cmp_token(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(wk_token));
}

/* No two of the n tokens are equal (sorts them). */
static void expect_distinct(wk_token *t, size_t n)
{
    qsort(t, n, sizeof(*t), cmp_token);
    for (size_t i = 1; i < n; i++)
        cr_assert(memcmp(&t[i - 1], &t[i], sizeof(*t)) != 0, "token %zu repeats", i);
}

/* The ways to make a child process: only libc's fork() runs the
 * pthread_atfork handlers. */
static pid_t by_fork(void)
{
    return fork();
}

static pid_t by_fork_syscall(void)
{
#ifdef SYS_fork
    return (pid_t)syscall(SYS_fork);
#else
    return (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
#endif
}

/* clone() without CLONE_VM: a copy of the memory, like fork (no stack
 * given: the child goes on on its copy of the parent's). */
static pid_t by_clone_syscall(void)
{
    return (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
}

/* The child draws DRAWS tokens and writes them to the pipe; the parent
 * draws as many; returns them all in `all` (child's first). */
static void draw_across_fork(wk_token all[2 * DRAWS], pid_t (*make_child)(void))
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = make_child();
    cr_assert(pid >= 0);
    if (pid == 0) {
        wk_token mine[DRAWS];
        for (int i = 0; i < DRAWS; i++)
            wk_token_random(&mine[i]);
        size_t off = 0;
        while (off < sizeof(mine)) {
            ssize_t n = write(fds[1], (char *)mine + off, sizeof(mine) - off);
            if (n <= 0)
                _exit(1);
            off += (size_t)n;
        }
        _exit(0);
    }
    close(fds[1]);
    for (int i = 0; i < DRAWS; i++)
        wk_token_random(&all[DRAWS + i]);
    size_t off = 0;
    while (off < DRAWS * sizeof(wk_token)) {
        ssize_t n = read(fds[0], (char *)all + off, DRAWS * sizeof(wk_token) - off);
        cr_assert(n > 0, "the child's tokens did not come");
        off += (size_t)n;
    }
    close(fds[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Three children in a row, the parent's stream started and part used
 * before each. */
static void expect_children_draw_their_own(pid_t (*make_child)(void))
{
    wk_token first;
    wk_token_random(&first);
    for (int round = 0; round < 3; round++) {
        wk_token all[2 * DRAWS];
        draw_across_fork(all, make_child);
        expect_distinct(all, 2 * DRAWS);
    }
}

Test(token, a_forked_child_never_draws_its_parents_next_tokens)
{
    expect_children_draw_their_own(by_fork);
}

Test(token, a_child_made_by_Fork_never_draws_its_parents_next_tokens)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    expect_children_draw_their_own(_Fork);
#else
    cr_skip_test("no _Fork() before glibc 2.34");
#endif
}

Test(token, a_child_made_by_the_fork_system_call_never_draws_its_parents_next_tokens)
{
    expect_children_draw_their_own(by_fork_syscall);
}

Test(token, a_child_made_by_a_raw_clone_never_draws_its_parents_next_tokens)
{
    expect_children_draw_their_own(by_clone_syscall);
}

typedef struct {
    wk_token t[DRAWS * 10];
} drawn;

static void *draw_many(void *arg)
{
    drawn *d = arg;
    for (size_t i = 0; i < sizeof(d->t) / sizeof(d->t[0]); i++)
        wk_token_random(&d->t[i]);
    return NULL;
}

Test(token, tokens_of_many_threads_are_all_distinct)
{
    enum { THREADS = 8 };
    drawn *d = calloc(THREADS, sizeof(*d));
    cr_assert(d);
    pthread_t th[THREADS];
    for (int k = 0; k < THREADS; k++)
        cr_assert_eq(pthread_create(&th[k], NULL, draw_many, &d[k]), 0);
    for (int k = 0; k < THREADS; k++)
        pthread_join(th[k], NULL);
    expect_distinct(&d[0].t[0], THREADS * DRAWS * 10);
    free(d);
}

/* The process's mapped memory in KiB (VmSize of /proc/self/status). */
static void *draw_one(void *arg)
{
    wk_token_random(arg);
    return NULL;
}

static void run_drawing_thread(void)
{
    wk_token t;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, draw_one, &t), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
}

Test(token, a_thread_gives_its_stream_back_when_it_exits)
{
    /* Threads one after another: each reuses the slot the one before
     * gave back, so no chunk is mapped for them; streams kept after their
     * threads would take a new chunk every 64 threads. Counted by the
     * library itself (a process's size moves under a sanitizer's
     * allocator). */
    enum { THREADS = 2000 };
    for (int i = 0; i < 8; i++)
        run_drawing_thread();
    size_t before = wk__token_chunks();
    for (int i = 0; i < THREADS; i++)
        run_drawing_thread();
    size_t grown = wk__token_chunks() - before;
    cr_assert(before >= 1 && grown == 0, "%zu chunks mapped over %d threads (%zu before)", grown,
              THREADS, before);
}

Test(token, a_null_token_is_ignored)
{
    wk_token_random(NULL);
}
