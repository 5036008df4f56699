/*
 * Random probe texts from the probe grammar (docs/query.md), for the
 * soundness fuzzer (every compiled probe must verify and run within its
 * cost) and for test_probe (every compiled probe must compute what the
 * reference model does).  Fields, events and values are drawn so that many
 * texts parse and compile; the rest are refused with an error, which the
 * callers count and skip.
 */
#ifndef MKS_TEST_PROBE_GEN_H
#define MKS_TEST_PROBE_GEN_H

#include <stddef.h>
#include <stdint.h>

/* A probe text for seed into buf (always NUL-terminated). */
void mks_test_probe_text(uint64_t seed, char *buf, size_t len);

#endif
