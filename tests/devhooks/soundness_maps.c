/*
 * The map implementation (devhooks/src/maps.c) with its device-side entry
 * points renamed, for the soundness fuzzer: the VM's helper calls land in the
 * fuzzer's wrappers (soundness_fuzz.c), which check the arguments against the
 * guard zones, open the map's bank to the real code and close it again.
 */
#define mksi_map_lookup         fz_real_map_lookup
#define mksi_map_update         fz_real_map_update
#define mksi_map_delete         fz_real_map_delete
#define mksi_map_hist_add       fz_real_map_hist_add
#define mksi_map_ringbuf_output fz_real_map_ringbuf_output
#include "../../devhooks/src/maps.c"
