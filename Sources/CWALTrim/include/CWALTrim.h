#ifndef CWALTRIM_H
#define CWALTRIM_H

/*
 * Cutting a grown WAL file back in steps, for the background checkpointer's
 * idle trim. Freeing a file's blocks is what costs (on a disk mounted with
 * `discard`, tens of MB took 10-70 ms), and SQLite's truncating checkpoint
 * frees them all under the WAL's write lock, so a write that comes in waits
 * for all of it. Here SQLite starts the WAL over as that checkpoint does,
 * without the cut, and the file is then cut a step at a time.
 */

#include <sqlite3.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Registers (once) a VFS over `base` (NULL: the default VFS) for a
 * checkpoint connection: it passes everything through, except that a WAL
 * file is not truncated inside `walcut_restart`. Writes its name (at most
 * `capacity` bytes with the NUL) to `name`. Returns SQLITE_OK or an error. */
int walcut_register_vfs(const char *base, char *name, int capacity);

/* A truncating checkpoint on `db` (a connection opened through the VFS of
 * `walcut_register_vfs`), without its truncate: everything in the WAL is
 * copied into the database file and synced, and the WAL starts over (its
 * frames in use drop to none), while the file keeps its size. Takes the
 * write lock and the readers' marks without waiting: SQLITE_BUSY when a
 * write or a reader of the WAL is in progress. */
int walcut_restart(sqlite3 *db);

/* One step of the cut, for a caller that holds the WAL's write lock (an
 * open BEGIN IMMEDIATE on `db`), so that no commit writes frames meanwhile.
 * Cuts at most `step` bytes off the file's end, never into the frames in use
 * (the wal-index header's mxFrame, read through the VFS's shared memory:
 * sqlite.org/walformat.html).
 *
 * When no frame is in use (the WAL started over), the file's header is first
 * cleared and synced: a crash part-way through the cut must not find a
 * valid header before a tail cut short, whose frames a recovery would
 * replay over a database file that already holds newer pages. The next
 * commit writes a new header, as after any restart.
 *
 * Sets *left to the file's size after the step and *in_use to the bytes of
 * the frames in use (the least the file can be cut to). */
int walcut_step(sqlite3 *db, sqlite3_int64 step, sqlite3_int64 *left, sqlite3_int64 *in_use);

#ifdef __cplusplus
}
#endif

#endif
