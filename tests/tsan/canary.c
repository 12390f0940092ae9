/*
 * tests/tsan/canary.c — proof that the ThreadSanitizer run can fail: two
 * threads increment a plain int (a data race TSan must report, ending the
 * test with halt_on_error=1), and the same with an atomic int (must pass).
 * Run by tests/tsan/expect_race.sh, which passes only if the first test
 * fails with a TSan report naming this file and the second one passes. Not
 * named test_*.c, so the criterion build never picks it up.
 */
#include <pthread.h>
#include <stdatomic.h>

#include <criterion/criterion.h>

#define ROUNDS 100000

static int plain;
static atomic_int counted;

static void *bump_plain(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++)
        plain++; /* the race */
    return NULL;
}

static void *bump_atomic(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++)
        atomic_fetch_add(&counted, 1);
    return NULL;
}

static void two_threads(void *(*fn)(void *))
{
    pthread_t a, b;
    cr_assert_eq(pthread_create(&a, NULL, fn, NULL), 0);
    cr_assert_eq(pthread_create(&b, NULL, fn, NULL), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
}

Test(canary, plain_int_increments_race)
{
    two_threads(bump_plain);
    /* Without TSan the count may even come out right; the race is the point. */
    cr_assert_leq(plain, 2 * ROUNDS);
}

Test(canary, atomic_increments_do_not_race)
{
    two_threads(bump_atomic);
    cr_assert_eq(atomic_load(&counted), 2 * ROUNDS);
}
