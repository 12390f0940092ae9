/*
 * tests/tsan/runner.c — a criterion-compatible runner for the
 * ThreadSanitizer build of the threaded suites. libcriterion 2.4 cannot run
 * under TSan ("Could not initialize inheritable arena", Criterion issue
 * #274), so with WK_TSAN=ON those suites and tests/support are compiled
 * against tests/tsan/include/criterion/ and linked with this file, which
 * supplies main(). It is not a general replacement for criterion: it does
 * what those suites rely on, the same way criterion does it.
 *
 *   1. Tests register themselves from constructors (Test(), TestSuite(),
 *      ReportHook()) and run sorted by suite, then name.
 *   2. PRE_ALL hooks run in the runner process; then each test runs in its
 *      own forked process, at most --jobs at a time, so it inherits what
 *      PRE_ALL set up (the shared redis-server's URL) and nothing a
 *      previous test did; POST_ALL hooks run after the last test ended.
 *   3. In the test process: suite .init, test .init, body, test .fini,
 *      suite .fini. A failed cr_assert in the test's own thread ends the
 *      init or body at once (longjmp) and the .fini functions still run. In
 *      another thread, or in a process the test forked, it ends that
 *      process with _exit(1) (criterion longjmps across threads there,
 *      which is undefined; a test's forked children are seen to fail by
 *      their parent's waitpid()). Every failed check, from whichever
 *      thread or process, counts against the test through a page shared
 *      with the runner.
 *   4. A test still running after its timeout (test, else suite, else
 *      --timeout, else none) is killed with SIGKILL and failed.
 *   5. A test passes if no check failed and its process exited with the
 *      expected status (.exit_code, default 0) or signal (.signal); it
 *      crashed if it ended any other way: a TSan report under
 *      halt_on_error=1 ends it with status 66.
 *   6. A test's output (stdout and stderr, with its threads' and forked
 *      processes') goes to a private temporary file and is printed as one
 *      block when it ends, followed by its verdict: "[PASS] suite::name:
 *      (1.23s)", "[FAIL] …", "[SKIP] …". So parallel tests never interleave
 *      and a sanitizer report sits above the name of the test it came from.
 *   7. The last line is criterion's synthesis line; the exit status is 0 if
 *      every test passed or was skipped, 1 otherwise.
 *
 * Options (criterion's spelling): --jobs=N / -jN, -S / --short-filename
 * (base name of the file in failure reports), --filter=GLOB (on
 * "suite/name"), --timeout=SECONDS, --list, --verbose (also prints a line
 * when each test starts), --help.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>

/* ---- registration: constructors run before main ----------------------- */

static struct wk_shim_test *registered_tests;
static struct wk_shim_suite *registered_suites;

#define MAX_HOOKS 8
static void (*hooks[2][MAX_HOOKS])(void *);
static int nhooks[2];

void wk_shim_register_test(struct wk_shim_test *t)
{
    t->next = registered_tests;
    registered_tests = t;
}

void wk_shim_register_suite(struct wk_shim_suite *s)
{
    s->next = registered_suites;
    registered_suites = s;
}

void wk_shim_register_hook(enum wk_shim_hook_kind kind, void (*fn)(void *))
{
    if (nhooks[kind] == MAX_HOOKS) {
        fprintf(stderr, "runner: more than %d hooks of one kind\n", MAX_HOOKS);
        abort();
    }
    hooks[kind][nhooks[kind]++] = fn;
}

static void run_hooks(enum wk_shim_hook_kind kind, void *arg)
{
    for (int i = 0; i < nhooks[kind]; i++)
        hooks[kind][i](arg);
}

/* ---- inside a test process -------------------------------------------- */

/* What a test process shares with the runner: a MAP_SHARED page, which its
 * threads and the processes it forks write into as well. */
typedef struct shared_result {
    atomic_int failures;
    atomic_int skipped;
} shared_result;

static bool short_filename;
static shared_result *current_result; /* NULL in the runner process */
static pid_t test_pid;
static pthread_t test_thread;
static jmp_buf abort_to;

int wk_shim_strcmp(const char *a, const char *b)
{
    if (!a || !b)
        return a ? 1 : b ? -1 : 0;
    return strcmp(a, b);
}

static void print_quoted(const char *s)
{
    if (s)
        fprintf(stderr, "\"%s\"", s);
    else
        fputs("NULL", stderr);
}

/* Prints one failed check on stderr and counts it. */
static void report(const char *file, int line, const char *expr, const char *a, const char *b,
                   const char *fmt, va_list ap)
{
    const char *slash = strrchr(file, '/');
    if (short_filename && slash)
        file = slash + 1;
    char msg[4096];
    vsnprintf(msg, sizeof(msg), fmt + 1, ap); /* skip the space the macros add */
    flockfile(stderr);
    fprintf(stderr, "[----] %s:%d: Assertion Failed\n", file, line);
    if (expr)
        fprintf(stderr, "[----]   The expression %s is false.\n", expr);
    else if (!msg[0])
        fputs("[----]   The conditions for this assertion were not met.\n", stderr);
    if (a || b) {
        fputs("[----]   actual: ", stderr);
        print_quoted(a);
        fputs(" and ", stderr);
        print_quoted(b);
        fputc('\n', stderr);
    }
    if (msg[0])
        fprintf(stderr, "[----]   %s\n", msg);
    funlockfile(stderr);
    if (current_result)
        atomic_fetch_add(&current_result->failures, 1);
}

/* Ends whatever a fatal check interrupted (point 3 of the banner). */
static _Noreturn void abort_test(void)
{
    if (!current_result)
        exit(1); /* a hook in the runner process */
    if (getpid() != test_pid)
        _exit(1); /* a process the test forked: its parent sees the status */
    if (pthread_equal(pthread_self(), test_thread))
        longjmp(abort_to, 1);
    fflush(stdout);
    _exit(1); /* another thread of the test */
}

void wk_shim_assert_failed(const char *file, int line, const char *expr, const char *a,
                           const char *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(file, line, expr, a, b, fmt, ap);
    va_end(ap);
    abort_test();
}

void wk_shim_expect_failed(const char *file, int line, const char *expr, const char *a,
                           const char *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(file, line, expr, a, b, fmt, ap);
    va_end(ap);
}

void wk_shim_skip(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt + 1, ap);
    va_end(ap);
    fprintf(stderr, "[----] Skipped: %s\n", msg[0] ? msg : "(no reason given)");
    if (current_result)
        atomic_store(&current_result->skipped, 1);
    exit(0);
}

void wk_shim_log(const char *tag, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %s\n", tag, msg);
}

/* The test's options with its suite's filled in where it has none. */
typedef struct plan {
    const struct wk_shim_test *test;
    const struct wk_shim_suite *suite; /* NULL: no TestSuite() */
    double timeout;
    bool disabled;
    int exit_code, signal;
} plan;

static _Noreturn void run_test_process(const plan *p, shared_result *result, int out)
{
    if (dup2(out, STDOUT_FILENO) < 0 || dup2(out, STDERR_FILENO) < 0)
        _exit(126);
    close(out);
    setvbuf(stdout, NULL, _IOLBF, 0);
    current_result = result;
    test_pid = getpid();
    test_thread = pthread_self();
    const struct criterion_test_extra_data *so = p->suite ? &p->suite->opt : NULL;
    const struct criterion_test_extra_data *to = &p->test->opt;
    if (setjmp(abort_to) == 0) {
        if (so && so->init)
            so->init();
        if (to->init)
            to->init();
        p->test->body();
    }
    if (setjmp(abort_to) == 0) {
        if (to->fini)
            to->fini();
        if (so && so->fini)
            so->fini();
    }
    exit(0);
}

/* ---- the runner process ----------------------------------------------- */

typedef enum verdict { PASSED, FAILED, CRASHED, SKIPPED } verdict;

/* A test being run. pid 0: a free slot. */
typedef struct running {
    const plan *p;
    pid_t pid;
    int out;
    shared_result *result;
    double started;
} running;

static bool verbose;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int start_test(running *r, const plan *p)
{
    r->result = mmap(NULL, sizeof(*r->result), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                     -1, 0);
    if (r->result == MAP_FAILED)
        return -1;
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/wk-shim-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    /* O_APPEND: the test's threads and children write through one offset. */
    r->out = mkostemp(path, O_APPEND | O_CLOEXEC);
    if (r->out < 0) {
        munmap(r->result, sizeof(*r->result));
        return -1;
    }
    unlink(path);
    if (verbose)
        fprintf(stderr, "[RUN ] %s::%s\n", p->test->suite, p->test->name);
    fflush(stdout);
    fflush(stderr); /* nothing buffered here may be written again by the child */
    r->p = p;
    r->started = now_s();
    r->pid = fork();
    if (r->pid == 0)
        run_test_process(p, r->result, r->out);
    if (r->pid < 0) {
        r->pid = 0;
        close(r->out);
        munmap(r->result, sizeof(*r->result));
        return -1;
    }
    return 0;
}

static void copy_output(int fd)
{
    char buf[16384];
    off_t at = 0;
    ssize_t n;
    while ((n = pread(fd, buf, sizeof(buf), at)) > 0) {
        fwrite(buf, 1, (size_t)n, stderr);
        at += n;
    }
}

/* Prints the test's output and verdict, frees the slot. */
static verdict finish_test(running *r, int status, bool timed_out)
{
    const plan *p = r->p;
    double took = now_s() - r->started;
    int failures = atomic_load(&r->result->failures);
    verdict v;
    char why[128] = "";
    if (timed_out) {
        v = FAILED;
        snprintf(why, sizeof(why), "Timed out after %.0f s, killed. ", p->timeout);
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        v = failures ? FAILED : sig == p->signal ? PASSED : CRASHED;
        if (sig != p->signal)
            snprintf(why, sizeof(why), "CRASH! killed by signal %d (%s). ", sig, strsignal(sig));
    } else {
        int code = WEXITSTATUS(status);
        if (failures)
            v = FAILED;
        else if (atomic_load(&r->result->skipped))
            v = SKIPPED;
        else if (p->signal) {
            v = FAILED;
            snprintf(why, sizeof(why), "exited with status %d, expected signal %d. ", code,
                     p->signal);
        } else
            v = code == p->exit_code ? PASSED : CRASHED;
        if (v == CRASHED)
            snprintf(why, sizeof(why), "CRASH! exited with status %d. ", code);
    }
    copy_output(r->out);
    static const char *const tag[] = {"PASS", "FAIL", "FAIL", "SKIP"};
    fprintf(stderr, "[%s] %s::%s: %s(%.2fs)\n", tag[v], p->test->suite, p->test->name, why, took);
    fflush(stderr);
    close(r->out);
    munmap(r->result, sizeof(*r->result));
    r->pid = 0;
    return v;
}

static int by_suite_then_name(const void *a, const void *b)
{
    const plan *x = a, *y = b;
    int c = strcmp(x->test->suite, y->test->suite);
    return c ? c : strcmp(x->test->name, y->test->name);
}

static const struct wk_shim_suite *find_suite(const char *name)
{
    for (const struct wk_shim_suite *s = registered_suites; s; s = s->next)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

static _Noreturn void usage(const char *argv0, int status)
{
    fprintf(status ? stderr : stdout,
            "usage: %s [--jobs=N] [-S] [--filter=GLOB] [--timeout=SECONDS] [--list] [--verbose]\n"
            "criterion-compatible runner of the ThreadSanitizer build (tests/tsan/runner.c)\n",
            argv0);
    exit(status);
}

int main(int argc, char **argv)
{
    long jobs = sysconf(_SC_NPROCESSORS_ONLN);
    const char *filter = NULL;
    double default_timeout = 0;
    bool list = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *end;
        if (strncmp(a, "--jobs=", 7) == 0 || (strncmp(a, "-j", 2) == 0 && a[2])) {
            jobs = strtol(a + (a[1] == 'j' ? 2 : 7), &end, 10);
            if (*end || jobs < 1)
                usage(argv[0], 2);
        } else if (strcmp(a, "-S") == 0 || strcmp(a, "--short-filename") == 0) {
            short_filename = true;
        } else if (strncmp(a, "--filter=", 9) == 0) {
            filter = a + 9;
        } else if (strncmp(a, "--timeout=", 10) == 0) {
            default_timeout = strtod(a + 10, &end);
            if (*end || default_timeout < 0)
                usage(argv[0], 2);
        } else if (strcmp(a, "--list") == 0) {
            list = true;
        } else if (strcmp(a, "--verbose") == 0 || strncmp(a, "--verbose=", 10) == 0) {
            verbose = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(argv[0], 0);
        } else {
            fprintf(stderr, "%s: unknown option %s\n", argv[0], a);
            usage(argv[0], 2);
        }
    }

    size_t n = 0;
    for (const struct wk_shim_test *t = registered_tests; t; t = t->next)
        n++;
    plan *plans = calloc(n ? n : 1, sizeof(*plans));
    if (!plans)
        return 1;
    size_t k = 0;
    for (const struct wk_shim_test *t = registered_tests; t; t = t->next) {
        char full[512];
        snprintf(full, sizeof(full), "%s/%s", t->suite, t->name);
        if (filter && fnmatch(filter, full, 0) != 0)
            continue;
        plan *p = &plans[k++];
        p->test = t;
        p->suite = find_suite(t->suite);
        const struct criterion_test_extra_data *so = p->suite ? &p->suite->opt : NULL;
        p->timeout = t->opt.timeout > 0         ? t->opt.timeout
                     : so && so->timeout > 0 ? so->timeout
                                             : default_timeout;
        p->disabled = t->opt.disabled || (so && so->disabled);
        p->exit_code = t->opt.exit_code ? t->opt.exit_code : so ? so->exit_code : 0;
        p->signal = t->opt.signal ? t->opt.signal : so ? so->signal : 0;
    }
    n = k;
    qsort(plans, n, sizeof(*plans), by_suite_then_name);
    if (list) {
        for (size_t i = 0; i < n; i++)
            printf("%s::%s%s\n", plans[i].test->suite, plans[i].test->name,
                   plans[i].disabled ? " (disabled)" : "");
        free(plans);
        return 0;
    }

    struct criterion_global_stats stats = {0};
    struct criterion_test_set set = {.tests = n};
    run_hooks(WK_SHIM_PRE_ALL, &set);

    running *slots = calloc((size_t)jobs, sizeof(*slots));
    if (!slots)
        return 1;
    size_t next = 0, active = 0;
    while (next < n || active > 0) {
        for (long s = 0; s < jobs && next < n; s++) {
            if (slots[s].pid)
                continue;
            const plan *p = &plans[next++];
            if (p->disabled) {
                fprintf(stderr, "[SKIP] %s::%s: Test is disabled\n", p->test->suite,
                        p->test->name);
                stats.tests_skipped++;
                s--; /* the slot is still free */
                continue;
            }
            if (start_test(&slots[s], p) != 0) {
                fprintf(stderr, "[FAIL] %s::%s: cannot start: %s\n", p->test->suite,
                        p->test->name, strerror(errno));
                stats.nb_tests++;
                stats.tests_failed++;
                s--;
                continue;
            }
            active++;
        }
        /* Poll: tests take seconds, so 10 ms is plenty, and waitpid() on our
         * own children only leaves PRE_ALL's redis-server to the hook that
         * started it. */
        struct timespec tick = {0, 10 * 1000 * 1000};
        nanosleep(&tick, NULL);
        for (long s = 0; s < jobs; s++) {
            running *r = &slots[s];
            if (!r->pid)
                continue;
            int status = 0;
            pid_t got = waitpid(r->pid, &status, WNOHANG);
            bool timed_out = false;
            if (got == 0 && r->p->timeout > 0 && now_s() - r->started > r->p->timeout) {
                kill(r->pid, SIGKILL);
                got = waitpid(r->pid, &status, 0);
                timed_out = true;
            }
            if (got == 0 || (got < 0 && errno == EINTR))
                continue;
            if (got < 0) /* cannot happen for our own child; count it as a crash */
                status = 0xff00;
            verdict v = finish_test(r, status, timed_out);
            active--;
            stats.nb_tests++;
            stats.tests_passed += v == PASSED;
            stats.tests_failed += v == FAILED || v == CRASHED;
            stats.tests_crashed += v == CRASHED;
            stats.tests_skipped += v == SKIPPED;
        }
    }
    free(slots);
    free(plans);

    run_hooks(WK_SHIM_POST_ALL, &stats);
    fprintf(stderr, "[====] Synthesis: Tested: %zu | Passing: %zu | Failing: %zu | Crashing: %zu",
            stats.nb_tests, stats.tests_passed, stats.tests_failed, stats.tests_crashed);
    if (stats.tests_skipped)
        fprintf(stderr, " | Skipped: %zu", stats.tests_skipped);
    fputc('\n', stderr);
    return stats.tests_failed ? 1 : 0;
}
