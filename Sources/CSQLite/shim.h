#include <sqlite3.h>

/* sqlite3_db_config is variadic, which Swift cannot call: one integer option, on or off. */
static inline int syncengine_db_config_flag(sqlite3 *db, int option, int on) {
    return sqlite3_db_config(db, option, on, (int *)0);
}

/* Syncs the WAL (or rollback journal) file of the connection's main database
 * to stable storage, as a COMMIT under synchronous=FULL would: every commit
 * written to it so far is then durable. SQLITE_NOTFOUND when the connection
 * has no such file open: a sync that syncs nothing must not pass. */
static inline int syncengine_sync_open_journal(sqlite3 *db) {
    sqlite3_file *file = 0;
    int rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &file);
    if (rc != SQLITE_OK) return rc;
    if (file == 0 || file->pMethods == 0) return SQLITE_NOTFOUND;
    return file->pMethods->xSync(file, SQLITE_SYNC_NORMAL);
}

