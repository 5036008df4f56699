/*
 * Bounded FIFO of unacknowledged summaries (see spool.h).
 *
 * Invariant: the entries whose payload is only on disk are always a prefix
 * of the queue (the oldest ones, n_disk of them), because spilling moves the
 * oldest in-memory payload.  So the head is read back from disk while newer
 * entries stay in memory, and order is simply the queue order.  Written
 * through, an entry in memory has its file as well (entry.file); spilling it
 * then only frees the memory.
 */
#include "spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define SPOOL_DEFAULT_MEM  (8u << 20)
#define SPOOL_DEFAULT_DISK (256u << 20)
#define SPOOL_SUFFIX       ".sum"
#define SPOOL_REPLAY       "replay"    /* subdirectory: files of earlier agents */
#define SPOOL_MAX_FILE     (64u << 20) /* larger than any summary we write */

struct entry {
    uint64_t seq;
    struct agt_spool_tag tag;
    size_t len;
    void *mem; /* NULL while the payload is on disk only */
    int file;  /* the payload is in its spool file too */
};

struct agt_spool {
    struct entry *q; /* ring of cap entries */
    size_t cap, head, n;
    size_t n_disk; /* entries [head, head + n_disk) have their payload on disk only */
    size_t mem_limit, disk_limit;
    char *dir;
    int lock_fd;       /* DIR/lock, held (flock) while this spool lives; -1 none */
    int write_through; /* every entry to its file when pushed (opts.spill_only 0) */
    int through_full;  /* the disk bound stopped writing through (logged once) */
    uint64_t mem_used, disk_used, lost, stale, last_seq;
    struct agt_spool_tag lost_tags;
    int have_seq;
    struct agt_spool_tag last_tag; /* tag of the entry drop_head() removed last */
    uint64_t pinned;   /* seq of the entry in flight, 0 for none */
    void *scratch;     /* head payload read back from disk */
    size_t scratch_cap;
    /* Summaries an earlier agent left on disk, oldest first: file names in
     * the replay directory, sent before this agent's own. */
    char *rdir;
    char **replay;
    size_t n_replay, replay_next;
    uint64_t replayed;
};

static struct entry *at(struct agt_spool *sp, size_t i)
{
    return &sp->q[(sp->head + i) % sp->cap];
}

static void entry_path(const struct agt_spool *sp, uint64_t seq, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%020llu%s", sp->dir, (unsigned long long)seq, SPOOL_SUFFIX);
}

static int is_spool_file(const char *name)
{
    size_t l = strlen(name), sl = strlen(SPOOL_SUFFIX);
    return l > sl && strcmp(name + l - sl, SPOOL_SUFFIX) == 0;
}

static int replay_filter(const struct dirent *de)
{
    return is_spool_file(de->d_name);
}

/* A file being written: renamed to its spool name once complete, so a crash
 * in the middle leaves no torn summary to replay. */
#define SPOOL_PART ".part"

static int is_part_file(const char *name)
{
    size_t l = strlen(name), sl = strlen(SPOOL_PART);
    return l > sl && strcmp(name + l - sl, SPOOL_PART) == 0;
}

/* A crashed agent leaves its oldest unacknowledged summaries in the spool
 * directory, each a complete authenticated envelope of its incarnation.
 * They move into the replay directory under a new generation prefix
 * (several crashes in a row keep their order: generation, then seq) and
 * are listed oldest first.  What exceeds the disk bound is removed and
 * counted as lost (stale). */
static int adopt_stale(struct agt_spool *sp)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", sp->dir, SPOOL_REPLAY);
    sp->rdir = strdup(path);
    if (!sp->rdir)
        return -ENOMEM;
    struct dirent **names = NULL;
    int n = scandir(sp->rdir, &names, replay_filter, alphasort);
    if (n < 0 && errno != ENOENT)
        return -errno;
    if (n < 0)
        n = 0; /* made when the first file moves in */
    unsigned long gen = 0;
    if (n > 0)
        gen = strtoul(names[n - 1]->d_name, NULL, 10);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    gen++;

    DIR *d = opendir(sp->dir);
    if (!d)
        return -errno;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (is_part_file(de->d_name)) { /* cut off while being written */
            snprintf(path, sizeof(path), "%s/%s", sp->dir, de->d_name);
            unlink(path);
            continue;
        }
        if (!is_spool_file(de->d_name))
            continue;
        if (mkdir(sp->rdir, 0700) != 0 && errno != EEXIST) {
            int err = -errno;
            closedir(d);
            return err;
        }
        char to[4096];
        snprintf(to, sizeof(to), "%s/%010lu-%s", sp->rdir, gen, de->d_name);
        snprintf(path, sizeof(path), "%s/%s", sp->dir, de->d_name);
        if (rename(path, to) != 0) {
            agt_log_warn("spool: cannot move %s to %s: %s; counting it as lost", path, to,
                         strerror(errno));
            unlink(path);
            sp->stale++;
        }
    }
    closedir(d);

    names = NULL;
    n = scandir(sp->rdir, &names, replay_filter, alphasort);
    if (n < 0)
        return errno == ENOENT ? 0 : -errno;
    /* Keep the newest files within the disk bound. */
    uint64_t total = 0;
    int first = n;
    while (first > 0) {
        struct stat stt;
        snprintf(path, sizeof(path), "%s/%s", sp->rdir, names[first - 1]->d_name);
        uint64_t sz = stat(path, &stt) == 0 ? (uint64_t)stt.st_size : 0;
        if (total + sz > sp->disk_limit)
            break;
        total += sz;
        first--;
    }
    int err = 0;
    sp->replay = calloc((size_t)(n > 0 ? n : 1), sizeof(*sp->replay));
    if (!sp->replay)
        err = -ENOMEM;
    for (int i = 0; i < n; i++) {
        if (i < first || err) {
            snprintf(path, sizeof(path), "%s/%s", sp->rdir, names[i]->d_name);
            if (!err && unlink(path) == 0)
                sp->stale++;
        } else if (!(sp->replay[sp->n_replay] = strdup(names[i]->d_name))) {
            err = -ENOMEM;
        } else {
            sp->n_replay++;
        }
        free(names[i]);
    }
    free(names);
    if (!sp->n_replay)
        rmdir(sp->rdir); /* nothing left to send: no trace of it */
    return err;
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
    sp->lock_fd = -1;
    sp->mem_limit = o.mem_bytes ? o.mem_bytes : SPOOL_DEFAULT_MEM;
    if (o.dir && *o.dir) {
        sp->write_through = !o.spill_only;
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
        /* One agent per directory: a second would take the first one's
         * files for a crashed agent's and send them again. */
        char lock[4096];
        snprintf(lock, sizeof(lock), "%s/lock", sp->dir);
        sp->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (sp->lock_fd < 0 || flock(sp->lock_fd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno == EWOULDBLOCK ? -EBUSY : -errno;
            if (err == -EBUSY)
                agt_log_err("spool: %s is in use by another agent (of the same job and rank?)",
                            sp->dir);
            else
                agt_log_err("spool: cannot lock %s: %s", lock, strerror(-err));
            agt_spool_destroy(sp);
            return err;
        }
        int err = adopt_stale(sp);
        if (err) {
            agt_log_err("spool: cannot read directory %s: %s", sp->dir, strerror(-err));
            agt_spool_destroy(sp);
            return err;
        }
        if (sp->stale)
            agt_log_warn("spool: removed %llu summaries of an earlier agent in %s (over the"
                         " disk bound); counted as lost",
                         (unsigned long long)sp->stale, sp->dir);
        if (sp->n_replay)
            agt_log_info("spool: %zu summaries of an earlier agent in %s go to the collector"
                         " first",
                         sp->n_replay, sp->rdir);
    }
    *sp_p = sp;
    return 0;
}

/* The entry drop_head() removed last was lost. */
static void count_lost(struct agt_spool *sp)
{
    sp->lost++;
    for (int i = 0; i < AGT_SPOOL_TAG_N; i++)
        sp->lost_tags.v[i] += sp->last_tag.v[i];
}

static void drop_head(struct agt_spool *sp)
{
    struct entry *e = at(sp, 0);
    sp->last_tag = e->tag;
    if (e->mem) {
        sp->mem_used -= e->len;
        free(e->mem);
    } else {
        sp->n_disk--;
    }
    if (e->file) {
        char path[4096];
        entry_path(sp, e->seq, path, sizeof(path));
        unlink(path);
        sp->disk_used -= e->len;
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
    count_lost(sp);
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
    /* Replay files not yet delivered stay for the next agent. */
    for (size_t i = 0; i < sp->n_replay; i++)
        free(sp->replay[i]);
    free(sp->replay);
    free(sp->rdir);
    if (sp->lock_fd >= 0)
        close(sp->lock_fd); /* the lock file stays: removing it would race a next agent */
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

/* Write the file under a temporary name, then rename it into place: the
 * spool name never holds part of a summary. */
static int write_file(const char *path, const void *buf, size_t len)
{
    char part[4096 + sizeof(SPOOL_PART)];
    snprintf(part, sizeof(part), "%s%s", path, SPOOL_PART);
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
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
            unlink(part);
            return err;
        }
        p += w;
        len -= (size_t)w;
    }
    if (close(fd) != 0 || rename(part, path) != 0) {
        int err = -errno;
        unlink(part);
        return err;
    }
    return 0;
}

/* Move the oldest in-memory payload to disk; 0 on success, <0 when the disk
 * cannot take it (the caller then drops entries instead). */
static int spill_one(struct agt_spool *sp)
{
    if (!sp->dir || sp->n_disk >= sp->n)
        return -ENOSPC;
    struct entry *e = at(sp, sp->n_disk);
    if (e->file) { /* written through: its file is there already */
        free(e->mem);
        e->mem = NULL;
        sp->mem_used -= e->len;
        sp->n_disk++;
        return 0;
    }
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
    e->file = 1;
    sp->mem_used -= e->len;
    sp->disk_used += e->len;
    sp->n_disk++;
    return 0;
}

/* Written through: the new entry's file, so that a crash leaves it for the
 * next agent.  Never at the cost of an older entry: past the disk bound (or
 * on a write error) the entry stays in memory only, said once. */
static void write_through(struct agt_spool *sp, struct entry *e)
{
    if (sp->disk_used + e->len > sp->disk_limit) {
        if (!sp->through_full)
            agt_log_warn("spool: %s is full (%zu bytes): newer summaries are kept in memory"
                         " only until older ones are acknowledged",
                         sp->dir, sp->disk_limit);
        sp->through_full = 1;
        return;
    }
    char path[4096];
    entry_path(sp, e->seq, path, sizeof(path));
    int err = write_file(path, e->mem, e->len);
    if (err) {
        if (!sp->through_full)
            agt_log_warn("spool: cannot write %s: %s; keeping summaries in memory only", path,
                         strerror(-err));
        sp->through_full = 1;
        return;
    }
    if (sp->through_full)
        agt_log_info("spool: writing summaries to %s again", sp->dir);
    sp->through_full = 0;
    e->file = 1;
    sp->disk_used += e->len;
}

int agt_spool_push(struct agt_spool *sp, uint64_t seq, const void *buf, size_t len,
                   const struct agt_spool_tag *tag)
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
    *at(sp, sp->n) = (struct entry){.seq = seq, .len = len, .mem = copy};
    if (tag)
        at(sp, sp->n)->tag = *tag;
    if (sp->write_through)
        write_through(sp, at(sp, sp->n));
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
        count_lost(sp);
    }
    return -ENOENT;
}

int agt_spool_replay_head(struct agt_spool *sp, const void **buf_p, size_t *len_p)
{
    if (!sp || !buf_p || !len_p)
        return -EINVAL;
    while (sp->replay_next < sp->n_replay) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", sp->rdir, sp->replay[sp->replay_next]);
        struct stat st;
        int err = stat(path, &st) == 0 ? 0 : -errno;
        if (!err && (st.st_size <= 0 || (uint64_t)st.st_size > SPOOL_MAX_FILE))
            err = -EFBIG;
        if (!err)
            err = read_file(sp, path, (size_t)st.st_size);
        if (err == 0) {
            *buf_p = sp->scratch;
            *len_p = (size_t)st.st_size;
            return 0;
        }
        agt_log_warn("spool: cannot read %s: %s; counting it as lost", path,
                     err == -EFBIG ? "empty or larger than any summary" : strerror(-err));
        agt_spool_replay_pop(sp, 0);
    }
    return -ENOENT;
}

void agt_spool_replay_pop(struct agt_spool *sp, int delivered)
{
    if (!sp || sp->replay_next >= sp->n_replay)
        return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", sp->rdir, sp->replay[sp->replay_next]);
    unlink(path);
    free(sp->replay[sp->replay_next]);
    sp->replay[sp->replay_next++] = NULL;
    if (delivered)
        sp->replayed++;
    else
        sp->stale++;
    if (sp->replay_next == sp->n_replay)
        rmdir(sp->rdir);
}

int agt_spool_drop(struct agt_spool *sp, uint64_t seq)
{
    if (!sp || !sp->n || at(sp, 0)->seq != seq)
        return -ENOENT;
    if (sp->pinned == seq)
        sp->pinned = 0;
    drop_head(sp);
    count_lost(sp);
    return 0;
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
                                   .stale = sp->stale,
                                   .replay_left = sp->n_replay - sp->replay_next,
                                   .replayed = sp->replayed};
}
