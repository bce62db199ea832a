/*
 * ctfio_recheck.c -- `ctfio check --recheck FILE`: reads a bad-records file (the JSON lines a
 * reader writes with bad_records, docs/rules.md 2.8) back, parses each record's raw text again
 * with the command's stream definitions and prints, per record, where it came from and the
 * error its text gives now ("ok now" when it parses). A record whose text was cut at 4 KiB, or
 * could not be read, is listed as not rechecked.
 *
 * Each text is one line of a temporary CTF file read in line mode (every line its own
 * sequence), so records that shared a sequence id do not merge.
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINE_MAX_BYTES (64 << 10) /* a record line is at most ~8 KiB; more is not ours */

typedef struct record {
    char *file, *error;
    uint64_t line, column;
    bool has_text, truncated, bad_now;
} record;

typedef struct recheck {
    record *recs;
    size_t n;
    size_t *of_line; /* temporary file line (0-based) -> record */
    size_t lines;
} recheck;

/* A JSON string at *p (after its opening quote) into out (at most cap - 1 bytes kept).
 * @return : false on malformed input. */
static bool json_string(const char **p, char *out, size_t cap, size_t *len)
{
    const char *s = *p;
    size_t n = 0;
    for (;;) {
        unsigned c = (unsigned char)*s++;
        if (!c) return false;
        if (c == '"') break;
        if (c == '\\') {
            c = (unsigned char)*s++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case '"':
            case '\\':
            case '/': break;
            case 'u': {
                char hex[5] = {0};
                for (int i = 0; i < 4; i++)
                    if (!(hex[i] = *s++)) return false;
                c = (unsigned)strtoul(hex, NULL, 16);
                if (c >= 0x80 && c <= 0xff) { /* a byte that was not UTF-8 (the writer's) */
                    if (n + 1 < cap) out[n++] = (char)c;
                    continue;
                }
                if (c > 0xff) { /* as UTF-8 */
                    unsigned char u[3];
                    size_t k = c < 0x800 ? 2 : 3;
                    if (k == 2) {
                        u[0] = (unsigned char)(0xc0 | (c >> 6));
                        u[1] = (unsigned char)(0x80 | (c & 0x3f));
                    } else {
                        u[0] = (unsigned char)(0xe0 | (c >> 12));
                        u[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
                        u[2] = (unsigned char)(0x80 | (c & 0x3f));
                    }
                    for (size_t i = 0; i < k; i++)
                        if (n + 1 < cap) out[n++] = (char)u[i];
                    continue;
                }
                break;
            }
            default: return false;
            }
        }
        if (n + 1 < cap) out[n++] = (char)c;
    }
    out[n] = 0;
    *len = n;
    *p = s;
    return true;
}

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
    return s;
}

/* One record line; its text goes to tmp (one line) when it can be rechecked. */
static bool parse_record(const char *s, record *r, char *buf, FILE *tmp)
{
    memset(r, 0, sizeof *r);
    s = skip_ws(s);
    if (*s++ != '{') return false;
    for (;;) {
        s = skip_ws(s);
        char key[32];
        size_t n;
        if (*s++ != '"' || !json_string(&s, key, sizeof key, &n)) return false;
        s = skip_ws(s);
        if (*s++ != ':') return false;
        s = skip_ws(s);
        if (*s == '"') {
            s++;
            if (!json_string(&s, buf, LINE_MAX_BYTES, &n)) return false;
            if (!strcmp(key, "file") && !(r->file = strdup(buf))) return false;
            if (!strcmp(key, "error") && !(r->error = strdup(buf))) return false;
            if (!strcmp(key, "text")) {
                if (memchr(buf, '\n', n)) return false;
                r->has_text = true;
                if (fwrite(buf, 1, n, tmp) != n) return false;
                fputc('\n', tmp);
            }
        } else if (!strncmp(s, "null", 4) || !strncmp(s, "false", 5) || !strncmp(s, "true", 4)) {
            if (!strcmp(key, "truncated")) r->truncated = *s == 't';
            s += *s == 'f' ? 5 : 4;
        } else {
            char *end;
            const long long v = strtoll(s, &end, 10);
            if (end == s) return false;
            if (!strcmp(key, "line")) r->line = (uint64_t)v;
            if (!strcmp(key, "column")) r->column = (uint64_t)v;
            s = end;
        }
        s = skip_ws(s);
        if (*s == '}') break;
        if (*s++ != ',') return false;
    }
    return r->file != NULL;
}

static void recheck_log(void *user, ctf_severity sev, const ctf_error *e)
{
    recheck *rc = user;
    if (sev != CTF_SEV_ERROR || !e->line || e->line > rc->lines) return;
    record *r = &rc->recs[rc->of_line[e->line - 1]];
    r->bad_now = true;
    printf("%s:%" PRIu64 ":%" PRIu64 ": error: %s\n", r->file, r->line, e->column, e->message);
}

int ctfio_cli_recheck(const ctf_config *given, const char *path)
{
    FILE *in = fopen(path, "rb");
    if (!in) {
        fprintf(stderr, "error: %s: cannot be opened (%s)\n", path, strerror(errno));
        return 1;
    }
    char tmpl[] = "/tmp/ctfio-recheck-XXXXXX";
    const int fd = mkstemp(tmpl);
    FILE *tmp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    char *line = malloc(LINE_MAX_BYTES), *buf = malloc(LINE_MAX_BYTES);
    recheck rc = {0};
    size_t cap = 0;
    int status = 1;
    uint64_t lineno = 0;
    if (!tmp || !line || !buf) {
        fprintf(stderr, "error: cannot make a temporary file (%s)\n", strerror(errno));
        goto done;
    }
    while (fgets(line, LINE_MAX_BYTES, in)) {
        lineno++;
        if (rc.n == cap) {
            cap = cap ? 2 * cap : 64;
            record *nr = realloc(rc.recs, cap * sizeof *nr);
            size_t *nl = realloc(rc.of_line, cap * sizeof *nl);
            if (nr) rc.recs = nr;
            if (nl) rc.of_line = nl;
            if (!nr || !nl) goto done;
        }
        record *r = &rc.recs[rc.n];
        if (!strchr(line, '\n') && !feof(in)) {
            fprintf(stderr, "error: %s:%" PRIu64 ": not a bad-records line (too long)\n", path,
                    lineno);
            goto done;
        }
        if (!parse_record(line, r, buf, tmp)) {
            fprintf(stderr, "error: %s:%" PRIu64 ": not a bad-records line\n", path, lineno);
            free(r->file);
            free(r->error);
            goto done;
        }
        if (r->has_text) rc.of_line[rc.lines++] = rc.n;
        rc.n++;
    }
    if (fflush(tmp) != 0) goto done;
    uint64_t rechecked = 0;
    if (rc.lines) {
        ctf_config cfg = *given;
        cfg.path = tmpl;
        cfg.paths = NULL;
        cfg.num_paths = 0;
        cfg.joins = NULL;
        cfg.num_joins = 0;
        cfg.skip_sequence_ids = true;
        cfg.max_errors = UINT64_MAX;
        cfg.randomize = false;
        cfg.max_samples = CTF_INFINITELY_REPEAT;
        cfg.max_sweeps = 1;
        cfg.num_threads = 0;
        cfg.cache_index = false;
        cfg.chunk_cache = NULL;
        cfg.bad_records = NULL;
        cfg.frame_mode = false;
        cfg.num_workers = 1;
        cfg.worker_rank = 0;
        cfg.log = recheck_log;
        cfg.log_user = &rc;
        ctf_reader *reader = NULL;
        ctf_error err;
        int e = ctf_reader_open(&cfg, &reader, &err);
        for (ctf_minibatch *mb = NULL; !e;) {
            e = ctf_reader_next(reader, 1024, &mb);
            if (!mb) break;
            ctf_minibatch_free(mb);
        }
        if (e && reader) err = *ctf_reader_error(reader);
        ctf_reader_free(reader);
        if (e) {
            char msg[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
            fprintf(stderr, "%s\n", ctf_error_format(&err, CTF_SEV_ERROR, msg, sizeof msg));
            goto done;
        }
    }
    uint64_t bad = 0, ok = 0;
    for (size_t i = 0; i < rc.n; i++) {
        const record *r = &rc.recs[i];
        if (!r->has_text || r->truncated) {
            printf("%s:%" PRIu64 ": not rechecked (%s); recorded: %s\n", r->file, r->line,
                   r->has_text ? "its text was cut at 4 KiB" : "no text", r->error ? r->error : "");
            continue;
        }
        rechecked++;
        if (r->bad_now) {
            bad++;
        } else {
            ok++;
            printf("%s:%" PRIu64 ": ok now; recorded: %s\n", r->file, r->line,
                   r->error ? r->error : "");
        }
    }
    printf("records: %zu\nrechecked: %" PRIu64 "\nstill bad: %" PRIu64 "\nok now: %" PRIu64 "\n",
           rc.n, rechecked, bad, ok);
    status = 0;
done:
    for (size_t i = 0; i < rc.n; i++) {
        free(rc.recs[i].file);
        free(rc.recs[i].error);
    }
    free(rc.recs);
    free(rc.of_line);
    free(line);
    free(buf);
    if (tmp)
        fclose(tmp);
    else if (fd >= 0)
        close(fd);
    if (fd >= 0) unlink(tmpl);
    fclose(in);
    return status;
}
