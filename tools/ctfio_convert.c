/*
 * ctfio_convert.c -- `ctfio convert libsvm|csv IN OUT.ctf`: the command around
 * ctf_convert_file(). Parses its options, draws a progress line when stderr is a terminal,
 * prints what was written and the reader configuration that reads it.
 * Exit status as for every command: 0 success, 1 the data failed, 2 usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cli.h"
#include "ctfio.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char convert_usage[] =
    "usage: ctfio convert libsvm IN OUT.ctf [--dim D] [--zero-based|--one-based] [--classes K]\n"
    "       ctfio convert csv IN OUT.ctf --label COLS [--delimiter C] [--header]\n"
    "       ctfio convert cbf IN.ctf OUT.bin (--input NAME:DIM:FORMAT[:ALIAS] ... |\n"
    "                 --config FILE [--section S]) [--chunk-size BYTES] [--precision P]\n"
    "\n"
    "Writes a CTF file with two streams, 'features' and 'labels', and prints the reader\n"
    "configuration (BrainScript and Python) that reads it. Values are written as the shortest\n"
    "text that reads back to the same float64.\n"
    "\n"
    "libsvm (svmlight): 'label [qid:Q] index:value ... [# comment]' per line\n"
    "  --dim D          features' dimension (default: the largest index + 1)\n"
    "  --zero-based     indices start at 0      --one-based   indices start at 1\n"
    "                   (default: one-based unless an index 0 appears)\n"
    "  --classes K      labels as a one-hot sparse stream of dim K (labels 0..K-1);\n"
    "                   default: the label as a dense value of dim 1\n"
    "  Lines with qid: consecutive lines of one query form one sequence (its id is the qid).\n"
    "csv: one row per line, every cell a number\n"
    "  --label COLS     label columns: 0-based numbers or header names, comma-separated\n"
    "  --delimiter C    the field separator (default ','; 'tab' for a tab)\n"
    "  --header         the first line names the columns\n"
    "common:\n"
    "  --features NAME --labels NAME   the streams' names in the file (default features, labels)\n"
    "  --quiet          print neither the summary nor the reader configuration\n"
    "  A progress line is drawn on stderr when it is a terminal.\n";

static int convert_usage_error(const char *fmt, const char *arg)
{
    return ctfio_cli_usage_error("ctfio convert", fmt, arg);
}

typedef struct progress_line {
    const char *path;
    int last_permille;
    bool draw, drawn;
} progress_line;

/* SIGINT or SIGTERM during a conversion cancels it at the next line (the library then removes
 * its temporary file), and the signal is raised again afterwards so that the exit status still
 * tells that the command was interrupted. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

static int draw_progress(void *user, uint64_t done, uint64_t total)
{
    progress_line *p = user;
    if (stop_signal) return 1;
    if (!p->draw) return 0;
    int pm = total ? (int)(done * 1000 / total) : 1000;
    if (pm == p->last_permille) return 0;
    p->last_permille = pm;
    fprintf(stderr, "\rconverting %s: %5.1f%% (%.1f of %.1f MB)", p->path, pm / 10.0, done / 1e6,
            total / 1e6);
    fflush(stderr);
    p->drawn = true;
    return 0;
}

static int parse_size(const char *name, const char *s, size_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') return convert_usage_error("%s: expected a positive integer", name);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > SIZE_MAX)
        return convert_usage_error("%s: expected a positive integer", name);
    *out = (size_t)v;
    return 0;
}

int ctfio_cli_convert(int argc, char **argv)
{
    ctf_convert_options opt = {0};
    const char *pos[3] = {NULL, NULL, NULL};
    size_t npos = 0;
    bool quiet = false, zero = false, one = false, have_label = false, have_csv_opt = false,
         have_svm_opt = false;
    opt.index_base = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(convert_usage, stdout);
            return 0;
        }
        bool takes = !strcmp(a, "--dim") || !strcmp(a, "--classes") || !strcmp(a, "--label") ||
                     !strcmp(a, "--delimiter") || !strcmp(a, "--features") ||
                     !strcmp(a, "--labels");
        if (takes && !v) return convert_usage_error("%s needs a value", a);
        if (!strcmp(a, "--dim")) {
            if (parse_size("--dim", v, &opt.dim)) return 2;
            have_svm_opt = true;
            i++;
        } else if (!strcmp(a, "--classes")) {
            if (parse_size("--classes", v, &opt.classes)) return 2;
            have_svm_opt = true;
            i++;
        } else if (!strcmp(a, "--zero-based"))
            zero = have_svm_opt = true;
        else if (!strcmp(a, "--one-based"))
            one = have_svm_opt = true;
        else if (!strcmp(a, "--label")) {
            opt.label_columns = v;
            have_label = have_csv_opt = true;
            i++;
        } else if (!strcmp(a, "--delimiter")) {
            if (!strcmp(v, "tab") || !strcmp(v, "\\t"))
                opt.delimiter = '\t';
            else if (strlen(v) == 1)
                opt.delimiter = v[0];
            else
                return convert_usage_error(
                    "--delimiter: expected one character or 'tab' (got '%s')", v);
            have_csv_opt = true;
            i++;
        } else if (!strcmp(a, "--header"))
            opt.header = have_csv_opt = true;
        else if (!strcmp(a, "--features")) {
            opt.features_name = v;
            i++;
        } else if (!strcmp(a, "--labels")) {
            opt.labels_name = v;
            i++;
        } else if (!strcmp(a, "--quiet"))
            quiet = true;
        else if (a[0] == '-' && a[1])
            return convert_usage_error("unknown option '%s'", a);
        else if (npos == 3)
            return convert_usage_error("unexpected argument '%s'", a);
        else
            pos[npos++] = a;
    }
    if (npos < 3)
        return convert_usage_error("expected FORMAT IN OUT (got %s)", npos ? "fewer" : "none");
    if (!strcmp(pos[0], "libsvm") || !strcmp(pos[0], "svmlight")) {
        opt.format = CTF_CONVERT_LIBSVM;
        if (have_csv_opt)
            return convert_usage_error("%s: --label, --delimiter and --header are for csv", pos[0]);
    } else if (!strcmp(pos[0], "csv")) {
        opt.format = CTF_CONVERT_CSV;
        if (have_svm_opt)
            return convert_usage_error(
                "%s: --dim, --classes, --zero-based and --one-based are for libsvm", pos[0]);
        if (!have_label) return convert_usage_error("csv needs --label COLS%s", "");
    } else
        return convert_usage_error("unknown format '%s' (expected libsvm or csv)", pos[0]);
    if (zero && one) return convert_usage_error("give --zero-based or --one-based, not both%s", "");
    if (zero) opt.index_base = 0;
    if (one) opt.index_base = 1;

    progress_line pl = {pos[1], -1, isatty(STDERR_FILENO) != 0, false};
    opt.progress = draw_progress;
    opt.progress_user = &pl;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    /* A signal the caller ignores (nohup, a background job) stays ignored. */
    sigaction(SIGINT, NULL, &old_int);
    sigaction(SIGTERM, NULL, &old_term);
    if (old_int.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, NULL);
    if (old_term.sa_handler != SIG_IGN) sigaction(SIGTERM, &sa, NULL);
    ctf_convert_result res;
    ctf_error err;
    int rc = ctf_convert_file(pos[1], pos[2], &opt, &res, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (pl.drawn) fprintf(stderr, "\n");
    if (stop_signal) {
        signal(stop_signal, SIG_DFL);
        raise(stop_signal);
        return 1;
    }
    if (rc) {
        char line[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
        fprintf(stderr, "%s\n", ctf_error_format(&err, CTF_SEV_ERROR, line, sizeof line));
        return 1;
    }
    if (quiet) return 0;
    printf("wrote %s: %" PRIu64 " rows, %" PRIu64 " sequences%s, %" PRIu64 " bytes (from %" PRIu64
           ")\n",
           pos[2], res.rows, res.sequences, res.sequence_ids ? " (ids from qid)" : "",
           res.bytes_written, res.bytes_read);
    if (opt.format == CTF_CONVERT_LIBSVM)
        printf("features: sparse, dim %zu (%s indices)\nlabels: %s, dim %zu\n", res.features_dim,
               res.index_base ? "one-based" : "zero-based",
               res.labels_sparse ? "sparse one-hot" : "dense", res.labels_dim);
    else
        printf("features: dense, dim %zu\nlabels: dense, dim %zu\n", res.features_dim,
               res.labels_dim);
    size_t need = cli_convert_describe(&res, &opt, pos[2], NULL, 0);
    char *text = malloc(need + 1);
    if (!text) return 1;
    cli_convert_describe(&res, &opt, pos[2], text, need + 1);
    printf("\n%s", text);
    free(text);
    return 0;
}
