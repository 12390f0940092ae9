/*
 * tests/kinds/registry.c — the list the kinds' files register into
 * (tests/kinds/kinds.h). No allocation: the allocation test counts them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kinds/kinds.h"

static wk_test_kind *head;

/* Whether row `name` ("lock.try", "lock.try (fair)") runs operation `op`. */
static bool runs(const char *name, const char *op)
{
    size_t n = strlen(op);
    return !strncmp(name, op, n) && (!name[n] || name[n] == ' ');
}

/* Every operation of the file's lists has a row, and every row is one of
 * them; else abort, naming it (a constructor cannot fail a test). */
static void check_rows(const wk_test_kind *kind)
{
    for (const char *const *op = kind->ops; op && *op; op++) {
        size_t i = 0;
        while (i < kind->nqueries && !runs(kind->queries[i].name, *op))
            i++;
        if (i == kind->nqueries) {
            fprintf(stderr, "tests/kinds/%s.c: operation %s of its op list has no row\n", kind->id,
                    *op);
            abort();
        }
    }
    for (size_t i = 0; i < kind->nqueries; i++) {
        const char *const *op = kind->ops;
        while (op && *op && !runs(kind->queries[i].name, *op))
            op++;
        if (!op || !*op) {
            fprintf(stderr, "tests/kinds/%s.c: row %s is no operation of its .ops lists\n",
                    kind->id, kind->queries[i].name);
            abort();
        }
    }
}

void wk_test_kind_register(wk_test_kind *kind)
{
    check_rows(kind);
    wk_test_kind **at = &head;
    while (*at && strcmp((*at)->id, kind->id) < 0)
        at = &(*at)->next;
    kind->next = *at;
    *at = kind;
}

const wk_test_kind *wk_test_kinds(void)
{
    return head;
}

size_t wk_test_nqueries(void)
{
    size_t n = 0;
    for (const wk_test_kind *k = head; k; k = k->next)
        n += k->nqueries;
    return n;
}

const wk_test_query *wk_test_query_at(size_t i)
{
    for (const wk_test_kind *k = head; k; k = k->next) {
        if (i < k->nqueries)
            return &k->queries[i];
        i -= k->nqueries;
    }
    return NULL;
}

size_t wk_test_nallocs(void)
{
    size_t n = 0;
    for (const wk_test_kind *k = head; k; k = k->next)
        n += k->nallocs;
    return n;
}

const wk_test_alloc_case *wk_test_alloc_at(size_t i)
{
    for (const wk_test_kind *k = head; k; k = k->next) {
        if (i < k->nallocs)
            return &k->allocs[i];
        i -= k->nallocs;
    }
    return NULL;
}

static wk_name row_name = {.type = WK_NAME_BYTES, .bytes = "n", .len = 1};

wk_name wk_test_name(void)
{
    return row_name;
}

void wk_test_set_name(wk_name name)
{
    row_name = name;
}
