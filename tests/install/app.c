/*
 * tests/install/app.c — a user's program against an installed wakuwaku
 * (tests/install/run.sh). Needs no Redis: it checks the library's version
 * against the headers', and, built with the generated "mini" service
 * (WK_WITH_MINI), that the generated descriptors are valid entities.
 */
#include <stdio.h>
#include <string.h>

#include <wakuwaku/wakuwaku.h>
#ifdef WK_WITH_MINI
#include "mini.h"
#endif

int main(void)
{
    if (strcmp(wk_version(), WK_VERSION_STRING) != 0) {
        fprintf(stderr, "library %s, headers %s\n", wk_version(), WK_VERSION_STRING);
        return 1;
    }
    if (strcmp(wk_err_name(WK_EINVAL), "WK_EINVAL") != 0)
        return 1;
#ifdef WK_WITH_MINI
    for (size_t i = 0; i < MINI_ENTITY_COUNT; i++) {
        if (wk_entity_check(mini_entities[i]) != WK_OK) {
            fprintf(stderr, "generated entity %zu is invalid\n", i);
            return 1;
        }
    }
    if (strcmp(mini_job_entity.kind, WK_KIND_LOCK) != 0)
        return 1;
#endif
    printf("wakuwaku %s\n", wk_version());
    return 0;
}
