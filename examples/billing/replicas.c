/*
 * examples/billing/replicas.c — the README demo: several replicas of the
 * billing service (examples/billing/schema.json) run side by side for a few
 * seconds against one Redis, while a controller changes their settings.
 *
 *   - they race to finalise the same invoices (each exactly once);
 *   - an "hourly" report, scaled down to one second, runs once per interval
 *     across all replicas (cron + a lease shorter than the interval);
 *   - logins are rate-limited per address across replicas;
 *   - a customer profile lives in a hashed cache; each replica keeps a local
 *     copy and revalidates it for the price of a hash;
 *   - every replica follows a settings map the controller changes;
 *   - a read-only replica is refused every lock query.
 *
 * Replicas report what they did over a pipe; the controller checks every
 * invariant, prints a short report and exits non-zero if one broke.
 *
 * Usage: wk_billing_replicas [redis-url]   (default $WK_REDIS_URL)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <wakuwaku/cron.h>

#include "billing.h"

#define REPLICAS 4
#define RUN_MS 5000
#define INVOICES 200
#define REPORT_INTERVAL_MS 1000
#define SETTINGS_CHANGES 4

static const char *url;
static int report_fd; /* replicas → controller: one line per event */
static char run_id[32];
static uint64_t invoice_base, customer;
static char report_job[64], settings_name[64], login_address[64];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* shared by all processes of the demo */
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One line to the controller; lines < PIPE_BUF are written atomically. */
static void tell(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(report_fd, line, (size_t)n) < 0)
        perror("write");
}

static void hex32(const uint8_t h[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* ------------------------------------------------------------------------
 * A billing worker replica
 * ---------------------------------------------------------------------- */

typedef struct replica {
    int id;
    billing_worker w;
    wk_settings_follower *flags;
    wk_local_copy profile;
    long logins_allowed, logins_denied, profile_changed, profile_same, finalised;
} replica;

/* The hourly report: runs once per interval across all replicas. */
static int hourly_report(wk_cron_ctx *ctx, void *arg)
{
    (void)ctx;
    replica *r = arg;
    tell("report %d %lld", r->id, (long long)now_ms());
    return WK_OK;
}

/* Finalise an invoice unless someone did: check-then-act, safe only
 * because the invoice's lock is held around it. */
static int try_finalise(replica *r, uint64_t invoice)
{
    wk_token token;
    bool acquired, released;
    int rc = billing_worker_invoice_try(&r->w, invoice, &token, &acquired);
    if (rc != WK_OK || !acquired)
        return rc;
    wk_body state = WK_BODY_INIT;
    rc = billing_worker_invoice_state_get(&r->w, invoice, &state);
    if (rc == WK_OK && !state.found) {
        char who[32];
        int n = snprintf(who, sizeof(who), "replica %d", r->id);
        usleep(300); /* the real work: talk to the payment provider … */
        rc = billing_worker_invoice_state_put(&r->w, invoice, who, (size_t)n);
        if (rc == WK_OK) {
            tell("final %llu %d", (unsigned long long)(invoice - invoice_base), r->id);
            r->finalised++;
        }
    }
    wk_body_free(&state);
    billing_worker_invoice_release(&r->w, invoice, &token, &released);
    return rc;
}

static int run_replica(int id)
{
    replica r = {.id = id, .profile = WK_LOCAL_COPY_INIT};
    char err[256];
    wk_db_options opts = WK_DB_OPTIONS_INIT;
    opts.url = url;
    int rc = billing_worker_open(&r.w, &opts, err, sizeof(err));
    if (rc != WK_OK) {
        tell("error %d open: %s", id, err);
        return 1;
    }
    /* Helpers with threads of their own open their own connections from
     * options carrying the same ("worker") capability. */
    wk_cap *worker_cap;
    billing_worker_cap_new(&worker_cap);
    opts.capability = worker_cap;

    wk_settings_follower_options fo = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    fo.db = &opts;
    fo.settings = &billing_flags_entity;
    fo.name = wk_name_str(settings_name);
    rc = wk_settings_follower_start(&r.flags, &fo, err, sizeof(err));
    if (rc != WK_OK) {
        tell("error %d follow: %s", id, err);
        return 1;
    }

    wk_cron *cron;
    wk_cron_new(&cron, NULL);
    wk_cron_job job = WK_CRON_JOB_INIT;
    job.name = "hourly-report";
    job.interval_ms = REPORT_INTERVAL_MS;
    job.fn = hourly_report;
    job.arg = &r;
    wk_cron_once_options once = WK_CRON_ONCE_OPTIONS_INIT;
    once.db = &opts;
    once.lock = &billing_report_entity;
    once.name = wk_name_str(report_job);
    if (wk_cron_add_once(cron, &job, &once) != WK_OK || wk_cron_start(cron) != WK_OK) {
        tell("error %d cron: %s", id, wk_cron_errmsg(cron));
        return 1;
    }

    /* Work until the end of the run, visiting invoices in a replica-
     * specific order so the replicas collide on many of them. */
    int64_t end = now_ms() + RUN_MS;
    unsigned step = 1 + 2 * (unsigned)id; /* odd: visits every invoice mod 200 */
    unsigned next = (unsigned)id * 37, round = 0;
    while (now_ms() < end) {
        if (round < INVOICES) {
            try_finalise(&r, invoice_base + (next % INVOICES));
            next += step;
            round++;
        } else {
            usleep(20000);
        }
        wk_token_bucket_outcome login;
        if (billing_worker_login_acquire(&r.w, login_address, 1, &login) == WK_OK) {
            if (login.allowed)
                r.logins_allowed++;
            else
                r.logins_denied++;
        }
        wk_item_change change;
        if (round % 10 == 0 &&
            wk_local_copy_refresh(&r.profile, r.w.p, &billing_profile_entity,
                                  wk_name_u64(customer), &change) == WK_OK) {
            if (change == WK_ITEM_CHANGED)
                r.profile_changed++;
            else if (change == WK_ITEM_UNCHANGED)
                r.profile_same++;
        }
    }
    wk_cron_stop(cron);
    wk_cron_free(cron);

    /* Final state, for the controller to compare with the master copies. */
    wk_item_change change;
    wk_local_copy_refresh(&r.profile, r.w.p, &billing_profile_entity, wk_name_u64(customer),
                          &change);
    if (change == WK_ITEM_CHANGED)
        r.profile_changed++;
    char hash[65] = "none";
    if (r.profile.body.found)
        hex32(r.profile.body.hash, hash);
    char discount[32] = "";
    size_t len = 0;
    bool found = false;
    wk_settings_follower_get(r.flags, "discount", 8, discount, sizeof(discount) - 1, &len, &found);
    discount[found ? len : 0] = '\0';
    tell("replica %d %ld %ld %ld %ld %ld %s %lld %s", id, r.finalised, r.logins_allowed,
         r.logins_denied, r.profile_changed, r.profile_same, hash,
         (long long)wk_settings_follower_version(r.flags), discount);
    wk_settings_follower_free(r.flags);
    wk_local_copy_clear(&r.profile);
    wk_cap_free(worker_cap);
    billing_worker_close(&r.w);
    return 0;
}

/* ------------------------------------------------------------------------
 * The read-only replica
 * ---------------------------------------------------------------------- */

static int run_read_only(void)
{
    billing_replica ro;
    char err[256];
    wk_db_options opts = WK_DB_OPTIONS_INIT;
    opts.url = url;
    if (billing_replica_open(&ro, &opts, err, sizeof(err)) != WK_OK) {
        tell("error ro open: %s", err);
        return 1;
    }
    /* Its typed handle has no lock functions at all (a call would not
     * compile); going around it to the plain accessors, the runtime refuses
     * every lock query before anything is sent. */
    wk_processor *p = ro.p;
    uint64_t inv = invoice_base;
    wk_token t;
    wk_token_random(&t);
    bool b;
    int refused = 0, total = 0;
    char a_refusal[256];
    int results[] = {
        billing_invoice_try(p, inv, &t, &b),
        billing_invoice_release(p, inv, &t, &b),
        billing_invoice_extend(p, inv, &t, &b),
        billing_catalog_try_read(p, "main", &t, &b),
        billing_catalog_try_write(p, "main", &t, &b),
        billing_catalog_release_read(p, "main", &t, &b),
        billing_catalog_extend_read(p, "main", &t, &b),
        billing_catalog_release_write(p, "main", &t, &b),
        billing_catalog_extend_write(p, "main", &t, &b),
        billing_report_try(p, report_job, &t, &b),
        billing_report_release(p, report_job, &t, &b),
        billing_report_extend(p, report_job, &t, &b),
    };
    snprintf(a_refusal, sizeof(a_refusal), "%s", wk_db_errmsg(ro.db));
    for (size_t i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
        total++;
        refused += results[i] == WK_EDENIED;
    }
    /* Reads are its job: inspecting locks, and following the settings
     * (which it may not change). */
    wk_lock_state st;
    int reads_ok = billing_replica_invoice_inspect(&ro, inv, &st) == WK_OK;
    int64_t v;
    int put_refused = billing_flags_put(p, settings_name, "discount", 8, "99%", 3, &v) ==
                      WK_EDENIED;
    wk_cap *replica_cap;
    billing_replica_cap_new(&replica_cap);
    opts.capability = replica_cap;
    wk_settings_follower_options fo = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    fo.db = &opts;
    fo.settings = &billing_flags_entity;
    fo.name = wk_name_str(settings_name);
    wk_settings_follower *flags = NULL;
    if (wk_settings_follower_start(&flags, &fo, err, sizeof(err)) != WK_OK) {
        tell("error ro follow: %s", err);
        return 1;
    }
    usleep(RUN_MS * 1000);
    tell("readonly %d %d %d %d %lld %s", refused, total, reads_ok && put_refused, RUN_MS,
         (long long)wk_settings_follower_version(flags), a_refusal);
    wk_settings_follower_free(flags);
    wk_cap_free(replica_cap);
    billing_replica_close(&ro);
    return 0;
}

/* ------------------------------------------------------------------------
 * The controller
 * ---------------------------------------------------------------------- */

static void store_profile(wk_processor *p, const char *name, uint8_t hash[WK_HASH_LEN])
{
    billing_customer_profile prof;
    billing_customer_profile_init(&prof);
    uint64_t open[] = {41, 42};
    prof.id = customer;
    prof.name = (char *)name;
    prof.vip = true;
    prof.credit_limit = 2500.5;
    prof.open_invoices = open;
    prof.open_invoices_len = 2;
    prof.billing_address.street = "12 Analytical Row";
    prof.billing_address.city = "London";
    billing_profile_put(p, customer, &prof, hash);
}

typedef struct tally {
    int final_count[INVOICES];
    int final_by[REPLICAS];
    int64_t report_at[64];
    int report_by[64];
    int reports;
    int replicas_done;
    long logins_allowed, logins_denied, profile_changed, profile_same;
    char hashes[REPLICAS][65];
    long long versions[REPLICAS];
    char discounts[REPLICAS][32];
    int ro_refused, ro_total, ro_reads_ok, ro_ms;
    long long ro_version;
    char ro_message[256];
    int errors;
} tally;

static void read_reports(int fd, tally *t)
{
    FILE *in = fdopen(fd, "r");
    char line[512];
    while (in && fgets(line, sizeof(line), in)) {
        unsigned long long inv;
        int who;
        long long at, version;
        long fin, la, ld, pc, ps;
        char hash[65], discount[32] = "";
        if (sscanf(line, "final %llu %d", &inv, &who) == 2 && inv < INVOICES && who < REPLICAS) {
            t->final_count[inv]++;
            t->final_by[who]++;
        } else if (sscanf(line, "report %d %lld", &who, &at) == 2 && t->reports < 64) {
            t->report_at[t->reports] = at;
            t->report_by[t->reports++] = who;
        } else if (sscanf(line, "replica %d %ld %ld %ld %ld %ld %64s %lld %31s", &who, &fin, &la,
                          &ld, &pc, &ps, hash, &version, discount) >= 8 &&
                   who < REPLICAS) {
            t->replicas_done++;
            t->logins_allowed += la;
            t->logins_denied += ld;
            t->profile_changed += pc;
            t->profile_same += ps;
            snprintf(t->hashes[who], sizeof(t->hashes[who]), "%s", hash);
            t->versions[who] = version;
            snprintf(t->discounts[who], sizeof(t->discounts[who]), "%s", discount);
        } else if (sscanf(line, "readonly %d %d %d %d %lld", &t->ro_refused, &t->ro_total,
                          &t->ro_reads_ok, &t->ro_ms, &t->ro_version) == 5) {
            const char *msg = strchr(line, ' ');
            for (int k = 0; msg && k < 5; k++)
                msg = strchr(msg + 1, ' ');
            snprintf(t->ro_message, sizeof(t->ro_message), "%s", msg ? msg + 1 : "");
            t->ro_message[strcspn(t->ro_message, "\n")] = '\0';
        } else {
            t->errors++;
            fprintf(stderr, "replica: %s", line);
        }
    }
    if (in)
        fclose(in);
}

int main(int argc, char **argv)
{
    url = argc > 1 ? argv[1] : getenv("WK_REDIS_URL");
    if (!url) {
        fprintf(stderr, "usage: %s redis://host:port (or set WK_REDIS_URL)\n", argv[0]);
        return 2;
    }
    /* Names unique to this run, so runs against a shared Redis never mix. */
    int64_t t0 = now_ms();
    snprintf(run_id, sizeof(run_id), "%lld-%d", (long long)t0, (int)getpid());
    invoice_base = (uint64_t)t0 * 1000;
    customer = (uint64_t)t0;
    snprintf(report_job, sizeof(report_job), "hourly-%s", run_id);
    snprintf(settings_name, sizeof(settings_name), "billing-%s", run_id);
    snprintf(login_address, sizeof(login_address), "203.0.113.7/%s", run_id);

    wk_db_options opts = WK_DB_OPTIONS_INIT;
    opts.url = url;
    opts.capability = wk_cap_read_write(); /* the controller: an operator's tool */
    wk_db *db;
    char err[256];
    if (wk_db_open(&db, &opts, err, sizeof(err)) != WK_OK) {
        fprintf(stderr, "cannot open %s: %s\n", url, err);
        return 1;
    }
    wk_processor *p = wk_db_processor(db);
    uint8_t hash[WK_HASH_LEN];
    store_profile(p, "Ada Lovelace", hash);
    int64_t version = 0;
    wk_settings_put(p, &billing_flags_entity, wk_name_str(settings_name), "discount", 8, "0%", 2,
                    &version);

    printf("wakuwaku %s: %d billing replicas + 1 read-only replica for %.1f s at %s\n",
           wk_version(), REPLICAS, RUN_MS / 1000.0, url);
    fflush(stdout);
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return 1;
    pid_t kids[REPLICAS + 1];
    for (int i = 0; i <= REPLICAS; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            close(pipefd[0]);
            report_fd = pipefd[1];
            wk_db_close(db);
            _exit(i < REPLICAS ? run_replica(i) : run_read_only());
        }
    }
    close(pipefd[1]);

    /* The controller changes the settings and the profile mid-run. */
    char value[16];
    for (int c = 1; c <= SETTINGS_CHANGES; c++) {
        usleep(RUN_MS * 1000 / (SETTINGS_CHANGES + 1));
        int n = snprintf(value, sizeof(value), "%d%%", 5 * c);
        wk_settings_put(p, &billing_flags_entity, wk_name_str(settings_name), "discount", 8,
                        value, (size_t)n, &version);
        if (c == 2)
            store_profile(p, "Ada King, Countess of Lovelace", hash);
    }
    tally t = {0};
    read_reports(pipefd[0], &t);
    int crashed = 0;
    for (int i = 0; i <= REPLICAS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        crashed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    double elapsed_s = (now_ms() - t0) / 1000.0;

    /* ---- the report ---- */
    int broken = 0;
#define CHECK(ok, ...)                                             \
    do {                                                           \
        bool ok_ = (ok);                                           \
        printf("  [%s] ", ok_ ? "ok" : "BROKEN");                  \
        printf(__VA_ARGS__);                                       \
        printf("\n");                                              \
        broken += !ok_;                                            \
    } while (0)

    int once = 0, twice = 0, never = 0;
    for (int i = 0; i < INVOICES; i++) {
        once += t.final_count[i] == 1;
        twice += t.final_count[i] > 1;
        never += t.final_count[i] == 0;
    }
    CHECK(once == INVOICES,
          "invoices: %d of %d finalised exactly once (twice: %d, never: %d); by replica: "
          "%d/%d/%d/%d",
          once, INVOICES, twice, never, t.final_by[0], t.final_by[1], t.final_by[2],
          t.final_by[3]);

    /* Sort runs by time, keeping who ran them. */
    for (int i = 1; i < t.reports; i++)
        for (int j = i; j > 0 && t.report_at[j] < t.report_at[j - 1]; j--) {
            int64_t at = t.report_at[j];
            int by = t.report_by[j];
            t.report_at[j] = t.report_at[j - 1];
            t.report_by[j] = t.report_by[j - 1];
            t.report_at[j - 1] = at;
            t.report_by[j - 1] = by;
        }
    char runners[128] = "";
    for (int i = 0, o = 0; i < t.reports && o < (int)sizeof(runners) - 4; i++)
        o += snprintf(runners + o, sizeof(runners) - (size_t)o, "%s%d", i ? "," : "",
                      t.report_by[i]);
    int64_t min_gap = INT64_MAX, max_gap = 0;
    for (int i = 1; i < t.reports; i++) {
        int64_t gap = t.report_at[i] - t.report_at[i - 1];
        min_gap = gap < min_gap ? gap : min_gap;
        max_gap = gap > max_gap ? gap : max_gap;
    }
    int expected = RUN_MS / REPORT_INTERVAL_MS;
    CHECK(t.reports >= expected - 1 && t.reports <= expected + 1 &&
              (t.reports < 2 || (min_gap >= billing_report_entity.ttl_ms &&
                                 max_gap < 2 * REPORT_INTERVAL_MS)),
          "hourly report (every %d ms, lease %lld ms, cron on all %d replicas): %d runs in "
          "%.1f s, %lld..%lld ms apart, by replicas %s",
          REPORT_INTERVAL_MS, (long long)billing_report_entity.ttl_ms, REPLICAS, t.reports,
          RUN_MS / 1000.0, (long long)(t.reports > 1 ? min_gap : 0),
          (long long)(t.reports > 1 ? max_gap : 0), runners);

    double bound = billing_login_entity.capacity +
                   billing_login_entity.rate * elapsed_s * 1000.0 / billing_login_entity.period_ms +
                   1;
    CHECK(t.logins_allowed <= bound && t.logins_allowed >= billing_login_entity.capacity,
          "logins: %ld allowed, %ld refused across replicas (bound: %.0f + %.0f per %.0f s "
          "→ ≤ %.1f)",
          t.logins_allowed, t.logins_denied, billing_login_entity.capacity,
          billing_login_entity.rate, billing_login_entity.period_ms / 1000.0, bound);

    char want[65];
    hex32(hash, want);
    int same = 0;
    for (int i = 0; i < REPLICAS; i++)
        same += strcmp(t.hashes[i], want) == 0;
    CHECK(same == REPLICAS && t.profile_changed >= 2 * REPLICAS,
          "profile: updated once mid-run; %ld revalidations sent no body, %ld fetched one; "
          "%d of %d local copies match the master",
          t.profile_same, t.profile_changed, same, REPLICAS);

    int in_sync = t.ro_version == version;
    for (int i = 0; i < REPLICAS; i++)
        in_sync += t.versions[i] == version && strcmp(t.discounts[i], value) == 0;
    CHECK(in_sync == REPLICAS + 1,
          "settings: the controller changed them %d times; %d of %d mirrors (the read-only "
          "replica's included) at version %lld, discount=%s",
          SETTINGS_CHANGES, in_sync, REPLICAS + 1, (long long)version, value);

    CHECK(t.ro_total > 0 && t.ro_refused == t.ro_total && t.ro_reads_ok,
          "read-only replica: %d of %d lock queries refused, nothing sent; it inspects locks "
          "and follows the settings but may not change them\n         %s",
          t.ro_refused, t.ro_total, t.ro_message);
    CHECK(crashed == 0 && t.errors == 0 && t.replicas_done == REPLICAS,
          "replicas: %d finished, %d crashed, %d errors", t.replicas_done, crashed, t.errors);

    printf("%s\n", broken ? "SOME INVARIANTS BROKE" : "every invariant held");
    wk_db_close(db);
    return broken ? 1 : 0;
}
