/*
 * examples/billing/billing_demo.c — the billing service, through the code
 * generated from examples/billing/schema.json (billing.h, billing.c):
 *
 *   1. the profile service stores a typed customer profile (HashedCache);
 *   2. a worker, holding only the "worker" capability, finalises invoice 42
 *      under its Lock and reads the profile;
 *   3. logins are rate-limited per address (TokenBucket: 20, then 1 per 3 s);
 *   4. a read-only replica inspects the lock and reads the profile; taking
 *      the lock is not even a function of its handle, and the raw accessor
 *      is refused by the runtime with nothing sent.
 *
 * Usage: wk_billing [redis-url]   (default $WK_REDIS_URL, else
 * redis://127.0.0.1:6379). Exits non-zero if any step misbehaves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "billing.h"

static int failures;

static void check(bool ok, const char *what)
{
    printf("  [%s] %s\n", ok ? "ok" : "FAILED", what);
    if (!ok)
        failures++;
}

/* The profile service: builds and stores a profile (a typed body). */
static int store_profile(wk_processor *p, uint64_t customer)
{
    billing_customer_profile prof;
    billing_customer_profile_init(&prof);
    uint64_t open[] = {41, 42};
    prof.id = customer;
    prof.name = "Ada Lovelace";
    prof.has_email = true;
    prof.email = "ada@example.org";
    prof.vip = true;
    prof.credit_limit = 2500.5;
    prof.open_invoices = open;
    prof.open_invoices_len = 2;
    prof.billing_address.street = "12 Analytical Row";
    prof.billing_address.city = "London";
    /* the strings above are borrowed: no billing_customer_profile_free() */
    uint8_t hash[WK_HASH_LEN];
    return billing_profile_put(p, customer, &prof, hash);
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : getenv("WK_REDIS_URL");
    wk_db_options opts = WK_DB_OPTIONS_INIT;
    opts.url = url ? url : "redis://127.0.0.1:6379";
    opts.capability = wk_cap_read_write();
    char err[256];
    wk_db *db;
    int rc = wk_db_open(&db, &opts, err, sizeof(err));
    if (rc != WK_OK) {
        fprintf(stderr, "cannot connect to %s: %s\n", opts.url, err);
        return 1;
    }
    const uint64_t customer = 7, invoice = 42;

    printf("1. profile service (read-write handle) stores customer %llu\n",
           (unsigned long long)customer);
    rc = store_profile(wk_db_processor(db), customer);
    check(rc == WK_OK, "billing_profile_put: typed body encoded as JSON and stored");

    printf("2. worker (capability \"worker\") finalises invoice %llu\n",
           (unsigned long long)invoice);
    billing_worker worker;
    rc = billing_worker_narrow(&worker, db);
    check(rc == WK_OK, "billing_worker_narrow");
    wk_token token;
    bool acquired = false;
    rc = billing_worker_invoice_try(&worker, invoice, &token, &acquired);
    check(rc == WK_OK && acquired, "billing_worker_invoice_try: lock taken");
    billing_customer_profile prof;
    billing_customer_profile_init(&prof);
    uint8_t hash[WK_HASH_LEN];
    bool found = false;
    rc = billing_worker_profile_get(&worker, customer, &prof, hash, &found);
    check(rc == WK_OK && found && prof.name && strcmp(prof.name, "Ada Lovelace") == 0 &&
              prof.open_invoices_len == 2 && prof.open_invoices[1] == invoice,
          "billing_worker_profile_get: the typed body came back");
    if (found)
        printf("     customer %s <%s>, credit limit %.2f, lives in %s\n", prof.name,
               prof.has_email ? prof.email : "-", prof.credit_limit,
               prof.billing_address.city);
    billing_customer_profile_free(&prof);
    /* ... finalise the invoice here, fenced by a version check ... */
    bool released = false;
    rc = billing_worker_invoice_release(&worker, invoice, &token, &released);
    check(rc == WK_OK && released, "billing_worker_invoice_release");

    printf("3. logins from one address: bursts of 20, then 1 per 3 s\n");
    int allowed = 0;
    char address[64];
    snprintf(address, sizeof(address), "198.51.100.7-%ld", (long)getpid());
    for (int i = 0; i < 25; i++) {
        wk_token_bucket_outcome out;
        rc = billing_login_acquire(wk_db_processor(db), address, 1, &out);
        if (rc != WK_OK)
            break;
        allowed += out.allowed;
    }
    check(rc == WK_OK && allowed == 20, "billing_login_acquire: 20 of 25 allowed");
    billing_login_reset(wk_db_processor(db), address, NULL);

    printf("4. read-only replica (capability \"replica\")\n");
    billing_replica replica;
    rc = billing_replica_narrow(&replica, db);
    check(rc == WK_OK, "billing_replica_narrow");
    wk_lock_state state;
    rc = billing_replica_invoice_inspect(&replica, invoice, &state);
    check(rc == WK_OK && !state.held, "billing_replica_invoice_inspect: a READ is granted");
    rc = billing_replica_profile_get(&replica, customer, &prof, hash, &found);
    check(rc == WK_OK && found, "billing_replica_profile_get: caches are readable");
    billing_customer_profile_free(&prof);
    /* billing_replica_invoice_try() does not exist: calling it does not
     * compile. Going around the typed handle reaches the runtime's check: */
    rc = billing_invoice_try(replica.p, invoice, &token, &acquired);
    check(rc == WK_EDENIED, "billing_invoice_try through the replica's processor: WK_EDENIED");
    printf("     %s\n", wk_db_errmsg(replica.db));

    billing_replica_close(&replica);
    billing_worker_close(&worker);
    billing_profile_remove(wk_db_processor(db), customer, NULL);
    wk_db_close(db);
    if (failures)
        printf("billing demo: %d step(s) FAILED\n", failures);
    else
        printf("billing demo: all steps ok\n");
    return failures ? 1 : 0;
}
