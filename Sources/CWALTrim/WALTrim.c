/* See include/CWALTrim.h. */
#include "CWALTrim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Set on the thread inside walcut_restart: its checkpoint's truncate of the WAL is skipped. */
static _Thread_local int skipping_wal_truncate;

/* A WAL file's methods: the real file's own, but for xTruncate. */
typedef struct WrappedMethods {
    sqlite3_io_methods methods;           /* first: what the file's pMethods points at */
    const sqlite3_io_methods *original;
    struct WrappedMethods *next;
} WrappedMethods;

typedef struct TrimVFS {
    sqlite3_vfs base;
    sqlite3_vfs *real;
    struct TrimVFS *next;
    char name[];
} TrimVFS;

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static TrimVFS *registry;
static WrappedMethods *wrapped;  /* one per distinct real method table, kept for the process's life */

static int wal_truncate(sqlite3_file *file, sqlite3_int64 size) {
    const WrappedMethods *w = (const WrappedMethods *)file->pMethods;
    if (skipping_wal_truncate) return SQLITE_OK;
    return w->original->xTruncate(file, size);
}

static const sqlite3_io_methods *wrap(const sqlite3_io_methods *original) {
    pthread_mutex_lock(&registry_mutex);
    WrappedMethods *w = wrapped;
    while (w && w->original != original) w = w->next;
    if (!w && (w = calloc(1, sizeof(WrappedMethods))) != NULL) {
        w->methods = *original;
        w->methods.xTruncate = wal_truncate;
        w->original = original;
        w->next = wrapped;
        wrapped = w;
    }
    pthread_mutex_unlock(&registry_mutex);
    return w ? &w->methods : NULL;
}

/* The real VFS opens the file in place; a WAL file gets the wrapped methods. */
static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
    sqlite3_vfs *real = ((TrimVFS *)vfs)->real;
    int rc = real->xOpen(real, name, file, flags, out_flags);
    if (rc == SQLITE_OK && (flags & SQLITE_OPEN_WAL) && file->pMethods && file->pMethods->xTruncate) {
        const sqlite3_io_methods *methods = wrap(file->pMethods);
        if (!methods) {
            file->pMethods->xClose(file);
            file->pMethods = NULL;
            return SQLITE_NOMEM;
        }
        file->pMethods = methods;
    }
    return rc;
}

#define REAL(vfs) (((TrimVFS *)(vfs))->real)
static int v_delete(sqlite3_vfs *v, const char *n, int s) { return REAL(v)->xDelete(REAL(v), n, s); }
static int v_access(sqlite3_vfs *v, const char *n, int f, int *o) { return REAL(v)->xAccess(REAL(v), n, f, o); }
static int v_full_pathname(sqlite3_vfs *v, const char *n, int c, char *o) { return REAL(v)->xFullPathname(REAL(v), n, c, o); }
static void *v_dl_open(sqlite3_vfs *v, const char *n) { return REAL(v)->xDlOpen(REAL(v), n); }
static void v_dl_error(sqlite3_vfs *v, int c, char *o) { REAL(v)->xDlError(REAL(v), c, o); }
static void (*v_dl_sym(sqlite3_vfs *v, void *h, const char *s))(void) { return REAL(v)->xDlSym(REAL(v), h, s); }
static void v_dl_close(sqlite3_vfs *v, void *h) { REAL(v)->xDlClose(REAL(v), h); }
static int v_randomness(sqlite3_vfs *v, int n, char *o) { return REAL(v)->xRandomness(REAL(v), n, o); }
static int v_sleep(sqlite3_vfs *v, int us) { return REAL(v)->xSleep(REAL(v), us); }
static int v_current_time(sqlite3_vfs *v, double *o) { return REAL(v)->xCurrentTime(REAL(v), o); }
static int v_get_last_error(sqlite3_vfs *v, int c, char *o) { return REAL(v)->xGetLastError(REAL(v), c, o); }
static int v_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *o) { return REAL(v)->xCurrentTimeInt64(REAL(v), o); }

int walcut_register_vfs(const char *base, char *name, int capacity) {
    sqlite3_vfs *real = sqlite3_vfs_find(base);
    if (!real || real->iVersion < 2 || !real->xCurrentTimeInt64) return SQLITE_ERROR;
    const char *prefix = "syncengine-walcut-";
    size_t length = strlen(prefix) + strlen(real->zName);
    if (capacity <= 0 || length + 1 > (size_t)capacity) return SQLITE_TOOBIG;
    pthread_mutex_lock(&registry_mutex);
    TrimVFS *v = registry;
    while (v && v->real != real) v = v->next;
    int rc = SQLITE_OK;
    if (!v) {
        v = calloc(1, sizeof(TrimVFS) + length + 1);
        if (!v) {
            pthread_mutex_unlock(&registry_mutex);
            return SQLITE_NOMEM;
        }
        strcpy(v->name, prefix);
        strcat(v->name, real->zName);
        v->real = real;
        v->base.iVersion = 2;
        v->base.szOsFile = real->szOsFile;
        v->base.mxPathname = real->mxPathname;
        v->base.zName = v->name;
        v->base.xOpen = v_open;
        v->base.xDelete = v_delete;
        v->base.xAccess = v_access;
        v->base.xFullPathname = v_full_pathname;
        v->base.xDlOpen = v_dl_open;
        v->base.xDlError = v_dl_error;
        v->base.xDlSym = v_dl_sym;
        v->base.xDlClose = v_dl_close;
        v->base.xRandomness = v_randomness;
        v->base.xSleep = v_sleep;
        v->base.xCurrentTime = v_current_time;
        v->base.xGetLastError = v_get_last_error;
        v->base.xCurrentTimeInt64 = v_current_time_int64;
        rc = sqlite3_vfs_register(&v->base, 0);
        if (rc != SQLITE_OK) {
            free(v);
            v = NULL;
        } else {
            v->next = registry;
            registry = v;
        }
    }
    if (v) memcpy(name, v->name, length + 1);
    pthread_mutex_unlock(&registry_mutex);
    return rc;
}

int walcut_restart(sqlite3 *db) {
    skipping_wal_truncate = 1;
    int rc = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    skipping_wal_truncate = 0;
    return rc;
}

int walcut_step(sqlite3 *db, sqlite3_int64 step, sqlite3_int64 *left, sqlite3_int64 *in_use) {
    sqlite3_file *main_file = 0, *wal = 0;
    int rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &main_file);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal);
    if (rc != SQLITE_OK) return rc;
    if (main_file == 0 || main_file->pMethods == 0 || main_file->pMethods->iVersion < 2
        || main_file->pMethods->xShmMap == 0 || wal == 0 || wal->pMethods == 0) return SQLITE_NOTFOUND;
    void volatile *region = 0;
    rc = main_file->pMethods->xShmMap(main_file, 0, 32768, 0, &region);
    if (rc != SQLITE_OK) return rc;
    if (region == 0) return SQLITE_NOTFOUND;
    /* WalIndexHdr: u32 iVersion, u32 unused, u32 iChange, u8 isInit, u8 bigEndCksum,
     * u16 szPage (1 means 65536), u32 mxFrame, ...: native byte order. */
    const volatile unsigned char *header = (const volatile unsigned char *)region;
    if (header[12] == 0) return SQLITE_NOTFOUND;
    unsigned short page_field = 0;
    unsigned int frames = 0;
    memcpy(&page_field, (const void *)(header + 14), sizeof page_field);
    memcpy(&frames, (const void *)(header + 16), sizeof frames);
    sqlite3_int64 page = page_field == 1 ? 65536 : page_field;
    if (page < 512) return SQLITE_NOTFOUND;
    sqlite3_int64 used = frames == 0 ? 0 : 32 + (sqlite3_int64)frames * (page + 24);
    sqlite3_int64 size = 0;
    rc = wal->pMethods->xFileSize(wal, &size);
    if (rc != SQLITE_OK) return rc;
    *in_use = used;
    *left = size;
    if (size <= used) return SQLITE_OK;
    if (frames == 0 && size >= 4) {
        unsigned char magic[4] = {0, 0, 0, 0};
        rc = wal->pMethods->xRead(wal, magic, 4, 0);
        if (rc != SQLITE_OK) return rc;
        if (magic[0] | magic[1] | magic[2] | magic[3]) {
            static const unsigned char cleared[32] = {0};
            rc = wal->pMethods->xWrite(wal, cleared, size < 32 ? (int)size : 32, 0);
            if (rc != SQLITE_OK) return rc;
            rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
            if (rc != SQLITE_OK) return rc;
        }
    }
    sqlite3_int64 target = size - step;
    if (target < used) target = used;
    rc = wal->pMethods->xTruncate(wal, target);
    if (rc != SQLITE_OK) return rc;
    *left = target;
    return SQLITE_OK;
}
