/*
 * mkscope wire format: encode, decode and validate the mkscope.v1 Envelope
 * that every agent, the collector and the CLI exchange (docs/wire.md).
 *
 * The message structs are the ones protoc-c generates from proto/mkscope.proto
 * (Mkscope__V1__Envelope and friends, declared in mkscope.pb-c.h, a build
 * output).  This header adds what the generated code does not do:
 *   - validation of everything a peer could get wrong or forge: wire version,
 *     a body present, string length and UTF-8, repeated-field and byte-field
 *     bounds, enum ranges, histogram bucket count, job name syntax;
 *   - an optional MAC (libsodium crypto_auth, HMAC-SHA512-256) over the
 *     encoded envelope when a shared key is configured;
 *   - one-line error messages and negative errno returns.
 * Decoding never trusts its input: garbage, truncation and bit flips yield
 * -EBADMSG (or -EPROTO / -EACCES / -E2BIG) with a reason, never a crash.
 */
#ifndef MKSCOPE_WIRE_H
#define MKSCOPE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MKS_WIRE_VERSION 1u

/* Largest encoded envelope accepted: a summary of a large epoch with map
 * dumps fits well below; anything larger is a bug or an attack. */
#define MKS_WIRE_MAX_MSG (16u << 20)
/* Default bound of a string field (names, hosts, reasons). */
#define MKS_WIRE_MAX_STR 4096u
/* Bound of the long text fields (CliReply.json, verifier logs, CLI args). */
#define MKS_WIRE_MAX_TEXT (MKS_WIRE_MAX_MSG - 1024u)
/* Default bound of a bytes field (map keys/values, UCX address). */
#define MKS_WIRE_MAX_BYTES 4096u
/* Bound of a BPF object or CLI blob. */
#define MKS_WIRE_MAX_OBJECT (8u << 20)
/* Bound of the element count of any repeated field. */
#define MKS_WIRE_MAX_REPEATED (1u << 20)
/* Histogram buckets: as struct mks_hist. */
#define MKS_WIRE_MAX_HIST_BUCKETS 64u
/* Job names: a letter, digit or '_', then up to 63 of [A-Za-z0-9_.-].  The
 * control block, spool directories and trace files are named after the job,
 * so no name may be "." or "..", or start with '-' (an option to a shell
 * command).  Agent, collector and CLI all check it with mks_wire_job_valid. */
#define MKS_WIRE_MAX_JOB 64u
#define MKS_WIRE_JOB_GRAMMAR "[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}"
/* Ranks of a job. */
#define MKS_WIRE_MAX_RANKS (1u << 20)
/* Hook ids on the wire must be below this (MKS_EV_COUNT of hook ABI v1). */
#define MKS_WIRE_HOOK_LIMIT 11u

/* Counts and durations (count, sum, eligible, busy_ns, ...) above this are
 * refused: no epoch of a real rank comes near (2^53 ns is 104 days), a value
 * this size is exact in a double (JSON readers) and a sum of many of them
 * stays far from 2^63 in the store.  Times (t_*, *_time_ns, sent_ns) may be
 * up to MKS_WIRE_MAX_TIME (year 2116 in ns since 1970), never negative once
 * stored as SQLite's signed integers.  Ids (comm_gen, prog_gen, nonce, ...)
 * use all 64 bits. */
#define MKS_WIRE_MAX_COUNT (1ull << 53)
#define MKS_WIRE_MAX_TIME  (1ull << 62)
/* Memory protobuf-c may allocate to decode one message: a message of n bytes
 * gets at most MKS_WIRE_DECODE_FACTOR * n + 1 MiB, and never more than
 * MKS_WIRE_MAX_DECODED.  Real summaries need about 5x their size; a hostile
 * message of empty sub-messages would need 40x (1.5 GB for 16 MiB),
 * capped here at 128 MiB. */
#define MKS_WIRE_DECODE_FACTOR 16u
#define MKS_WIRE_MAX_DECODED   (128u << 20)

#define MKS_WIRE_KEY_BYTES 32u /* crypto_auth_KEYBYTES */
#define MKS_WIRE_MAC_BYTES 32u /* crypto_auth_BYTES */

typedef Mkscope__V1__Envelope mks_envelope;

/* A shared MAC key; NULL key pointers everywhere mean "no MAC". */
struct mks_wire_key {
    uint8_t bytes[MKS_WIRE_KEY_BYTES];
};

/* The one answer a sender gets whose message did not authenticate (a key is
 * configured and the MAC is missing or wrong, or the message was refused
 * before its MAC could be checked): nothing about what was wrong with it. */
#define MKS_WIRE_REFUSAL "message refused: not authenticated"

/* Accept masks: which bodies a receiver takes, one bit per body case.  A
 * message with another body is refused before it is decoded. */
#define MKS_WIRE_BODY(c) (1u << MKSCOPE__V1__ENVELOPE__BODY_##c)
#define MKS_WIRE_ACCEPT_ANY 0u
/* collector ingest socket: what agents send */
#define MKS_WIRE_ACCEPT_INGEST                                                                     \
    (MKS_WIRE_BODY(REGISTER) | MKS_WIRE_BODY(HEARTBEAT) | MKS_WIRE_BODY(EPOCH_SUMMARY) |           \
     MKS_WIRE_BODY(COMMAND_REPLY) | MKS_WIRE_BODY(RAW_EVENT_BATCH))
/* agent's link: the collector's answers */
#define MKS_WIRE_ACCEPT_AGENT_LINK (MKS_WIRE_BODY(REGISTER_ACK) | MKS_WIRE_BODY(ACK))

/* Bit of a body case in an accept mask (0 for an unknown case). */
uint32_t mks_wire_body_bit(int body_case);

/* Make s one printable line in place: every control character (newline,
 * escape, ...) becomes '?'.  For messages that quote what a peer or a user
 * gave.  Returns s. */
char *mks_wire_one_line(char *s);

/* Does job follow MKS_WIRE_JOB_GRAMMAR? */
int mks_wire_job_valid(const char *job);

/* Program (and built-in monitor) names: what an agent attaches under. */
#define MKS_WIRE_MAX_PROG_NAME 48u
#define MKS_WIRE_PROG_GRAMMAR "[A-Za-z0-9_.-]{1,48}"
int mks_wire_prog_name_valid(const char *name);

/* Name of hook id h of hook ABI v1 ("task_end"), NULL when out of range;
 * and the id of a name or decimal number ("task_end", "3"), -1 if none. */
const char *mks_wire_hook_name(uint32_t h);
int mks_wire_hook_parse(const char *s);

/* Read a key file: exactly 32 raw bytes, or 64 hex digits (a trailing newline
 * allowed).  The file must not be readable by group or others. */
int mks_wire_key_load(const char *path, struct mks_wire_key *key, char *err, size_t errlen);

/* Initialise an envelope for sending: wire_version, job, rank, seq, and its
 * freshness: a random nonce and sent_ns, the sender's CLOCK_REALTIME.  The
 * body is then set by the caller (env->body_case and the union member); a
 * reply sets reply_to to the request's nonce. */
void mks_wire_init(mks_envelope *env, const char *job, uint32_t rank, uint64_t seq);

/* Validate a decoded or about-to-be-encoded envelope. */
int mks_wire_validate(const mks_envelope *env, char *err, size_t errlen);

/* Validate, encode and (with a key) append the MAC.  *buf_p is malloc()ed,
 * the caller frees it.  env->mac must be empty. */
int mks_wire_encode(const mks_envelope *env, const struct mks_wire_key *key, uint8_t **buf_p,
                    size_t *len_p, char *err, size_t errlen);

/* Decode and validate a message for a receiver that takes the bodies in
 * accept (MKS_WIRE_ACCEPT_*; 0: any).  In order, each step before anything
 * costlier:
 *   1. the size: not empty, at most MKS_WIRE_MAX_MSG and the body's own
 *      limit (a heartbeat is small, a summary may be large);
 *   2. the body, read from the envelope's outer fields without decoding
 *      anything: one accept takes;
 *   3. with a key, the MAC over the raw bytes;
 *   4. the decode, with at most MKS_WIRE_DECODE_FACTOR x size of memory;
 *   5. validation of every field.
 * With a key, a failure of 1-3 returns -EACCES: the sender is not
 * authenticated and is answered MKS_WIRE_REFUSAL only; err still says what
 * was wrong, for the receiver's log.  Otherwise a negative errno with one
 * line in err (-E2BIG, -EPROTO, -EBADMSG, -ENOMEM).  Without a key, a MAC
 * present is ignored.  Free the result with mks_wire_free(). */
int mks_wire_decode_for(const void *buf, size_t len, uint32_t accept,
                        const struct mks_wire_key *key, mks_envelope **env_p, char *err,
                        size_t errlen);
/* mks_wire_decode_for with any body accepted. */
int mks_wire_decode(const void *buf, size_t len, const struct mks_wire_key *key,
                    mks_envelope **env_p, char *err, size_t errlen);
/* The nonce of an encoded envelope (what its reply must name in
 * reply_to), read from its outer fields; 0 when it has none or the bytes
 * are not an envelope.  For a request kept encoded (an agent's spool). */
uint64_t mks_wire_nonce_of(const void *buf, size_t len);
/* Largest encoded envelope accepted with this body. */
size_t mks_wire_body_limit(int body_case);
void mks_wire_free(mks_envelope *env); /* accepts NULL */

/* Name of a body case ("register", "epoch_summary", ...), "none" or "?". */
const char *mks_wire_body_name(int body_case);

/* A TaskSchema as the runtime publishes it (serialized, no envelope). */
int mks_wire_schema_decode(const void *buf, size_t len, Mkscope__V1__TaskSchema **schema_p,
                           char *err, size_t errlen);
void mks_wire_schema_free(Mkscope__V1__TaskSchema *schema); /* accepts NULL */

/* The compact form of an EpochSummary (docs/wire.md "Compact summaries"),
 * for a collector whose RegisterAck says compact_summaries.  compact
 * rewrites es in place: it sorts its remote waits and releases by comm_gen,
 * moves their comm_gen into comm_gen_delta and every row's device times
 * into its dev_times, which point into words (n_words at least
 * mks_wire_summary_compact_words(es); they must live until es is encoded).
 * A summary without device times, or with one above MKS_WIRE_MAX_TIME, is
 * left plain.  -EINVAL for a summary in the compact form already.
 * mks_wire_decode_for expands a decoded one (expand: back to the plain
 * form, exactly; -EBADMSG with a line in err for a malformed one). */
size_t mks_wire_summary_compact_words(const Mkscope__V1__EpochSummary *es);
int mks_wire_summary_compact(Mkscope__V1__EpochSummary *es, uint64_t *words, size_t n_words);
int mks_wire_summary_expand(Mkscope__V1__EpochSummary *es, char *err, size_t errlen);

/* Validate any generated message against the generic bounds (strings,
 * repeated counts, bytes) and the per-message rules above. */
int mks_wire_validate_message(const ProtobufCMessage *msg, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_WIRE_H */
