/*
 * regression.c -- the fuzz regression driver (a plain main(), like zstd's): no libFuzzer needed.
 *
 *   fuzz_regression [--seconds N] [--seed S] [--target NAME] [--max-len BYTES]
 *                   [--current PATH] [--crash-dir DIR] DIR_OR_FILE...
 *
 * 1. Replay: every file under the given directories (recursively, sorted) is fed to every target
 *    of fuzz_targets.c, plus a few valid checkpoint states made on the spot.
 * 2. Mutation: for N seconds (default 0), a deterministic random-mutation fuzzer (fixed seed:
 *    bit flips, byte changes, inserts of interesting bytes and tokens such as | : # \n \r digits
 *    . e - and a BOM, deletions, duplications, number swaps, line edits, splices of two corpus
 *    entries) feeds every target. An input whose outcome (status codes and message shapes, see
 *    ctf_fuzz_events) was never seen before joins the in-memory corpus: cheap feedback without
 *    coverage instrumentation.
 *
 * Before each run the input is written to the current-input file (default
 * /tmp/ctfio_fuzz_current, printed on startup), so that when a sanitizer kills the process the
 * reproducer is already on disk. On a crash the input is also copied to the crash directory
 * (default: DIR/crashes for the first directory given, i.e. tests/fuzz/corpus/crashes), named
 * crash-TARGET-HASH; files there are replayed by every later run. Reproduce one with
 *   build/asan/fuzz_regression --target TARGET tests/fuzz/corpus/crashes/crash-TARGET-HASH
 *
 * Prints a summary and, last, "N passed, N failed" (N counts target runs). Exit status 1 only on
 * a detected failure (a target returning non-zero); a crash is a crash.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define CTF_MIN_(a, b) ((a) < (b) ? (a) : (b))

#include "fuzz.h"

/*======================================================================
 * The corpus
 *====================================================================*/

typedef struct input {
    uint8_t *data;
    size_t size;
} input;

static input *corpus;
static size_t corpus_n, corpus_cap;
static size_t max_len = 65536;
#define CORPUS_MAX 8192

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "fuzz_regression: out of memory\n");
        exit(2);
    }
    return q;
}

static void corpus_add(const uint8_t *data, size_t size)
{
    if (size > max_len) size = max_len;
    if (corpus_n == corpus_cap) {
        corpus_cap = corpus_cap ? corpus_cap * 2 : 256;
        corpus = xrealloc(corpus, corpus_cap * sizeof *corpus);
    }
    uint8_t *d = xrealloc(NULL, size);
    if (size) memcpy(d, data, size);
    corpus[corpus_n++] = (input){d, size};
}

static char **paths;
static size_t paths_n, paths_cap;

static void add_path(const char *p)
{
    if (paths_n == paths_cap) {
        paths_cap = paths_cap ? paths_cap * 2 : 256;
        paths = xrealloc(paths, paths_cap * sizeof *paths);
    }
    paths[paths_n++] = strdup(p);
}

static void collect(const char *path, bool top)
{
    struct stat st;
    if ((top ? stat(path, &st) : lstat(path, &st)) != 0) { /* no symlinks below the top */
        fprintf(stderr, "fuzz_regression: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (S_ISREG(st.st_mode)) {
        add_path(path);
        return;
    }
    if (!S_ISDIR(st.st_mode)) return;
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        collect(sub, false);
    }
    closedir(d);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool load_file(const char *path, input *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            buf = xrealloc(buf, cap);
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        if (!k) break;
        n += k;
    }
    fclose(f);
    out->data = buf;
    out->size = n;
    return true;
}

/*======================================================================
 * Running one input, with the reproducer on disk first
 *====================================================================*/

static const char *current_path = "/tmp/ctfio_fuzz_current";
static char crash_dir[4096];
static int current_fd = -1;
static const uint8_t *volatile cur_data;
static volatile size_t cur_size;
static const char *volatile cur_target;
static unsigned long long runs, failures;

/* Async-signal-safe: writes the current input to crash_dir/crash-TARGET-HASH. */
static void save_crash(void)
{
    const uint8_t *d = cur_data;
    size_t n = cur_size;
    const char *t = cur_target;
    if (!t || !crash_dir[0]) return;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 0x100000001b3ull;
    char name[4096 + 64];
    size_t k = 0;
    for (const char *p = crash_dir; *p && k < 4096; p++) name[k++] = *p;
    const char *mid = "/crash-";
    for (const char *p = mid; *p; p++) name[k++] = *p;
    for (const char *p = t; *p && k < 4096 + 30; p++) name[k++] = *p;
    name[k++] = '-';
    for (int i = 15; i >= 0; i--) name[k++] = "0123456789abcdef"[(h >> (4 * i)) & 15];
    name[k] = 0;
    mkdir(crash_dir, 0755);
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    while (n > 0) {
        ssize_t w = write(fd, d, n);
        if (w <= 0) break;
        d += w;
        n -= (size_t)w;
    }
    close(fd);
    const char *msg = "\nfuzz_regression: crashing input saved as ";
    if (write(2, msg, strlen(msg)) < 0 || write(2, name, strlen(name)) < 0 ||
        write(2, "\n", 1) < 0) {
    }
}

static void on_signal(int sig)
{
    save_crash();
    signal(sig, SIG_DFL);
    raise(sig);
}

#ifdef FUZZ_ASAN
static void on_sanitizer_death(void) { save_crash(); }
#endif

/* UBSan reports go through its own runtime (GCC links libubsan apart from libasan), whose
 * death callback we cannot set: make it abort, so that the SIGABRT handler saves the input. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "abort_on_error=1:print_stacktrace=1"; }

static void install_handlers(void)
{
    static char altstack[1 << 16];
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGABRT, &sa, NULL); /* our own checks, assert() */
#ifdef FUZZ_ASAN
    __sanitizer_set_death_callback(on_sanitizer_death);
#else
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);
    sigaction(SIGILL, &sa, NULL);
#endif
}

static void write_current(const uint8_t *data, size_t size)
{
    if (current_fd < 0) return;
    size_t off = 0;
    while (off < size) {
        ssize_t w = pwrite(current_fd, data + off, size - off, (off_t)off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    if (ftruncate(current_fd, (off_t)size) != 0) {
    }
}

static const ctf_fuzz_target *only_target;

/* Runs data through every target (or the chosen one). @return : whether some outcome was new. */
static uint64_t *seen;
static size_t seen_n, seen_cap;

static bool seen_add(uint64_t h)
{
    if (h == 0) h = 1;
    if ((seen_n + 1) * 2 > seen_cap) {
        size_t ncap = seen_cap ? seen_cap * 2 : 4096;
        uint64_t *ns = calloc(ncap, sizeof *ns);
        if (!ns) exit(2);
        for (size_t i = 0; i < seen_cap; i++) {
            if (!seen[i]) continue;
            size_t j = (size_t)(seen[i] * 0x9E3779B97F4A7C15ull >> 17) & (ncap - 1);
            while (ns[j]) j = (j + 1) & (ncap - 1);
            ns[j] = seen[i];
        }
        free(seen);
        seen = ns;
        seen_cap = ncap;
    }
    size_t j = (size_t)(h * 0x9E3779B97F4A7C15ull >> 17) & (seen_cap - 1);
    while (seen[j]) {
        if (seen[j] == h) return false;
        j = (j + 1) & (seen_cap - 1);
    }
    seen[j] = h;
    seen_n++;
    return true;
}

static unsigned long long per_target[16];

static bool run_all(const uint8_t *data, size_t size)
{
    bool fresh = false;
    write_current(data, size);
    cur_data = data;
    cur_size = size;
    for (size_t t = 0; t < ctf_fuzz_num_targets; t++) {
        const ctf_fuzz_target *tg = &ctf_fuzz_targets[t];
        if (only_target && tg != only_target) continue;
        cur_target = tg->name;
        ctf_fuzz_num_events = 0;
        int rc = tg->fn(data, size);
        runs++;
        per_target[t]++;
        if (rc != 0) {
            failures++;
            fprintf(stderr, "FAIL target %s returned %d\n", tg->name, rc);
            save_crash();
        }
        for (size_t e = 0; e < ctf_fuzz_num_events; e++)
            if (seen_add(ctf_fuzz_events[e] ^ (0x1234567ull * (t + 1)))) fresh = true;
    }
    cur_target = NULL;
    return fresh;
}

/*======================================================================
 * Mutations
 *====================================================================*/

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* Tables packed by hand: clang-format would give each string a line. */
/* clang-format off */
static const char *const tokens[] = {
    "|", ":", "#", "\n", "\r\n", "\r", " ", "\t", "0", "1", "2", "5", "9", ".", "e", "E", "-",
    "+", "\xEF\xBB\xBF", "|a ", "|b ", "|c ", "|#", "|# comment |", "\n0 ", "\n1 ", "\n\n",
    "1e308", "1e-320", "3.4e39", "-0", "0:", "7:1.5", "1.", ".5", "1e", "\xFF\xFE", "\x00",
    "\x7f", "$", "$x$", "[", "]", "{", "}", "(", ")", "=", "\"", "'", ";", ",", "nan", "inf",
    "dim", "format", "sparse", "dense", "alias", "input", "reader", "file", "precision",
    "definesMBSize", "true", "false", "randomize", "\"version\": 1", "minibatchSourcePosition",
    "\"sweep\": ", "readerType", "CNTKTextFormatReader", "deserializers", "\\",
};

static const char *const numbers[] = {
    "0", "1", "-1", "2147483647", "2147483648", "4294967295", "4294967296",
    "9223372036854775807", "18446744073709551615", "18446744073709551616",
    "99999999999999999999999", "1e308", "1e309", "4.9e-324", "1e-400", "3.4028235e38",
    "0.000000000000000000000000000000000000000000001", "00000000000000000000000000001",
};
/* clang-format on */

typedef struct buf {
    uint8_t *d;
    size_t n, cap;
} buf;

static void buf_reserve(buf *b, size_t n)
{
    if (n <= b->cap) return;
    size_t c = b->cap ? b->cap : 256;
    while (c < n) c *= 2;
    b->d = xrealloc(b->d, c);
    b->cap = c;
}

static void buf_insert(buf *b, size_t at, const void *src, size_t n)
{
    if (b->n + n > max_len) n = max_len > b->n ? max_len - b->n : 0;
    if (!n) return;
    buf_reserve(b, b->n + n);
    memmove(b->d + at + n, b->d + at, b->n - at);
    memcpy(b->d + at, src, n);
    b->n += n;
}

static void buf_erase(buf *b, size_t at, size_t n)
{
    if (at >= b->n) return;
    if (n > b->n - at) n = b->n - at;
    memmove(b->d + at, b->d + at + n, b->n - at - n);
    b->n -= n;
}

/* Start of the line holding position p, and the end of that line (after its '\n'). */
static void line_at(const buf *b, size_t p, size_t *ls, size_t *le)
{
    size_t s = p, e = p;
    while (s > 0 && b->d[s - 1] != '\n') s--;
    while (e < b->n && b->d[e] != '\n') e++;
    if (e < b->n) e++;
    *ls = s;
    *le = e;
}

static void mutate_once(buf *b)
{
    unsigned op = (unsigned)below(13);
    if (b->n == 0 && op != 11) op = 3; /* only inserts and splices make sense */
    switch (op) {
    case 0: { /* bit flip */
        size_t p = below(b->n);
        b->d[p] ^= (uint8_t)(1u << below(8));
        break;
    }
    case 1: /* random byte */ b->d[below(b->n)] = (uint8_t)rnd(); break;
    case 2: { /* interesting byte */
        static const char ib[] = "|:#\n\r0123456789.e-+ \t$[]=\"";
        b->d[below(b->n)] = (uint8_t)ib[below(sizeof ib - 1)];
        break;
    }
    case 3:
    case 4: { /* insert a token */
        const char *t = tokens[below(sizeof tokens / sizeof tokens[0])];
        size_t len = t[0] ? strlen(t) : 1;
        buf_insert(b, below(b->n + 1), t, len);
        break;
    }
    case 5: { /* delete a few bytes */
        size_t n = 1 + below(below(8) ? 4 : 64);
        buf_erase(b, below(b->n), n);
        break;
    }
    case 6: { /* duplicate a range */
        size_t from = below(b->n), n = 1 + below(CTF_MIN_(b->n - from, (size_t)64));
        uint8_t tmp[64];
        memcpy(tmp, b->d + from, n);
        buf_insert(b, below(b->n + 1), tmp, n);
        break;
    }
    case 7: { /* replace a digit run with an interesting number */
        size_t p = below(b->n), q;
        while (p < b->n && !(b->d[p] >= '0' && b->d[p] <= '9')) p++;
        if (p == b->n) break;
        for (q = p; q < b->n && b->d[q] >= '0' && b->d[q] <= '9'; q++) {
        }
        const char *num = numbers[below(sizeof numbers / sizeof numbers[0])];
        buf_erase(b, p, q - p);
        buf_insert(b, p, num, strlen(num));
        break;
    }
    case 8: { /* duplicate a line */
        size_t ls, le;
        line_at(b, below(b->n), &ls, &le);
        if (le - ls > 4096) break;
        uint8_t *tmp = xrealloc(NULL, le - ls);
        memcpy(tmp, b->d + ls, le - ls);
        size_t at = below(2) ? le : ls;
        buf_insert(b, at, tmp, le - ls);
        free(tmp);
        break;
    }
    case 9: { /* delete a line */
        size_t ls, le;
        line_at(b, below(b->n), &ls, &le);
        buf_erase(b, ls, le - ls);
        break;
    }
    case 10: /* truncate */ b->n = below(b->n + 1); break;
    case 11:
    case 12: { /* splice with another corpus entry */
        const input *o = &corpus[below(corpus_n)];
        if (!o->size) break;
        size_t from = below(o->size), n = 1 + below(o->size - from);
        if (below(2)) { /* our prefix + its suffix */
            b->n = below(b->n + 1);
            buf_insert(b, b->n, o->data + from, o->size - from);
        } else {
            buf_insert(b, below(b->n + 1), o->data + from, CTF_MIN_(n, (size_t)512));
        }
        break;
    }
    }
}

/*======================================================================
 * main
 *====================================================================*/

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: fuzz_regression [--seconds N] [--seed S] [--target NAME] [--max-len BYTES]\n"
            "                       [--current PATH] [--crash-dir DIR] DIR_OR_FILE...\n");
    exit(2);
}

int main(int argc, char **argv)
{
    double seconds = 0;
    uint64_t seed = 0x5eedc7f10ull;
    const char *crash_opt = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(a, "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(a, "--max-len") && i + 1 < argc)
            max_len = (size_t)strtoull(argv[++i], NULL, 0);
        else if (!strcmp(a, "--current") && i + 1 < argc)
            current_path = argv[++i];
        else if (!strcmp(a, "--crash-dir") && i + 1 < argc)
            crash_opt = argv[++i];
        else if (!strcmp(a, "--target") && i + 1 < argc) {
            const char *name = argv[++i];
            for (size_t t = 0; t < ctf_fuzz_num_targets; t++)
                if (!strcmp(ctf_fuzz_targets[t].name, name)) only_target = &ctf_fuzz_targets[t];
            if (!only_target) {
                fprintf(stderr, "fuzz_regression: unknown target '%s'\n", name);
                usage();
            }
        } else if (a[0] == '-' && a[1] == '-')
            usage();
        else {
            if (!crash_opt && !crash_dir[0]) {
                struct stat st;
                if (stat(a, &st) == 0 && S_ISDIR(st.st_mode)) {
                    snprintf(crash_dir, sizeof crash_dir, "%s", a);
                    size_t n = strlen(crash_dir);
                    while (n > 1 && crash_dir[n - 1] == '/') crash_dir[--n] = 0;
                    /* Replaying the crash directory itself: save beside the files. */
                    const char *base = strrchr(crash_dir, '/');
                    if (strcmp(base ? base + 1 : crash_dir, "crashes") != 0)
                        snprintf(crash_dir + n, sizeof crash_dir - n, "/crashes");
                }
            }
            collect(a, true);
        }
    }
    if (crash_opt) snprintf(crash_dir, sizeof crash_dir, "%s", crash_opt);
    if (!crash_dir[0]) snprintf(crash_dir, sizeof crash_dir, "tests/fuzz/corpus/crashes");
    if (max_len < 16) max_len = 16;
    rng_state = seed;

    current_fd = open(current_path, O_RDWR | O_CREAT, 0644);
    printf("fuzz_regression: current input in %s; crashes go to %s/\n", current_path, crash_dir);
    if (current_fd < 0) fprintf(stderr, "  (cannot open %s: %s)\n", current_path, strerror(errno));
    fflush(stdout);
    install_handlers();

    /* 1. Replay. */
    qsort(paths, paths_n, sizeof *paths, cmp_str);
    double t0 = now_s();
    for (size_t i = 0; i < paths_n; i++) {
        input in;
        if (!load_file(paths[i], &in)) {
            fprintf(stderr, "fuzz_regression: cannot read %s\n", paths[i]);
            continue;
        }
        run_all(in.data, in.size < max_len ? in.size : max_len);
        corpus_add(in.data, in.size);
        free(in.data);
    }
    size_t replayed = corpus_n;
    for (uint64_t k = 0; k < 8; k++) {
        char st[4096];
        int n = ctf_fuzz_state_example(k / 2 * 2 + 1, k & 1, st, sizeof st);
        if (n > 0) {
            run_all((const uint8_t *)st, (size_t)n);
            corpus_add((const uint8_t *)st, (size_t)n);
        }
    }
    if (corpus_n == 0) corpus_add((const uint8_t *)"", 0);
    double t1 = now_s();
    unsigned long long replay_runs = runs;
    printf("replay: %zu files (+%zu generated states), %llu target runs in %.2f s\n", replayed,
           corpus_n - replayed, replay_runs, t1 - t0);
    fflush(stdout);

    /* 2. Mutation. */
    unsigned long long mutated = 0, grown = 0;
    buf b = {0};
    double stop = t1 + seconds;
    while (seconds > 0) {
        if ((mutated & 15) == 0 && now_s() >= stop) break;
        const input *src = &corpus[below(corpus_n)];
        b.n = 0;
        buf_reserve(&b, src->size + 1);
        if (src->size) memcpy(b.d, src->data, src->size);
        b.n = src->size;
        unsigned k = 1 + (unsigned)below(4);
        if (below(4) == 0) k += (unsigned)below(8);
        for (unsigned i = 0; i < k; i++) mutate_once(&b);
        mutated++;
        if (run_all(b.d, b.n) && corpus_n < CORPUS_MAX) {
            corpus_add(b.d, b.n);
            grown++;
        }
    }
    double t2 = now_s();
    free(b.d);
    if (seconds > 0)
        printf("mutation: %llu inputs (%llu target runs) in %.1f s = %.0f inputs/s, corpus grew by "
               "%llu (%zu distinct events)\n",
               mutated, runs - replay_runs, t2 - t1, (t2 > t1 ? (double)mutated / (t2 - t1) : 0),
               grown, seen_n);
    printf("per target:");
    for (size_t t = 0; t < ctf_fuzz_num_targets; t++)
        printf(" %s %llu", ctf_fuzz_targets[t].name, per_target[t]);
    printf("\n%llu passed, %llu failed\n", runs - failures, failures);
    for (size_t i = 0; i < corpus_n; i++) free(corpus[i].data);
    free(corpus);
    for (size_t i = 0; i < paths_n; i++) free(paths[i]);
    free(paths);
    free(seen);
    if (current_fd >= 0) close(current_fd);
    return failures ? 1 : 0;
}
