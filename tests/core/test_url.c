/*
 * tests/core/test_url.c — URL parsing, including secrets kept out of
 * messages.
 */
#include <string.h>

#include <criterion/criterion.h>

#include <wakuwaku/db.h>

Test(url, tcp_defaults)
{
    wk_url u;
    cr_assert_eq(wk_url_parse(&u, "redis://example.org", NULL, 0), WK_OK);
    cr_assert_str_eq(u.host, "example.org");
    cr_assert_eq(u.port, 6379);
    cr_assert_eq(u.database, 0);
    cr_assert_null(u.username);
    cr_assert_null(u.password);
    wk_url_free(&u);
    cr_assert_eq(wk_url_parse(&u, NULL, NULL, 0), WK_OK);
    cr_assert_str_eq(u.host, "127.0.0.1");
    wk_url_free(&u);
}

Test(url, user_password_port_db)
{
    wk_url u;
    cr_assert_eq(wk_url_parse(&u, "redis://alice:p%40ss%3Aw0rd@10.0.0.1:6380/3", NULL, 0), WK_OK);
    cr_assert_str_eq(u.username, "alice");
    cr_assert_str_eq(u.password, "p@ss:w0rd");
    cr_assert_str_eq(u.host, "10.0.0.1");
    cr_assert_eq(u.port, 6380);
    cr_assert_eq(u.database, 3);
    wk_url_free(&u);
}

Test(url, password_only_forms)
{
    wk_url u;
    cr_assert_eq(wk_url_parse(&u, "redis://:secret@h:1", NULL, 0), WK_OK);
    cr_assert_null(u.username);
    cr_assert_str_eq(u.password, "secret");
    wk_url_free(&u);
    cr_assert_eq(wk_url_parse(&u, "redis://secret@h", NULL, 0), WK_OK);
    cr_assert_str_eq(u.password, "secret");
    wk_url_free(&u);
}

Test(url, ipv6_and_unix)
{
    wk_url u;
    cr_assert_eq(wk_url_parse(&u, "redis://[::1]:7000/1", NULL, 0), WK_OK);
    cr_assert_str_eq(u.host, "::1");
    cr_assert_eq(u.port, 7000);
    cr_assert_eq(u.database, 1);
    wk_url_free(&u);
    cr_assert_eq(wk_url_parse(&u, "unix:///run/redis.sock?db=2", NULL, 0), WK_OK);
    cr_assert_str_eq(u.path, "/run/redis.sock");
    cr_assert_null(u.host);
    cr_assert_eq(u.database, 2);
    wk_url_free(&u);
}

Test(url, rejects_bad_urls_without_leaking_password)
{
    const char *bad[] = {"http://h", "redis://", "redis://h:0", "redis://h:70000",
                         "redis://h:12x", "redis://h/x", "unix://relative", "unix:///s?x=1",
                         "redis://u:pa%zzss@h", "redis://[::1", "redis://h?x=1", "redis://u:%00@h"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        wk_url u;
        char err[200];
        cr_assert_eq(wk_url_parse(&u, bad[i], err, sizeof(err)), WK_EINVAL, "%s", bad[i]);
        cr_assert(strlen(err) > 0);
        cr_assert_null(strstr(err, "pa%zzss"), "password in message: %s", err);
    }
}

Test(url, cluster_seed_lists)
{
    wk_url u, copy;
    cr_assert_eq(wk_url_parse(&u, "redis://:pw@10.0.0.1:7000,[::1]:7001,h3/0", NULL, 0), WK_OK);
    cr_assert_eq(u.nseeds, 3);
    cr_assert_str_eq(u.seeds[0].host, "10.0.0.1");
    cr_assert_eq(u.seeds[0].port, 7000);
    cr_assert_str_eq(u.seeds[1].host, "::1");
    cr_assert_eq(u.seeds[1].port, 7001);
    cr_assert_str_eq(u.seeds[2].host, "h3");
    cr_assert_eq(u.seeds[2].port, 6379);
    /* host and port are the first seed's; the password is every node's. */
    cr_assert_str_eq(u.host, "10.0.0.1");
    cr_assert_eq(u.port, 7000);
    cr_assert_str_eq(u.password, "pw");
    cr_assert_null(u.sentinels);
    wk_url_free(&u);
    /* One host: no seed list. */
    cr_assert_eq(wk_url_parse(&u, "rediss://h:7000", NULL, 0), WK_OK);
    cr_assert_eq(u.nseeds, 0);
    cr_assert_null(u.seeds);
    wk_url_free(&u);
    const char *bad[] = {"redis://h1,", "redis://,h2", "redis://h1:1,h2:0", "redis://h1,[::1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[200];
        cr_assert_eq(wk_url_parse(&u, bad[i], err, sizeof(err)), WK_EINVAL, "%s", bad[i]);
        cr_assert(strlen(err) > 0, "%s", bad[i]);
    }
    cr_assert_eq(wk_url_parse(&u, "rediss://a:1,b:2", NULL, 0), WK_OK);
    cr_assert(u.tls);
    wk_url_free(&u);
    cr_assert_eq(wk_url_parse(&u, "redis://a:1,b:2", NULL, 0), WK_OK);
    extern int wk__url_copy(wk_url *dst, const wk_url *src); /* the handle's copy */
    cr_assert_eq(wk__url_copy(&copy, &u), WK_OK);
    wk_url_free(&u);
    cr_assert_eq(copy.nseeds, 2);
    cr_assert_str_eq(copy.seeds[1].host, "b");
    cr_assert_eq(copy.seeds[1].port, 2);
    wk_url_free(&copy);
}
