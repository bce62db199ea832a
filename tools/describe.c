/*
 * describe.c -- the reader configuration that reads what `ctfio convert` wrote: a BrainScript
 * reader section and the Python StreamDefs, printed by the CLI and returned by ctfio.convert.
 * It lives with the tool, not in lib/: the library does not know the languages its callers use.
 */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct sbuf {
    char *buf;
    size_t cap, len;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->len < b->cap ? b->buf + b->len : NULL,
                      b->len < b->cap ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

/* A path inside a double-quoted BrainScript or Python string: backslashes and quotes escaped. */
static void sb_quoted(sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            sb_printf(b, "\\%c", *s);
        else
            sb_printf(b, "%c", *s);
    }
    sb_printf(b, "\"");
}

size_t cli_convert_describe(const ctf_convert_result *r, const ctf_convert_options *opt,
                            const char *out_path, char *buf, size_t cap)
{
    sbuf b = {buf, cap, 0};
    if (cap) buf[0] = 0;
    const char *fn = opt && opt->features_name && *opt->features_name ? opt->features_name
                                                                      : "features";
    const char *ln = opt && opt->labels_name && *opt->labels_name ? opt->labels_name : "labels";
    /* precision double: the values were parsed and written as float64 and read back exactly so. */
    sb_printf(&b, "# BrainScript reader section\nprecision = \"double\"\nreader = [\n"
                  "    readerType = \"CNTKTextFormatReader\"\n    file = ");
    sb_quoted(&b, out_path);
    sb_printf(&b, "\n    input = [\n");
    sb_printf(&b, "        %s = [ dim = %zu ; format = \"%s\" ]\n", fn, r->features_dim,
              r->features_sparse ? "sparse" : "dense");
    sb_printf(&b, "        %s = [ dim = %zu ; format = \"%s\" ]\n", ln, r->labels_dim,
              r->labels_sparse ? "sparse" : "dense");
    sb_printf(&b, "    ]\n]\n\n# Python\nimport ctfio\nsource = "
                  "ctfio.MinibatchSource(ctfio.CTFDeserializer(");
    sb_quoted(&b, out_path);
    sb_printf(&b, ", ctfio.StreamDefs(\n    %s=ctfio.StreamDef(field=\"%s\", shape=%zu%s),\n", fn,
              fn, r->features_dim, r->features_sparse ? ", is_sparse=True" : "");
    sb_printf(&b, "    %s=ctfio.StreamDef(field=\"%s\", shape=%zu%s)), precision=\"double\"))\n",
              ln, ln, r->labels_dim, r->labels_sparse ? ", is_sparse=True" : "");
    if (cap && b.len >= cap) buf[cap - 1] = 0;
    return b.len;
}
