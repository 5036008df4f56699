/*
 * Map keys and values decoded along their BTF types (`mkscope maps`).
 *
 * Private to the collector; a header of its own so that the decoder, fed
 * by agents' dump bytes and users' objects, has a fuzz target.
 */
#ifndef MKSCOPE_COLLECTOR_MAPS_DECODE_H
#define MKSCOPE_COLLECTOR_MAPS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct btf;

/* The len bytes at data as a value of BTF type `type` of b: integers,
 * enums, floats, pointers, arrays (char arrays as strings), structs and
 * unions by member, sections by variable; typedefs and qualifiers looked
 * through; nesting bounded.  Every read is checked against len.  Hex
 * ("0x...") when b is NULL, type is 0, or the bytes do not fit the type;
 * then the first reason goes into why (when why is still empty).  Out of
 * memory, NULL or a JSON null. */
json_t *mks_maps_decode(const struct btf *b, uint32_t type, const void *data, size_t len,
                        char *why, size_t why_len);

#endif /* MKSCOPE_COLLECTOR_MAPS_DECODE_H */
