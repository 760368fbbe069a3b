#ifndef CCRASHVFS_H
#define CCRASHVFS_H

/*
 * A SQLite VFS that simulates power loss, after SQLite's own crash tests
 * (src/test6.c): it shims the real "unix" VFS and keeps every write that no
 * xSync has covered yet in memory, per file (main database, -wal, -journal),
 * so the files on disk always hold exactly what was synced. A power cut
 * throws the unsynced writes away (or writes back a seeded random subset of
 * them, whole write calls, as a disk might) and kills every file open at
 * that moment: their reads, writes, syncs and deletes fail from then on.
 *
 * Reads see the unsynced writes, so every connection of this process that
 * opens the file through the same VFS sees one consistent file. The -shm
 * wal-index is memory in SQLite's design: it passes through untouched, and
 * the first connection after a cut rebuilds it from the -wal, as after a reboot.
 *
 * Not modelled: directory entries (creating, deleting and renaming files is
 * durable at once) and torn writes inside one write call. Other processes
 * see only what was synced (or written back).
 *
 * All functions are thread-safe. Names are those given to crashvfs_register.
 */

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Registers a crash VFS called `name` over the real "unix" VFS (never as the
 * default). Registering a name again is a no-op. Returns SQLITE_OK or a SQLite error. */
int crashvfs_register(const char *name);

/* The power fails now. Unsynced writes are dropped, except that each survives
 * with probability keep_percent/100 (drawn from `seed`; 0 keeps none). Files
 * open now are dead for good; opening files fails until crashvfs_power_on.
 * Returns the number of unsynced writes dropped, or -1 for an unknown name. */
int64_t crashvfs_power_cut(const char *name, uint64_t seed, int keep_percent);

/* The power is back: files can be opened again (files from before the cut stay dead). */
int crashvfs_power_on(const char *name);

/* Cuts the power inside the `operations`-th write, truncate or sync from now
 * (that operation fails with an I/O error and has no effect). 0 disarms. */
int crashvfs_arm(const char *name, int64_t operations, uint64_t seed, int keep_percent);

/* The disk is full (nonzero) or has room again (0): while full, a write that
 * would make a file longer fails with SQLITE_FULL, unless truncates and deletes
 * made since gave back as many bytes (as on a full file system); writes within
 * a file's size pass. */
int crashvfs_set_full(const char *name, int full);

/* Writes every unsynced write to disk without syncing (the kernel keeps them:
 * the process dies, the machine does not). Returns the number written, or -1. */
int64_t crashvfs_write_back(const char *name);

typedef struct crashvfs_stats {
    int64_t writes;          /* write calls seen */
    int64_t syncs;           /* xSync calls seen */
    int64_t operations;      /* writes + truncates + syncs (what crashvfs_arm counts) */
    int64_t unsynced_bytes;  /* bytes written and not synced now */
    int64_t cuts;            /* power cuts so far */
    int64_t dropped_writes;  /* unsynced writes thrown away by cuts */
    int64_t kept_writes;     /* unsynced writes that survived cuts */
    int64_t full_writes;     /* writes refused because the disk was full */
    int64_t largest_truncation; /* the most bytes one truncate took off a file's end */
    int powered;             /* 1 while the power is on */
    int armed;               /* 1 while a cut is armed */
} crashvfs_stats;

/* Fills `out`; returns SQLITE_OK or SQLITE_NOTFOUND. */
int crashvfs_get_stats(const char *name, crashvfs_stats *out);

#ifdef __cplusplus
}
#endif

#endif
