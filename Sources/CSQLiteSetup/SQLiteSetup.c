#include <sqlite3.h>
#include "CSQLiteSetup.h"

/* SQLite counts every allocation of every connection under one process-wide
 * mutex while its allocation statistics are on (the default of most builds,
 * Debian's among them, which also leave out the lookaside allocator, so that
 * every small allocation of a statement step takes it). A store's reader
 * connections then meet the writer applying a replicated batch at that mutex
 * on each allocation: a cache-miss read during an initial sync waited there.
 * The statistics (sqlite3_memory_used, sqlite3_status) feed nothing in
 * SyncEngine. sqlite3_config must run before SQLite initializes, hence at load. */
static int setup_result = -1;

__attribute__((constructor))
static void syncengine_sqlite_setup(void) {
    setup_result = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

int syncengine_sqlite_setup_result(void) {
    return setup_result;
}
