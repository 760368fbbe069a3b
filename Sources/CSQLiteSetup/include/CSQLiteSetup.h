#ifndef CSQLITESETUP_H
#define CSQLITESETUP_H

/* What sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) returned when this library
 * was loaded: SQLITE_OK (0) when SQLite's allocation statistics are off for
 * the process, SQLITE_MISUSE (21) when SQLite was already in use then (the
 * statistics stay on). */
int syncengine_sqlite_setup_result(void);

#endif
