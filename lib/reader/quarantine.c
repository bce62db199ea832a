/*
 * quarantine.c -- the bad-records file (ctf_config.bad_records): one JSON line per record the
 * reader skipped, written as the reader reports the skip (reader.c's commit_chunk, on the
 * caller's thread, in timeline order), so the file is the same whatever the thread count.
 *
 * Each line: {"file","line","column","offset","error","text","truncated"}. The text is the
 * physical line holding the error's byte, read back through the source's I/O (a local pread or
 * a remote range request); at most CTF__QUAR_TEXT bytes of it, "truncated": true beyond (or
 * when the line began more than that before the error's byte). The file is written through an
 * atomic file: it appears at its path, whole, when the reader reaches its end or is freed,
 * never half written.
 */
#include "reader/quarantine.h"
#include "io/io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

struct ctf__quarantine {
    ctf__atomic_file af;
    bool open;                       /* af holds the temporary file (false once committed) */
    char *path;
    uint64_t written;
    ctf__io *h;                      /* the last file read back, kept for the next record */
    char hpath[CTF_ERROR_PATH_MAX];
    char *line;                      /* the JSON line being made */
    size_t len, cap;
    char buf[2 * CTF__QUAR_TEXT + 2]; /* the bytes read back around an error */
};

int ctf__quar_open(const char *path, ctf__quarantine **out, ctf_error *err)
{
    *out = NULL;
    ctf__quarantine *q = CTF_CALLOC(1, sizeof *q);
    if (!q || !(q->path = ctf__strdup(path))) {
        CTF_FREE(q);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    int e = ctf__atomic_open(&q->af, path, ".tmp", 0);
    if (e) {
        ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                  "bad_records: cannot write '%s' (%s: %s)", path, q->af.step, strerror(e));
        CTF_FREE(q->path);
        CTF_FREE(q);
        return CTF_EINVAL;
    }
    q->open = true;
    *out = q;
    return 0;
}

int ctf__quar_commit(ctf__quarantine *q)
{
    if (!q || !q->open) return 0;
    q->open = false;
    return ctf__atomic_commit(&q->af);
}

/* After a commit, a further line goes into a new temporary file that starts as a copy of the
 * committed one, so that PATH always holds every line written so far, whole. */
static int reopen(ctf__quarantine *q, ctf_error *err)
{
    int e = ctf__atomic_open(&q->af, q->path, ".tmp", 0);
    FILE *in = e ? NULL : ctf__fopen_regular(q->path);
    if (!e && !in) e = errno ? errno : EIO;
    for (size_t n; !e && (n = fread(q->buf, 1, sizeof q->buf, in)) > 0;)
        e = ctf__atomic_write(&q->af, q->buf, n);
    if (!e && in && ferror(in)) e = EIO;
    if (in) fclose(in);
    if (e) {
        ctf__atomic_abort(&q->af);
        return ctf__fail(err, CTF_EIO, (ctf__where){q->path, 0, 0, -1},
                         "bad_records: cannot write '%s' again (%s)", q->path, strerror(e));
    }
    q->open = true;
    return 0;
}

static int put(ctf__quarantine *q, const void *p, size_t n)
{
    if (q->len + n > q->cap && ctf__grow((void **)&q->line, &q->cap, q->len + n, 1))
        return CTF_ENOMEM;
    memcpy(q->line + q->len, p, n);
    q->len += n;
    return 0;
}

/* The length of the well-formed UTF-8 sequence at p (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    const unsigned c = p[0];
    size_t k;
    unsigned min;
    if (c >= 0xc2 && c <= 0xdf) {
        k = 2, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4, min = 0x10000;
    } else {
        return 0;
    }
    if (k > n) return 0;
    unsigned v = c & (0x3f >> (k - 1));
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    return v >= min && v <= 0x10ffff && (v < 0xd800 || v > 0xdfff) ? k : 0;
}

/* A JSON string: quotes, backslashes and control bytes escaped, UTF-8 as it is, and each byte
 * that is not part of well-formed UTF-8 as \u00XX (its value: the file is valid JSON, and
 * ctfio check --recheck writes such an escape back as the byte). */
static int put_string(ctf__quarantine *q, const char *s, size_t n)
{
    int rc = put(q, "\"", 1);
    for (size_t i = 0; !rc && i < n;) {
        const unsigned char c = (unsigned char)s[i];
        char esc[8];
        size_t k;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            rc = put(q, esc, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            rc = put(q, esc, 6);
            i++;
        } else if (c < 0x80) {
            rc = put(q, s + i, 1);
            i++;
        } else if ((k = utf8_len((const unsigned char *)s + i, n - i)) != 0) {
            rc = put(q, s + i, k);
            i += k;
        } else {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            rc = put(q, esc, 6);
            i++;
        }
    }
    return rc ? rc : put(q, "\"", 1);
}

/* The file of a source an error names (its identity and size), or NULL. */
static const ctf__source_file *find_file(const ctf__source *src, const char *path)
{
    for (size_t i = 0; i < src->num_fp_files; i++)
        if (!strcmp(src->fp_files[i].path, path)) return &src->fp_files[i];
    for (size_t i = 0; i < src->num_files; i++)
        if (!strcmp(src->files[i].path, path)) return &src->files[i];
    return NULL;
}

/* Reads back the line holding e's byte into buf: *text and *n, *cut when it was cut short.
 * @return : 0, or 1 when it cannot be read (the record then has "text": null). */
static int read_text(ctf__quarantine *q, ctf__remote *rem, const ctf__source *src,
                     const ctf_error *e, char *buf, const char **text, size_t *n, bool *cut)
{
    const ctf__source_file *f = e->path[0] && e->offset >= 0 ? find_file(src, e->path) : NULL;
    if (!f || !f->idx || f->idx->cbf) return 1; /* a CBF file has no lines to show */
    const uint64_t size = f->idx->file.size, off = (uint64_t)e->offset;
    if (off > size) return 1;
    ctf_error ignored;
    if (!q->h || strcmp(q->hpath, e->path)) {
        ctf__io_close(q->h);
        q->h = NULL;
        if (ctf__io_open(rem, e->path, &f->idx->file, &q->h, &ignored)) return 1;
        snprintf(q->hpath, sizeof q->hpath, "%s", e->path);
    }
    const uint64_t lo = off > CTF__QUAR_TEXT ? off - CTF__QUAR_TEXT : 0;
    const uint64_t hi = CTF_MIN(size, off + CTF__QUAR_TEXT + 1);
    if (hi > lo && ctf__io_read(q->h, buf, (size_t)(hi - lo), lo, &ignored)) return 1;
    size_t start = (size_t)(off - lo);
    while (start > 0 && buf[start - 1] != '\n') start--;
    *cut = start == 0 && lo > 0; /* the line began before the window */
    size_t end = start;
    const size_t stop = (size_t)(hi - lo);
    while (end < stop && buf[end] != '\n') end++;
    if (end - start > CTF__QUAR_TEXT) {
        end = start + CTF__QUAR_TEXT;
        *cut = true;
    } else if (end == stop && hi < size) {
        *cut = true;
    }
    if (end > start && buf[end - 1] == '\r' && !*cut) end--;
    *text = buf + start;
    *n = end - start;
    return 0;
}

int ctf__quar_add(ctf__quarantine *q, ctf__remote *rem, const ctf__source *src, const ctf_error *e,
                  ctf_error *err)
{
    const char *text = NULL;
    size_t n = 0;
    bool cut = false;
    const bool have = src && !read_text(q, rem, src, e, q->buf, &text, &n, &cut);
    char num[128];
    q->len = 0;
    int rc = put(q, "{\"file\": ", 9);
    if (!rc) rc = put_string(q, e->path, strlen(e->path));
    snprintf(num, sizeof num,
             ", \"line\": %" PRIu64 ", \"column\": %" PRIu64 ", \"offset\": %" PRId64
             ", \"error\": ",
             e->line, e->column, e->offset);
    if (!rc) rc = put(q, num, strlen(num));
    if (!rc) rc = put_string(q, e->message, strlen(e->message));
    if (!rc) rc = put(q, ", \"text\": ", 10);
    if (!rc) rc = have ? put_string(q, text, n) : put(q, "null", 4);
    if (!rc)
        rc = cut ? put(q, ", \"truncated\": true}\n", 21) : put(q, ", \"truncated\": false}\n", 22);
    if (rc) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    if (!q->open && reopen(q, err)) return CTF_EIO;
    const int w = ctf__atomic_write(&q->af, q->line, q->len);
    if (w)
        return ctf__fail(err, CTF_EIO, (ctf__where){q->path, 0, 0, -1},
                         "bad_records: cannot write '%s' (%s)", q->path, strerror(w));
    q->written++;
    return 0;
}

uint64_t ctf__quar_count(const ctf__quarantine *q) { return q ? q->written : 0; }

void ctf__quar_close(ctf__quarantine *q)
{
    if (!q) return;
    (void)ctf__quar_commit(q); /* a commit that fails leaves nothing behind */
    ctf__io_close(q->h);
    CTF_FREE(q->line);
    CTF_FREE(q->path);
    CTF_FREE(q);
}
