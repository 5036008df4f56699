/*
 * main() for fuzz targets in builds without libFuzzer (gcc, the default and
 * sanitizer builds): every file named on the command line, or found in a
 * directory named there, is fed to LLVMFuzzerTestOneInput once as it is and
 * MUTATIONS times changed (a byte flipped, cut short, a byte inserted, a
 * stretch repeated), from a fixed seed so a failure repeats.  This keeps
 * every committed corpus input a regression test and gives the sanitizer
 * build some of the fuzzer's reach; finding new inputs is libFuzzer's job
 * (-DMKS_FUZZ=ON, cmake/MksFuzz.cmake).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#define MUTATIONS 64
/* Corpus inputs are small; a larger file is a mistake in the corpus. */
#define MAX_INPUT_BYTES (1u << 20)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* The input being run, written out if it crashes the target, so that a
 * failure found here can be run again on its own (and kept in the corpus). */
static const uint8_t *cur;
static size_t cur_len;

static void on_crash(int sig)
{
    static const char path[] = "fuzz-crash-input";
    /* only while an input runs (not, say, the leak check at exit) */
    int fd = cur ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    if (fd >= 0) {
        ssize_t w = write(fd, cur, cur_len);
        (void)w;
        close(fd);
        static const char msg[] = "fuzz: the failing input is in ./fuzz-crash-input\n";
        w = write(2, msg, sizeof(msg) - 1);
        (void)w;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_one(const uint8_t *data, size_t len)
{
    cur = data, cur_len = len;
    LLVMFuzzerTestOneInput(data, len);
    cur = NULL;
}

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int run_file(const char *path, size_t *runs)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = malloc(2 * MAX_INPUT_BYTES + 2);
    if (!buf) {
        fclose(f);
        return -1;
    }
    size_t n = fread(buf, 1, MAX_INPUT_BYTES + 1, f);
    fclose(f);
    if (n > MAX_INPUT_BYTES) {
        fprintf(stderr, "fuzz: %s is larger than %u bytes\n", path, MAX_INPUT_BYTES);
        free(buf);
        return -1;
    }
    /* Each input is copied into a buffer of its exact size, so ASan sees a
     * read past its end. */
    uint8_t *in = malloc(n ? n : 1);
    memcpy(in, buf, n);
    run_one(in, n);
    free(in);
    (*runs)++;
    for (int m = 0; m < MUTATIONS; m++) {
        size_t len = n;
        uint8_t *mut = malloc(2 * MAX_INPUT_BYTES + 2);
        memcpy(mut, buf, n);
        switch (next() % 4) {
        case 0:
            if (len)
                mut[next() % len] ^= (uint8_t)(1u << (next() % 8));
            break;
        case 1:
            len = len ? (size_t)(next() % len) : 0;
            break;
        case 2: {
            size_t at = len ? (size_t)(next() % (len + 1)) : 0;
            memmove(mut + at + 1, mut + at, len - at);
            mut[at] = (uint8_t)next();
            len++;
            break;
        }
        default:
            if (len) {
                size_t at = (size_t)(next() % len), k = 1 + (size_t)(next() % (len - at));
                memmove(mut + at + 2 * k, mut + at + k, len - at - k);
                memcpy(mut + at + k, mut + at, k);
                len += k;
            }
            break;
        }
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, mut, len);
        free(mut);
        run_one(exact, len);
        free(exact);
        (*runs)++;
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    signal(SIGABRT, on_crash);
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGFPE, on_crash);
    size_t runs = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i], &runs))
                return 1;
            files++;
            continue;
        }
        struct dirent **ents;
        int n = scandir(argv[i], &ents, NULL, alphasort);
        if (n < 0) {
            fprintf(stderr, "fuzz: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], ents[k]->d_name);
            if (ents[k]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(path, &runs))
                    return 1;
                files++;
            }
            free(ents[k]);
        }
        free(ents);
    }
    if (!files) {
        fprintf(stderr, "fuzz: no input files (give corpus files or directories)\n");
        return 1;
    }
    printf("fuzz: %zu inputs from %zu files, no failure\n", runs, files);
    return 0;
}
