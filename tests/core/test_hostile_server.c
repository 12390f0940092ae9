/*
 * tests/core/test_hostile_server.c — a fake peer on loopback that passes
 * the open handshake, then answers every command with bytes chosen by the
 * test: a broken or hostile server, not Redis. Replies of the wrong shape
 * must give clear errors, never a crash, a hang or a huge allocation.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "support.h"
#include "core/core_internal.h" /* wk__key_slot: the slot a MOVED names */

static int inspect_against(const char *reply, size_t len, wk_lock_state *st, char *msg, size_t n)
{
    wk_test_peer p;
    cr_assert_eq(
        wk_test_peer_start(&p, WK_TEST_HELLO_REPLY, sizeof(WK_TEST_HELLO_REPLY) - 1, reply, len),
        0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = p.url;
    o.capability = wk_cap_read_only();
    o.command_timeout_ms = 500;
    wk_db *db;
    cr_assert_eq(wk_db_open(&db, &o, NULL, 0), WK_OK);
    wk_entity lock = WK_LOCK_ENTITY("hostile", 1000);
    int rc = wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("x"), st);
    snprintf(msg, n, "%s", wk_db_errmsg(db));
    wk_db_close(db);
    wk_test_peer_stop(&p);
    return rc;
}

#define INSPECT(lit, st, msg) inspect_against(lit, sizeof(lit) - 1, st, msg, sizeof(msg))

Test(hostile_server, huge_array_header_is_refused_not_allocated, .timeout = 30)
{
    wk_lock_state st;
    char msg[512];
    int rc = INSPECT("*233333333\r\n:5\r\n", &st, msg);
    /* A protocol error naming the count: the process is not out of
     * memory, the server is broken. */
    cr_assert_eq(rc, WK_EPROTO, "got %s: %s", wk_err_name(rc), msg);
    cr_assert_str_eq(msg, "lock.inspect: the reply announces an array of 233333333 elements, "
                          "more than 4194304");
    /* Inside an array too. */
    rc = INSPECT("*2\r\n:1\r\n*233333333\r\n:5\r\n", &st, msg);
    cr_assert_eq(rc, WK_EPROTO, "got %s: %s", wk_err_name(rc), msg);
}

Test(hostile_server, wrong_reply_types_are_eproto, .timeout = 30)
{
    wk_lock_state st;
    char msg[512];
    cr_assert_eq(INSPECT("$5\r\nhello\r\n", &st, msg), WK_EPROTO);
    cr_assert(strstr(msg, "lock.inspect"), "%s", msg);
    cr_assert_eq(INSPECT("*0\r\n", &st, msg), WK_EPROTO);
    cr_assert_eq(INSPECT("$-1\r\n", &st, msg), WK_EPROTO);
    cr_assert_eq(INSPECT(":42\r\n", &st, msg), WK_EPROTO, "a bare PTTL is not the script's");
    cr_assert_eq(INSPECT("*2\r\n:42\r\n:3\r\n", &st, msg), WK_OK, "a good reply still parses");
    cr_assert(st.held && st.ttl_ms == 42 && st.waiting == 3);
}

Test(hostile_server, garbage_is_a_protocol_error, .timeout = 30)
{
    wk_lock_state st;
    char msg[512];
    int rc = INSPECT("!!!! not resp\r\n", &st, msg);
    cr_assert_eq(rc, WK_EPROTO, "got %s: %s", wk_err_name(rc), msg);
}

Test(hostile_server, silence_is_a_timeout, .timeout = 30)
{
    wk_lock_state st;
    char msg[512];
    int64_t t0 = wk_test_now_ms();
    int rc = inspect_against("", 0, &st, msg, sizeof(msg));
    cr_assert_eq(rc, WK_ETIMEDOUT, "got %s: %s", wk_err_name(rc), msg);
    cr_assert_lt(wk_test_now_ms() - t0, 5000);
}

/* A read (lock.inspect, command timeout `timeout_ms`) answered `header`
 * and then up to `flood` bytes of filler as fast as they are read: its
 * status, message, how long it took and how many filler bytes the
 * client's side took before the connection closed. */
typedef struct flooded {
    int rc;
    char msg[512];
    int64_t ms;
    size_t taken;
    bool hung_up; /* the handle closed the connection within a second */
} flooded;

static void read_against_flood(const char *header, size_t flood, int timeout_ms, flooded *out)
{
    wk_test_peer p;
    cr_assert_eq(wk_test_peer_start(&p, WK_TEST_HELLO_REPLY, sizeof(WK_TEST_HELLO_REPLY) - 1,
                                    header, strlen(header)),
                 0);
    p.flood = flood;
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = p.url;
    o.capability = wk_cap_read_only();
    o.command_timeout_ms = timeout_ms;
    wk_db *db;
    cr_assert_eq(wk_db_open(&db, &o, NULL, 0), WK_OK);
    wk_entity lock = WK_LOCK_ENTITY("hostile", 1000);
    wk_lock_state st;
    int64_t t0 = wk_test_now_ms();
    out->rc = wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("x"), &st);
    out->ms = wk_test_now_ms() - t0;
    snprintf(out->msg, sizeof(out->msg), "%s", wk_db_errmsg(db));
    for (int64_t t = wk_test_now_ms(); !atomic_load(&p.hung_up) && wk_test_now_ms() - t < 1000;)
        wk_test_sleep_ms(10);
    out->hung_up = atomic_load(&p.hung_up);
    wk_db_close(db);
    wk_test_peer_stop(&p); /* the flood ends when the connection closed */
    out->taken = atomic_load(&p.flooded);
}

/* A bulk string announced longer than any reply the library takes
 * (WK_BODY_MAX, 512 MiB) is refused at its header: WK_EPROTO at once,
 * the connection closed, the body not read (the peer's 64 MiB of filler
 * stop at what the sockets' buffers hold). */
Test(hostile_server, a_bulk_header_past_the_body_limit_is_refused_at_once, .timeout = 30)
{
    static const char *const headers[] = {
        "$99999999999\r\n",             /* ~100 GB */
        "$536870913\r\n",               /* WK_BODY_MAX + 1 */
        "*2\r\n:1\r\n$99999999999\r\n", /* inside an array */
        "$12345678901234567890123",     /* 23 digits, its line never ends */
    };
    enum { FLOOD = 64 << 20, TIMEOUT_MS = 2000 };
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        flooded f;
        read_against_flood(headers[i], FLOOD, TIMEOUT_MS, &f);
        cr_assert_eq(f.rc, WK_EPROTO,
                     "header %zu: got %s after %lld ms (%zu filler bytes taken): %s", i,
                     wk_err_name(f.rc), (long long)f.ms, f.taken, f.msg);
        cr_assert(strstr(f.msg, "lock.inspect") && strstr(f.msg, "announces a bulk string"), "%s",
                  f.msg);
        cr_assert_lt(f.ms, TIMEOUT_MS / 2, "header %zu: refused after %lld ms", i, (long long)f.ms);
        cr_assert(f.hung_up, "header %zu: the connection is still open", i);
        cr_assert_lt(f.taken, (size_t)FLOOD / 2, "header %zu: %zu filler bytes taken", i, f.taken);
    }
}

/* WK_BODY_MAX itself is a body the library may read: that header is
 * taken, and the query waits for the rest (here: until its timeout). */
Test(hostile_server, a_bulk_header_of_the_body_limit_is_read, .timeout = 30)
{
    flooded f;
    read_against_flood("$536870912\r\n", 1 << 20, 300, &f);
    cr_assert_eq(f.rc, WK_ETIMEDOUT, "got %s: %s", wk_err_name(f.rc), f.msg);
}

/* ------------------------------------------------------------------------
 * A peer that claims to be a cluster node: its slot map and redirections
 * are bytes chosen by the test.
 * ---------------------------------------------------------------------- */

#define CLUSTER_HELLO_REPLY                                                                        \
    "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n"                      \
    "$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:3\r\n$4\r\nmode\r\n$7\r\ncluster\r\n"                       \
    "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"

/* Open against a peer answering HELLO as a cluster node, then `slots`
 * to CLUSTER SLOTS, then `reply` to everything. */
static int open_cluster_peer(wk_test_peer *p, const char **script, const char *slots,
                             const char *reply, wk_db **db, char *err, size_t errlen)
{
    cr_assert_eq(wk_test_peer_start(p, NULL, 0, "", 0), 0);
    script[0] = CLUSTER_HELLO_REPLY;
    script[1] = slots;
    script[2] = reply;
    wk_test_peer_script(p, script, 3);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = p->url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 300;
    return wk_db_open(db, &o, err, errlen);
}

Test(hostile_server, unreadable_cluster_slot_maps_fail_the_open_clearly, .timeout = 30)
{
    static const char *const maps[] = {
        "*1\r\n*3\r\n:0\r\n:99999\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n", /* slot 99999 */
        "*1\r\n*3\r\n:9\r\n:3\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n",     /* 9 > 3 */
        "*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n$9\r\n127.0.0.1\r\n:0\r\n",        /* port 0 */
        "*1\r\n*2\r\n:0\r\n:3\r\n",                                       /* no node */
        "*1\r\n*3\r\n:0\r\n:3\r\n:7\r\n",                                 /* node not an array */
        "$5\r\nslots\r\n",                                                /* not an array */
    };
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        wk_test_peer p;
        const char *script[3];
        wk_db *db = NULL;
        char err[512];
        int rc = open_cluster_peer(&p, script, maps[i], "+OK\r\n", &db, err, sizeof(err));
        cr_assert_eq(rc, WK_EPROTO, "map %zu: %s: %s", i, wk_err_name(rc), err);
        cr_assert(strstr(err, "CLUSTER SLOTS"), "map %zu: %s", i, err);
        cr_assert_null(db);
        wk_test_peer_stop(&p);
    }
    /* No slot assigned, and a refusal, are said as such. */
    wk_test_peer p;
    const char *script[3];
    wk_db *db = NULL;
    char err[512];
    cr_assert_eq(open_cluster_peer(&p, script, "*0\r\n", "+OK\r\n", &db, err, sizeof(err)), WK_EIO);
    cr_assert(strstr(err, "no slot is assigned"), "%s", err);
    wk_test_peer_stop(&p);
    cr_assert_eq(open_cluster_peer(&p, script, "-ERR nope\r\n", "+OK\r\n", &db, err, sizeof(err)),
                 WK_EREDIS);
    cr_assert(strstr(err, "CLUSTER SLOTS refused") && strstr(err, "nope"), "%s", err);
    wk_test_peer_stop(&p);
}

/* Open a handle on a scripted peer whose map has it as the one primary. */
static wk_db *open_single_primary(const wk_test_peer *p)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = p->url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 300;
    wk_db *db;
    char err[512];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    cr_assert_eq(wk_db_cluster_primaries(db), 1);
    return db;
}

/* A map giving every slot to the peer itself (its port known once it
 * listens), then `reply` to every query. */
static int against_self_map(const char *reply_fmt, int *status, char *msg, size_t msglen)
{
    wk_test_peer p;
    cr_assert_eq(wk_test_peer_start(&p, NULL, 0, "", 0), 0);
    static char slots[200], reply[200];
    snprintf(slots, sizeof(slots), "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
             p.port);
    snprintf(reply, sizeof(reply), reply_fmt, p.port);
    static const char *script[3];
    script[0] = CLUSTER_HELLO_REPLY;
    script[1] = slots;
    script[2] = reply;
    wk_test_peer_script(&p, script, 3);
    wk_db *db = open_single_primary(&p);
    wk_entity lock = WK_LOCK_ENTITY("hostile", 1000);
    wk_token t;
    bool got = true;
    *status = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("x"), &t, &got);
    snprintf(msg, msglen, "%s", wk_db_errmsg(db));
    int commands = atomic_load(&p.commands);
    cr_assert(!got);
    wk_db_close(db);
    wk_test_peer_stop(&p);
    return commands;
}

Test(hostile_server, cluster_redirections_that_never_end_give_up, .timeout = 30)
{
    int rc;
    char msg[512];
    /* MOVED to itself, forever: a few re-sends, then the error. */
    int sent = against_self_map("-MOVED 866 127.0.0.1:%d\r\n", &rc, msg, sizeof(msg));
    cr_assert_eq(rc, WK_EREDIS, "%s: %s", wk_err_name(rc), msg);
    cr_assert(strstr(msg, "MOVED"), "%s", msg);
    cr_assert_leq(sent, 2 + 6, "%d commands for one query", sent);
    /* TRYAGAIN forever: re-sent with pauses until the command timeout, then
     * not run (the write never ran, so it is not WK_EUNKNOWN). */
    sent = against_self_map("-TRYAGAIN Multiple keys request during rehashing of slot\r\n", &rc,
                            msg, sizeof(msg));
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), msg);
    cr_assert(strstr(msg, "TRYAGAIN"), "%s", msg);
    cr_assert(strstr(msg, "did not happen"), "%s", msg);
    cr_assert_geq(sent, 2 + 2, "re-sent after a pause: %d commands", sent);
    /* ASK to a node that refuses connections: not sent there, so not run. */
    sent = against_self_map("-ASK 866 127.0.0.1:1\r\n", &rc, msg, sizeof(msg));
    cr_assert_eq(rc, WK_EIO, "%s: %s", wk_err_name(rc), msg);
    cr_assert(strstr(msg, "did not happen"), "%s", msg);
    /* Unreadable redirections are the server's error, not a crash. */
    sent = against_self_map("-MOVED 99999 127.0.0.1:%d\r\n", &rc, msg, sizeof(msg));
    cr_assert_eq(rc, WK_EREDIS, "%s: %s", wk_err_name(rc), msg);
    sent = against_self_map("-ASK 1 nohostport\r\n", &rc, msg, sizeof(msg));
    cr_assert_eq(rc, WK_EREDIS, "%s: %s", wk_err_name(rc), msg);
    (void)sent;
}

Test(hostile_server, a_dead_first_seed_keeps_its_slots_off_the_live_connection, .timeout = 30)
{
    /* Seeds "127.0.0.1:1" (refuses) and the peer; the peer's map gives
     * every slot to 127.0.0.1:1. The open's connection is the peer's, so
     * a query for those slots must go to 127.0.0.1:1 — and fail there as
     * not sent — never run on the peer. */
    wk_test_peer p;
    cr_assert_eq(wk_test_peer_start(&p, NULL, 0, "", 0), 0);
    static const char *script[3] = {CLUSTER_HELLO_REPLY,
                                    "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n",
                                    ":5\r\n"};
    wk_test_peer_script(&p, script, 3);
    char url[96];
    snprintf(url, sizeof(url), "redis://127.0.0.1:1,127.0.0.1:%d", p.port);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 300;
    wk_db *db;
    char err[512];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_entity lock = WK_LOCK_ENTITY("hostile", 1000);
    wk_lock_state st;
    int rc = wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("x"), &st);
    cr_assert_eq(rc, WK_EIO, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), "127.0.0.1:1"), "%s", wk_db_errmsg(db));
    cr_assert_eq(atomic_load(&p.commands), 2, "HELLO and CLUSTER SLOTS only");
    wk_db_close(db);
    wk_test_peer_stop(&p);
}

Test(hostile_server, a_moved_that_grows_the_node_table_mid_round_reads_no_freed_node, .timeout = 30)
{
    /* The map names 16 nodes (the table's first capacity): 15 addresses
     * that are never reached, each claiming slot 0, then the peer taking
     * every slot. A batch of three reads then goes to the peer, whose one
     * answer holds two MOVEDs to addresses not in the table, then a miss:
     * the table grows while the round still reads the peer's replies. */
    wk_test_peer p;
    cr_assert_eq(wk_test_peer_start(&p, NULL, 0, "", 0), 0);
    static char slots[2048];
    size_t len = (size_t)snprintf(slots, sizeof(slots), "*16\r\n");
    for (int i = 0; i < 15; i++)
        len += (size_t)snprintf(slots + len, sizeof(slots) - len,
                                "*3\r\n:0\r\n:0\r\n*2\r\n$10\r\n127.0.1.%02d\r\n:1\r\n", 10 + i);
    snprintf(slots + len, sizeof(slots) - len,
             "*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", p.port);
    wk_entity cache = WK_CACHE_ENTITY("hostile", 1000);
    unsigned key_slot[2];
    for (int i = 0; i < 2; i++) {
        char key[WK_KEY_MAX + 1];
        size_t klen;
        wk_name name = wk_name_u64((uint64_t)i);
        cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &cache, &name, NULL), WK_OK);
        key_slot[i] = wk__key_slot(key, klen);
    }
    static char moved[200];
    snprintf(moved, sizeof(moved), "-MOVED %u 127.0.2.1:1\r\n-MOVED %u 127.0.2.2:1\r\n$-1\r\n",
             key_slot[0], key_slot[1]);
    static const char *script[5];
    script[0] = CLUSTER_HELLO_REPLY;
    script[1] = slots;
    script[2] = moved;
    /* The new nodes refuse connections: the map is asked anew (the peer
     * again) and the two reads come back to the peer. */
    script[3] = slots;
    script[4] = "$-1\r\n$-1\r\n";
    wk_test_peer_script(&p, script, 5);
    wk_db *db = open_single_primary(&p);
    wk_batch *b = NULL;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_body body[3] = {{0}};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(
            wk_cache_get(wk_batch_processor(b), &cache, wk_name_u64((uint64_t)i), &body[i]), WK_OK);
    int rc = wk_batch_exec(b);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    for (int i = 0; i < 3; i++) {
        cr_assert_not(body[i].found, "read %d: a miss", i);
        wk_body_free(&body[i]);
    }
    cr_assert_eq(atomic_load(&p.commands), 5, "HELLO, SLOTS, the batch, SLOTS, the re-sent two");
    wk_batch_close(b);
    wk_db_close(db);
    wk_test_peer_stop(&p);
}
