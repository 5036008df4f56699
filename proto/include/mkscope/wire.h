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
/* Job names: [A-Za-z0-9_.-]{1,64}, as the control block names them. */
#define MKS_WIRE_MAX_JOB 64u
/* Hook ids on the wire must be below this (MKS_EV_COUNT of hook ABI v1). */
#define MKS_WIRE_HOOK_LIMIT 11u

#define MKS_WIRE_KEY_BYTES 32u /* crypto_auth_KEYBYTES */
#define MKS_WIRE_MAC_BYTES 32u /* crypto_auth_BYTES */

typedef Mkscope__V1__Envelope mks_envelope;

/* A shared MAC key; NULL key pointers everywhere mean "no MAC". */
struct mks_wire_key {
    uint8_t bytes[MKS_WIRE_KEY_BYTES];
};

/* Read a key file: exactly 32 raw bytes, or 64 hex digits (a trailing newline
 * allowed).  The file must not be readable by group or others. */
int mks_wire_key_load(const char *path, struct mks_wire_key *key, char *err, size_t errlen);

/* Initialise an envelope for sending: wire_version, job, rank, seq.  The body
 * is then set by the caller (env->body_case and the union member). */
void mks_wire_init(mks_envelope *env, const char *job, uint32_t rank, uint64_t seq);

/* Validate a decoded or about-to-be-encoded envelope. */
int mks_wire_validate(const mks_envelope *env, char *err, size_t errlen);

/* Validate, encode and (with a key) append the MAC.  *buf_p is malloc()ed,
 * the caller frees it.  env->mac must be empty. */
int mks_wire_encode(const mks_envelope *env, const struct mks_wire_key *key, uint8_t **buf_p,
                    size_t *len_p, char *err, size_t errlen);

/* Decode and validate.  With a key, the envelope must carry a valid MAC;
 * without one, a MAC present is ignored.  Free the result with
 * mks_wire_free(). */
int mks_wire_decode(const void *buf, size_t len, const struct mks_wire_key *key,
                    mks_envelope **env_p, char *err, size_t errlen);
void mks_wire_free(mks_envelope *env); /* accepts NULL */

/* Name of a body case ("register", "epoch_summary", ...), "none" or "?". */
const char *mks_wire_body_name(int body_case);

/* A TaskSchema as the runtime publishes it (serialized, no envelope). */
int mks_wire_schema_decode(const void *buf, size_t len, Mkscope__V1__TaskSchema **schema_p,
                           char *err, size_t errlen);
void mks_wire_schema_free(Mkscope__V1__TaskSchema *schema); /* accepts NULL */

/* Validate any generated message against the generic bounds (strings,
 * repeated counts, bytes) and the per-message rules above. */
int mks_wire_validate_message(const ProtobufCMessage *msg, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_WIRE_H */
