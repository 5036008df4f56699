/*
 * Perfetto's native trace format (a protobuf `Trace` of `TracePacket`s with
 * TrackDescriptor and TrackEvent), written from the Chrome JSON trace that
 * mks_trace_build() makes, so both formats show the same slices and arrows.
 */
#ifndef MKS_COLLECTOR_PERFETTO_H
#define MKS_COLLECTOR_PERFETTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Encode `chrome` ({"traceEvents": [...]}, "X" slices, "s"/"f" flow ends,
 * "M" names) as a Perfetto protobuf trace: one process track per rank (pid
 * = rank + 1, named "rank R"), a child track per worker ("worker W"),
 * SLICE_BEGIN/SLICE_END per slice (a slice that overlaps its enclosing one
 * without nesting is clipped to it: a track's slices must nest), and an
 * INSTANT per flow end carrying flow_ids (the release) or
 * terminating_flow_ids (the wait's end).  *buf_p is malloc()ed.  Returns 0,
 * -EINVAL for input that is not such a trace, -ENOMEM. */
int mks_trace_perfetto(const json_t *chrome, uint8_t **buf_p, size_t *len_p);

#endif
