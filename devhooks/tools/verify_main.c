/* mkscope-verify: `mkscope verify` as a program of its own. */
#include <stdio.h>

#include "mkscope/verifier.h"

int main(int argc, char **argv)
{
    return mks_cmd_verify(argc, argv, stdout, stderr);
}
