/*
 * tests/kinds/registry.c — the list the kinds' files register into
 * (tests/kinds/kinds.h). No allocation: the allocation test counts them.
 */
#include <string.h>

#include "tests/kinds/kinds.h"

static wk_test_kind *head;

void wk_test_kind_register(wk_test_kind *kind)
{
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
