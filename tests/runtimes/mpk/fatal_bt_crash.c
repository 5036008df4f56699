/* A program that dies for mpk_probe_test.sh: "segv" writes through a null
 * pointer inside a named function, "abort" aborts; fatal_bt, preloaded, must
 * name the function and keep the signal's exit status. */
#include <stdlib.h>
#include <string.h>

void mks_test_crash_here(int volatile *p);

__attribute__((noinline)) void mks_test_crash_here(int volatile *p)
{
	*p = 1;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "abort") == 0)
		abort();
	mks_test_crash_here((int volatile *)(argc > 2 ? argv : NULL));
	return 0;
}
