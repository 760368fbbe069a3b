/*
 * The crash-simulating VFS described in include/CCrashVFS.h.
 *
 * Model: a Node per file path holds the writes (and truncates) no xSync has
 * covered yet; the real file on disk holds exactly the synced state. Reads
 * overlay the unsynced writes on the disk bytes; xSync writes them to the
 * real file and syncs it. A power cut forgets them (or writes back a random
 * subset) and bumps the generation: every file opened before is dead.
 *
 * One mutex per VFS guards everything, including the real reads and writes
 * (test and simulator loads are small); locks and the -shm pass straight
 * through to the real file, outside that mutex.
 */
#include "CCrashVFS.h"

#include <sqlite3.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#define ROUND8(x) (((x) + 7) & ~(size_t)7)

typedef struct Write {
    struct Write *next;
    int64_t offset;
    int64_t count;
    unsigned char data[];
} Write;

typedef struct Node {
    struct Node *next;     /* in the VFS's list while linked */
    int linked;            /* 0: detached by a cut or a delete, owned by its open files */
    char *path;
    int refs;              /* open files on this node */
    int64_t disk_size;     /* the real file's size (what was synced) */
    int64_t visible;       /* disk bytes from here on were truncated away (unsynced) */
    int64_t size;          /* the file's size as SQLite sees it */
    Write *head, *tail;
    int64_t pending_bytes;
    sqlite3_file *any_real; /* one open real file of this node, to write back through */
} Node;

typedef struct CrashFile CrashFile;

typedef struct CrashVFS {
    sqlite3_vfs base;
    sqlite3_vfs *real;
    pthread_mutex_t mutex;
    Node *nodes;
    CrashFile *files;
    int64_t generation;
    int powered;
    int64_t arm_countdown;
    uint64_t arm_seed;
    int arm_keep;
    int full;              /* the disk is full: a write that would grow a file past the bytes freed since fails with SQLITE_FULL */
    int64_t freed;         /* while full: bytes that truncates and deletes gave back, which growth may use again */
    crashvfs_stats stats;
    struct CrashVFS *next_vfs;
    char name[];
} CrashVFS;

struct CrashFile {
    sqlite3_file base;
    CrashVFS *vfs;
    Node *node;            /* NULL for unnamed (temporary) files: not tracked */
    int64_t generation;
    int is_main_db;
    CrashFile *prev, *next;
    sqlite3_file *real;    /* the real file, right after this struct */
};

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static CrashVFS *registry;

/* MARK: helpers (VFS mutex held) */

static uint64_t splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int is_live(CrashFile *f) {
    return f->vfs->powered && f->generation == f->vfs->generation;
}

static void drop_writes(CrashVFS *v, Node *n) {
    Write *w = n->head;
    while (w) {
        Write *next = w->next;
        free(w);
        w = next;
    }
    v->stats.unsynced_bytes -= n->pending_bytes;
    n->head = n->tail = NULL;
    n->pending_bytes = 0;
}

static void free_node(CrashVFS *v, Node *n) {
    drop_writes(v, n);
    free(n->path);
    free(n);
}

static void unlink_node(CrashVFS *v, Node *n) {
    if (!n->linked) return;
    Node **p = &v->nodes;
    while (*p && *p != n) p = &(*p)->next;
    if (*p) *p = n->next;
    n->next = NULL;
    n->linked = 0;
}

static Node *find_node(CrashVFS *v, const char *path) {
    for (Node *n = v->nodes; n; n = n->next) {
        if (strcmp(n->path, path) == 0) return n;
    }
    return NULL;
}

/* Applies one write to the disk: through an open real file, or (no file open) the path itself. */
static int write_to_disk(Node *n, const Write *w) {
    if (n->any_real) {
        return n->any_real->pMethods->xWrite(n->any_real, w->data, (int)w->count, w->offset);
    }
    int fd = open(n->path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return SQLITE_IOERR_WRITE;
    int64_t done = 0;
    while (done < w->count) {
        ssize_t k = pwrite(fd, w->data + done, (size_t)(w->count - done), (off_t)(w->offset + done));
        if (k <= 0) break;
        done += k;
    }
    close(fd);
    return done == w->count ? SQLITE_OK : SQLITE_IOERR_WRITE;
}

static int truncate_on_disk(Node *n, int64_t size) {
    if (n->any_real) return n->any_real->pMethods->xTruncate(n->any_real, size);
    return truncate(n->path, (off_t)size) == 0 ? SQLITE_OK : SQLITE_IOERR_TRUNCATE;
}

/* Makes the disk hold the node's file as SQLite sees it (no sync). */
static int write_back_node(CrashVFS *v, Node *n) {
    int rc = SQLITE_OK;
    if (n->visible < n->disk_size) {
        rc = truncate_on_disk(n, n->visible);
        if (rc != SQLITE_OK) return rc;
    }
    for (Write *w = n->head; w; w = w->next) {
        rc = write_to_disk(n, w);
        if (rc != SQLITE_OK) return rc;
    }
    int64_t end = n->visible;
    for (Write *w = n->head; w; w = w->next) {
        if (w->offset + w->count > end) end = w->offset + w->count;
    }
    if (end != n->size) {
        rc = truncate_on_disk(n, n->size);
        if (rc != SQLITE_OK) return rc;
    }
    drop_writes(v, n);
    n->disk_size = n->visible = n->size;
    return SQLITE_OK;
}

/* The power fails: unsynced writes go (a random subset survives), open files die. */
static int64_t cut_locked(CrashVFS *v, uint64_t seed, int keep_percent) {
    uint64_t state = seed;
    int64_t dropped = 0;
    Node *n = v->nodes;
    while (n) {
        Node *next = n->next;
        for (Write *w = n->head; w; w = w->next) {
            if (keep_percent > 0 && (int)(splitmix(&state) % 100) < keep_percent && write_to_disk(n, w) == SQLITE_OK) {
                v->stats.kept_writes += 1;
            } else {
                dropped += 1;
            }
        }
        drop_writes(v, n);
        n->next = NULL;
        n->linked = 0;
        if (n->refs == 0) free_node(v, n);
        n = next;
    }
    v->nodes = NULL;
    v->generation += 1;
    v->powered = 0;
    v->arm_countdown = 0;
    v->stats.cuts += 1;
    v->stats.dropped_writes += dropped;
    return dropped;
}

/* Counts a write, truncate or sync; true when an armed cut fires on it. */
static int count_operation(CrashVFS *v) {
    v->stats.operations += 1;
    if (v->arm_countdown > 0 && --v->arm_countdown == 0) {
        cut_locked(v, v->arm_seed, v->arm_keep);
        return 1;
    }
    return 0;
}

/* A path some dead file still refers to (its own, or its database's -wal / -journal). */
static int is_dead_path(CrashVFS *v, const char *path) {
    for (CrashFile *f = v->files; f; f = f->next) {
        if (f->generation == v->generation || !f->node) continue;
        const char *own = f->node->path;
        if (strcmp(own, path) == 0) return 1;
        if (f->is_main_db) {
            size_t len = strlen(own);
            if (strncmp(path, own, len) == 0 && (strcmp(path + len, "-wal") == 0 || strcmp(path + len, "-journal") == 0)) return 1;
        }
    }
    return 0;
}

/* MARK: io methods */

static int c_close(sqlite3_file *p) {
    CrashFile *f = (CrashFile *)p;
    CrashVFS *v = f->vfs;
    pthread_mutex_lock(&v->mutex);
    if (f->prev) f->prev->next = f->next; else v->files = f->next;
    if (f->next) f->next->prev = f->prev;
    Node *n = f->node;
    if (n) {
        n->refs -= 1;
        if (n->any_real == f->real) {
            n->any_real = NULL;
            for (CrashFile *o = v->files; o; o = o->next) {
                if (o->node == n) { n->any_real = o->real; break; }
            }
        }
        if (n->refs == 0) {
            if (!n->linked) {
                free_node(v, n);
            } else if (!n->head && n->visible == n->disk_size && n->size == n->disk_size) {
                unlink_node(v, n);
                free_node(v, n);
            }
            /* else: unsynced writes outlive the handle, as in a page cache */
        }
    }
    pthread_mutex_unlock(&v->mutex);
    return f->real->pMethods->xClose(f->real);
}

static int c_read(sqlite3_file *p, void *buffer, int amount, sqlite3_int64 offset) {
    CrashFile *f = (CrashFile *)p;
    CrashVFS *v = f->vfs;
    pthread_mutex_lock(&v->mutex);
    if (!is_live(f)) {
        pthread_mutex_unlock(&v->mutex);
        return SQLITE_IOERR_READ;
    }
    Node *n = f->node;
    if (!n) {
        pthread_mutex_unlock(&v->mutex);
        return f->real->pMethods->xRead(f->real, buffer, amount, offset);
    }
    unsigned char *out = buffer;
    int64_t end = offset + amount;
    memset(out, 0, (size_t)amount);
    if (offset < n->visible) {
        int64_t stop = end < n->visible ? end : n->visible;
        int rc = f->real->pMethods->xRead(f->real, out, (int)(stop - offset), offset);
        if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) {
            pthread_mutex_unlock(&v->mutex);
            return rc;
        }
    }
    for (Write *w = n->head; w; w = w->next) {
        int64_t low = w->offset > offset ? w->offset : offset;
        int64_t high = w->offset + w->count < end ? w->offset + w->count : end;
        if (low < high) memcpy(out + (low - offset), w->data + (low - w->offset), (size_t)(high - low));
    }
    int short_read = end > n->size;
    pthread_mutex_unlock(&v->mutex);
    return short_read ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

static int c_write(sqlite3_file *p, const void *data, int amount, sqlite3_int64 offset) {
    CrashFile *f = (CrashFile *)p;
    CrashVFS *v = f->vfs;
    pthread_mutex_lock(&v->mutex);
    if (!is_live(f) || count_operation(v)) {
        pthread_mutex_unlock(&v->mutex);
        return SQLITE_IOERR_WRITE;
    }
    v->stats.writes += 1;
    Node *n = f->node;
    if (v->full) {
        sqlite3_int64 size = 0;
        if (n) {
            size = n->size;
        } else if (f->real->pMethods->xFileSize(f->real, &size) != SQLITE_OK) {
            size = 0;
        }
        int64_t growth = offset + amount - size;
        if (growth > v->freed) {
            v->stats.full_writes += 1;
            pthread_mutex_unlock(&v->mutex);
            return SQLITE_FULL;
        }
        if (growth > 0) v->freed -= growth;
    }
    if (!n) {
        pthread_mutex_unlock(&v->mutex);
        return f->real->pMethods->xWrite(f->real, data, amount, offset);
    }
    Write *w = malloc(sizeof(Write) + (size_t)amount);
    if (!w) {
        pthread_mutex_unlock(&v->mutex);
        return SQLITE_IOERR_NOMEM;
    }
    w->next = NULL;
    w->offset = offset;
    w->count = amount;
    memcpy(w->data, data, (size_t)amount);
    if (n->tail) n->tail->next = w; else n->head = w;
    n->tail = w;
    n->pending_bytes += amount;
    v->stats.unsynced_bytes += amount;
    if (offset + amount > n->size) n->size = offset + amount;
    pthread_mutex_unlock(&v->mutex);
    return SQLITE_OK;
}

static int c_truncate(sqlite3_file *p, sqlite3_int64 size) {
    CrashFile *f = (CrashFile *)p;
    CrashVFS *v = f->vfs;
    pthread_mutex_lock(&v->mutex);
    if (!is_live(f) || count_operation(v)) {
        pthread_mutex_unlock(&v->mutex);
        return SQLITE_IOERR_TRUNCATE;
    }
    Node *n = f->node;
    if (!n) {
        sqlite3_int64 before = 0;
        if (v->full && f->real->pMethods->xFileSize(f->real, &before) == SQLITE_OK && before > size) v->freed += before - size;
        pthread_mutex_unlock(&v->mutex);
        return f->real->pMethods->xTruncate(f->real, size);
    }
    if (v->full && n->size > size) v->freed += n->size - size;
    if (n->size - size > v->stats.largest_truncation) v->stats.largest_truncation = n->size - size;
    /* Unsynced writes past the new end are gone; so are disk bytes past it. */
    Write **link = &n->head;
    Write *last = NULL;
    while (*link) {
        Write *w = *link;
        if (w->offset >= size) {
            *link = w->next;
            n->pending_bytes -= w->count;
            v->stats.unsynced_bytes -= w->count;
            free(w);
            continue;
        }
        if (w->offset + w->count > size) {
            int64_t cut = w->offset + w->count - size;
            w->count -= cut;
            n->pending_bytes -= cut;
            v->stats.unsynced_bytes -= cut;
        }
        last = w;
        link = &w->next;
    }
    n->tail = last;
    n->size = size;
    if (size < n->visible) n->visible = size;
    pthread_mutex_unlock(&v->mutex);
    return SQLITE_OK;
}

static int c_sync(sqlite3_file *p, int flags) {
    CrashFile *f = (CrashFile *)p;
    CrashVFS *v = f->vfs;
    pthread_mutex_lock(&v->mutex);
    if (!is_live(f) || count_operation(v)) {
        pthread_mutex_unlock(&v->mutex);
        return SQLITE_IOERR_FSYNC;
    }
    v->stats.syncs += 1;
    int rc = SQLITE_OK;
    if (f->node) {
        sqlite3_file *saved = f->node->any_real;
        f->node->any_real = f->real;
        rc = write_back_node(v, f->node);
        f->node->any_real = saved;
    }
    if (rc == SQLITE_OK) rc = f->real->pMethods->xSync(f->real, flags);
    pthread_mutex_unlock(&v->mutex);
    return rc;
}

static int c_file_size(sqlite3_file *p, sqlite3_int64 *size) {
    CrashFile *f = (CrashFile *)p;
    CrashVFS *v = f->vfs;
    pthread_mutex_lock(&v->mutex);
    if (!is_live(f)) {
        pthread_mutex_unlock(&v->mutex);
        return SQLITE_IOERR_FSTAT;
    }
    if (!f->node) {
        pthread_mutex_unlock(&v->mutex);
        return f->real->pMethods->xFileSize(f->real, size);
    }
    *size = f->node->size;
    pthread_mutex_unlock(&v->mutex);
    return SQLITE_OK;
}

static int c_lock(sqlite3_file *p, int level) {
    CrashFile *f = (CrashFile *)p;
    return f->real->pMethods->xLock(f->real, level);
}

static int c_unlock(sqlite3_file *p, int level) {
    CrashFile *f = (CrashFile *)p;
    return f->real->pMethods->xUnlock(f->real, level);
}

static int c_check_reserved(sqlite3_file *p, int *out) {
    CrashFile *f = (CrashFile *)p;
    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int c_file_control(sqlite3_file *p, int op, void *arg) {
    CrashFile *f = (CrashFile *)p;
    /* Hints that would grow or map the real file behind the model's back. */
    if (op == SQLITE_FCNTL_SIZE_HINT || op == SQLITE_FCNTL_CHUNK_SIZE) return SQLITE_OK;
    if (op == SQLITE_FCNTL_MMAP_SIZE) {
        *(sqlite3_int64 *)arg = 0;
        return SQLITE_OK;
    }
    return f->real->pMethods->xFileControl(f->real, op, arg);
}

static int c_sector_size(sqlite3_file *p) {
    CrashFile *f = (CrashFile *)p;
    return f->real->pMethods->xSectorSize(f->real);
}

static int c_device_characteristics(sqlite3_file *p) {
    CrashFile *f = (CrashFile *)p;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int c_shm_map(sqlite3_file *p, int page, int size, int extend, void volatile **out) {
    CrashFile *f = (CrashFile *)p;
    return f->real->pMethods->xShmMap(f->real, page, size, extend, out);
}

static int c_shm_lock(sqlite3_file *p, int offset, int n, int flags) {
    CrashFile *f = (CrashFile *)p;
    return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

static void c_shm_barrier(sqlite3_file *p) {
    CrashFile *f = (CrashFile *)p;
    f->real->pMethods->xShmBarrier(f->real);
}

static int c_shm_unmap(sqlite3_file *p, int delete_flag) {
    CrashFile *f = (CrashFile *)p;
    return f->real->pMethods->xShmUnmap(f->real, delete_flag);
}

/* No memory mapping: every read goes through c_read and sees unsynced writes. */
static int c_fetch(sqlite3_file *p, sqlite3_int64 offset, int amount, void **out) {
    (void)p; (void)offset; (void)amount;
    *out = NULL;
    return SQLITE_OK;
}

static int c_unfetch(sqlite3_file *p, sqlite3_int64 offset, void *page) {
    (void)p; (void)offset; (void)page;
    return SQLITE_OK;
}

static const sqlite3_io_methods crash_io = {
    3,
    c_close, c_read, c_write, c_truncate, c_sync, c_file_size,
    c_lock, c_unlock, c_check_reserved, c_file_control, c_sector_size, c_device_characteristics,
    c_shm_map, c_shm_lock, c_shm_barrier, c_shm_unmap,
    c_fetch, c_unfetch,
};

/* MARK: vfs methods */

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *p, int flags, int *out_flags) {
    CrashVFS *v = (CrashVFS *)vfs;
    CrashFile *f = (CrashFile *)p;
    memset(f, 0, sizeof(CrashFile));
    f->real = (sqlite3_file *)((char *)p + ROUND8(sizeof(CrashFile)));
    f->vfs = v;
    pthread_mutex_lock(&v->mutex);
    int powered = v->powered;
    pthread_mutex_unlock(&v->mutex);
    if (!powered) return SQLITE_CANTOPEN;
    int rc = v->real->xOpen(v->real, name, f->real, flags, out_flags);
    if (rc != SQLITE_OK) {
        if (f->real->pMethods) f->real->pMethods->xClose(f->real);
        return rc;
    }
    pthread_mutex_lock(&v->mutex);
    f->generation = v->generation;
    if (name && !(flags & SQLITE_OPEN_DELETEONCLOSE)) {
        Node *n = find_node(v, name);
        if (!n) {
            n = calloc(1, sizeof(Node));
            char *path = n ? strdup(name) : NULL;
            sqlite3_int64 size = 0;
            if (!n || !path || f->real->pMethods->xFileSize(f->real, &size) != SQLITE_OK) {
                free(path);
                free(n);
                pthread_mutex_unlock(&v->mutex);
                f->real->pMethods->xClose(f->real);
                return SQLITE_IOERR_NOMEM;
            }
            n->path = path;
            n->disk_size = n->visible = n->size = size;
            n->linked = 1;
            n->next = v->nodes;
            v->nodes = n;
        }
        n->refs += 1;
        if (!n->any_real) n->any_real = f->real;
        f->node = n;
        f->is_main_db = (flags & SQLITE_OPEN_MAIN_DB) != 0;
    }
    f->next = v->files;
    if (v->files) v->files->prev = f;
    v->files = f;
    pthread_mutex_unlock(&v->mutex);
    p->pMethods = &crash_io;
    return SQLITE_OK;
}

static int v_delete(sqlite3_vfs *vfs, const char *path, int sync_dir) {
    CrashVFS *v = (CrashVFS *)vfs;
    pthread_mutex_lock(&v->mutex);
    if (!v->powered || is_dead_path(v, path)) {
        pthread_mutex_unlock(&v->mutex);
        return SQLITE_IOERR_DELETE;
    }
    Node *n = find_node(v, path);
    if (v->full) {
        struct stat info;
        if (n) {
            v->freed += n->size;
        } else if (stat(path, &info) == 0) {
            v->freed += (int64_t)info.st_size;
        }
    }
    if (n) {
        unlink_node(v, n);
        if (n->refs == 0) free_node(v, n);
    }
    pthread_mutex_unlock(&v->mutex);
    return v->real->xDelete(v->real, path, sync_dir);
}

static int v_access(sqlite3_vfs *vfs, const char *path, int flags, int *out) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xAccess(v->real, path, flags, out);
}

static int v_full_pathname(sqlite3_vfs *vfs, const char *path, int n, char *out) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xFullPathname(v->real, path, n, out);
}

static void *v_dl_open(sqlite3_vfs *vfs, const char *path) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xDlOpen(v->real, path);
}

static void v_dl_error(sqlite3_vfs *vfs, int n, char *out) {
    CrashVFS *v = (CrashVFS *)vfs;
    v->real->xDlError(v->real, n, out);
}

static void (*v_dl_sym(sqlite3_vfs *vfs, void *handle, const char *symbol))(void) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xDlSym(v->real, handle, symbol);
}

static void v_dl_close(sqlite3_vfs *vfs, void *handle) {
    CrashVFS *v = (CrashVFS *)vfs;
    v->real->xDlClose(v->real, handle);
}

static int v_randomness(sqlite3_vfs *vfs, int n, char *out) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xRandomness(v->real, n, out);
}

static int v_sleep(sqlite3_vfs *vfs, int microseconds) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xSleep(v->real, microseconds);
}

static int v_current_time(sqlite3_vfs *vfs, double *out) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xCurrentTime(v->real, out);
}

static int v_get_last_error(sqlite3_vfs *vfs, int n, char *out) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xGetLastError ? v->real->xGetLastError(v->real, n, out) : 0;
}

static int v_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
    CrashVFS *v = (CrashVFS *)vfs;
    return v->real->xCurrentTimeInt64(v->real, out);
}

/* MARK: public */

static CrashVFS *lookup(const char *name) {
    pthread_mutex_lock(&registry_mutex);
    CrashVFS *v = registry;
    while (v && strcmp(v->name, name) != 0) v = v->next_vfs;
    pthread_mutex_unlock(&registry_mutex);
    return v;
}

int crashvfs_register(const char *name) {
    pthread_mutex_lock(&registry_mutex);
    for (CrashVFS *v = registry; v; v = v->next_vfs) {
        if (strcmp(v->name, name) == 0) {
            pthread_mutex_unlock(&registry_mutex);
            return SQLITE_OK;
        }
    }
    sqlite3_vfs *real = sqlite3_vfs_find("unix");
    if (!real || real->iVersion < 2) {
        pthread_mutex_unlock(&registry_mutex);
        return SQLITE_ERROR;
    }
    size_t length = strlen(name);
    CrashVFS *v = calloc(1, sizeof(CrashVFS) + length + 1);
    if (!v) {
        pthread_mutex_unlock(&registry_mutex);
        return SQLITE_NOMEM;
    }
    memcpy(v->name, name, length + 1);
    v->real = real;
    pthread_mutex_init(&v->mutex, NULL);
    v->generation = 1;
    v->powered = 1;
    v->base.iVersion = 2;
    v->base.szOsFile = (int)(ROUND8(sizeof(CrashFile)) + (size_t)real->szOsFile);
    v->base.mxPathname = real->mxPathname;
    v->base.zName = v->name;
    v->base.pAppData = v;
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
    int rc = sqlite3_vfs_register(&v->base, 0);
    if (rc != SQLITE_OK) {
        pthread_mutex_destroy(&v->mutex);
        free(v);
    } else {
        v->next_vfs = registry;
        registry = v;
    }
    pthread_mutex_unlock(&registry_mutex);
    return rc;
}

int64_t crashvfs_power_cut(const char *name, uint64_t seed, int keep_percent) {
    CrashVFS *v = lookup(name);
    if (!v) return -1;
    pthread_mutex_lock(&v->mutex);
    int64_t dropped = cut_locked(v, seed, keep_percent);
    pthread_mutex_unlock(&v->mutex);
    return dropped;
}

int crashvfs_power_on(const char *name) {
    CrashVFS *v = lookup(name);
    if (!v) return SQLITE_NOTFOUND;
    pthread_mutex_lock(&v->mutex);
    v->powered = 1;
    pthread_mutex_unlock(&v->mutex);
    return SQLITE_OK;
}

int crashvfs_arm(const char *name, int64_t operations, uint64_t seed, int keep_percent) {
    CrashVFS *v = lookup(name);
    if (!v) return SQLITE_NOTFOUND;
    pthread_mutex_lock(&v->mutex);
    v->arm_countdown = operations > 0 ? operations : 0;
    v->arm_seed = seed;
    v->arm_keep = keep_percent;
    pthread_mutex_unlock(&v->mutex);
    return SQLITE_OK;
}

int crashvfs_set_full(const char *name, int full) {
    CrashVFS *v = lookup(name);
    if (!v) return SQLITE_NOTFOUND;
    pthread_mutex_lock(&v->mutex);
    v->full = full != 0;
    v->freed = 0;
    pthread_mutex_unlock(&v->mutex);
    return SQLITE_OK;
}

int64_t crashvfs_write_back(const char *name) {
    CrashVFS *v = lookup(name);
    if (!v) return -1;
    pthread_mutex_lock(&v->mutex);
    int64_t written = 0;
    Node *n = v->nodes;
    while (n) {
        Node *next = n->next;
        for (Write *w = n->head; w; w = w->next) written += 1;
        if (write_back_node(v, n) == SQLITE_OK && n->refs == 0) {
            unlink_node(v, n);
            free_node(v, n);
        }
        n = next;
    }
    pthread_mutex_unlock(&v->mutex);
    return written;
}

int crashvfs_get_stats(const char *name, crashvfs_stats *out) {
    CrashVFS *v = lookup(name);
    if (!v) return SQLITE_NOTFOUND;
    pthread_mutex_lock(&v->mutex);
    *out = v->stats;
    out->powered = v->powered;
    out->armed = v->arm_countdown > 0;
    pthread_mutex_unlock(&v->mutex);
    return SQLITE_OK;
}
