/*
 * ctfio.c -- the command-line tool: check | stats | index | dump. The only code in the project
 * that prints. argv (or a BrainScript file plus KEY=VALUE overrides) -> ctf_config -> library.
 *
 *   ctfio check --config reader.cntk            every problem (up to maxErrors) + a summary
 *   ctfio stats --file d.ctf --input x:3:dense  counts, non-zeros, sequence-length histogram
 *   ctfio index ...                             build or validate the index cache
 *   ctfio dump ...                              sequences in file order as JSON lines
 *   ctfio dump --mb 64 --count 10 ...           minibatches as JSON lines (rules 5-7)
 *   ctfio convert libsvm|csv IN OUT.ctf ...     another format into CTF (ctfio_convert.c)
 *
 * Exit status: 0 success, 1 the data or the configuration failed, 2 usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dump_json.h"
#include "cli.h"
#include "ctfio.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*======================================================================
 * Usage
 *====================================================================*/

static const char usage_text[] =
    "usage: ctfio COMMAND [options]\n"
    "\n"
    "Commands:\n"
    "  check    read the whole file; print every problem (up to maxErrors) and a summary\n"
    "  stats    sequences, samples and non-zeros per stream, sequence lengths, chunks\n"
    "  index    build the index cache next to the data file, or check a loaded one against\n"
    "           the data (a stale one is rebuilt)\n"
    "  dump     sequences in file order as JSON lines; with --mb, minibatches\n"
    "  convert  LibSVM / CSV into CTF (run 'ctfio convert --help' for its options)\n"
    "\n"
    "Input, from a CNTK configuration file (the whole experiment file):\n"
    "  --config FILE [--section NAME] [KEY=VALUE ...]\n"
    "      --section picks the block whose reader is read (Train, trainNetwork,\n"
    "      train.cvreader); needed when several blocks have one.\n"
    "      KEY=VALUE defines $KEY$ (e.g. DataDir=/data) and overrides a reader\n"
    "      parameter (e.g. randomize=false, input.features.dim=10).\n"
    "or from flags:\n"
    "  --file PATH --input NAME:DIM:dense|sparse[:ALIAS] [--input ...]\n"
    "      --file may be repeated, and PATH may be a pattern ('data/part-*.ctf', quoted):\n"
    "      the files are read as one corpus, in the order given (a pattern's matches in\n"
    "      byte-wise sorted order); stats and check report each file and the total.\n"
    "      PATH may be s3://BUCKET/KEY (a pattern in the key is listed) or http(s)://...;\n"
    "      the endpoint and credentials come from the AWS variables and shared files\n"
    "      (docs/remote.md). --endpoint URL, --no-sign-request (public buckets),\n"
    "      --cache-dir DIR (remote index caches; default $CTFIO_CACHE_DIR, ~/.cache/ctfio).\n"
    "or a mix of data sets, each read with the --input streams:\n"
    "  --mix WEIGHT:PATH [--mix WEIGHT:PATH ...]\n"
    "      interleaves the parts' sequences on one timeline in proportion to the weights\n"
    "      (PATH may be a pattern: a corpus); each part keeps its own randomization and\n"
    "      sweeps; a sweep ends when every part of weight > 0 finished one.\n"
    "\n"
    "Reader parameters (override the configuration file; the parameter table's flags):\n"
    "%s"
    "  --window-samples N        the randomization window in samples\n"
    "  --defines-mb-size NAME    the stream whose samples count for the minibatch size\n"
    "  --chunk-cache DIR         keep parsed chunks in DIR in CBF's layout; later sweeps and\n"
    "                            runs decode them instead of parsing (docs/chunk-cache.md)\n"
    "  --bad-records PATH        with --max-errors N > 0: write each skipped record to PATH\n"
    "                            as a JSON line (docs/reliability.md, \"Quarantine\")\n"
    "\n"
    "check options:\n"
    "  --recheck FILE   read a bad-records file back: parse each record's text again with\n"
    "                   the --input (or --config) streams and print its error now\n"
    "\n"
    "dump options:\n"
    "  --mb K           minibatch mode: K index samples per minibatch (global size)\n"
    "  --count M        stop after M minibatches (M sequences without --mb)\n"
    "  --workers N --rank R        this worker's share of each global minibatch\n"
    "  --max-samples N | --max-sweeps N   end of data (default: endless with --mb)\n"
    "  --truncation-length T        truncated BPTT: max(1, K div T) parallel slots, T samples "
    "each\n"
    "  --state          print the checkpoint state after each minibatch ('state {...}')\n"
    "  --restore STATE  start from a saved state (JSON text, or @FILE of at most 64 MiB)\n"
    "  --skip N         skip N samples of the global timeline first (after --restore); the\n"
    "                   state lists the stretch under \"skipped\"\n"
    "  --line           add the first line number to each sequence (file-order dump)\n"
    "  --at POSITION    replay: the minibatches from that timeline position (any sweep; after\n"
    "                   --restore, if given), each sequence with its file and first line\n"
    "  --at-step S      replay from step S of a run of --mb K minibatches (reads the S before)\n"
    "  --stats          at the end, where the time went: each stage's time and bytes, and the\n"
    "                   stage that limits throughput (on stderr, 'stats: ...' lines)\n"
    "\n"
    "check, stats and index draw a progress line on stderr when it is a terminal and the\n"
    "input is 32 MiB or more: --progress draws it always, --no-progress never.\n";

/* The usage, with one line per parameter flag of the table (--workers, --rank, --max-samples,
 * --max-sweeps and --truncation-length belong to dump and are listed there). */
static void print_usage(FILE *out)
{
    static const char *const dump_only[] = {"--workers", "--rank", "--max-samples", "--max-sweeps",
                                            "--truncation-length"};
    char flags[4096];
    size_t used = 0;
    flags[0] = 0;
    for (size_t i = 0; i < ctf_param_count(); i++) {
        const ctf_param *p = ctf_param_at(i);
        bool skip = !p->cli_flag;
        for (size_t j = 0; !skip && j < sizeof dump_only / sizeof dump_only[0]; j++)
            skip = !strcmp(p->cli_flag, dump_only[j]);
        if (skip || used >= sizeof flags) continue;
        char flag[48];
        snprintf(flag, sizeof flag, "%s%s", p->cli_flag,
                 p->cli_switch               ? ""
                 : p->kind == CTF_PARAM_BOOL ? " true|false"
                                             : " N");
        if (p->kind == CTF_PARAM_PRECISION)
            snprintf(flag, sizeof flag, "%s float|double", p->cli_flag);
        int k = snprintf(flags + used, sizeof flags - used, "  %-24s  %s\n", flag, p->help);
        if (k > 0) used += (size_t)k;
    }
    fprintf(out, usage_text, flags);
}

static void usage_error(const char *fmt, const char *arg)
{
    exit(ctfio_cli_usage_error("ctfio", fmt, arg));
}

/*======================================================================
 * Options
 *====================================================================*/

#define MAX_OVERRIDES 128
#define MAX_FILE_ARGS 1024
enum { AT_POSITION = 1, AT_STEP };

typedef struct opts {
    const char *command;
    const char *config_file, *section;
    const char *overrides[MAX_OVERRIDES];
    size_t num_overrides;
    const char *files[MAX_FILE_ARGS]; /* --file, repeated */
    size_t num_files;
    ctf_mix_part mix[CTF_MAX_MIX_PARTS]; /* --mix, repeated */
    const char *mix_paths[CTF_MAX_MIX_PARTS];
    size_t num_mix;
    ctf_stream_def streams[CTF_MAX_STREAMS];
    char *stream_specs[CTF_MAX_STREAMS];
    size_t num_streams;
    /* Reader parameter flags (the table's cli_flag), by table row: the text given, or "true"
     * for a switch; applied after the configuration file. */
    const char *param_text[CLI_MAX_PARAMS];
    const char *window_samples, *mb_stream, *restore, *chunk_cache, *bad_records, *recheck;
    const char *endpoint, *cache_dir; /* remote data: --endpoint, --cache-dir */
    bool no_sign;                     /* --no-sign-request */
    uint64_t mb, count, at, skip;
    bool have_skip;
    bool have_mb, have_count, print_state, with_line, print_stats;
    int at_kind; /* 0, or AT_POSITION / AT_STEP: --at, --at-step */
    int progress; /* 1 --progress, -1 --no-progress, 0 on a terminal for large inputs */
} opts;

static uint64_t parse_u64_arg(const char *name, const char *s)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') usage_error("%s: expected a non-negative integer", name);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) usage_error("%s: expected a non-negative integer", name);
    return v;
}

/* The table row of a ctf_config field (always there: the names below are the table's). */
static size_t param_row(const char *field)
{
    size_t i = 0;
    while (i + 1 < ctf_param_count() && strcmp(ctf_param_at(i)->field, field)) i++;
    return i;
}

/* --mix WEIGHT:PATH: one part of a mix. */
static void parse_mix_spec(opts *o, const char *spec)
{
    if (o->num_mix == CTF_MAX_MIX_PARTS) usage_error("--mix: too many parts (%s)", spec);
    const char *colon = strchr(spec, ':');
    char *end = NULL;
    errno = 0;
    double w = colon ? strtod(spec, &end) : 0;
    if (!colon || end != colon || errno || !colon[1])
        usage_error("--mix %s: expected WEIGHT:PATH (e.g. 0.7:train-a.ctf)", spec);
    o->mix_paths[o->num_mix] = colon + 1;
    o->mix[o->num_mix] = (ctf_mix_part){.paths = &o->mix_paths[o->num_mix],
                                        .num_paths = 1,
                                        .weight = w};
    o->num_mix++;
}

static void parse_input_spec(opts *o, const char *spec)
{
    if (o->num_streams == CTF_MAX_STREAMS) usage_error("--input: too many streams (%s)", spec);
    char *s = strdup(spec);
    o->stream_specs[o->num_streams] = s;
    char *name = strtok(s, ":"), *dim = strtok(NULL, ":"), *fmt = strtok(NULL, ":"),
         *alias = strtok(NULL, ":");
    if (!name || !dim || !fmt)
        usage_error("--input %s: expected NAME:DIM:dense|sparse[:ALIAS]", spec);
    ctf_stream_def *d = &o->streams[o->num_streams++];
    d->name = name;
    d->alias = alias;
    d->dim = (size_t)parse_u64_arg("--input DIM", dim);
    if (!strcmp(fmt, "dense"))
        d->is_sparse = false;
    else if (!strcmp(fmt, "sparse"))
        d->is_sparse = true;
    else
        usage_error("--input: format must be dense or sparse (got '%s')", fmt);
}

static void parse_args(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    if (argc < 2) {
        print_usage(stderr);
        exit(2);
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_usage(stdout);
        exit(0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ctfio %s\n", ctf_version_string());
        exit(0);
    }
    o->command = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (usage_error("%s needs a value", a), ""))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--config"))
            o->config_file = NEXT();
        else if (!strcmp(a, "--section"))
            o->section = NEXT();
        else if (!strcmp(a, "--file")) {
            if (o->num_files == MAX_FILE_ARGS)
                usage_error("--file: too many (%s); use a pattern", a);
            o->files[o->num_files++] = NEXT();
        } else if (!strcmp(a, "--input"))
            parse_input_spec(o, NEXT());
        else if (!strcmp(a, "--mix"))
            parse_mix_spec(o, NEXT());
        else if (cli_param_flag(a) >= 0) {
            const int k = cli_param_flag(a);
            o->param_text[k] = ctf_param_at((size_t)k)->cli_switch ? "true" : NEXT();
        } else if (!strcmp(a, "--window-samples"))
            o->window_samples = NEXT();
        else if (!strcmp(a, "--endpoint"))
            o->endpoint = NEXT();
        else if (!strcmp(a, "--cache-dir"))
            o->cache_dir = NEXT();
        else if (!strcmp(a, "--no-sign-request"))
            o->no_sign = true;
        else if (!strcmp(a, "--defines-mb-size"))
            o->mb_stream = NEXT();
        else if (!strcmp(a, "--chunk-cache"))
            o->chunk_cache = NEXT();
        else if (!strcmp(a, "--bad-records"))
            o->bad_records = NEXT();
        else if (!strcmp(a, "--recheck"))
            o->recheck = NEXT();
        else if (!strcmp(a, "--mb")) {
            o->mb = parse_u64_arg("--mb", NEXT());
            o->have_mb = true;
        } else if (!strcmp(a, "--count")) {
            o->count = parse_u64_arg("--count", NEXT());
            o->have_count = true;
        } else if (!strcmp(a, "--state"))
            o->print_state = true;
        else if (!strcmp(a, "--restore"))
            o->restore = NEXT();
        else if (!strcmp(a, "--skip")) {
            o->skip = parse_u64_arg("--skip", NEXT());
            o->have_skip = true;
        } else if (!strcmp(a, "--line"))
            o->with_line = true;
        else if (!strcmp(a, "--at") || !strcmp(a, "--at-step")) {
            if (o->at_kind) usage_error("%s: give one of --at and --at-step", a);
            o->at_kind = strcmp(a, "--at") ? AT_STEP : AT_POSITION;
            o->at = parse_u64_arg(a, NEXT());
        } else if (!strcmp(a, "--stats"))
            o->print_stats = true;
        else if (!strcmp(a, "--progress"))
            o->progress = 1;
        else if (!strcmp(a, "--no-progress"))
            o->progress = -1;
        else if (a[0] != '-' && strchr(a, '=')) {
            if (o->num_overrides == MAX_OVERRIDES) usage_error("too many overrides (%s)", a);
            o->overrides[o->num_overrides++] = a;
        } else
            usage_error("unknown option '%s'", a);
#undef NEXT
    }
    if (o->have_mb && o->mb == 0) usage_error("--mb: must be > 0%s", "");
    if (o->at_kind && !o->have_mb)
        usage_error("%s needs --mb (a replay is of minibatches)",
                    o->at_kind == AT_STEP ? "--at-step" : "--at");
}

/*======================================================================
 * Logging and errors
 *====================================================================*/

typedef struct log_counts {
    uint64_t errors, warnings, infos;
} log_counts;

static void cli_log(void *user, ctf_severity sev, const ctf_error *e)
{
    log_counts *c = user;
    char line[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
    if (sev == CTF_SEV_ERROR)
        c->errors++;
    else if (sev == CTF_SEV_WARNING)
        c->warnings++;
    else
        c->infos++;
    fprintf(stderr, "%s\n", ctf_error_format(e, sev, line, sizeof line));
}

static int die_error(const ctf_error *e)
{
    char line[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
    fprintf(stderr, "%s\n", ctf_error_format(e, CTF_SEV_ERROR, line, sizeof line));
    return 1;
}

/*======================================================================
 * Building the configuration
 *====================================================================*/

static int build_config(opts *o, ctf_config *cfg, ctf_bsconfig **doc, log_counts *lc)
{
    ctf_error err;
    ctf_config_init(cfg);
    *doc = NULL;
    if (o->config_file) {
        if (ctf_bsconfig_load(o->config_file, o->section, o->overrides, o->num_overrides, doc,
                              &err))
            return die_error(&err);
        if (ctf_bsconfig_apply(*doc, cfg, &err)) return die_error(&err);
    } else if (o->num_overrides) {
        usage_error("KEY=VALUE overrides need --config (got '%s')", o->overrides[0]);
    }
    /* One plain path is the single-file reader as always; several, or a pattern, a corpus. */
    if (o->num_files == 1 && !strpbrk(o->files[0], "*?[")) {
        cfg->path = o->files[0];
        cfg->paths = NULL;
        cfg->num_paths = 0;
    } else if (o->num_files) {
        cfg->path = NULL;
        cfg->paths = o->files;
        cfg->num_paths = o->num_files;
    }
    if (o->num_mix) {
        if (o->num_files)
            usage_error("--mix: the parts name the files; drop --file (%s)", o->files[0]);
        cfg->path = NULL;
        cfg->paths = NULL;
        cfg->num_paths = 0;
        cfg->joins = NULL;
        cfg->num_joins = 0;
        cfg->mix = o->mix;
        cfg->num_mix = o->num_mix;
    }
    if (o->num_streams) {
        cfg->streams = o->streams;
        cfg->num_streams = o->num_streams;
    }
    if (o->mb_stream) {
        /* Copy so that the flag also works on streams that come from a configuration file. */
        static ctf_stream_def copy[CTF_MAX_STREAMS];
        size_t n = cfg->num_streams < CTF_MAX_STREAMS ? cfg->num_streams : CTF_MAX_STREAMS;
        bool found = false;
        for (size_t i = 0; i < n; i++) {
            copy[i] = cfg->streams[i];
            copy[i].defines_mb_size = !strcmp(copy[i].name, o->mb_stream);
            found |= copy[i].defines_mb_size;
        }
        if (!found) usage_error("--defines-mb-size: no stream named '%s'", o->mb_stream);
        cfg->streams = copy;
    }
    /* Every reader parameter flag through the table: one parser and one range check. */
    if (cli_params_apply(cfg, o->param_text, &err)) return die_error(&err);
    /* --window counts chunks, --window-samples samples (the same parameter, another unit). */
    const size_t kw = param_row("randomization_window");
    if (o->param_text[kw]) cfg->window_in_samples = false;
    if (o->window_samples) {
        if (ctf_param_parse(cfg, ctf_param_at(kw), "--window-samples", o->window_samples, &err))
            return die_error(&err);
        cfg->window_in_samples = true;
    }
    if (o->chunk_cache) cfg->chunk_cache = o->chunk_cache;
    if (o->bad_records) cfg->bad_records = o->bad_records;
    cli_remote_options(&cfg->remote, o->endpoint, o->cache_dir, o->no_sign);
    cfg->log = cli_log;
    cfg->log_user = lc;
    if (o->recheck && !cfg->path && !cfg->num_paths) cfg->path = o->recheck; /* not read */
    if (!cfg->path && !cfg->num_paths && !cfg->num_mix)
        usage_error("no data file: give --config FILE or --file PATH%s", "");
    if (!cfg->num_streams) {
        /* A CBF file names its streams: without --input every stream of the file is read. */
        static ctf_stream_def *file_streams;
        size_t n = 0;
        const char *first = cfg->num_paths ? cfg->paths[0] : cfg->path;
        ctf_error e;
        if (ctf_cbf_streams_at(first, &cfg->remote, &file_streams, &n, &cfg->precision, &e) == 0) {
            cfg->streams = file_streams; /* kept until the command exits */
            cfg->num_streams = n;
            const size_t k = param_row("precision"); /* the flag wins over the file's */
            if (o->param_text[k])
                (void)ctf_param_parse(cfg, ctf_param_at(k), "--precision", o->param_text[k], &e);
        } else if (strstr(e.message, "magic number is missing") ||
                   (e.code == CTF_EIO && !strstr(first, "://"))) {
            usage_error("no inputs: give --config FILE or --input NAME:DIM:FORMAT%s", "");
        } else {
            return die_error(&e);
        }
    }
    /* A CBF stream of dim 0 takes the file's: the reader completes and checks it. */
    bool complete = true;
    for (size_t k = 0; k < cfg->num_streams; k++) complete &= cfg->streams[k].dim != 0;
    if (complete && ctf_config_validate(cfg, &err)) return die_error(&err);
    return 0;
}

/*======================================================================
 * Commands
 *====================================================================*/

/* Bytes of every file the reader reads. */
static uint64_t data_bytes(const ctf_reader *r)
{
    uint64_t total = 0;
    for (size_t f = 0; f < ctf_reader_num_files(r); f++) {
        ctf_index_info info;
        ctf_index_get_info(ctf_reader_file_index(r, f), &info);
        total += info.file_size;
    }
    return total;
}

/* Reads one sweep in file order, with a progress line; shared by check and stats. */
static int read_all(ctf_config *cfg, ctf_reader **out, int progress, const char *what)
{
    ctf_error err;
    cfg->randomize = false;
    cfg->max_samples = CTF_INFINITELY_REPEAT;
    cfg->max_sweeps = 1;
    cfg->num_workers = 1;
    cfg->worker_rank = 0;
    if (ctf_reader_open(cfg, out, &err)) return die_error(&err);
    /* Stream: minibatches of at most ~16 MiB of dense values (a large dim makes each sample
     * big), at most 2^20 samples. */
    uint64_t per_sample = 1;
    for (size_t k = 0; k < cfg->num_streams; k++)
        if (!cfg->streams[k].is_sparse) per_sample += cfg->streams[k].dim * (size_t)cfg->precision;
    uint64_t mb_samples = ((uint64_t)16 << 20) / per_sample;
    mb_samples = mb_samples<1 ? 1 : mb_samples>(1u << 20) ? (1u << 20) : mb_samples;
    ctfio_progress pl;
    ctfio_progress_init(&pl, what, progress, data_bytes(*out));
    const uint64_t total = ctf_reader_samples_per_sweep(*out);
    for (;;) {
        ctf_minibatch *mb;
        int rc = ctf_reader_next(*out, mb_samples, &mb);
        if (rc) {
            ctfio_progress_end(&pl);
            return die_error(ctf_reader_error(*out));
        }
        if (!mb) break;
        ctf_minibatch_free(mb);
        ctfio_progress_draw(&pl, ctf_reader_position(*out), total);
    }
    ctfio_progress_end(&pl);
    return 0;
}

/* A path as printed: a URL's user, password and query never reach the output. */
static const char *shown(const char *path, char *buf, size_t cap)
{
    return ctf_redact_urls(path, buf, cap);
}

static void print_summary(const ctf_config *cfg, const ctf_reader *r)
{
    char sp[CTF_ERROR_PATH_MAX];
    ctf_stats st;
    ctf_index_info info;
    ctf_reader_get_stats(r, &st);
    const size_t nf = ctf_reader_num_files(r);
    if (nf == 1 && !cfg->num_joins) {
        ctf_index_get_info(ctf_reader_index(r), &info);
        printf("file: %s\n", shown(ctf_reader_file_path(r, 0), sp, sizeof sp));
        printf("mode: %s\n", info.line_mode ? "line (one sequence per line)" : "sequence ids");
    } else {
        /* A corpus: each file's index, then the totals. */
        ctf_index_info sum = {0};
        printf("files: %zu\n", nf);
        for (size_t f = 0; f < nf; f++) {
            ctf_index_get_info(ctf_reader_file_index(r, f), &info);
            printf("file %zu: %s: %s, bytes %" PRIu64 ", lines %" PRIu64 ", sequences %" PRIu64
                   ", index samples %" PRIu64 ", chunks %" PRIu64 "\n",
                   f, shown(ctf_reader_file_path(r, f), sp, sizeof sp),
                   info.line_mode ? "line mode" : "sequence ids", info.file_size, info.lines,
                   info.sequences, info.samples, info.chunks);
            sum.file_size += info.file_size;
            sum.lines += info.lines;
            sum.sequences += info.sequences;
            sum.samples += info.samples;
            sum.chunks += info.chunks;
            sum.repeated_ids += info.repeated_ids;
        }
        info = sum;
        printf("total:\n");
    }
    printf("bytes: %" PRIu64 "\nlines: %" PRIu64 "\nsequences: %" PRIu64 "\nindex samples: %" PRIu64
           "\nchunks: %" PRIu64 "\n",
           info.file_size, info.lines, info.sequences, info.samples, info.chunks);
    /* Shown when there are any: CNTK calls such files invalid, ctfio reads them. */
    if (info.repeated_ids)
        printf("repeated sequence ids (reappearing after other ids): %" PRIu64 "\n",
               info.repeated_ids);
    /* Every deserializer's streams: the primary's, then each joined one's (stats order). */
    size_t total = cfg->num_streams;
    for (size_t j = 0; j < cfg->num_joins; j++) total += cfg->joins[j].num_streams;
    for (size_t k = 0; k < total && k < CTF_MAX_STREAMS; k++) {
        const ctf_stream_def *d = &cfg->streams[k];
        for (size_t j = 0, base = cfg->num_streams; k >= cfg->num_streams; j++) {
            if (k < base + cfg->joins[j].num_streams) {
                d = &cfg->joins[j].streams[k - base];
                break;
            }
            base += cfg->joins[j].num_streams;
        }
        printf("stream %s (%s, dim %zu, alias %s): samples %" PRIu64 ", non-zeros %" PRIu64
               ", dropped samples %" PRIu64 "\n",
               d->name, d->is_sparse ? "sparse" : "dense", d->dim,
               d->alias && d->alias[0] ? d->alias : d->name, st.streams[k].samples,
               st.streams[k].nonzeros, st.streams[k].dropped_samples);
    }
    printf("errors: %" PRIu64 " (maxErrors %" PRIu64 ")\nwarnings: %" PRIu64
           "\ndropped rows: %" PRIu64 "\ndropped sequences: %" PRIu64 "\n",
           st.errors, cfg->max_errors, st.warnings, st.dropped_rows, st.dropped_sequences);
    if (cfg->bad_records)
        printf("bad records: %" PRIu64 " (%s)\n", st.bad_records, cfg->bad_records);
    if (cfg->num_joins)
        printf("keys missing in a joined deserializer: %" PRIu64
               "\nkeys only in joined deserializers: %" PRIu64 "\n",
               st.keys_missing, st.keys_unmatched);
}

static int cmd_check(ctf_config *cfg, int progress)
{
    ctf_reader *r = NULL;
    int rc = read_all(cfg, &r, progress, "checking");
    if (r) {
        print_summary(cfg, r);
        printf("result: %s\n", rc ? "FAILED" : "ok");
    }
    ctf_reader_free(r);
    return rc;
}

/* The distribution of sequence lengths (index samples) as a text histogram: power-of-two
 * buckets from the shortest to the longest sequence of every file, a bar of up to 40 '#' each (at
 * least one for a non-empty bucket, so that no length present is hidden). */
static void print_length_histogram(const ctf_reader *r)
{
    uint64_t hist[65] = {0}, total = 0, lo = UINT64_MAX, hi = 0, sequences = 0;
    /* Counted by the indexing pass: no walk over a per-sequence table. */
    for (size_t f = 0; f < ctf_reader_num_files(r); f++) {
        ctf_index_info info;
        ctf_index_get_info(ctf_reader_file_index(r, f), &info);
        for (int b = 0; b < 65; b++) hist[b] += info.length_buckets[b];
        total += info.samples;
        if (info.sequences && info.min_sequence_samples < lo) lo = info.min_sequence_samples;
        if (info.max_sequence_samples > hi) hi = info.max_sequence_samples;
        sequences += info.sequences;
    }
    if (!sequences) return;
    printf("sequence lengths (index samples): min %" PRIu64 ", mean %.2f, max %" PRIu64 "\n", lo,
           (double)total / (double)sequences, hi);
    int first = 0, last = 0;
    uint64_t peak = 0;
    for (int b = 0; b < 65; b++) {
        if (!hist[b]) continue;
        if (!peak) first = b;
        last = b;
        if (hist[b] > peak) peak = hist[b];
    }
    for (int b = first; b <= last; b++) {
        char range[48];
        if (b <= 1)
            snprintf(range, sizeof range, "%d", b);
        else
            snprintf(range, sizeof range, "%" PRIu64 "-%" PRIu64, (uint64_t)1 << (b - 1),
                     ((uint64_t)1 << b) - 1);
        int bar = (int)((hist[b] * 40 + peak - 1) / peak);
        printf("  %13s %10" PRIu64 " %5.1f%% %.*s\n", range, hist[b],
               100.0 * (double)hist[b] / (double)sequences, bar,
               "########################################");
    }
}

static int cmd_stats(ctf_config *cfg, int progress)
{
    ctf_reader *r = NULL;
    int rc = read_all(cfg, &r, progress, "reading");
    if (rc) {
        ctf_reader_free(r);
        return rc;
    }
    print_summary(cfg, r);
    ctf_index_info info;
    uint64_t longest = 0;
    for (size_t f = 0; f < ctf_reader_num_files(r); f++) {
        ctf_index_get_info(ctf_reader_file_index(r, f), &info);
        if (info.max_sequence_samples > longest) longest = info.max_sequence_samples;
    }
    print_length_histogram(r);
    printf("longest sequence: %" PRIu64 " samples\n", longest);
    uint64_t index_bytes = 0;
    for (size_t f = 0; f < ctf_reader_num_files(r); f++) {
        ctf_index_get_info(ctf_reader_file_index(r, f), &info);
        index_bytes += info.index_bytes;
    }
    printf("index memory: %" PRIu64 " bytes (chunk tables; a chunk's sequence records are "
           "re-made when it is read)\n",
           index_bytes);
    ctf_reader_free(r);
    return 0;
}

/* Where a file's index cache went: a remote object's lives in the cache directory under a
 * hashed name, not beside it. */
static const char *cache_file(const ctf_index *idx, const char *path, char *buf, size_t cap)
{
    const char *c = ctf_index_cache_file(idx);
    if (c) return c;
    if (strstr(path, "://")) return "none (no cache directory: --cache-dir or CTFIO_CACHE_DIR)";
    return ctf_index_cache_path(path, buf, cap);
}

static int cmd_index(ctf_config *cfg, int progress)
{
    ctf_error err;
    ctf_index *idx;
    int rc;
    char cpath[1100];
    cfg->cache_index = true;
    ctfio_progress pl;
    ctfio_progress_init(&pl, "indexing", progress, 0);
    cfg->progress = ctfio_progress_fn;
    cfg->progress_user = &pl;
    if (cfg->num_paths || cfg->num_mix || (cfg->path && strstr(cfg->path, "://"))) {
        /* A corpus: every file's cache, through a reader (which expands the patterns and holds
         * a remote object's connection options). */
        ctf_reader *r;
        rc = ctf_reader_open(cfg, &r, &err);
        ctfio_progress_end(&pl);
        if (rc) return die_error(&err);
        /* Each cache that was loaded is checked against its data; a stale one is removed by
         * the check, and a second open indexes those files again. */
        bool *stale = calloc(ctf_reader_num_files(r) + 1, sizeof *stale);
        bool any_stale = false;
        for (size_t f = 0; stale && f < ctf_reader_num_files(r); f++) {
            ctf_index_info fi;
            ctf_index_get_info(ctf_reader_file_index(r, f), &fi);
            if (!fi.from_cache) continue;
            rc = ctf_index_verify(ctf_reader_file_index(r, f), &err);
            if (rc && rc != CTF_ECHANGED) {
                free(stale);
                ctf_reader_free(r);
                return die_error(&err);
            }
            if (rc) {
                char line[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
                fprintf(stderr, "%s\n", ctf_error_format(&err, CTF_SEV_WARNING, line, sizeof line));
                stale[f] = any_stale = true;
            }
        }
        if (any_stale) {
            ctf_reader_free(r);
            if (ctf_reader_open(cfg, &r, &err)) {
                free(stale);
                return die_error(&err);
            }
        }
        ctf_index_info info, sum = {0};
        for (size_t f = 0; f < ctf_reader_num_files(r); f++) {
            ctf_index_get_info(ctf_reader_file_index(r, f), &info);
            printf("index cache: %s (%s): sequences %" PRIu64 ", chunks %" PRIu64 "\n",
                   cache_file(ctf_reader_file_index(r, f), ctf_reader_file_path(r, f), cpath,
                              sizeof cpath),
                   stale && stale[f] ? "stale, rebuilt"
                   : info.from_cache ? "valid, loaded"
                                     : "built",
                   info.sequences, info.chunks);
            sum.sequences += info.sequences;
            sum.samples += info.samples;
            sum.lines += info.lines;
            sum.chunks += info.chunks;
        }
        printf("files: %zu\nsequences: %" PRIu64 "\nindex samples: %" PRIu64 "\nlines: %" PRIu64
               "\nchunks: %" PRIu64 "\n",
               ctf_reader_num_files(r), sum.sequences, sum.samples, sum.lines, sum.chunks);
        ctf_reader_free(r);
        free(stale);
        return 0;
    }
    rc = ctf_index_build(cfg, &idx, &err);
    ctfio_progress_end(&pl);
    if (rc) return die_error(&err);
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    const char *state = info.from_cache ? "valid, loaded" : "built";
    if (info.from_cache && (rc = ctf_index_verify(idx, &err)) != 0) {
        /* The header matched, the data did not: the cache is gone; index the file again. */
        if (rc != CTF_ECHANGED) {
            ctf_index_free(idx);
            return die_error(&err);
        }
        char line[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
        fprintf(stderr, "%s\n", ctf_error_format(&err, CTF_SEV_WARNING, line, sizeof line));
        ctf_index_free(idx);
        if (ctf_index_build(cfg, &idx, &err)) return die_error(&err);
        ctf_index_get_info(idx, &info);
        state = "stale, rebuilt";
    }
    printf("index cache: %s (%s)\n", cache_file(idx, cfg->path, cpath, sizeof cpath), state);
    printf("sequences: %" PRIu64 "\nindex samples: %" PRIu64 "\nlines: %" PRIu64
           "\nchunks: %" PRIu64 "\n",
           info.sequences, info.samples, info.lines, info.chunks);
    ctf_index_free(idx);
    return 0;
}

/* A state grows with the sequences in flight (truncated BPTT) but stays far below this: a
 * file above it is something else named by mistake (@train.ctf, @/dev/zero), and reading it
 * whole would take the memory of the machine. */
#define STATE_FILE_MAX ((size_t)64 << 20)

static void state_file_refused(const char *path, const char *why)
{
    fprintf(stderr,
            "ctfio: --restore @%s: %s; a reader state is a JSON object of at most "
            "64 MiB, as printed by dump --state (is this a data file?)\n",
            path, why);
    exit(1);
}

static char *read_state_arg(const char *arg)
{
    if (arg[0] != '@') return strdup(arg);
    const char *path = arg + 1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "ctfio: cannot open state file %s: %s\n", path, strerror(errno));
        exit(1);
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size > STATE_FILE_MAX) {
        fclose(f);
        state_file_refused(path, "the file is larger than 64 MiB");
    }
    size_t n = 0, cap = 0;
    char *buf = NULL;
    for (;;) {
        if (n + 1 >= cap) {
            /* One byte past the limit tells a file (or a device, a pipe) that is too long. */
            cap = !cap ? 65536 : 2 * cap < STATE_FILE_MAX + 2 ? 2 * cap : STATE_FILE_MAX + 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                fprintf(stderr, "ctfio: out of memory reading state file %s\n", path);
                exit(1);
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n > STATE_FILE_MAX) {
            free(buf);
            fclose(f);
            state_file_refused(path, "more than 64 MiB");
        }
        if (got == 0) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "ctfio: cannot read state file %s\n", path);
        exit(1);
    }
    if (memchr(buf, 0, n)) {
        free(buf);
        state_file_refused(path, "it holds a NUL byte");
    }
    buf[n] = 0;
    return buf;
}

/* Prints "state {...}" after a minibatch, whatever the state's size. @return : 0, or 1 after
 * reporting the error (never ignored: a missing checkpoint line would lose the position). */
static int print_state(const ctf_reader *r)
{
    size_t len = 0;
    int rc = ctf_reader_save_state(r, NULL, 0, &len);
    char *buf = rc == 0 || rc == CTF_ELIMIT ? malloc(len + 1) : NULL;
    if (buf) rc = ctf_reader_save_state(r, buf, len + 1, &len);
    if (!buf || rc) {
        free(buf);
        fprintf(stderr, "ctfio: cannot save the checkpoint state: %s\n",
                rc ? ctf_error_name(rc) : "out of memory");
        return 1;
    }
    printf("state %s\n", buf);
    free(buf);
    return 0;
}

static int cmd_dump(opts *o, ctf_config *cfg)
{
    ctf_error err;
    ctf_reader *r;
    if (!o->have_mb) {
        /* Sequences in file order, one sweep. */
        cfg->randomize = false;
        cfg->max_samples = CTF_INFINITELY_REPEAT;
        cfg->max_sweeps = 1;
        cfg->num_workers = 1;
        cfg->worker_rank = 0;
    }
    if (ctf_reader_open(cfg, &r, &err)) return die_error(&err);
    int rc = 0;
    if (o->restore) {
        char *st = read_state_arg(o->restore);
        if (!st || ctf_reader_restore_state(r, st, strlen(st))) {
            free(st);
            rc = die_error(ctf_reader_error(r));
            ctf_reader_free(r);
            return rc;
        }
        free(st);
    }
    /* A replay: from a position (a seek: the state the run had there), or from a step of a run
     * of fixed-size minibatches (the steps before it are cut and dropped: positions after a
     * step depend on the sequences' lengths). Indices count the run's steps where known. */
    uint64_t emitted = 0, first_index = 0;
    if (o->at_kind == AT_POSITION && ctf_reader_seek(r, o->at)) {
        rc = die_error(ctf_reader_error(r));
        ctf_reader_free(r);
        return rc;
    }
    if (o->have_skip && ctf_reader_skip(r, o->skip)) {
        rc = die_error(ctf_reader_error(r));
        ctf_reader_free(r);
        return rc;
    }
    for (uint64_t s = 0; o->at_kind == AT_STEP && s < o->at; s++, first_index++) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, o->mb, &mb)) {
            rc = die_error(ctf_reader_error(r));
            ctf_reader_free(r);
            return rc;
        }
        if (!mb) break;
        ctf_minibatch_free(mb);
    }
    while (!o->have_count || emitted < o->count) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, o->have_mb ? o->mb : 1, &mb)) {
            fflush(stdout);
            rc = die_error(ctf_reader_error(r));
            break;
        }
        if (!mb) break;
        if (o->at_kind)
            dump_json_replay(mb, stdout, first_index + emitted, r);
        else if (o->have_mb)
            dump_json_minibatch(mb, stdout, emitted);
        else
            dump_json_sequences(mb, stdout, o->with_line);
        emitted++;
        ctf_minibatch_free(mb);
        if (o->print_state && (rc = print_state(r)) != 0) break;
    }
    if (o->print_stats) {
        fflush(stdout);
        ctfio_cli_print_perf(stderr, r);
    }
    ctf_reader_free(r);
    return rc;
}

/* `ctfio convert cbf IN OUT [--input ... | --config FILE [--section S]] [--chunk-size BYTES]
 * [--precision float|double]`: the input is described as for reading; --chunk-size and
 * --precision are the output's. */
static int convert_cbf(int argc, char **argv)
{
    if (argc < 5 || argv[3][0] == '-' || argv[4][0] == '-') {
        fprintf(stderr, "usage: ctfio convert cbf IN.ctf OUT.bin (--input NAME:DIM:FORMAT[:ALIAS] "
                        "... | --config FILE [--section S]) [--chunk-size BYTES] "
                        "[--precision float|double]\n");
        return 2;
    }
    const char *in = argv[3], *out = argv[4];
    char **args = malloc((size_t)(argc + 2) * sizeof *args);
    if (!args) return 1;
    int n = 0;
    args[n++] = argv[0];
    args[n++] = "convert";
    for (int i = 5; i < argc; i++) args[n++] = argv[i];
    opts o;
    parse_args(&o, n, args);
    free(args);
    /* --chunk-size and --precision are the written file's here, not the reader's. */
    const size_t kc = param_row("chunk_size_bytes"), kp = param_row("precision");
    const char *chunk = o.param_text[kc], *prec = o.param_text[kp];
    o.param_text[kc] = o.param_text[kp] = NULL;
    if (!o.config_file) o.files[o.num_files++] = in;
    ctf_config cfg;
    ctf_bsconfig *doc = NULL;
    log_counts lc = {0};
    int rc = build_config(&o, &cfg, &doc, &lc);
    if (!rc && o.config_file) {
        cfg.path = in; /* IN replaces the configuration's file */
        cfg.paths = NULL;
        cfg.num_paths = 0;
    }
    ctf_config written; /* the table's defaults and checks for the two values */
    ctf_config_init(&written);
    ctf_cbf_write_result res;
    ctf_error err;
    if (!rc &&
        ((chunk && ctf_param_parse(&written, ctf_param_at(kc), "--chunk-size", chunk, &err)) ||
         (prec && ctf_param_parse(&written, ctf_param_at(kp), "--precision", prec, &err))))
        rc = die_error(&err);
    const uint64_t chunk_bytes = written.chunk_size_bytes;
    const ctf_precision p = written.precision;
    if (!rc && ctf_cbf_write(&cfg, out, chunk_bytes, p, &res, &err)) rc = die_error(&err);
    if (!rc)
        printf("wrote %s: %" PRIu64 " sequences, %" PRIu64 " samples, %" PRIu64 " chunks, %" PRIu64
               " bytes\n",
               out, res.sequences, res.samples, res.chunks, res.bytes_written);
    ctf_bsconfig_free(doc);
    for (size_t i = 0; i < o.num_streams; i++) free(o.stream_specs[i]);
    return rc ? 1 : 0;
}

#ifdef CTF_TESTING
int ctf__parse_set_variant(const char *name); /* lib/format/format.h, test builds only */
#endif

int main(int argc, char **argv)
{
    opts o;
#ifdef CTF_TESTING
    /* Test builds of the tool: CTFIO_SIMD=sse2 selects the parser's baseline variant, so that
     * tests/parse_diff compares both variants on one machine (the library reads no variable). */
    const char *simd = getenv("CTFIO_SIMD");
    if (simd && ctf__parse_set_variant(simd)) {
        fprintf(stderr, "ctfio: CTFIO_SIMD=%s: this build has no such parser variant\n", simd);
        return 2;
    }
#endif
    if (argc > 2 && !strcmp(argv[1], "convert") && !strcmp(argv[2], "cbf"))
        return convert_cbf(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "convert")) return ctfio_cli_convert(argc - 1, argv + 1);
    parse_args(&o, argc, argv);
    ctf_config cfg;
    ctf_bsconfig *doc = NULL;
    log_counts lc = {0};
    int rc;
    if (strcmp(o.command, "check") && strcmp(o.command, "stats") && strcmp(o.command, "index") &&
        strcmp(o.command, "dump"))
        usage_error("unknown command '%s'", o.command);
    rc = build_config(&o, &cfg, &doc, &lc);
    if (!rc) {
        if (!strcmp(o.command, "check") && o.recheck)
            rc = ctfio_cli_recheck(&cfg, o.recheck);
        else if (!strcmp(o.command, "check"))
            rc = cmd_check(&cfg, o.progress);
        else if (!strcmp(o.command, "stats"))
            rc = cmd_stats(&cfg, o.progress);
        else if (!strcmp(o.command, "index"))
            rc = cmd_index(&cfg, o.progress);
        else
            rc = cmd_dump(&o, &cfg);
    }
    ctf_bsconfig_free(doc);
    for (size_t i = 0; i < o.num_streams; i++) free(o.stream_specs[i]);
    if (fflush(stdout) != 0) rc = 1;
    return rc ? 1 : 0;
}
