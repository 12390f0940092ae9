/*
 * tests/tools/test_wk_cli.c — wk, the operator's CLI, run as a user would:
 * the built binary (WK_CLI_PATH) against a real redis-server, with the
 * billing example's schema (WK_BILLING_SCHEMA). State is set up and
 * checked through the library, so the CLI and the library see the same
 * keys; capability refusals must carry the library's own message.
 */
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "redis_fixture.h"

TestSuite(wk_cli, .timeout = 120);

static const wk_entity invoice = WK_LOCK_ENTITY("invoice", 30000);
static const wk_entity invoice_state = WK_CACHE_ENTITY("invoice-state", 600000);
static const wk_entity login = WK_TOKEN_BUCKET_ENTITY("login", 20, 1, 3000);
static const wk_entity flags = WK_SETTINGS_ENTITY("flags");
static const wk_entity profile = WK_HASHED_CACHE_ENTITY("profile", 300000);

/* A body that decodes as the schema's customer_profile. */
static const char good_profile[] =
    "{\"id\":\"7\",\"name\":\"Ada\",\"vip\":true,\"credit_limit\":100.5,"
    "\"open_invoices\":[\"1\",\"2\"],\"billing_address\":{\"street\":\"1 Main St\","
    "\"city\":\"Oslo\"}}";

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

/* Run `<env> wk --url URL --schema <billing> <args>` (env: NAME=value
 * words or ""; args: printf of shell words, already quoted; url NULL: no
 * --url nor --schema). */
static void run_wk_in(result *r, const char *env, const char *url, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void run_wk_in(result *r, const char *env, const char *url, const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    char outp[64], errp[64];
    snprintf(outp, sizeof(outp), "/tmp/wk-cli-%d.out", (int)getpid());
    snprintf(errp, sizeof(errp), "/tmp/wk-cli-%d.err", (int)getpid());
    if (!url)
        snprintf(cmd, sizeof(cmd), "%s '%s' %s >%s 2>%s", env, WK_CLI_PATH, args, outp, errp);
    else
        snprintf(cmd, sizeof(cmd), "%s '%s' --url '%s' --schema '%s' %s >%s 2>%s", env,
                 WK_CLI_PATH, url, WK_BILLING_SCHEMA, args, outp, errp);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "wk did not exit: %s", cmd);
    r->status = WEXITSTATUS(st);
    slurp(outp, r->out, sizeof(r->out));
    slurp(errp, r->err, sizeof(r->err));
    unlink(outp);
    unlink(errp);
}

/* `wk <args>`, with the test server's --url and --schema unless raw. */
#define run_wk(r, raw, ...) run_wk_in(r, "", (raw) ? NULL : wk_test_url(), __VA_ARGS__)

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
    /* every kind's commands, the later ones included */
    const char *every[] = {"owned NAME TOKEN",
                           "reset NAME",
                           "put NAME BODY",
                           "put NAME KEY VALUE",
                           "watch NAME [--count N] [--timeout-ms MS]",
                           "LiveView:",
                           "peek NAME [COUNT]",
                           "close NAME",
                           "read NAME [FROM]",
                           "finish NAME",
                           "list"};
    for (size_t i = 0; i < sizeof(every) / sizeof(every[0]); i++)
        cr_assert(strstr(r.out, every[i]), "--help lacks \"%s\"", every[i]);
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
    /* the commands and their effects come from the kind's op list, and its
     * other operations are named with theirs */
    run_wk(&r, false, "invoice --help");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "invoice force-release NAME\n      WRITE: free NAME"), "%s", r.out);
    cr_assert(strstr(r.out, "invoice inspect NAME\n      READ: "), "%s", r.out);
    cr_assert(strstr(r.out, "with no command here: try (WRITE), release (WRITE)"), "%s", r.out);
    run_wk(&r, false, "invoice try 1");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "lock.try is the library's (wk_lock_try())"), "%s", r.err);
    run_wk(&r, false, "--as read-write invoice force_release 1");
    cr_assert_eq(r.status, 1, "force_release as the list spells it: %s", r.err);

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

/* A handle on the test server, and invoice `id`'s lock taken with it. */
static wk_db *hold_invoice(uint64_t id, wk_token *token)
{
    wk_db *db = wk_test_open(NULL);
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &invoice, wk_name_u64(id), token, &got), WK_OK);
    cr_assert(got);
    return db;
}

Test(wk_cli, locks_inspect_owned_force_release)
{
    uint64_t id = 1000000u + (uint64_t)getpid();
    wk_token token;
    wk_db *db = hold_invoice(id, &token);
    char hex[2 * WK_TOKEN_LEN + 1], other[2 * WK_TOKEN_LEN + 1];
    hex_of(&token, hex);
    memset(other, '0', 2 * WK_TOKEN_LEN);
    other[2 * WK_TOKEN_LEN] = '\0';

    result r;
    run_wk(&r, false, "invoice inspect %llu", (unsigned long long)id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "held: yes"), "%s", r.out);
    cr_assert(strstr(r.out, "waiting: 0"), "how many wait (issue 38): %s", r.out);
    run_wk(&r, false, "--json invoice inspect %llu", (unsigned long long)id);
    json_t *j = parse_json(&r);
    cr_assert(json_is_true(json_object_get(j, "held")));
    cr_assert_gt(json_integer_value(json_object_get(j, "ttl_ms")), 0);
    cr_assert(json_is_integer(json_object_get(j, "waiting")));
    cr_assert_eq(json_integer_value(json_object_get(j, "waiting")), 0);
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
    run_wk(&r, false, "--as worker profile put %llu '%s'", (unsigned long long)a, good_profile);
    cr_assert_eq(r.status, 3);
    run_wk(&r, false, "--as read-write profile put %llu '%s'", (unsigned long long)a,
           good_profile);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, false, "--as worker --json profile get %llu", (unsigned long long)a);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "body")), good_profile);
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
            "\"capabilities\": [{\"id\": \"viewer\", \"default\": \"read\"},"
            " {\"id\": \"nobody\", \"default\": \"none\"}]}\n",
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
    /* refused: the error is the one JSON object on stdout (an inspect used
     * to print its "{" before the call, and the error object after it) */
    run_wk(&r, true, "--url '%s' --schema '%s' --as nobody --json job inspect -5", wk_test_url(),
           path);
    cr_assert_eq(r.status, 3, "%s", r.err);
    j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "WK_EDENIED");
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
    cr_assert(json_is_true(json_object_get(j, "was_held")), "%s", r.out);
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' slot inspect a", wk_test_url(), path);
    cr_assert_eq(r.status, 1);
    unlink(path);
    rmdir(dir);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * settings watch: wk as a child process (its own handles), ended by
 * --count, a signal or --timeout-ms; its output goes to a file that the
 * test reads, never to a pipe it could block on.
 * ---------------------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    char out[64], err[64];
} child;

/* Start `wk --url … --schema SCHEMA <args>` (exec'd by the shell, so the
 * pid is wk's). */
static void spawn_wk(child *c, const char *schema, const char *args)
{
    snprintf(c->out, sizeof(c->out), "/tmp/wk-cli-watch-%d.out", (int)getpid());
    snprintf(c->err, sizeof(c->err), "/tmp/wk-cli-watch-%d.err", (int)getpid());
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "exec '%s' --url '%s' --schema '%s' %s >%s 2>%s", WK_CLI_PATH,
             wk_test_url(), schema, args, c->out, c->err);
    pid_t parent = getpid();
    c->pid = fork();
    cr_assert_geq(c->pid, 0);
    if (c->pid == 0) {
        /* Dies with the test, even one that fails before child_cleanup(). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
}

/* The lines the child wrote so far into buf; waits (bounded by the
 * suite's timeout) until there are at least `n`. */
static void wait_lines(const child *c, size_t n, char *buf, size_t cap)
{
    for (;;) {
        slurp(c->out, buf, cap);
        size_t lines = 0;
        for (const char *p = buf; (p = strchr(p, '\n')); p++)
            lines++;
        if (lines >= n)
            return;
        int st;
        cr_assert_eq(waitpid(c->pid, &st, WNOHANG), 0, "wk ended before %zu lines: %s", n, buf);
        wk_test_sleep_ms(10);
    }
}

/* Wait for the child to end; its exit status. */
static int child_status(child *c)
{
    int st;
    cr_assert_eq(waitpid(c->pid, &st, 0), c->pid);
    c->pid = 0;
    cr_assert(WIFEXITED(st), "wk did not exit (signal %d)", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return WEXITSTATUS(st);
}

static void child_cleanup(child *c)
{
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
    }
    unlink(c->out);
    unlink(c->err);
}

/* Line `i` (from 0) of buf, parsed. */
static json_t *json_line(const char *buf, size_t i)
{
    const char *p = buf;
    for (size_t k = 0; k < i; k++)
        p = strchr(p, '\n') + 1;
    json_error_t e;
    json_t *j = json_loadb(p, (size_t)(strchr(p, '\n') - p), 0, &e);
    cr_assert(j, "line %zu is not JSON (%s): %s", i, e.text, buf);
    return j;
}

Test(wk_cli, settings_watch_prints_each_version_until_count)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    char svc[64], args[256], buf[8192];
    snprintf(svc, sizeof(svc), "watch-%d", (int)getpid());
    int64_t v = 0;
    cr_assert_eq(wk_settings_put(p, &flags, wk_name_str(svc), "mode", 4, "slow", 4, &v), WK_OK);
    child c;
    snprintf(args, sizeof(args), "--json --as worker flags watch %s --count 3", svc);
    spawn_wk(&c, WK_BILLING_SCHEMA, args);
    wait_lines(&c, 1, buf, sizeof(buf)); /* following now */
    int64_t v2, v3;
    cr_assert_eq(wk_settings_put(p, &flags, wk_name_str(svc), "mode", 4, "fast", 4, &v2), WK_OK);
    wk_settings_removal rm;
    cr_assert_eq(wk_settings_remove(p, &flags, wk_name_str(svc), "mode", 4, &rm), WK_OK);
    v3 = rm.version;
    cr_assert_eq(child_status(&c), 0, "ends by itself after 3 versions");
    slurp(c.out, buf, sizeof(buf));
    const int64_t want[3] = {v, v2, v3};
    const char *mode[3] = {"slow", "fast", NULL};
    for (size_t i = 0; i < 3; i++) {
        json_t *j = json_line(buf, i);
        cr_assert_eq(json_integer_value(json_object_get(j, "version")), want[i], "%s", buf);
        json_t *m = json_object_get(json_object_get(j, "entries"), "mode");
        if (mode[i])
            cr_assert_str_eq(json_string_value(m), mode[i], "%s", buf);
        else
            cr_assert_null(m, "removed: %s", buf);
        json_decref(j);
    }
    cr_assert_null(strchr(strrchr(buf, '}'), '{'), "nothing after the third: %s", buf);
    child_cleanup(&c);
    wk_db_close(db);
}

Test(wk_cli, settings_watch_ends_cleanly_on_sigint_sigterm_and_timeout)
{
    char svc[64], args[256], buf[8192];
    snprintf(svc, sizeof(svc), "watch-sig-%d", (int)getpid());
    const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        child c;
        snprintf(args, sizeof(args), "flags watch %s", svc);
        spawn_wk(&c, WK_BILLING_SCHEMA, args);
        wait_lines(&c, 1, buf, sizeof(buf));
        cr_assert(strstr(buf, "# version 0"), "a map never written: %s", buf);
        cr_assert_eq(kill(c.pid, sigs[i]), 0);
        cr_assert_eq(child_status(&c), 0, "signal %d: a clean exit", sigs[i]);
        child_cleanup(&c);
    }
    /* --timeout-ms before --count versions came: exit 1; without --count: 0 */
    result r;
    run_wk(&r, false, "--json flags watch %s --timeout-ms 200 --count 2", svc);
    cr_assert_eq(r.status, 1, "%s", r.err);
    json_t *j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "version")), 0);
    json_decref(j);
    run_wk(&r, false, "flags watch %s --timeout-ms 200", svc);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, false, "flags watch %s --count 0", svc);
    cr_assert_eq(r.status, 2);
    run_wk(&r, false, "flags watch %s --every 1", svc);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unknown option --every"), "%s", r.err);
}

/* ------------------------------------------------------------------------
 * LiveView, Pipe, StreamBuffer (a schema of the test's own)
 * ---------------------------------------------------------------------- */

Test(wk_cli, dynamic_kinds_inspect_and_read_without_consuming)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    char ns[3][64], dir[] = "/tmp/wk-cli-schema-XXXXXX", path[128];
    const char *kinds[3] = {"view", "pipe", "sbuf"};
    for (int i = 0; i < 3; i++)
        snprintf(ns[i], sizeof(ns[i]), "%s-%d", kinds[i], (int)getpid());
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/schema.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(
        f,
        "{\"service\": \"dyn\", \"entities\": ["
        "{\"id\": \"doc\", \"kind\": \"LiveView\", \"namespace\": \"%s\", \"name\": \"str\","
        " \"max_diffs\": 5},"
        "{\"id\": \"reply\", \"kind\": \"Pipe\", \"namespace\": \"%s\", \"name\": \"str\","
        " \"ttl\": \"60s\"},"
        "{\"id\": \"chunks\", \"kind\": \"StreamBuffer\", \"namespace\": \"%s\","
        " \"name\": \"u64\", \"ttl\": \"60s\"},"
        "{\"id\": \"cfg\", \"kind\": \"Settings\", \"namespace\": \"cfg-%d\", \"name\": \"str\"}],"
        "\"capabilities\": [{\"id\": \"viewer\", \"default\": \"read\"},"
        " {\"id\": \"nobody\", \"default\": \"none\"}]}\n",
        ns[0], ns[1], ns[2], (int)getpid());
    fclose(f);
    const char *url = wk_test_url();
    result r;
    json_t *j;

    /* Pipe: inspect and peek take nothing; a receiver gets every message after */
    wk_entity pipe = WK_PIPE_ENTITY(ns[1], 60000);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("s1"), "hello", 5), WK_OK);
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("s1"), "a\0b", 3), WK_OK);
    run_wk(&r, true, "--url '%s' --schema '%s' --json reply inspect s1", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "waiting")), 2, "%s", r.out);
    cr_assert(json_is_false(json_object_get(j, "closed")));
    cr_assert_gt(json_integer_value(json_object_get(j, "ttl_ms")), 0);
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' --as viewer --json reply peek s1", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    json_t *msgs = json_object_get(j, "messages");
    cr_assert_eq(json_array_size(msgs), 2, "%s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 0), "body")), "hello");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 1), "body_hex")),
                     "610062", "not text: in hex");
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' reply peek s1 1", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "hello\n");
    run_wk(&r, true, "--url '%s' --schema '%s' --as nobody reply peek s1", url, path);
    cr_assert_eq(r.status, 3, "READ refused by the capability");
    cr_assert(strstr(r.err, "capability \"nobody\" may not READ Pipe:"), "%s", r.err);
    run_wk(&r, true, "--url '%s' --schema '%s' --as viewer reply close s1", url, path);
    cr_assert_eq(r.status, 3, "close is a WRITE");
    run_wk(&r, true, "--url '%s' --schema '%s' --as viewer reply finish s1", url, path);
    cr_assert_eq(r.status, 3, "finish is a WRITE");
    cr_assert(strstr(r.err, "may not WRITE Pipe:"), "%s", r.err);
    wk_pipe_receiver *rx = NULL;
    cr_assert_eq(wk_pipe_receive(p, &pipe, wk_name_str("s1"), &rx), WK_OK);
    wk_pipe_message m;
    cr_assert_eq(wk_pipe_recv(rx, &m), WK_OK, "%s", wk_pipe_receiver_errmsg(rx));
    cr_assert(m.got == WK_PIPE_MESSAGE && m.len == 5 && !memcmp(m.body, "hello", 5),
              "peek took nothing: the first message is still the receiver's");
    cr_assert_eq(wk_pipe_recv(rx, &m), WK_OK);
    cr_assert(m.got == WK_PIPE_MESSAGE && m.len == 3 && !memcmp(m.body, "a\0b", 3));
    run_wk(&r, true, "--url '%s' --schema '%s' --json reply inspect s1", url, path);
    j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "waiting")), 0);
    cr_assert_eq(json_integer_value(json_object_get(j, "taken")), 2, "%s", r.out);
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' reply peek s1", url, path);
    cr_assert_eq(r.status, 1, "none waiting");
    run_wk(&r, true, "--url '%s' --schema '%s' --as read-write --json reply close s1", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_eq(wk_pipe_recv(rx, &m), WK_OK);
    cr_assert_eq(m.got, WK_PIPE_END, "the operator's close ended the receiver");
    wk_pipe_receiver_close(rx);
    /* finish, the new name of close, does the same */
    cr_assert_eq(wk_pipe_send(p, &pipe, wk_name_str("s2"), "x", 1), WK_OK);
    run_wk(&r, true, "--url '%s' --schema '%s' --as read-write --json reply finish s2", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "{\"finished\":true}\n");
    cr_assert_eq(wk_pipe_receive(p, &pipe, wk_name_str("s2"), &rx), WK_OK);
    cr_assert_eq(wk_pipe_recv(rx, &m), WK_OK);
    cr_assert(m.got == WK_PIPE_MESSAGE && m.len == 1, "the message sent before the finish first");
    cr_assert_eq(wk_pipe_recv(rx, &m), WK_OK);
    cr_assert_eq(m.got, WK_PIPE_END, "the operator's finish ended the receiver");
    wk_pipe_receiver_close(rx);
    run_wk(&r, true, "--url '%s' --schema '%s' --json reply inspect nosuch", url, path);
    cr_assert_eq(r.status, 1);

    /* LiveView: inspect, get, remove */
    wk_entity view = WK_LIVE_VIEW_ENTITY(ns[0], 5);
    bool created = false;
    cr_assert_eq(wk_live_view_create(p, &view, wk_name_str("d"), "v1", 2, &created), WK_OK);
    wk_live_view_commit_outcome co;
    cr_assert_eq(wk_live_view_commit(p, &view, wk_name_str("d"), 1, "+2", 2, "v2", 2, &co), WK_OK);
    cr_assert_eq(co.result, WK_LIVE_VIEW_COMMITTED);
    run_wk(&r, true, "--url '%s' --schema '%s' --json doc inspect d", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "version")), 2, "%s", r.out);
    cr_assert_eq(json_integer_value(json_object_get(j, "history_from")), 1);
    cr_assert_eq(json_integer_value(json_object_get(j, "history_diffs")), 1);
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' doc get d", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "v2");
    run_wk(&r, true, "--url '%s' --schema '%s' --as viewer doc remove d", url, path);
    cr_assert_eq(r.status, 3);
    run_wk(&r, true, "--url '%s' --schema '%s' --as read-write --json doc remove d", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, true, "--url '%s' --schema '%s' --json doc get d", url, path);
    cr_assert_eq(r.status, 1);
    run_wk(&r, true, "--url '%s' --schema '%s' doc inspect d", url, path);
    cr_assert_eq(r.status, 1);

    /* StreamBuffer: inspect, read from an index, finish, remove */
    wk_entity sb = WK_STREAM_BUFFER_ENTITY(ns[2], 60000);
    int64_t index;
    cr_assert_eq(wk_stream_buffer_append(p, &sb, wk_name_u64(7), "Hel", 3, &index), WK_OK);
    cr_assert_eq(wk_stream_buffer_append(p, &sb, wk_name_u64(7), "lo", 2, &index), WK_OK);
    run_wk(&r, true, "--url '%s' --schema '%s' --json chunks inspect 7", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_eq(json_integer_value(json_object_get(j, "length")), 2, "%s", r.out);
    cr_assert(json_is_false(json_object_get(j, "finished")));
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' chunks read 7", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "Hello");
    run_wk(&r, true, "--url '%s' --schema '%s' --json chunks read 7 1", url, path);
    j = parse_json(&r);
    cr_assert_eq(json_array_size(json_object_get(j, "bodies")), 1, "%s", r.out);
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' --as viewer chunks finish 7", url, path);
    cr_assert_eq(r.status, 3);
    run_wk(&r, true, "--url '%s' --schema '%s' --as read-write chunks finish 7", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, true, "--url '%s' --schema '%s' --as read-write chunks finish 7", url, path);
    cr_assert_eq(r.status, 1, "finished already");
    run_wk(&r, true, "--url '%s' --schema '%s' --json chunks inspect 7", url, path);
    j = parse_json(&r);
    cr_assert(json_is_true(json_object_get(j, "finished")));
    cr_assert_eq(json_integer_value(json_object_get(j, "length")), 2, "%s", r.out);
    json_decref(j);
    run_wk(&r, true, "--url '%s' --schema '%s' --json chunks list", url, path);
    cr_assert(strstr(r.out, "[7]"), "%s", r.out);
    run_wk(&r, true, "--url '%s' --schema '%s' --as read-write chunks remove 7", url, path);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, true, "--url '%s' --schema '%s' chunks inspect 7", url, path);
    cr_assert_eq(r.status, 1);

    /* watch, refused: nothing followed */
    run_wk(&r, true, "--url '%s' --schema '%s' --as nobody cfg watch x --count 1", url, path);
    cr_assert_eq(r.status, 3, "%s", r.err);
    cr_assert(strstr(r.err, "may not READ Settings:"), "%s", r.err);

    /* every command of these kinds is in the help */
    run_wk(&r, true, "--schema '%s' reply --help", path);
    cr_assert(strstr(r.out, "reply peek NAME [COUNT]") && strstr(r.out, "reply close NAME") &&
                  strstr(r.out, "reply finish NAME") && strstr(r.out, "reply inspect NAME") &&
                  strstr(r.out, "reply list"),
              "%s", r.out);
    run_wk(&r, true, "--schema '%s' chunks --help", path);
    cr_assert(strstr(r.out, "chunks read NAME [FROM]") && strstr(r.out, "chunks finish NAME") &&
                  strstr(r.out, "chunks remove NAME"),
              "%s", r.out);
    run_wk(&r, true, "--schema '%s' cfg watch --help", path);
    cr_assert(strstr(r.out, "cfg watch NAME [--count N] [--timeout-ms MS]"), "%s", r.out);
    unlink(path);
    rmdir(dir);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * --json: one JSON object on stdout, errors included. Every error path is
 * a row; a new one is one more line.
 * ---------------------------------------------------------------------- */

typedef struct json_error_case {
    bool raw;         /* no --url/--schema added */
    const char *args; /* shell words after them */
    int status;       /* the exit status */
    const char *want; /* the JSON "status" */
} json_error_case;

static const json_error_case json_errors[] = {
    {true, "--json --bogus", 2, "usage"},
    {true, "--bogus --json", 2, "usage"},
    {true, "--json --url", 2, "usage"},
    {true, "--json --timeout 0 help", 2, "usage"},
    {true, "--json --url redis://127.0.0.1:1", 2, "usage"},         /* no entity */
    {true, "--json --url redis://127.0.0.1:1 invoice inspect 1", 2, "usage"}, /* no schema */
    {true, "--json --schema /nonexistent/schema.json invoice inspect 1", 2, "usage"},
    {true, "--json --schema " WK_BILLING_SCHEMA " invoice inspect 1", 2, "usage"}, /* no url */
    {false, "--json nosuch inspect 1", 2, "usage"},
    {false, "--json invoice", 2, "usage"}, /* no command */
    {false, "--json invoice frobnicate 1", 2, "usage"},
    {false, "--json invoice inspect", 2, "usage"},
    {false, "--json invoice inspect x", 2, "usage"},
    {false, "--json invoice inspect 1 2", 2, "usage"},
    {false, "--json invoice owned 1 nothex", 2, "usage"},
    {false, "--json invoice list extra", 2, "usage"},
    {false, "--json --as nobody invoice inspect 1", 2, "usage"},
    {false, "--json flags watch f --bogus", 2, "usage"},
    {false, "--json flags watch f --count 0", 2, "usage"},
    {false, "--json \"$(printf 'bad\\377\\376')\" inspect 1", 2, "usage"}, /* raw bytes */
    {false, "--json --as replica invoice force-release 1", 3, "WK_EDENIED"},
};

Test(wk_cli, json_every_error_path_is_one_json_object)
{
    for (size_t i = 0; i < sizeof(json_errors) / sizeof(json_errors[0]); i++) {
        const json_error_case *c = &json_errors[i];
        result r;
        run_wk(&r, c->raw, "%s", c->args);
        cr_expect_eq(r.status, c->status, "wk %s: exit %d, expected %d (%s)", c->args, r.status,
                     c->status, r.err);
        json_error_t e;
        json_t *j = json_loads(r.out, 0, &e);
        cr_expect(j, "wk %s: stdout is not one JSON object (%s): \"%s\"", c->args, e.text, r.out);
        if (!j)
            continue;
        const char *st = json_string_value(json_object_get(j, "status"));
        cr_expect(st && !strcmp(st, c->want), "wk %s: status %s, expected %s", c->args,
                  st ? st : "(none)", c->want);
        cr_expect(json_object_get(j, "error") || json_object_get(j, "error_hex"),
                  "wk %s: no error member: %s", c->args, r.out);
        json_decref(j);
    }
}

/* Names, settings keys and values that are not UTF-8 come as `…_hex`. */
Test(wk_cli, json_bytes_that_are_not_utf8_are_hex)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const wk_entity report = WK_LOCK_ENTITY("report", 30000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(p, &report, wk_name_str("bad\xff\xfe"), &t, &got), WK_OK);
    cr_assert_eq(wk_settings_put(p, &flags, wk_name_str("bin"), "k\xff", 2, "v\xfe", 2, NULL),
                 WK_OK);
    cr_assert_eq(wk_settings_put(p, &flags, wk_name_str("bin"), "text", 4, "v\xfd", 2, NULL),
                 WK_OK);
    result r;
    run_wk(&r, false, "--json report list");
    json_t *j = parse_json(&r);
    json_t *names = json_object_get(j, "names");
    bool seen = false;
    for (size_t i = 0; i < json_array_size(names); i++) {
        const char *h = json_string_value(json_object_get(json_array_get(names, i), "name_hex"));
        seen |= h && !strcmp(h, "626164fffe");
    }
    cr_assert(seen, "%s", r.out);
    json_decref(j);
    run_wk(&r, false, "--json flags get bin");
    j = parse_json(&r);
    json_t *hex = json_object_get(j, "entries_hex");
    cr_assert_eq(json_array_size(hex), 1, "%s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(hex, 0), "key_hex")), "6bff");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(hex, 0), "value_hex")),
                     "76fe");
    cr_assert_str_eq(
        json_string_value(json_object_get(json_object_get(json_object_get(j, "entries"), "text"),
                                          "value_hex")),
        "76fd");
    json_decref(j);
    bool rel;
    wk_lock_release(p, &report, wk_name_str("bad\xff\xfe"), &t, &rel);
    wk_settings_remove(p, &flags, wk_name_str("bin"), "k\xff", 2, NULL);
    wk_settings_remove(p, &flags, wk_name_str("bin"), "text", 4, NULL);
    wk_db_close(db);
}

/* Bytes that look like UTF-8 to a lead-byte count but are not UTF-8
 * (RFC 3629), with their hex: JSON parsers (jansson) refuse them. */
static const struct {
    const char *bytes, *hex;
} not_utf8[] = {
    {"\xed\xa0\x80", "eda080"},       /* U+D800, a surrogate */
    {"\xed\xbf\xbf", "edbfbf"},       /* U+DFFF */
    {"\xc0\x80", "c080"},             /* NUL in two bytes */
    {"\xc1\xbf", "c1bf"},             /* U+007F in two bytes */
    {"\xe0\x80\x80", "e08080"},       /* overlong three bytes */
    {"\xe0\x9f\xbf", "e09fbf"},       /* U+07FF in three bytes */
    {"\xf0\x80\x80\x80", "f0808080"}, /* overlong four bytes */
    {"\xf0\x8f\xbf\xbf", "f08fbfbf"}, /* U+FFFF in four bytes */
    {"\xf4\x90\x80\x80", "f4908080"}, /* U+110000 */
    {"\xf5\x80\x80\x80", "f5808080"}, /* past U+10FFFF */
    {"\xf7\xbf\xbf\xbf", "f7bfbfbf"},
    {"\xff", "ff"},
};

/* The edges of what is UTF-8: these stay text. */
static const char *const utf8_edges[] = {
    "\xc2\x80",         /* U+0080 */
    "\xed\x9f\xbf",     /* U+D7FF, before the surrogates */
    "\xee\x80\x80",     /* U+E000, after them */
    "\xe0\xa0\x80",     /* U+0800 */
    "\xf0\x90\x80\x80", /* U+10000 */
    "\xf4\x8f\xbf\xbf", /* U+10FFFF */
};

/* Surrogates, overlong forms and code points past U+10FFFF, as settings
 * keys and as values, come as `…_hex`: the output stays JSON. */
Test(wk_cli, json_surrogates_overlong_forms_and_past_10ffff_are_hex)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    size_t n = sizeof(not_utf8) / sizeof(not_utf8[0]);
    size_t edges = sizeof(utf8_edges) / sizeof(utf8_edges[0]);
    for (size_t i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof(key), "v%zu", i);
        const char *b = not_utf8[i].bytes;
        cr_assert_eq(wk_settings_put(p, &flags, wk_name_str("utf8"), b, strlen(b), "k", 1, NULL),
                     WK_OK);
        cr_assert_eq(
            wk_settings_put(p, &flags, wk_name_str("utf8"), key, strlen(key), b, strlen(b), NULL),
            WK_OK);
    }
    for (size_t i = 0; i < edges; i++) {
        char key[16];
        snprintf(key, sizeof(key), "e%zu", i);
        const char *b = utf8_edges[i];
        cr_assert_eq(
            wk_settings_put(p, &flags, wk_name_str("utf8"), key, strlen(key), b, strlen(b), NULL),
            WK_OK);
    }
    result r;
    run_wk(&r, false, "--json flags get utf8");
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    json_t *j = parse_json(&r);
    json_t *entries = json_object_get(j, "entries");
    json_t *hex = json_object_get(j, "entries_hex");
    cr_assert_eq(json_array_size(hex), n, "%s", r.out);
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t k = 0; k < n; k++) {
            const char *h = json_string_value(json_object_get(json_array_get(hex, k), "key_hex"));
            seen |= h && !strcmp(h, not_utf8[i].hex);
        }
        cr_expect(seen, "key %s not in entries_hex: %s", not_utf8[i].hex, r.out);
        char key[16];
        snprintf(key, sizeof(key), "v%zu", i);
        const char *v =
            json_string_value(json_object_get(json_object_get(entries, key), "value_hex"));
        cr_expect(v && !strcmp(v, not_utf8[i].hex), "value %s not hex: %s", not_utf8[i].hex, r.out);
    }
    for (size_t i = 0; i < edges; i++) {
        char key[16];
        snprintf(key, sizeof(key), "e%zu", i);
        const char *v = json_string_value(json_object_get(entries, key));
        cr_expect(v && !strcmp(v, utf8_edges[i]), "%s is not text: %s", key, r.out);
    }
    json_decref(j);
    for (size_t i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof(key), "v%zu", i);
        const char *b = not_utf8[i].bytes;
        wk_settings_remove(p, &flags, wk_name_str("utf8"), b, strlen(b), NULL);
        wk_settings_remove(p, &flags, wk_name_str("utf8"), key, strlen(key), NULL);
    }
    for (size_t i = 0; i < edges; i++) {
        char key[16];
        snprintf(key, sizeof(key), "e%zu", i);
        wk_settings_remove(p, &flags, wk_name_str("utf8"), key, strlen(key), NULL);
    }
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Typed bodies: put checks them as generated clients decode them
 * ---------------------------------------------------------------------- */

/* The body stored under profile `n` (NULL: none), malloc'ed. */
static char *profile_body(wk_db *db, uint64_t n)
{
    wk_body body = WK_BODY_INIT;
    cr_assert_eq(wk_hashed_cache_get(wk_db_processor(db), &profile, wk_name_u64(n), &body), WK_OK);
    char *text = body.found ? strndup((const char *)body.data, body.len) : NULL;
    wk_body_free(&body);
    return text;
}

Test(wk_cli, typed_put_refuses_a_body_its_record_does_not_decode)
{
    wk_db *db = wk_test_open(NULL);
    uint64_t n = 3000000u + (uint64_t)getpid();
    result r;
    run_wk(&r, false, "--as read-write profile put %llu '%s'", (unsigned long long)n, good_profile);
    cr_assert_eq(r.status, 0, "a good body is stored: %s", r.err);

    /* the decoder's path and reason, exit 2, the stored body untouched */
    static const struct {
        const char *body, *why;
    } bad[] = {
        {"{\"id\":\"5\"}", "$.name: missing required field"},
        {"{\"x\":1}", "$.id: missing required field"},
        {"{\"id\":\"5\",\"name\":\"A\",\"vip\":1,\"credit_limit\":1,\"open_invoices\":[],"
         "\"billing_address\":{\"street\":\"s\",\"city\":\"c\"}}",
         "$.vip: expected"},
        {"{\"id\":\"5\",\"name\":\"A\",\"vip\":true,\"credit_limit\":1,\"open_invoices\":[],"
         "\"billing_address\":{\"street\":\"s\"}}",
         "$.billing_address.city: missing required field"},
        {"not json", "$: not valid JSON"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_wk(&r, false, "--as read-write profile put %llu '%s'", (unsigned long long)n,
               bad[i].body);
        cr_expect_eq(r.status, 2, "%s: exit %d (%s)", bad[i].body, r.status, r.err);
        cr_expect(strstr(r.err, bad[i].why), "%s: \"%s\" lacks \"%s\"", bad[i].body, r.err,
                  bad[i].why);
        char *now = profile_body(db, n);
        cr_expect(now && !strcmp(now, good_profile), "%s was written: %s", bad[i].body,
                  now ? now : "(none)");
        free(now);
    }
    run_wk(&r, false, "--json --as read-write profile put %llu '{\"id\":\"5\"}'",
           (unsigned long long)n);
    cr_assert_eq(r.status, 2);
    json_t *j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "usage");
    cr_assert(strstr(json_string_value(json_object_get(j, "error")), "$.name"), "%s", r.out);
    json_decref(j);

    /* checked before any connection: a server that is not there is never asked */
    run_wk(&r, true, "--url redis://127.0.0.1:1 --schema '%s' --as read-write profile put 1 '{}'",
           WK_BILLING_SCHEMA);
    cr_assert_eq(r.status, 2, "%s", r.err);

    /* --raw stores the bytes unchecked, on purpose */
    run_wk(&r, false, "--raw --as read-write profile put %llu '{\"id\":\"5\"}'",
           (unsigned long long)n);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char *now = profile_body(db, n);
    cr_assert(now && !strcmp(now, "{\"id\":\"5\"}"), "%s", now ? now : "(none)");
    free(now);
    /* a Cache without a typed body stores any bytes */
    run_wk(&r, false, "--as read-write invoice_state put %llu 'not json'", (unsigned long long)n);
    cr_assert_eq(r.status, 0, "%s", r.err);
    wk_db_close(db);
}

/* A file in /tmp holding `text`; its path in `path`. */
static void write_temp(char *path, size_t cap, const char *tag, const char *text)
{
    snprintf(path, cap, "/tmp/wk-cli-%s-%d", tag, (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

/* Records nested by value, arrays of records, optional arrays and a
 * record holding itself through an array: decoded at any depth. */
Test(wk_cli, typed_put_checks_nested_and_recursive_records)
{
    char schema[128];
    write_temp(schema, sizeof(schema), "tree.json",
               "{\"service\":\"t\",\"entities\":[{\"id\":\"tree\",\"kind\":\"Cache\","
               "\"namespace\":\"wk-cli-tree\",\"name\":\"str\",\"ttl\":\"1m\",\"body\":\"node\"}],"
               "\"records\":[{\"id\":\"pt\",\"fields\":[{\"name\":\"x\",\"type\":\"i32\"},"
               "{\"name\":\"tag\",\"type\":\"string\",\"optional\":true}]},"
               "{\"id\":\"node\",\"fields\":[{\"name\":\"label\",\"type\":\"string\"},"
               "{\"name\":\"at\",\"type\":\"pt\"},"
               "{\"name\":\"pts\",\"type\":\"pt\",\"array\":true,\"optional\":true},"
               "{\"name\":\"kids\",\"type\":\"node\",\"array\":true}]}]}");
    result r;
    run_wk(&r, true,
           "--url '%s' --schema '%s' --as read-write tree put n%d "
           "'{\"label\":\"r\",\"at\":{\"x\":1},\"pts\":[{\"x\":2,\"tag\":\"t\"}],"
           "\"kids\":[{\"label\":\"k\",\"at\":{\"x\":3},\"kids\":[{\"label\":\"g\","
           "\"at\":{\"x\":4},\"kids\":[]}]}]}'",
           wk_test_url(), schema, (int)getpid());
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_wk(&r, true,
           "--url '%s' --schema '%s' --as read-write tree put n%d "
           "'{\"label\":\"r\",\"at\":{\"x\":1},\"kids\":[{\"label\":\"k\",\"at\":{\"x\":3},"
           "\"kids\":[{\"label\":\"g\",\"at\":{\"x\":\"4\"},\"kids\":[]}]}]}'",
           wk_test_url(), schema, (int)getpid());
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "$.kids[0].kids[0].at.x: expected an integer"), "%s", r.err);
    run_wk(&r, true, "--schema '%s' help tree", schema);
    cr_assert(strstr(r.out, "    kids: node[], required\n      (node, as above)\n"), "%s", r.out);
    unlink(schema);
}

Test(wk_cli, help_entity_lists_the_typed_fields_of_its_body)
{
    result r;
    run_wk(&r, false, "help profile");
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *lines[] = {"  body: customer_profile, JSON",
                           "\n    id: u64, required\n    name: string, required\n",
                           "\n    email: string, optional\n",
                           "\n    open_invoices: u64[], required\n",
                           "\n    billing_address: address, required\n"
                           "      street: string, required\n"
                           "      city: string, required\n"
                           "      postcode: string, optional\n",
                           "\n    avatar: bytes, optional\n"};
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
        cr_expect(strstr(r.out, lines[i]), "help profile lacks \"%s\":\n%s", lines[i], r.out);
    run_wk(&r, false, "invoice_state --help");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(!strstr(r.out, "body:"), "a Cache of bytes has no fields: %s", r.out);
}

/* ------------------------------------------------------------------------
 * Reaching a server over TLS, through sentinels, with passwords from files
 * ---------------------------------------------------------------------- */

Test(wk_cli, tls_server_with_a_private_ca, .timeout = 120)
{
    wk_test_tls t;
    cr_assert_eq(wk_test_tls_start(&t, false, NULL), 0, "cannot start a TLS redis-server");
    result r;
    /* the private CA is nobody's default: without it the handshake fails */
    run_wk_in(&r, "", t.url, "--as read-write invoice_state put 1 a");
    cr_assert_eq(r.status, 4, "%s", r.err);
    run_wk_in(&r, "", t.url, "--as read-write --tls-ca-file '%s' invoice_state put 1 tls", t.ca);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char env[512];
    snprintf(env, sizeof(env), "WK_TLS_CA_FILE='%s'", t.ca);
    run_wk_in(&r, env, t.url, "--as read-write invoice_state get 1");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "tls");

    /* a CA directory (hashed), and the server name checked */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%s/cadir' && cp '%s' '%s/cadir/' && openssl rehash '%s/cadir'", t.certs,
             t.ca, t.certs, t.certs);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    run_wk_in(&r, "", t.url, "--as read-write --tls-ca-dir '%s/cadir' invoice_state get 1",
              t.certs);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(env, sizeof(env), "WK_TLS_CA_DIR='%s/cadir' WK_TLS_SERVER_NAME=localhost", t.certs);
    run_wk_in(&r, env, t.url, "--as read-write invoice_state get 1");
    cr_assert_eq(r.status, 0, "the certificate names localhost: %s", r.err);
    run_wk_in(&r, "", t.url,
              "--as read-write --tls-ca-file '%s' --tls-server-name elsewhere.example "
              "invoice_state get 1",
              t.ca);
    cr_assert_eq(r.status, 4, "a name the certificate lacks: %s", r.out);
    /* a CA file that is not there: the file's own reason */
    run_wk_in(&r, "", t.url, "--as read-write --tls-ca-file '%s/nosuch.crt' invoice_state get 1",
              t.certs);
    cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "No such file or directory"), "%s", r.err);
    wk_test_tls_stop(&t);
}

/* A TLS file the library cannot read is its WK_EINVAL: exit 2, as the
 * exit-status list of --help (and docs/wk.1) says. */
Test(wk_cli, unreadable_tls_file_exits_2_as_documented)
{
    result r;
    const char *files[] = {"--tls-ca-file", "--tls-cert", "--tls-key"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        /* the certificate and key come in pairs */
        const char *other = !strcmp(files[i], "--tls-cert")  ? "--tls-key /nonexistent/wk.key"
                            : !strcmp(files[i], "--tls-key") ? "--tls-cert /nonexistent/wk.crt"
                                                             : "";
        run_wk_in(&r, "", "rediss://127.0.0.1:1", "%s /nonexistent/wk.pem %s invoice inspect 1",
                  files[i], other);
        cr_expect_eq(r.status, 2, "%s: exit %d: %s", files[i], r.status, r.err);
        run_wk_in(&r, "", "rediss://127.0.0.1:1",
                  "--json %s /nonexistent/wk.pem %s invoice inspect 1", files[i], other);
        cr_expect_eq(r.status, 2, "%s: exit %d: %s", files[i], r.status, r.err);
        json_t *j = parse_json(&r);
        cr_expect_str_eq(json_string_value(json_object_get(j, "status")), "WK_EINVAL", "%s", r.out);
        json_decref(j);
    }
    run_wk(&r, true, "--help");
    const char *exits = strstr(r.out, "exit status:");
    cr_assert(exits, "%s", r.out);
    cr_assert(strstr(exits, "TLS file"),
              "--help's exit status does not say a TLS file exits 2:\n%s", exits);
    cr_assert(strstr(exits, "WK_EINVAL"), "%s", exits);
}

/* --json anywhere on the line: before the entity, between it and the
 * command, after the arguments; "--" keeps a later --json an argument. */
Test(wk_cli, json_anywhere_on_the_line)
{
    uint64_t id = 3000000u + (uint64_t)getpid();
    wk_token token;
    wk_db *db = hold_invoice(id, &token);
    const char *lines[] = {"--json invoice inspect %llu", "invoice --json inspect %llu",
                           "invoice inspect --json %llu", "invoice inspect %llu --json"};
    result r;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        char args[128];
        snprintf(args, sizeof(args), lines[i], (unsigned long long)id);
        run_wk(&r, false, "%s", args);
        cr_assert_eq(r.status, 0, "wk %s: exit %d: %s", args, r.status, r.err);
        json_t *j = parse_json(&r);
        cr_assert(json_is_true(json_object_get(j, "held")), "wk %s: %s", args, r.out);
        json_decref(j);
    }
    /* an error after the command is JSON too */
    run_wk(&r, false, "invoice inspect notanumber --json");
    cr_assert_eq(r.status, 2, "%s", r.err);
    json_t *j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "usage");
    json_decref(j);
    /* after "--", --json is a body */
    run_wk(&r, false, "--as read-write invoice_state put %llu -- --json", (unsigned long long)id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(!strchr(r.out, '{'), "not JSON: %s", r.out);
    wk_body body = WK_BODY_INIT;
    cr_assert_eq(wk_cache_get(wk_db_processor(db), &invoice_state, wk_name_u64(id), &body), WK_OK);
    cr_assert(body.found && body.len == 6 && !memcmp(body.data, "--json", 6));
    wk_body_free(&body);
    run_wk(&r, false, "invoice_state get %llu --json", (unsigned long long)id);
    cr_assert_eq(r.status, 0, "%s", r.err);
    j = parse_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "body")), "--json");
    json_decref(j);
    wk_db_close(db);
}

Test(wk_cli, tls_server_that_requires_a_client_certificate, .timeout = 120)
{
    wk_test_tls t;
    cr_assert_eq(wk_test_tls_start(&t, true, NULL), 0, "cannot start a TLS redis-server");
    result r;
    run_wk_in(&r, "", t.url, "--as read-write --tls-ca-file '%s' invoice_state put 2 a", t.ca);
    cr_assert_eq(r.status, 4, "refused without a client certificate: %s", r.err);
    run_wk_in(&r, "", t.url,
              "--as read-write --tls-ca-file '%s' --tls-cert '%s' --tls-key '%s' invoice_state put "
              "2 mtls",
              t.ca, t.client_crt, t.client_key);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char env[1024];
    snprintf(env, sizeof(env), "WK_TLS_CA_FILE='%s' WK_TLS_CERT='%s' WK_TLS_KEY='%s'", t.ca,
             t.client_crt, t.client_key);
    run_wk_in(&r, env, t.url, "--as read-write invoice_state get 2");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "mtls");
    wk_test_tls_stop(&t);
}

Test(wk_cli, sentinel_and_data_passwords_from_options_environment_and_files, .timeout = 120)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, "data-pw", "sentinel-pw"), 0,
                 "cannot start the sentinels");
    result r;
    char spw[128], dpw[128];
    write_temp(spw, sizeof(spw), "spw", "sentinel-pw\n"); /* one newline: not the password's */
    write_temp(dpw, sizeof(dpw), "dpw", "data-pw");

    /* each way of giving each password; %s: the sentinel password file,
     * then the data password file */
#define GET "invoice_state get 3"
    static const struct {
        const char *env, *args;
        int status;
    } ways[] = {
        {"WK_PASSWORD=data-pw", "invoice_state put 3 s", 4}, /* no sentinel password */
        {"WK_PASSWORD=data-pw", "--sentinel-password sentinel-pw invoice_state put 3 s", 0},
        {"WK_PASSWORD=data-pw", "--sentinel-user default --sentinel-password-file %s " GET, 0},
        {"WK_PASSWORD=data-pw", "--sentinel-user nobody --sentinel-password sentinel-pw " GET, 4},
        {"WK_SENTINEL_PASSWORD_FILE=%s WK_PASSWORD_FILE=%s", GET, 0},
        {"WK_SENTINEL_PASSWORD=sentinel-pw", "--password-file %2$s " GET, 0},
        {"WK_SENTINEL_PASSWORD=sentinel-pw", GET, 4}, /* no data password */
    };
    for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++) {
        char env_line[512], args[512];
        snprintf(env_line, sizeof(env_line), ways[i].env, spw, dpw);
        snprintf(args, sizeof(args), ways[i].args, spw, dpw);
        run_wk_in(&r, env_line, t.url, "--as read-write %s", args);
        cr_expect_eq(r.status, ways[i].status, "%s wk %s: exit %d (%s)", env_line, args, r.status,
                     r.err);
        if (strstr(args, GET) && !ways[i].status) /* the item put above */
            cr_expect_str_eq(r.out, "s", "%s wk %s", env_line, args);
    }
    /* a password file that cannot be read: its reason, exit 2 */
    run_wk_in(&r, "", t.url,
              "--as read-write --sentinel-password-file /nonexistent/wk-pw invoice_state get 3");
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(
        strstr(r.err, "--sentinel-password-file /nonexistent/wk-pw: No such file or directory"),
        "%s", r.err);
    run_wk_in(&r, "WK_PASSWORD_FILE=/tmp", t.url, "--as read-write invoice_state get 3");
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "WK_PASSWORD_FILE /tmp: "), "%s", r.err);
    run_wk_in(
        &r, "", t.url,
        "--as read-write --sentinel-password x --sentinel-password-file '%s' invoice_state get 3",
        spw);
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "not both"), "%s", r.err);
    unlink(spw);
    unlink(dpw);
    wk_test_sentinels_stop(&t);
}

/* acquire-all: every bucket or none, in one script; a refusal names the
 * bucket and writes nothing; usage errors exit 2, a read-only handle 3. */
Test(wk_cli, acquire_all_takes_every_bucket_or_none)
{
    result r;
    const char *user = wk_test_ns("aa-user"), *ip = wk_test_ns("aa-ip");
    run_wk(&r, false, "--as read-write acquire-all login %s 15 login %s 5", user, ip);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "allowed: yes"), "%s", r.out);
    /* the user's bucket has 5 left (capacity 20): 6 more is refused for both */
    run_wk(&r, false, "--as read-write --json acquire-all login %s 1 login %s 6", ip, user);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    json_t *j = parse_json(&r);
    cr_assert(json_is_false(json_object_get(j, "allowed")), "%s", r.out);
    cr_assert_eq(json_integer_value(json_object_get(j, "refused_index")), 1, "%s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(j, "refused")), "login");
    /* the name too, as the text output shows it ("refused: login <user>") */
    cr_assert(json_is_string(json_object_get(j, "refused_name")), "no refused_name: %s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(j, "refused_name")), user, "%s", r.out);
    cr_assert_gt(json_integer_value(json_object_get(j, "retry_after_ms")), 0, "%s", r.out);
    json_decref(j);
    run_wk(&r, false, "--as read-write acquire-all login %s 1 login %s 6", ip, user);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    char line[256];
    snprintf(line, sizeof(line), "refused: login %s\n", user);
    cr_assert(strstr(r.out, line), "%s", r.out);
    /* nothing was taken from the ip's bucket by the refusal: 15 left */
    wk_db *db = wk_test_open(NULL);
    wk_token_bucket_state st;
    cr_assert_eq(wk_token_bucket_peek(wk_db_processor(db), &login, wk_name_str(ip), &st), WK_OK);
    cr_assert_eq(st.available, 15, "available %lld", (long long)st.available);
    wk_db_close(db);

    run_wk(&r, false, "--as read-write acquire-all login %s", user);
    cr_assert_eq(r.status, 2, "%s", r.err);
    run_wk(&r, false, "--as read-write acquire-all invoice 1 1");
    cr_assert_eq(r.status, 2, "%s", r.err);
    cr_assert(strstr(r.err, "not a TokenBucket"), "%s", r.err);
    run_wk(&r, false, "--as read-write acquire-all login %s 0", user);
    cr_assert_eq(r.status, 2, "%s", r.err);
    run_wk(&r, false, "acquire-all login %s 1", user);
    cr_assert_eq(r.status, 3, "%s", r.err);
    run_wk(&r, true, "--help");
    cr_assert(strstr(r.out, "acquire-all BUCKET NAME COST"), "%s", r.out);
}
