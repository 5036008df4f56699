/*
 * Fuzz target: every decoder of the wire library, as the agent and the
 * collector call them.  The first input byte picks the receiver:
 *   bit 0      a key is configured
 *   bit 1      append a correct MAC to the rest (so that the fuzzer gets
 *              past the MAC into the decoder; without it, into the refusal)
 *   bits 2..4  accept mask: any, ingest socket, agent link, CLI request,
 *              CLI reply, survey request, survey reply, raw events (UCX)
 * the rest is the message.  Whatever decodes must validate again, re-encode,
 * and decode to the same body; it also goes through a replay cache.  The
 * same bytes are tried as a task schema (what a runtime publishes in its
 * control block).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "mkscope/fresh.h"
#include "mkscope/wire.h"

static const uint32_t masks[8] = {
    MKS_WIRE_ACCEPT_ANY,
    MKS_WIRE_ACCEPT_INGEST,
    MKS_WIRE_ACCEPT_AGENT_LINK,
    MKS_WIRE_BODY(CLI_REQUEST),
    MKS_WIRE_BODY(CLI_REPLY),
    MKS_WIRE_BODY(SURVEY_REQUEST),
    MKS_WIRE_BODY(SURVEY_REPLY),
    MKS_WIRE_BODY(RAW_EVENT_BATCH),
};

static struct mks_fresh *fresh;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!fresh) {
        struct mks_fresh_opts o = {.sz = sizeof(o), .capacity = 4096, .require = 1};
        if (mks_fresh_create(&o, &fresh))
            abort();
    }
    struct mks_wire_key key;
    memset(key.bytes, 0xa5, sizeof(key.bytes));
    uint8_t mode = data[0];
    const struct mks_wire_key *k = mode & 1 ? &key : NULL;
    data++, size--;
    uint8_t *msg = malloc(size + 35 + 1);
    if (!msg)
        return 0;
    memcpy(msg, data, size);
    size_t len = size;
    if (mode & 2) {
        static const uint8_t head[3] = {0xa2, 0x06, 0x20};
        memcpy(msg + len, head, 3);
        if (sodium_init() < 0)
            abort();
        crypto_auth(msg + len + 3, msg, len, key.bytes);
        len += 35;
    }
    char err[512];
    mks_envelope *env = NULL;
    int rc = mks_wire_decode_for(msg, len, masks[(mode >> 2) & 7], k, &env, err, sizeof(err));
    if (rc == 0) {
        if (mks_wire_validate(env, err, sizeof(err)))
            abort(); /* decoded but not valid */
        mks_fresh_check_env(fresh, env, env->sent_ns, err, sizeof(err));
        ProtobufCBinaryData mac = env->mac;
        env->mac.len = 0;
        uint8_t *out = NULL;
        size_t out_len = 0;
        if (mks_wire_encode(env, k, &out, &out_len, err, sizeof(err)))
            abort(); /* valid but cannot be sent again */
        env->mac = mac;
        mks_envelope *again = NULL;
        if (mks_wire_decode(out, out_len, k, &again, err, sizeof(err)) ||
            again->body_case != env->body_case)
            abort(); /* what we encode, we must decode */
        mks_wire_free(again);
        free(out);
        mks_wire_free(env);
    } else if (env || !err[0]) {
        abort(); /* an error leaves nothing behind and says why */
    }
    Mkscope__V1__TaskSchema *schema = NULL;
    if (mks_wire_schema_decode(data, size, &schema, err, sizeof(err)) == 0)
        mks_wire_schema_free(schema);
    free(msg);
    return 0;
}
