/*
 * test_layers.c -- lib/'s layers hold: from the release objects' symbols (`nm` over
 * build/lib/<layer>/<stage>.o, the members of build/libctfio.a), no layer calls a layer it may
 * not (docs/design.md draws them), and no file calls, through others, back into itself.
 */
#include "test.h"

#include <glob.h>
#include <stdlib.h>

/* Which layers each layer may call (besides itself). A folder not listed here fails the test:
 * a new layer is placed in the drawing on purpose, not by accident. */
static const struct {
    const char *layer;
    const char *may_call;
} allowed[] = {
    {"common", ""},
    {"io", "common"},
    {"format", "common io"},
    {"config", "common"},
    {"source", "common io format config"},
    {"reader", "common io format config source"},
    {"convert", "common io format"},
};

#define MAX_OBJS 128
#define LMIN(a, b) ((a) < (b) ? (a) : (b))

typedef struct {
    size_t n;
    char layer[MAX_OBJS][32];
    char file[MAX_OBJS][64];
    bool dep[MAX_OBJS][MAX_OBJS]; /* dep[a][b]: object a calls a symbol object b defines */
} graph;

static int layer_known(const char *layer)
{
    for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++)
        if (!strcmp(allowed[i].layer, layer)) return (int)i;
    return -1;
}

static bool may_call(const char *from, const char *to)
{
    if (!strcmp(from, to)) return true;
    int i = layer_known(from);
    if (i < 0) return false;
    const char *list = allowed[i].may_call;
    size_t n = strlen(to);
    for (const char *p = list; (p = strstr(p, to)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
    return false;
}

/* The calls that break the layers, one line each in report; @return : how many. */
static int layer_violations(const graph *g, char *report, size_t cap)
{
    int bad = 0;
    size_t len = 0;
    if (cap) report[0] = 0;
    for (size_t a = 0; a < g->n; a++) {
        if (layer_known(g->layer[a]) < 0) {
            bad++;
            len += (size_t)snprintf(report + LMIN(len, cap), cap - LMIN(len, cap),
                                    "unknown layer %s (%s)\n", g->layer[a], g->file[a]);
        }
        for (size_t b = 0; b < g->n; b++) {
            if (!g->dep[a][b] || may_call(g->layer[a], g->layer[b])) continue;
            bad++;
            len += (size_t)snprintf(report + LMIN(len, cap), cap - LMIN(len, cap),
                                    "%s/%s calls %s/%s\n", g->layer[a], g->file[a], g->layer[b],
                                    g->file[b]);
        }
    }
    return bad;
}

/* A file on a call cycle (depth-first search; colour 1 = on the current path), or -1. */
static int cycle_from(const graph *g, size_t a, unsigned char *colour)
{
    colour[a] = 1;
    for (size_t b = 0; b < g->n; b++) {
        if (!g->dep[a][b] || a == b) continue;
        if (colour[b] == 1) return (int)b;
        if (colour[b] == 0) {
            int c = cycle_from(g, b, colour);
            if (c >= 0) return c;
        }
    }
    colour[a] = 2;
    return -1;
}

static int file_cycle(const graph *g)
{
    unsigned char colour[MAX_OBJS] = {0};
    for (size_t a = 0; a < g->n; a++) {
        if (colour[a]) continue;
        int c = cycle_from(g, a, colour);
        if (c >= 0) return c;
    }
    return -1;
}

typedef struct {
    char name[128];
    size_t obj;
} sym_def;

static int cmp_def(const void *x, const void *y)
{
    return strcmp(((const sym_def *)x)->name, ((const sym_def *)y)->name);
}

/* Reads the release objects' symbols into g. @return : false if nm could not be run. */
static bool load_graph(graph *g)
{
    glob_t gl;
    if (glob("build/lib/*/*.o", 0, NULL, &gl) != 0) return false;
    size_t ndefs = 0, cap = 4096;
    sym_def *defs = malloc(cap * sizeof *defs);
    char (*undef)[128] = malloc(16384 * sizeof *undef);
    size_t *undef_obj = malloc(16384 * sizeof *undef_obj), nundef = 0;
    bool ok = defs && undef && undef_obj && gl.gl_pathc <= MAX_OBJS;
    memset(g, 0, sizeof *g);
    for (size_t i = 0; ok && i < gl.gl_pathc; i++) {
        const char *path = gl.gl_pathv[i] + strlen("build/lib/");
        const char *slash = strchr(path, '/');
        snprintf(g->layer[i], sizeof g->layer[i], "%.*s", (int)(slash - path), path);
        snprintf(g->file[i], sizeof g->file[i], "%s", slash + 1);
        char cmd[512], line[512];
        snprintf(cmd, sizeof cmd, "nm %s", gl.gl_pathv[i]);
        FILE *p = popen(cmd, "r");
        if (!p) {
            ok = false;
            break;
        }
        while (fgets(line, sizeof line, p)) {
            char a[128], b[128], c[128];
            int k = sscanf(line, "%127s %127s %127s", a, b, c);
            if (k == 2 && !strcmp(a, "U") && nundef < 16384) {
                snprintf(undef[nundef], sizeof undef[nundef], "%s", b);
                undef_obj[nundef++] = i;
            } else if (k == 3 && strchr("TDBRC", b[0]) && ndefs < cap) {
                snprintf(defs[ndefs].name, sizeof defs[ndefs].name, "%s", c);
                defs[ndefs++].obj = i;
            }
        }
        ok = pclose(p) == 0;
        g->n = i + 1;
    }
    qsort(defs, ndefs, sizeof *defs, cmp_def);
    for (size_t u = 0; ok && u < nundef; u++) {
        sym_def key;
        snprintf(key.name, sizeof key.name, "%s", undef[u]);
        const sym_def *d = bsearch(&key, defs, ndefs, sizeof *defs, cmp_def);
        if (d) g->dep[undef_obj[u]][d->obj] = true;
    }
    free(defs);
    free(undef);
    free(undef_obj);
    globfree(&gl);
    return ok;
}

TEST(lib_layers_call_only_the_layers_below)
{
    static graph g;
    ASSERT(load_graph(&g));
    ASSERT(g.n >= 10);
    char report[4096];
    int bad = layer_violations(&g, report, sizeof report);
    if (bad) test_fail(__FILE__, __LINE__, "layers", report);
    int c = file_cycle(&g);
    if (c >= 0) test_fail(__FILE__, __LINE__, "no call cycle between files", g.file[c]);
}

/* The checks themselves find what they look for (a graph made by hand). */
TEST(lib_layers_checker_reports_upward_calls_and_cycles)
{
    static graph g;
    memset(&g, 0, sizeof g);
    const char *objs[][2] = {{"common", "error.o"},
                             {"format", "parse.o"},
                             {"reader", "pack.o"},
                             {"source", "open.o"}};
    g.n = 4;
    for (size_t i = 0; i < g.n; i++) {
        snprintf(g.layer[i], sizeof g.layer[i], "%s", objs[i][0]);
        snprintf(g.file[i], sizeof g.file[i], "%s", objs[i][1]);
    }
    char report[512];
    g.dep[1][0] = g.dep[2][1] = g.dep[3][1] = true; /* all downward */
    ASSERT_EQ(layer_violations(&g, report, sizeof report), 0);
    ASSERT_EQ(file_cycle(&g), -1);
    g.dep[3][2] = true; /* source calls reader: upward */
    ASSERT_EQ(layer_violations(&g, report, sizeof report), 1);
    ASSERT(strstr(report, "source/open.o calls reader/pack.o") != NULL);
    g.dep[3][2] = false;
    g.dep[0][2] = true; /* common -> reader -> format -> common: a cycle and an upward call */
    ASSERT(file_cycle(&g) >= 0);
    snprintf(g.layer[3], sizeof g.layer[3], "misc");
    ASSERT_EQ(layer_violations(&g, report, sizeof report), 3);
    ASSERT(strstr(report, "unknown layer misc") != NULL);
}
