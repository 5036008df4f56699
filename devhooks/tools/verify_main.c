/* mkscope-verify: `mkscope verify` as a program of its own. */
#include <stdio.h>
#include <string.h>

#include "mkscope/verifier.h"

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("mkscope-verify %s\n", MKS_VERSION);
        return 0;
    }
    return mks_cmd_verify(argc, argv, stdout, stderr);
}
