/*
 * examples/fenced_sqlite/fence_store.c — the fence check of the SQLite
 * example: an upsert whose update applies only under a greater fence.
 */
#include "fence_store.h"

int fence_store_open(sqlite3 **db, const char *path)
{
    int rc = sqlite3_open(path, db);
    if (rc == SQLITE_OK)
        rc = sqlite3_busy_timeout(*db, 10000); /* writers in other processes */
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(*db,
                          "CREATE TABLE IF NOT EXISTS account ("
                          " id TEXT PRIMARY KEY, balance INTEGER NOT NULL,"
                          " fence INTEGER NOT NULL)",
                          NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_close(*db);
        *db = NULL;
    }
    return rc;
}

int fence_store_write(sqlite3 *db, const char *id, int64_t balance, int64_t fence, bool *applied)
{
    /* The check and the write are one statement, so no other writer can
     * come between them. */
    static const char sql[] =
        "INSERT INTO account (id, balance, fence) VALUES (?1, ?2, ?3)"
        " ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, fence = excluded.fence"
        " WHERE account.fence < excluded.fence";
    sqlite3_stmt *st;
    *applied = false;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, balance);
    sqlite3_bind_int64(st, 3, fence);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        *applied = sqlite3_changes(db) == 1;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

int fence_store_read(sqlite3 *db, const char *id, int64_t *balance, int64_t *fence, bool *found)
{
    sqlite3_stmt *st;
    *found = false;
    int rc =
        sqlite3_prepare_v2(db, "SELECT balance, fence FROM account WHERE id = ?1", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *balance = sqlite3_column_int64(st, 0);
        *fence = sqlite3_column_int64(st, 1);
        *found = true;
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}
