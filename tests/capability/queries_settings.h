/*
 * tests/capability/queries_settings.h — capability-table rows for the
 * Settings queries (included by builtin_queries.h): put and remove write
 * (hash + version + PUBLISH), snapshot only reads.
 */
#ifndef WK_TEST_QUERIES_SETTINGS_H
#define WK_TEST_QUERIES_SETTINGS_H

#include <string.h>

#include <wakuwaku/settings.h>

static int q_settings_put(wk_processor *p, const char *ns)
{
    wk_entity e = WK_SETTINGS_ENTITY(ns);
    int64_t v;
    return wk_settings_put(p, &e, wk_name_str("n"), "k", 1, "v", 1, &v);
}

static int q_settings_remove(wk_processor *p, const char *ns)
{
    wk_entity e = WK_SETTINGS_ENTITY(ns);
    wk_settings_removal out;
    return wk_settings_remove(p, &e, wk_name_str("n"), "k", 1, &out);
}

static int q_settings_snapshot(wk_processor *p, const char *ns)
{
    wk_entity e = WK_SETTINGS_ENTITY(ns);
    wk_settings_map *m = NULL;
    int rc = wk_settings_snapshot(p, &e, wk_name_str("n"), &m);
    wk_settings_map_free(m);
    return rc;
}

#define SETTINGS_QUERIES                                   \
    {"settings.put", WK_WRITE, q_settings_put},            \
    {"settings.remove", WK_WRITE, q_settings_remove},      \
    {"settings.snapshot", WK_READ, q_settings_snapshot},

#define SETTINGS_KIND(q) (strncmp(q, "settings.", 9) == 0 ? WK_KIND_SETTINGS : NULL)

#endif /* WK_TEST_QUERIES_SETTINGS_H */
