/* LD_PRELOAD helper of the MPK GPU runner (runtimes/mpk/gpu/run.sh): the
 * lent GPU machines have no gdb, and Python's faulthandler names only Python
 * frames.  On SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT this library prints
 * one line with the signal, the faulting address and the interrupted program
 * counter, then the native backtrace (object(symbol+offset)[address] per
 * frame, as backtrace_symbols_fd writes them, no allocation) to stderr, and
 * lets the signal take its default action, so the exit status stays
 * 128 + signal.
 *
 * Python's faulthandler, enabled after this library's constructor, takes the
 * signals over; after its own dump it restores the handler it found (this one)
 * and raises the signal again.  The backtrace is then taken inside
 * faulthandler's handler: the frames below the second signal trampoline
 * (__restore_rt) are the faulting ones, and the program counter on the first
 * line is that of the raise, not of the fault. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

enum { FATAL_BT_FRAMES = 128, FATAL_BT_ALT_STACK = 64 * 1024 };

static char fatal_bt_stack[FATAL_BT_ALT_STACK];

static void fatal_bt_put(char const *s)
{
	size_t n = strlen(s);
	while (n > 0) {
		ssize_t w = write(STDERR_FILENO, s, n);
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

static void fatal_bt_put_hex(uintptr_t v)
{
	char b[2 + 2 * sizeof v + 1];
	b[0] = '0';
	b[1] = 'x';
	for (size_t i = 0; i < 2 * sizeof v; i++)
		b[2 + i] = "0123456789abcdef"[(v >> (4 * (2 * sizeof v - 1 - i))) & 15];
	b[sizeof b - 1] = '\0';
	fatal_bt_put(b);
}

static char const *fatal_bt_name(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGBUS: return "SIGBUS";
	case SIGILL: return "SIGILL";
	case SIGFPE: return "SIGFPE";
	case SIGABRT: return "SIGABRT";
	default: return "signal";
	}
}

static void fatal_bt_handler(int sig, siginfo_t *si, void *ucv)
{
	void *frames[FATAL_BT_FRAMES];
	uintptr_t pc = 0;
#if defined(__x86_64__)
	pc = (uintptr_t)((ucontext_t *)ucv)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	pc = (uintptr_t)((ucontext_t *)ucv)->uc_mcontext.pc;
#else
	(void)ucv;
#endif
	fatal_bt_put("mkscope fatal_bt: ");
	fatal_bt_put(fatal_bt_name(sig));
	fatal_bt_put(" at address ");
	fatal_bt_put_hex((uintptr_t)si->si_addr);
	fatal_bt_put(", pc ");
	fatal_bt_put_hex(pc);
	if (si->si_code <= 0) /* SI_USER, SI_TKILL */
		fatal_bt_put(" (raised by the process: abort(), or Python's faulthandler passing on"
			     " a fault, whose frames follow its own)");
	fatal_bt_put("; native backtrace:\n");
	int n = backtrace(frames, FATAL_BT_FRAMES);
	backtrace_symbols_fd(frames, n, STDERR_FILENO);
	fatal_bt_put("mkscope fatal_bt: end of backtrace\n");
	/* SA_RESETHAND put the default action back: the signal, raised again,
	 * ends the process as it would have without this library */
	raise(sig);
}

__attribute__((constructor)) static void fatal_bt_install(void)
{
	/* the first backtrace() loads libgcc_s: done here, not in the handler */
	void *warm[1];
	backtrace(warm, 1);
	stack_t ss = { .ss_sp = fatal_bt_stack, .ss_size = sizeof fatal_bt_stack };
	sigaltstack(&ss, NULL); /* a stack overflow still gets its backtrace */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = fatal_bt_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	int const sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
}
