/*
 * tests/capability/queries_lock.h — rows of the built-in query table for
 * Lock and RwLock (included by builtin_queries.h).
 */
#ifndef WK_TEST_QUERIES_LOCK_H
#define WK_TEST_QUERIES_LOCK_H

#include <string.h>

#include <wakuwaku/rwlock.h>

static wk_token any_token;

#define LOCK_E(ns) wk_entity e = WK_LOCK_ENTITY(ns, 5000)
#define RW_E(ns) wk_entity e = WK_RWLOCK_ENTITY(ns, 5000)

static int q_lock_try(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    bool b;
    return wk_lock_try(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_lock_release(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    bool b;
    return wk_lock_release(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_lock_extend(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    bool b;
    return wk_lock_extend(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_lock_inspect(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    wk_lock_state st;
    return wk_lock_inspect(p, &e, wk_name_str("n"), &st);
}
static int q_rw_try_read(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_try_read(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_rw_try_write(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_try_write(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_rw_release_read(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_release_read(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_rw_extend_read(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_extend_read(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_rw_release_write(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_release_write(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_rw_extend_write(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_extend_write(p, &e, wk_name_str("n"), &any_token, &b);
}
static int q_rw_inspect(wk_processor *p, const char *ns)
{
    RW_E(ns);
    wk_rwlock_state st;
    return wk_rwlock_inspect(p, &e, wk_name_str("n"), &st);
}

#define LOCK_QUERIES                                           \
    {"lock.try", WK_WRITE, q_lock_try},                        \
    {"lock.release", WK_WRITE, q_lock_release},                \
    {"lock.extend", WK_WRITE, q_lock_extend},                  \
    {"lock.inspect", WK_READ, q_lock_inspect},                 \
    {"rwlock.try_read", WK_WRITE, q_rw_try_read},              \
    {"rwlock.try_write", WK_WRITE, q_rw_try_write},            \
    {"rwlock.release_read", WK_WRITE, q_rw_release_read},      \
    {"rwlock.extend_read", WK_WRITE, q_rw_extend_read},        \
    {"rwlock.release_write", WK_WRITE, q_rw_release_write},    \
    {"rwlock.extend_write", WK_WRITE, q_rw_extend_write},      \
    {"rwlock.inspect", WK_READ, q_rw_inspect},

#define LOCK_KIND(q)                                                                          \
    (strncmp(q, "lock.", 5) == 0 ? WK_KIND_LOCK                                               \
                                 : strncmp(q, "rwlock.", 7) == 0 ? WK_KIND_RWLOCK : NULL)

#endif /* WK_TEST_QUERIES_LOCK_H */
