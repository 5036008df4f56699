/*
 * Bounded FIFO of unacknowledged summaries (see spool.h).
 *
 * Invariant: the entries on disk are always a prefix of the queue (the oldest
 * ones), because spilling moves the oldest in-memory payload.  So the head is
 * read back from disk while newer entries stay in memory, and order is
 * simply the queue order.
 */
#include "spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define SPOOL_DEFAULT_MEM  (8u << 20)
#define SPOOL_DEFAULT_DISK (256u << 20)
#define SPOOL_SUFFIX       ".sum"

struct entry {
    uint64_t seq, tag;
    size_t len;
    void *mem; /* NULL while the payload is on disk */
};

struct agt_spool {
    struct entry *q; /* ring of cap entries */
    size_t cap, head, n;
    size_t n_disk; /* entries [head, head + n_disk) are on disk */
    size_t mem_limit, disk_limit;
    char *dir;
    uint64_t mem_used, disk_used, lost, lost_tags, stale, last_seq;
    int have_seq;
    uint64_t last_tag; /* tag of the entry drop_head() removed last */
    uint64_t pinned;   /* seq of the entry in flight, 0 for none */
    void *scratch;     /* head payload read back from disk */
    size_t scratch_cap;
};

static struct entry *at(struct agt_spool *sp, size_t i)
{
    return &sp->q[(sp->head + i) % sp->cap];
}

static void entry_path(const struct agt_spool *sp, uint64_t seq, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%020llu%s", sp->dir, (unsigned long long)seq, SPOOL_SUFFIX);
}

static int remove_stale(struct agt_spool *sp)
{
    DIR *d = opendir(sp->dir);
    if (!d)
        return -errno;
    struct dirent *de;
    size_t sl = strlen(SPOOL_SUFFIX);
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l <= sl || strcmp(de->d_name + l - sl, SPOOL_SUFFIX) != 0)
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) == 0)
            sp->stale++;
    }
    closedir(d);
    return 0;
}

int agt_spool_create(const struct agt_spool_opts *opts, struct agt_spool **sp_p)
{
    if (!opts || opts->sz < sizeof(size_t) || opts->sz > sizeof(*opts) || !sp_p)
        return -EINVAL;
    struct agt_spool_opts o = {0};
    memcpy(&o, opts, opts->sz);
    struct agt_spool *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return -ENOMEM;
    sp->mem_limit = o.mem_bytes ? o.mem_bytes : SPOOL_DEFAULT_MEM;
    if (o.dir && *o.dir) {
        sp->dir = strdup(o.dir);
        sp->disk_limit = o.disk_bytes ? o.disk_bytes : SPOOL_DEFAULT_DISK;
        if (!sp->dir) {
            agt_spool_destroy(sp);
            return -ENOMEM;
        }
        if (mkdir(sp->dir, 0700) != 0 && errno != EEXIST) {
            int err = -errno;
            agt_log_err("spool: cannot create directory %s: %s", sp->dir, strerror(errno));
            agt_spool_destroy(sp);
            return err;
        }
        int err = remove_stale(sp);
        if (err) {
            agt_log_err("spool: cannot read directory %s: %s", sp->dir, strerror(-err));
            agt_spool_destroy(sp);
            return err;
        }
        if (sp->stale)
            agt_log_warn("spool: removed %llu summaries of an earlier agent in %s",
                         (unsigned long long)sp->stale, sp->dir);
    }
    *sp_p = sp;
    return 0;
}

static void drop_head(struct agt_spool *sp)
{
    struct entry *e = at(sp, 0);
    sp->last_tag = e->tag;
    if (e->mem) {
        sp->mem_used -= e->len;
        free(e->mem);
    } else {
        char path[4096];
        entry_path(sp, e->seq, path, sizeof(path));
        unlink(path);
        sp->disk_used -= e->len;
        sp->n_disk--;
    }
    sp->head = (sp->head + 1) % sp->cap;
    sp->n--;
}

/* Drop the oldest entry that is not in flight, counting it as lost. */
static void drop_lost(struct agt_spool *sp)
{
    if (sp->n >= 2 && sp->pinned && at(sp, 0)->seq == sp->pinned) {
        /* Remove the second entry: drop it as the head, then put the
         * pinned entry back in front.  The disk prefix stays a prefix. */
        struct entry keep = *at(sp, 0);
        int keep_on_disk = keep.mem == NULL;
        sp->head = (sp->head + 1) % sp->cap;
        sp->n--;
        if (keep_on_disk)
            sp->n_disk--;
        drop_head(sp);
        sp->head = (sp->head + sp->cap - 1) % sp->cap;
        *at(sp, 0) = keep;
        sp->n++;
        if (keep_on_disk)
            sp->n_disk++;
    } else {
        drop_head(sp);
    }
    sp->lost++;
    sp->lost_tags += sp->last_tag;
}

void agt_spool_pin(struct agt_spool *sp, uint64_t seq)
{
    sp->pinned = seq;
}

void agt_spool_destroy(struct agt_spool *sp)
{
    if (!sp)
        return;
    while (sp->n)
        drop_head(sp);
    free(sp->q);
    free(sp->dir);
    free(sp->scratch);
    free(sp);
}

static int grow(struct agt_spool *sp)
{
    size_t ncap = sp->cap ? sp->cap * 2 : 64;
    struct entry *nq = malloc(ncap * sizeof(*nq));
    if (!nq)
        return -ENOMEM;
    for (size_t i = 0; i < sp->n; i++)
        nq[i] = *at(sp, i);
    free(sp->q);
    sp->q = nq;
    sp->cap = ncap;
    sp->head = 0;
    return 0;
}

static int write_file(const char *path, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int err = -errno;
            close(fd);
            unlink(path);
            return err;
        }
        p += w;
        len -= (size_t)w;
    }
    close(fd);
    return 0;
}

/* Move the oldest in-memory payload to disk; 0 on success, <0 when the disk
 * cannot take it (the caller then drops entries instead). */
static int spill_one(struct agt_spool *sp)
{
    if (!sp->dir || sp->n_disk >= sp->n)
        return -ENOSPC;
    struct entry *e = at(sp, sp->n_disk);
    while (sp->disk_used + e->len > sp->disk_limit) {
        /* make room by dropping the oldest on disk, never the one in flight */
        int only_pinned = sp->n_disk == 1 && sp->pinned && at(sp, 0)->seq == sp->pinned;
        if (sp->n_disk == 0 || only_pinned)
            return -ENOSPC;
        drop_lost(sp);
        e = at(sp, sp->n_disk); /* the same entry, one place further front */
    }
    char path[4096];
    entry_path(sp, e->seq, path, sizeof(path));
    int err = write_file(path, e->mem, e->len);
    if (err) {
        agt_log_warn("spool: cannot write %s: %s; keeping summaries in memory only", path,
                     strerror(-err));
        return err;
    }
    free(e->mem);
    e->mem = NULL;
    sp->mem_used -= e->len;
    sp->disk_used += e->len;
    sp->n_disk++;
    return 0;
}

int agt_spool_push(struct agt_spool *sp, uint64_t seq, const void *buf, size_t len, uint64_t tag)
{
    if (!sp || (!buf && len))
        return -EINVAL;
    if (sp->have_seq && seq <= sp->last_seq)
        return -EINVAL;
    if (sp->n == sp->cap) {
        int err = grow(sp);
        if (err)
            return err;
    }
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    if (len)
        memcpy(copy, buf, len);
    *at(sp, sp->n) = (struct entry){.seq = seq, .tag = tag, .len = len, .mem = copy};
    sp->n++;
    sp->mem_used += len;
    sp->last_seq = seq;
    sp->have_seq = 1;
    while (sp->mem_used > sp->mem_limit) {
        if (spill_one(sp) == 0)
            continue;
        /* No room on disk either: the oldest entry is lost (counted). */
        drop_lost(sp);
    }
    return 0;
}

static int read_file(struct agt_spool *sp, const char *path, size_t len)
{
    if (sp->scratch_cap < len) {
        void *n = realloc(sp->scratch, len);
        if (!n)
            return -ENOMEM;
        sp->scratch = n;
        sp->scratch_cap = len;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, (char *)sp->scratch + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            close(fd);
            return r < 0 ? -errno : -EIO;
        }
        got += (size_t)r;
    }
    close(fd);
    return 0;
}

int agt_spool_head(struct agt_spool *sp, uint64_t *seq_p, const void **buf_p, size_t *len_p)
{
    if (!sp || !seq_p || !buf_p || !len_p)
        return -EINVAL;
    while (sp->n) {
        struct entry *e = at(sp, 0);
        if (e->mem) {
            *seq_p = e->seq;
            *buf_p = e->mem;
            *len_p = e->len;
            return 0;
        }
        char path[4096];
        entry_path(sp, e->seq, path, sizeof(path));
        int err = read_file(sp, path, e->len);
        if (err == 0) {
            *seq_p = e->seq;
            *buf_p = sp->scratch;
            *len_p = e->len;
            return 0;
        }
        /* An unreadable spool file is a lost summary, reported as such. */
        agt_log_warn("spool: cannot read %s: %s; counting it as lost", path, strerror(-err));
        drop_head(sp);
        sp->lost++;
        sp->lost_tags += sp->last_tag;
    }
    return -ENOENT;
}

uint64_t agt_spool_ack(struct agt_spool *sp, uint64_t up_to)
{
    uint64_t k = 0;
    while (sp && sp->n && at(sp, 0)->seq <= up_to) {
        drop_head(sp);
        k++;
    }
    return k;
}

void agt_spool_stats(const struct agt_spool *sp, struct agt_spool_stats *st)
{
    *st = (struct agt_spool_stats){.entries = sp->n,
                                   .mem_bytes = sp->mem_used,
                                   .disk_bytes = sp->disk_used,
                                   .lost = sp->lost,
                                   .lost_tags = sp->lost_tags,
                                   .stale = sp->stale};
}
