/*
 * core/granted.c — open or narrow a handle with a capability given as a
 * table (wk_db_open_granted(), wk_db_narrow_granted() in wakuwaku/db.h):
 * the one copy of what every generated typed handle's open and narrow do.
 */
#include <wakuwaku/db.h>

/* *proc follows the handle: its processor, or NULL when there is none. */
static int with_processor(int rc, wk_db *db, wk_processor **proc)
{
    if (proc)
        *proc = wk_db_processor(db);
    return rc;
}

int wk_db_open_granted(wk_db **out, wk_processor **proc, const wk_db_options *opts,
                       const wk_cap_table *grants, char *err, size_t errlen)
{
    wk_db_options with_cap;
    wk_cap *cap;
    int rc;
    if (proc)
        *proc = NULL;
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!opts || !grants)
        return WK_EINVAL;
    if ((rc = wk_cap_new_table(&cap, grants)) != WK_OK)
        return rc;
    with_cap = *opts;
    with_cap.capability = cap;
    rc = wk_db_open(out, &with_cap, err, errlen);
    wk_cap_free(cap);
    return with_processor(rc, *out, proc);
}

int wk_db_narrow_granted(wk_db **out, wk_processor **proc, wk_db *db, const wk_cap_table *grants)
{
    wk_cap *cap;
    int rc;
    if (proc)
        *proc = NULL;
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!grants)
        return WK_EINVAL;
    if ((rc = wk_cap_new_table(&cap, grants)) != WK_OK)
        return rc;
    rc = wk_db_narrow(out, db, cap, NULL);
    wk_cap_free(cap);
    return with_processor(rc, *out, proc);
}
