#include <sqlite3.h>
#include <time.h>

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

/* The busy handler of a store's connections, after SQLite's own
 * (sqlite3_busy_timeout: 1, 2, 5, 10 ... 100 ms between tries) but finer at
 * first. The locks a store's writer meets are held briefly (one step of the
 * idle WAL trim's cut, 0.3-0.7 ms), and the default's first sleep of 1 ms,
 * then 2 and 5 ms, outlasted them: a write that met one step waited 1-14 ms.
 * Microseconds to sleep after `tries` failed tries: 50 doubling to 12,800,
 * then 20,000; -1 to give up (after about 5 s in all). */
static inline sqlite3_int64 syncengine_busy_delay(int tries) {
    if (tries < 0 || tries >= 9 + 250) return -1;
    return tries < 9 ? (sqlite3_int64)50 << tries : 20000;
}

static int syncengine_busy_wait(void *context, int tries) {
    (void)context;
    sqlite3_int64 microseconds = syncengine_busy_delay(tries);
    if (microseconds < 0) return 0;
    struct timespec pause = { (time_t)(microseconds / 1000000), (long)(microseconds % 1000000) * 1000 };
    nanosleep(&pause, 0);
    return 1;
}

/* Installs `syncengine_busy_wait` on `db` (in place of sqlite3_busy_timeout). */
static inline int syncengine_set_busy_wait(sqlite3 *db) {
    return sqlite3_busy_handler(db, syncengine_busy_wait, 0);
}
