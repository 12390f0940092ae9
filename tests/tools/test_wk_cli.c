/*
 * tests/tools/test_wk_cli.c — wk, the operator's CLI, run as a user would:
 * the built binary (WK_CLI_PATH) against a real redis-server, with the
 * billing example's schema (WK_BILLING_SCHEMA). State is set up and
 * checked through the library, so the CLI and the library see the same
 * keys; capability refusals must carry the library's own message.
 */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "redis_fixture.h"

TestSuite(wk_cli, .timeout = 120);

static const wk_entity invoice = WK_LOCK_ENTITY("invoice", 30000);
static const wk_entity invoice_state = WK_CACHE_ENTITY("invoice-state", 600000);
static const wk_entity login = WK_TOKEN_BUCKET_ENTITY("login", 20, 1, 3000);
static const wk_entity flags = WK_SETTINGS_ENTITY("flags");

typedef struct result {
    int status;
    char out[8192];
    char err[4096];
} result;

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* Run `wk <args>` (args: shell words, already quoted) with --url and
 * --schema in front unless raw. */
static void run_wk(result *r, bool raw, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void run_wk(result *r, bool raw, const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    char outp[64], errp[64];
    snprintf(outp, sizeof(outp), "/tmp/wk-cli-%d.out", (int)getpid());
    snprintf(errp, sizeof(errp), "/tmp/wk-cli-%d.err", (int)getpid());
    if (raw)
        snprintf(cmd, sizeof(cmd), "'%s' %s >%s 2>%s", WK_CLI_PATH, args, outp, errp);
    else
        snprintf(cmd, sizeof(cmd), "'%s' --url '%s' --schema '%s' %s >%s 2>%s", WK_CLI_PATH,
                 wk_test_url(), WK_BILLING_SCHEMA, args, outp, errp);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "wk did not exit: %s", cmd);
    r->status = WEXITSTATUS(st);
    slurp(outp, r->out, sizeof(r->out));
    slurp(errp, r->err, sizeof(r->err));
    unlink(outp);
    unlink(errp);
}

static json_t *parse_json(const result *r)
{
    json_error_t e;
    json_t *j = json_loads(r->out, 0, &e);
    cr_assert(j, "not JSON (%s): %s", e.text, r->out);
    return j;
}

static void hex_of(const wk_token *t, char out[2 * WK_TOKEN_LEN + 1])
{
    for (int i = 0; i < WK_TOKEN_LEN; i++)
        sprintf(out + 2 * i, "%02x", t->bytes[i]);
}

Test(wk_cli, help_and_usage)
{
    result r;
    run_wk(&r, true, "--help");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "force-release NAME"), "%s", r.out);
    cr_assert(strstr(r.out, "exit status"), "%s", r.out);
    run_wk(&r, false, "help");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "invoice          Lock"), "%s", r.out);
    cr_assert(strstr(r.out, "worker replica"), "%s", r.out);
    run_wk(&r, false, "login --help");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "login peek NAME"), "%s", r.out);
    cr_assert(!strstr(r.out, "inspect"), "%s", r.out);
    run_wk(&r, false, "invoice owned --help");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "invoice owned NAME TOKEN"), "%s", r.out);

    run_wk(&r, true, "%s", "");
    cr_assert_eq(r.status, 2);
    run_wk(&r, false, "nosuch inspect 1");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "no entity \"nosuch\""), "%s", r.err);
    run_wk(&r, false, "invoice peek 1");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "has no command \"peek\""), "%s", r.err);
    run_wk(&r, false, "invoice inspect abc");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "not an unsigned integer"), "%s", r.err);
    run_wk(&r, false, "invoice inspect");
    cr_assert_eq(r.status, 2);
    run_wk(&r, false, "invoice owned 1 xyz");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "32 hex digits"), "%s", r.err);
    run_wk(&r, false, "--as nobody invoice inspect 1");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "no capability \"nobody\""), "%s", r.err);
    run_wk(&r, true, "--schema /nonexistent.json invoice inspect 1");
    cr_assert_eq(r.status, 2);
}

Test(wk_cli, connection_errors_exit_4)
{
    int port = wk_test_free_port();
    result r;
    run_wk(&r, true, "--url redis://127.0.0.1:%d --schema '%s' --timeout 500 invoice inspect 1",
           port, WK_BILLING_SCHEMA);
    cr_assert_eq(r.status, 4, "%d %s", r.status, r.err);
    run_wk(&r, true, "--json --url redis://127.0.0.1:%d --schema '%s' invoice inspect 1", port,
           WK_BILLING_SCHEMA);
    cr_assert_eq(r.status, 4);
    json_t *j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "WK_EIO");
    json_decref(j);
}

Test(wk_cli, locks_inspect_owned_force_release)
{
    wk_db *db = wk_test_open(NULL);
    uint64_t id = 1000000u + (uint64_t)getpid();
    wk_token token;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &invoice, wk_name_u64(id), &token, &got), WK_OK);
    cr_assert(got);
    char hex[2 * WK_TOKEN_LEN + 1], other[2 * WK_TOKEN_LEN + 1];
    hex_of(&token, hex);
    memset(other, '0', 2 * WK_TOKEN_LEN);
    other[2 * WK_TOKEN_LEN] = '\0';

    result r;
    run_wk(&r, false, "invoice inspect %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "held: yes"), "%s", r.out);
    run_wk(&r, false, "--json invoice inspect %llu", (unsigned long long)id);
    json_t *j = parse_json(&r);
    cr_assert(json_is_true(json_object_get(j, "held")));
    cr_assert_gt(json_integer_value(json_object_get(j, "ttl_ms")), 0);
    json_decref(j);

    run_wk(&r, false, "--as replica invoice owned %llu %s", (unsigned long long)id, hex);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, false, "--json invoice owned %llu %s", (unsigned long long)id, other);
    cr_assert_eq(r.status, 1);
    j = parse_json(&r);
    cr_assert(json_is_false(json_object_get(j, "owned")));
    json_decref(j);

    /* --as replica: refused with the library's message, nothing sent */
    wk_cap *replica_cap = NULL;
    wk_cap_entry none[1] = {{"Lock", "invoice", WK_GRANT_READ}};
    cr_assert_eq(wk_cap_new(&replica_cap, "replica", WK_GRANT_READ, none, 1), WK_OK);
    wk_db *replica = wk_test_open(replica_cap);
    bool was;
    cr_assert_eq(wk_lock_force_release(wk_db_processor(replica), &invoice, wk_name_u64(id), &was),
                 WK_EDENIED);
    char libmsg[256];
    snprintf(libmsg, sizeof(libmsg), "%s", wk_db_errmsg(replica));
    run_wk(&r, false, "--as replica invoice force-release %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 3);
    cr_assert(strstr(r.err, libmsg), "wk said \"%s\", the library \"%s\"", r.err, libmsg);
    run_wk(&r, false, "--json --as replica invoice force-release %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 3);
    j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "WK_EDENIED");
    cr_assert_str_eq(json_string_value(json_object_get(j, "error")), libmsg);
    json_decref(j);
    /* the default capability is read-only */
    run_wk(&r, false, "invoice force-release %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 3);
    run_wk(&r, false, "invoice inspect %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 0, "still held");

    run_wk(&r, false, "--as worker --json invoice force-release %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert(json_is_true(json_object_get(j, "was_held")));
    json_decref(j);
    run_wk(&r, false, "invoice inspect %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 1);
    run_wk(&r, false, "--as worker invoice force-release %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 1);
    bool released = true;
    cr_assert_eq(wk_lock_release(wk_db_processor(db), &invoice, wk_name_u64(id), &token, &released),
                 WK_OK);
    cr_assert(!released, "the holder's lease was taken away");
    wk_db_close(replica);
    wk_cap_free(replica_cap);
    wk_db_close(db);
}

Test(wk_cli, caches_get_put_remove_list)
{
    wk_db *db = wk_test_open(NULL);
    uint64_t a = 2000000u + (uint64_t)getpid() * 4, b = a + 1;
    result r;
    run_wk(&r, false, "--as worker invoice_state put %llu 'done by w1'", (unsigned long long)a);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_eq(wk_cache_put(wk_db_processor(db), &invoice_state, wk_name_u64(b), "x\n\"y", 4),
                 WK_OK);
    wk_body body = WK_BODY_INIT;
    cr_assert_eq(wk_cache_get(wk_db_processor(db), &invoice_state, wk_name_u64(a), &body), WK_OK);
    cr_assert(body.found && body.len == 10 && !memcmp(body.data, "done by w1", 10));
    wk_body_free(&body);

    run_wk(&r, false, "invoice_state get %llu", (unsigned long long)a);
    cr_assert_eq(r.status, 0);
    cr_assert_str_eq(r.out, "done by w1");
    run_wk(&r, false, "--json invoice_state get %llu", (unsigned long long)b);
    json_t *j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "body")), "x\n\"y");
    json_decref(j);

    run_wk(&r, false, "--json invoice_state list");
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    json_t *names = json_object_get(j, "names");
    bool saw_a = false, saw_b = false;
    for (size_t i = 0; i < json_array_size(names); i++) {
        json_int_t v = json_integer_value(json_array_get(names, i));
        saw_a |= v == (json_int_t)a;
        saw_b |= v == (json_int_t)b;
    }
    cr_assert(saw_a && saw_b, "%s", r.out);
    json_decref(j);

    run_wk(&r, false, "--as replica invoice_state remove %llu", (unsigned long long)a);
    cr_assert_eq(r.status, 3);
    run_wk(&r, false, "--as read-write invoice_state remove %llu", (unsigned long long)a);
    cr_assert_eq(r.status, 0);
    run_wk(&r, false, "--json invoice_state get %llu", (unsigned long long)a);
    cr_assert_eq(r.status, 1);
    j = parse_json(&r);
    cr_assert(json_is_false(json_object_get(j, "found")));
    json_decref(j);
    run_wk(&r, false, "--as read-write invoice_state remove %llu", (unsigned long long)a);
    cr_assert_eq(r.status, 1);

    /* a HashedCache: the worker may read profiles, not write them */
    run_wk(&r, false, "--as worker profile put %llu '{}'", (unsigned long long)a);
    cr_assert_eq(r.status, 3);
    run_wk(&r, false, "--as read-write profile put %llu '{\"id\":\"1\"}'", (unsigned long long)a);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, false, "--as worker --json profile get %llu", (unsigned long long)a);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "body")), "{\"id\":\"1\"}");
    cr_assert_eq(strlen(json_string_value(json_object_get(j, "hash"))), 2 * WK_HASH_LEN);
    json_decref(j);
    wk_db_close(db);
}

Test(wk_cli, token_bucket_peek_and_reset)
{
    wk_db *db = wk_test_open(NULL);
    char addr[64];
    snprintf(addr, sizeof(addr), "203.0.113.%d", (int)(getpid() % 200));
    result r;
    run_wk(&r, false, "--json login peek %s", addr);
    cr_assert_eq(r.status, 0, "%s", r.err);
    json_t *j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "available")), 20);
    json_decref(j);
    wk_token_bucket_outcome o;
    cr_assert_eq(wk_token_bucket_acquire(wk_db_processor(db), &login, wk_name_str(addr), 20, &o),
                 WK_OK);
    cr_assert(o.allowed);
    run_wk(&r, false, "login peek %s", addr);
    cr_assert_eq(r.status, 1, "limited: %s", r.out);
    cr_assert(strstr(r.out, "available: 0"), "%s", r.out);
    run_wk(&r, false, "--as replica login reset %s", addr);
    cr_assert_eq(r.status, 3);
    run_wk(&r, false, "--as worker --json login reset %s", addr);
    cr_assert_eq(r.status, 0);
    j = parse_json(&r);
    cr_assert(json_is_true(json_object_get(j, "was_used")));
    json_decref(j);
    run_wk(&r, false, "login peek %s", addr);
    cr_assert_eq(r.status, 0);
    run_wk(&r, false, "login list");
    cr_assert_eq(r.status, 0);
    wk_db_close(db);
}

Test(wk_cli, settings_get_put_remove)
{
    wk_db *db = wk_test_open(NULL);
    char svc[64];
    snprintf(svc, sizeof(svc), "svc-%d", (int)getpid());
    result r;
    run_wk(&r, false, "--as worker flags put %s mode fast", svc);
    cr_assert_eq(r.status, 3, "the worker only reads flags");
    run_wk(&r, false, "--as read-write --json flags put %s mode fast", svc);
    cr_assert_eq(r.status, 0, "%s", r.err);
    json_t *j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "version")), 1);
    json_decref(j);
    wk_settings_map *map = NULL;
    cr_assert_eq(wk_settings_snapshot(wk_db_processor(db), &flags, wk_name_str(svc), &map), WK_OK);
    const wk_settings_entry *e = wk_settings_map_find(map, "mode", 4);
    cr_assert(e && e->value_len == 4 && !memcmp(e->value, "fast", 4));
    wk_settings_map_free(map);

    run_wk(&r, false, "flags get %s mode", svc);
    cr_assert_eq(r.status, 0);
    cr_assert_str_eq(r.out, "fast\n");
    run_wk(&r, false, "--json flags get %s", svc);
    j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "entries"), "mode")),
                     "fast");
    json_decref(j);
    run_wk(&r, false, "flags get %s nokey", svc);
    cr_assert_eq(r.status, 1);
    run_wk(&r, false, "--as read-write flags remove %s mode", svc);
    cr_assert_eq(r.status, 0);
    run_wk(&r, false, "--as read-write flags remove %s mode", svc);
    cr_assert_eq(r.status, 1);
    run_wk(&r, false, "--json flags list");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, svc), "%s", r.out);
    wk_db_close(db);
}

/* Multi-key kinds (their names come out of the hash tag of their keys):
 * the billing RwLock, and a schema of the test's own with a FencedLock and
 * a Semaphore. */
Test(wk_cli, rwlock_fenced_lock_and_semaphore)
{
    wk_db *db = wk_test_open(NULL);
    char shop[64];
    snprintf(shop, sizeof(shop), "shop:{x}-%d", (int)getpid());
    static const wk_entity catalog = WK_RWLOCK_ENTITY("catalog", 10000);
    wk_token token;
    bool got;
    cr_assert_eq(
        wk_rwlock_try_write(wk_db_processor(db), &catalog, wk_name_str(shop), &token, &got), WK_OK);
    cr_assert(got);
    char hex[2 * WK_TOKEN_LEN + 1];
    hex_of(&token, hex);
    result r;
    run_wk(&r, false, "--json catalog inspect '%s'", shop);
    cr_assert_eq(r.status, 0, "%s", r.err);
    json_t *j = parse_json(&r);
    cr_assert(json_is_true(json_object_get(j, "writer_held")));
    json_decref(j);
    run_wk(&r, false, "--json catalog owned '%s' %s", shop, hex);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "as")), "writer");
    json_decref(j);
    run_wk(&r, false, "--json catalog list");
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    json_t *names = json_object_get(j, "names");
    size_t seen = 0;
    for (size_t i = 0; i < json_array_size(names); i++)
        seen += !strcmp(json_string_value(json_array_get(names, i)), shop);
    cr_assert_eq(seen, 1, "once, though it has several keys: %s", r.out);
    json_decref(j);
    run_wk(&r, false, "--as worker catalog force-release '%s'", shop);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, false, "catalog inspect '%s'", shop);
    cr_assert_eq(r.status, 1);

    char dir[] = "/tmp/wk-cli-schema-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/schema.json", dir);
    char ns_f[64], ns_s[64];
    snprintf(ns_f, sizeof(ns_f), "fence-%d", (int)getpid());
    snprintf(ns_s, sizeof(ns_s), "sem-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f,
            "{\"service\": \"ops\", \"entities\": ["
            "{\"id\": \"job\", \"kind\": \"FencedLock\", \"namespace\": \"%s\", \"name\": \"i64\","
            " \"ttl\": \"30s\"},"
            "{\"id\": \"slot\", \"kind\": \"Semaphore\", \"namespace\": \"%s\", \"name\": \"str\","
            " \"ttl\": \"30s\", \"permits\": 3}],"
            "\"capabilities\": [{\"id\": \"viewer\", \"default\": \"read\"}]}\n",
            ns_f, ns_s);
    fclose(f);
    wk_entity job = WK_FENCED_LOCK_ENTITY(ns_f, 30000);
    wk_entity slot = WK_SEMAPHORE_ENTITY(ns_s, 3, 30000);
    wk_fenced_lease lease;
    cr_assert_eq(wk_fenced_lock_try(wk_db_processor(db), &job, wk_name_i64(-5), &lease), WK_OK);
    cr_assert(lease.acquired);
    wk_token t1, t2;
    cr_assert_eq(wk_semaphore_try(wk_db_processor(db), &slot, wk_name_str("a"), &t1, &got), WK_OK);
    cr_assert_eq(wk_semaphore_try(wk_db_processor(db), &slot, wk_name_str("a"), &t2, &got), WK_OK);

    run_wk(&r, true, "--url '%s' --schema '%s' --json job inspect -5", wk_test_url(), path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "last_fence")), lease.fence);
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' --json job list", wk_test_url(), path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "-5"), "%s", r.out);
    run_wk(&r, true, "--url '%s' --schema '%s' --as viewer job force-release -5", wk_test_url(),
           path);
    cr_assert_eq(r.status, 3);
    run_wk(&r, true, "--url '%s' --schema '%s' --json slot inspect a", wk_test_url(), path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "running")), 2);
    cr_assert_eq(json_integer_value(json_object_get(j, "available")), 1);
    json_decref(j);
    hex_of(&t1, hex);
    run_wk(&r, true, "--url '%s' --schema '%s' slot owned a %s", wk_test_url(), path, hex);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, true, "--url '%s' --schema '%s' --as read-write --json slot force-release a",
           wk_test_url(), path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "freed")), 2);
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' slot inspect a", wk_test_url(), path);
    cr_assert_eq(r.status, 1);
    unlink(path);
    rmdir(dir);
    wk_db_close(db);
}
