/* Wait-chain stitching and diagnosis (in progress). */
#include "serve.h"

int mks_serve_diagnose(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                       json_t **out, char *err, size_t errlen)
{
    (void)env, (void)req, (void)out;
    return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "diagnose: not available in this build");
}
