/*
 * tests/core/test_token.c — lease tokens (core/token.c): each thread draws
 * from a stream of its own, and a forked child never repeats the tokens
 * its parent draws (two holders with one token).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <wakuwaku/wakuwaku.h>

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

/* The child draws DRAWS tokens and writes them to the pipe; the parent
 * draws as many; returns them all in `all` (child's first). */
static void draw_across_fork(wk_token all[2 * DRAWS])
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
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

Test(token, a_forked_child_never_draws_its_parents_next_tokens)
{
    /* The parent's stream is started and part used before each fork. */
    wk_token first;
    wk_token_random(&first);
    for (int round = 0; round < 3; round++) {
        wk_token all[2 * DRAWS];
        draw_across_fork(all);
        expect_distinct(all, 2 * DRAWS);
    }
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

Test(token, a_null_token_is_ignored)
{
    wk_token_random(NULL);
}
