/*
 * tests/kinds/settings.c — the test rows of Settings (tests/kinds/kinds.h):
 * every built-in query. put and remove write (hash + version + PUBLISH),
 * snapshot only reads. (The follower's own tests are
 * tests/collection/test_settings.c; no hot path or soak operation here.)
 */
#include <string.h>

#include "tests/kinds/kinds.h"

static int q_settings_put(wk_processor *p, const char *ns)
{
    wk_entity e = WK_SETTINGS_ENTITY(ns);
    int64_t v;
    return wk_settings_put(p, &e, wk_test_name(), "k", 1, "v", 1, &v);
}

static int q_settings_remove(wk_processor *p, const char *ns)
{
    wk_entity e = WK_SETTINGS_ENTITY(ns);
    wk_settings_removal out;
    return wk_settings_remove(p, &e, wk_test_name(), "k", 1, &out);
}

static int q_settings_snapshot(wk_processor *p, const char *ns)
{
    wk_entity e = WK_SETTINGS_ENTITY(ns);
    wk_settings_map *m = NULL;
    int rc = wk_settings_snapshot(p, &e, wk_test_name(), &m);
    wk_settings_map_free(m);
    return rc;
}

static const wk_test_query queries[] = {
    WK_TEST_ROW(WK_KIND_SETTINGS, settings, put, q_settings_put, 0),
    WK_TEST_ROW(WK_KIND_SETTINGS, settings, remove, q_settings_remove, 0),
    WK_TEST_ROW(WK_KIND_SETTINGS, settings, snapshot, q_settings_snapshot, 0),
};

static wk_test_kind settings_rows = {
    .id = "settings",
    .ops = (const char *const[]){WK_SETTINGS_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries,
    .nqueries = WK_TEST_COUNT(queries),
};
WK_TEST_KIND(settings_rows)
