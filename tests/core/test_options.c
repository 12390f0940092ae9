/*
 * tests/core/test_options.c — the set-up plumbing the thread-owning
 * helpers share (core/options.c): the caller's error buffer, the deep copy
 * of wk_db_options, the entity + name copy, the CLOCK_MONOTONIC condition.
 * No Redis.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <wakuwaku/wakuwaku.h>

#include "core/core_internal.h"

Test(options, errbuf_formats_truncates_and_accepts_no_buffer)
{
    char buf[8];
    cr_assert_eq(wk__errbuf_set(buf, sizeof(buf), WK_EINVAL, "bad %d", 42), WK_EINVAL);
    cr_assert_str_eq(buf, "bad 42");
    cr_assert_eq(wk__errbuf_set(buf, sizeof(buf), WK_EIO, "%s", "much too long"), WK_EIO);
    cr_assert_str_eq(buf, "much to", "cut to the buffer, NUL-terminated");
    cr_assert_eq(wk__errbuf_set(NULL, 100, WK_ENOMEM, "x"), WK_ENOMEM, "NULL buffer: status only");
    buf[0] = 'z';
    cr_assert_eq(wk__errbuf_set(buf, 0, WK_OK, "x"), WK_OK);
    cr_assert_eq(buf[0], 'z', "a zero length writes nothing");
}

Test(options, db_options_copy_owns_its_strings_and_capability)
{
    char url[] = "redis://127.0.0.1:6390/2", user[] = "me", pass[] = "secret", name[] = "svc";
    wk_cap_entry rows[] = {{"Lock", "jobs", WK_GRANT_WRITE}};
    wk_cap *cap = NULL;
    cr_assert_eq(wk_cap_new(&cap, "worker", WK_GRANT_READ, rows, 1), WK_OK);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.username = user;
    o.password = pass;
    o.client_name = name;
    o.capability = cap;
    o.database = 3;
    o.command_timeout_ms = 1234;

    wk_db_options c;
    cr_assert_eq(wk__db_options_copy(&c, &o), WK_OK);
    /* The caller's strings and capability may go away. */
    memset(url, 'x', sizeof(url) - 1);
    memset(pass, 'x', sizeof(pass) - 1);
    wk_cap_free(cap);
    cr_assert_str_eq(c.url, "redis://127.0.0.1:6390/2");
    cr_assert_str_eq(c.username, "me");
    cr_assert_str_eq(c.password, "secret");
    cr_assert_str_eq(c.client_name, "svc");
    cr_assert_eq(c.database, 3);
    cr_assert_eq(c.command_timeout_ms, 1234);
    cr_assert_eq(c.connect_timeout_ms, o.connect_timeout_ms);
    cr_assert_str_eq(wk_cap_name(c.capability), "worker");
    cr_assert_eq(wk_cap_grant_of(c.capability, "Lock", "jobs"), WK_GRANT_WRITE);
    cr_assert_eq(wk_cap_grant_of(c.capability, "Cache", "x"), WK_GRANT_READ);
    wk__db_options_free(&c);
    cr_assert_null(c.url);
    cr_assert_null(c.password);
    cr_assert_null(c.capability);
    wk__db_options_free(&c); /* cleared: a second free is harmless */
    wk__db_options_free(NULL);

    /* NULL strings and a NULL capability stay NULL. */
    wk_db_options bare = WK_DB_OPTIONS_INIT;
    cr_assert_eq(wk__db_options_copy(&c, &bare), WK_OK);
    cr_assert_null(c.url);
    cr_assert_null(c.username);
    cr_assert_null(c.capability);
    wk__db_options_free(&c);
}

Test(options, held_copies_the_namespace_and_the_name_bytes)
{
    char ns[] = "reports", bytes[] = {'a', '\0', 'b'};
    wk_entity e = WK_RWLOCK_ENTITY(ns, 900);
    wk_name n = wk_name_bytes(bytes, sizeof(bytes));
    wk__held h;
    const char *given = WK_KIND_RWLOCK; /* its pointer is compared below */
    cr_assert_eq(wk__held_init(&h, &e, given, &n), WK_OK);
    memset(ns, 'x', sizeof(ns) - 1);
    memset(bytes, 'x', sizeof(bytes));
    cr_assert_str_eq(h.entity.ns, "reports");
    cr_assert_eq(h.entity.kind, given, "the kind is the static string given");
    cr_assert_eq(h.entity.ttl_ms, 900);
    cr_assert_eq(h.name.type, WK_NAME_BYTES);
    cr_assert_eq(h.name.len, 3);
    cr_assert(memcmp(h.name.bytes, "a\0b", 3) == 0);
    cr_assert_eq(((const char *)h.name.bytes)[3], '\0', "NUL-terminated");
    wk__held_free(&h);
    cr_assert_null(h.ns);
    wk__held_free(&h);
    wk__held_free(NULL);

    /* Integer names have no bytes to copy. */
    wk_entity l = WK_LOCK_ENTITY("jobs", 1000);
    wk_name u = wk_name_u64(7);
    cr_assert_eq(wk__held_init(&h, &l, WK_KIND_LOCK, &u), WK_OK);
    cr_assert_null(h.name_bytes);
    cr_assert_eq(h.name.type, WK_NAME_U64);
    cr_assert_eq(h.name.u64, 7);
    wk__held_free(&h);
}

Test(options, monotonic_condition_times_out_on_a_boot_clock_deadline)
{
    pthread_mutex_t mu;
    pthread_cond_t cond;
    cr_assert_eq(wk__sync_init(&mu, &cond), WK_OK);
    struct timespec ts;
    int64_t until = wk__add_ms(wk__boot_ms(), 200);
    wk__cond_abstime(until, &ts);
    pthread_mutex_lock(&mu);
    int rc = 0;
    while (rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&cond, &mu, &ts);
    pthread_mutex_unlock(&mu);
    /* A condition on another clock (CLOCK_REALTIME) would see the
     * CLOCK_MONOTONIC time as long past and return at once. 1 ms: the two
     * clocks are read in whole milliseconds. */
    cr_assert_geq(wk__boot_ms(), until - 1, "woke at the deadline, not before");
    pthread_cond_destroy(&cond);
    pthread_mutex_destroy(&mu);
}
