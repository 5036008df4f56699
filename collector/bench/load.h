/*
 * mkscope-load: a load generator for one collector (docs/PERF.md, "load").
 *
 * A recording holds envelopes a real agent sent (registrations, heartbeats,
 * epoch summaries of a CPU bench run), as `mkscope-load record` received
 * them: the magic line below, then for each envelope a 4-byte little-endian
 * length and the encoded envelope (without a MAC).  `mkscope-load run`
 * replays them as many simulated agents, each with its own job, rank,
 * incarnation, seq, epoch, steps and times.
 */
#ifndef MKS_LOAD_H
#define MKS_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/wire.h"

#define LOAD_REC_MAGIC "mkscope-load recording v1\n"

struct load_rec {
    uint8_t **msg;
    size_t *len;
    size_t n, cap;
};

/* Read a recording; 0, or a negative errno with one line in err. */
int load_rec_read(const char *path, struct load_rec *rec, char *err, size_t errlen);
/* Append one envelope to an open recording file (magic already written). */
int load_rec_append(FILE *f, const void *buf, size_t len);
void load_rec_free(struct load_rec *rec);

/* `mkscope-load record|run|info ...`: exit codes. */
int load_record_main(int argc, char **argv);
int load_run_main(int argc, char **argv);
int load_info_main(int argc, char **argv);

uint64_t load_mono_ns(void);
uint64_t load_real_ns(void);

#endif /* MKS_LOAD_H */
