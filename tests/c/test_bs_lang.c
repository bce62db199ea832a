/*
 * test_bs_lang.c -- CNTK's configuration language as whole files use it: every construct the
 * parser knows (parsed where it is skipped, evaluated where the reader needs it), includes,
 * NDL, syntax errors in skipped parts, composite readers with joined deserializers, corpora,
 * and the real CNTK configuration files in tests/configs loaded with only DataDir given.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int parse_apply(const char *text, const char *section, const char *const *ov, size_t nov,
                       ctf_bsconfig **doc, ctf_config *cfg, ctf_error *err)
{
    ctf_config_init(cfg);
    *doc = NULL;
    int rc = ctf_bsconfig_parse(text, strlen(text), "x.cntk", section, ov, nov, doc, err);
    if (!rc) rc = ctf_bsconfig_apply(*doc, cfg, err);
    return rc;
}

static bool fails_at(const char *text, const char *section, const char *needle, uint64_t line,
                     uint64_t col)
{
    ctf_bsconfig *doc = NULL;
    ctf_config cfg;
    ctf_error err;
    ctf__error_clear(&err);
    int rc = parse_apply(text, section, NULL, 0, &doc, &cfg, &err);
    ctf_bsconfig_free(doc);
    bool ok = rc == CTF_EINVAL && strstr(err.message, needle) && err.line == line &&
              (col == 0 || err.column == col);
    if (!ok)
        fprintf(stderr, "  want %llu:%llu \"%s\"\n  got  %d %s:%llu:%llu \"%s\"\n",
                (unsigned long long)line, (unsigned long long)col, needle, rc, err.path,
                (unsigned long long)err.line, (unsigned long long)err.column, err.message);
    return ok;
}

#define READER_X "reader = [ file = d.ctf; input = [ x = [ dim = 1; format = dense ] ] ]\n"

/* Every construct of the language in the parts that are only parsed. */
static const char skipped_parts[] =
    "/* a block comment\n   over lines */ command = Train:Test   // a line comment\n"
    "precision = \"float\"; deviceId = -1; lr = 0.01*5:0.005; eps = 1.5e-3; big = 2E+4\n"
    "OutDir = ./work; Log = $OutDir$/log; Exp = g2p-01-$deviceId$\n"
    "Train = [\n"
    "  BrainScriptNetworkBuilder = (new ComputationNetwork {\n"
    "    dims[i:0..maxLayer-1] = 2 * i + 1\n"
    "    f(x, y = 1) = x * y + (x .* y) ** 2 % 3 - -y\n"
    "    g{a} = a => a + 1\n"
    "    sq = array [1..3] (i => i * i)\n"
    "    lst = [| 1; 2; 3 |]\n"
    "    cond = if a < 2 && !(b >= 3) || c != 4 then f(1, y = 2) else g{3}(4)\n"
    "    r = { h = x.y[2].z; c = BS.Loop.Previous (h) } with { d = 1 }\n"
    "    shifted = a << 1 >> 2; cmp = a == b; le = a <= b; gt = a > b\n"
    "    model = Sequential (\n"
    "        DenseLayer {200, activation = ReLU} :\n"
    "        LinearLayer {10}\n"
    "    )\n"
    "    s = 'single' + \"double\"\n"
    "  })\n"
    "  NDLNetworkBuilder = [\n"
    "    run = ndlMain\n"
    "    ndlMain = [ W0 = Parameter(10, 5, init = \"uniform\"); L1.tag = @weird ]\n"
    "  ]\n"
    "  SGD = [ epochSize = 0; learningRatesPerSample = $lr$ ]\n"
    "  reader = [ readerType = CNTKTextFormatReader; file = \"$OutDir$/train.ctf\"\n"
    "    input = [ x = [ dim = 2; format = dense ] ] ]\n"
    "]\n";

TEST(bs_parses_every_construct)
{
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(skipped_parts, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "./work/train.ctf");
    ASSERT_EQ(c.num_streams, 1);
    ASSERT_EQ(c.streams[0].dim, 2);
    ctf_bsconfig_free(doc);
}

TEST(bs_syntax_errors_in_skipped_parts)
{
    /* The network is never evaluated, yet its errors are found, with line and column. */
    ASSERT(
        fails_at("net = [\n  f(x) = x +\n]\n" READER_X, NULL, "expected a value, found ']'", 3, 1));
    ASSERT(fails_at("net = [\n  a = Input (3\n  b = 2\n]\n" READER_X, NULL,
                    "expected ',' or ')' to close the '(' on line 2", 3, 3));
    ASSERT(fails_at("net = { a = if x then 1 }\n" READER_X, NULL, "expected 'else'", 1, 25));
    ASSERT(fails_at("net = { a = new 3 }\n" READER_X, NULL, "expected a class name after 'new'", 1,
                    17));
    ASSERT(fails_at("net = { f(1) = 2 }\n" READER_X, NULL, "expected a parameter name", 1, 11));
    ASSERT(fails_at("net = { a = 1 @ 2 }\n" READER_X, NULL, "unexpected character '@'", 1, 15));
    ASSERT(fails_at("/* open\n" READER_X, NULL, "comment without closing */", 1, 1));
    ASSERT(
        fails_at("net = { a = (x). }\n" READER_X, NULL, "expected a member name after '.'", 1, 18));
    ASSERT(fails_at("net = { a = 1 b = 2 }\n" READER_X, NULL,
                    "expected ';' or a line break after the value of 'a', found 'b'", 1, 15));
    /* Limits that keep the parser's and the evaluator's recursion bounded. */
    char *chain = malloc(8000);
    ASSERT(chain);
    strcpy(chain, "net = { a = 1");
    for (int i = 0; i < 600; i++) strcat(chain, " + 1");
    strcat(chain, " }\n" READER_X);
    bool chain_ok = fails_at(chain, NULL, "more than 500 operators in one expression", 1, 0);
    free(chain);
    ASSERT(chain_ok);
    /* NDL that BrainScript cannot parse is skipped where a name says NDL; elsewhere not. */
    static const char ndl_macros[] =
        "ndlMacroDefine = [\n  DNNLayer(inDim, outDim, x)\n  {\n    W = Parameter(outDim, inDim)\n"
        "  }\n]\n" READER_X;
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(ndl_macros, NULL, NULL, 0, &doc, &c, &err), &err);
    ctf_bsconfig_free(doc);
    ASSERT(fails_at(ndl_macros + 3, NULL, "expected '=' after 'DNNLayer', found '{'", 3, 3));
    /* An NDL section that does not parse is skipped, but unbalanced brackets are not. */
    ASSERT(fails_at("NDLNetworkBuilder = [ a = f(1\n" READER_X, NULL, "", 2, 0));
}

TEST(bs_strings_and_substitution)
{
    static const char text[] =
        "Root = \"/data\"\n"
        "Name = 'part'\n"
        "Dim = 3\n"
        "Twice = Dim * 2              # BrainScript arithmetic on a definition\n"
        "Multi = \"a\n"
        "b\"\n"
        "reader = {\n"
        "  file = Root + \"/\" + Name + \"-\" + (if Dim > 2 then \"big\" else \"small\") + "
        "\".ctf\"\n"
        "  maxErrors = Twice + 1\n"
        "  randomizationWindow = $Dim$\n"
        "  input = { x = { dim = Twice; format = dense; alias = '$Name$$Dim$' }\n"
        "            y = { dim = -(-4); format = sparse; alias = y_alias } }\n"
        "}\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(text, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/part-big.ctf");
    ASSERT_U64_EQ(c.max_errors, 7);
    ASSERT_U64_EQ(c.randomization_window, 3);
    ASSERT_EQ(c.streams[0].dim, 6);
    /* $X$ is found without regard to case, innermost block first: here the stream's own dim. */
    ASSERT_STR_EQ(c.streams[0].alias, "part6");
    ASSERT_EQ(c.streams[1].dim, 4);
    ASSERT_STR_EQ(c.streams[1].alias, "y_alias");
    ctf_bsconfig_free(doc);
    /* The command line defines and replaces variables, also inside strings. */
    const char *ov[] = {"Root=/mnt", "Dim=1"};
    ASSERT_OK(parse_apply(text, NULL, ov, 2, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/mnt/part-small.ctf");
    ASSERT_EQ(c.streams[0].dim, 2);
    ctf_bsconfig_free(doc);
    ASSERT(fails_at("reader = { file = 1 / 0; input = { x = { dim = 1; format = dense } } }\n",
                    NULL, "division by zero", 1, 19));
    ASSERT(fails_at("f(x) = x\nreader = { file = f(2); input = { x = { dim = 1; format = dense }"
                    " } }\n",
                    NULL, "a function call cannot be evaluated in a reader section", 2, 19));
    ASSERT(fails_at("reader = { file = \"a\" && true; input = { x = { dim = 1; format = dense } }"
                    " }\n",
                    NULL, "'&&' needs true or false on both sides", 1, 19));
}

TEST(bs_operators_evaluated)
{
    static const char text[] =
        "n = 17; s = \"ab\"\n"
        "reader = [ file = d.ctf\n"
        "  maxErrors = n % 5 + 10 / 4 * 2 - 1        # 2 + 5 - 1\n"
        "  randomize = !(n <= 3) && (s == \"ab\" || false) && n != 4 && 3 >= 3 && 2 < 3\n"
        "  randomizationWindow = (if s != 'ab' then 1 else 2 ** 3) + +1\n"
        "  keepDataInMemory = !true || 1 > 2\n"
        "  input = [ x = [ dim = 1.5e1 * 2; format = dense ] ] ]\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(text, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_U64_EQ(c.max_errors, 6);
    ASSERT(c.randomize);
    ASSERT_U64_EQ(c.randomization_window, 9);
    ASSERT(!c.keep_data_in_memory);
    ASSERT_EQ(c.streams[0].dim, 30);
    ctf_bsconfig_free(doc);
    ASSERT(fails_at("reader = [ file = d; maxErrors = 1 + [ a = 1 ]; input = [ x = [ dim = 1; "
                    "format = dense ] ] ]\n",
                    NULL, "'+' cannot combine \"1\" and a block", 1, 34));
    ASSERT(fails_at("reader = [ file = d; maxErrors = -\"a\"; input = [ x = [ dim = 1; "
                    "format = dense ] ] ]\n",
                    NULL, "'-' needs a number", 1, 34));
    ASSERT(fails_at("reader = [ file = d; maxErrors = if 1 then 2 else 3; input = [ x = [ dim = "
                    "1; format = dense ] ] ]\n",
                    NULL,
                    "the condition of 'if' must be true or "
                    "false",
                    1, 37));
}

TEST(bs_member_access_and_indexing)
{
    static const char text[] =
        "paths = { train = \"t.ctf\"; dims = (5 : 7) }\n"
        "reader = [ file = paths.train; input = [ x = [ dim = paths.dims[1]; "
        "format = dense ] ] ]\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(text, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "t.ctf");
    ASSERT_EQ(c.streams[0].dim, 7);
    ctf_bsconfig_free(doc);
    ASSERT(fails_at(
        "p = { a = { c = 1 } }\nreader = [ file = p.a.b; input = [ x = [ dim = 1; format = "
        "dense ] ] ]\n",
        NULL, "no member 'b'", 2, 19));
    /* A member a block lacks leaves the older meaning: the word as written. */
    ASSERT_OK(parse_apply("p = { a = 1 }\nreader = [ file = p.ctf; input = [ x = [ dim = p.a; "
                          "format = dense ] ] ]\n",
                          NULL, NULL, 0, &doc, &c, &err),
              &err);
    ASSERT_STR_EQ(c.path, "p.ctf");
    ASSERT_EQ(c.streams[0].dim, 1);
    ctf_bsconfig_free(doc);
}

TEST(bs_include_relative_to_the_including_file)
{
    char dir[600], sub[700];
    snprintf(dir, sizeof dir, "%s/inc", test_tmpdir());
    snprintf(sub, sizeof sub, "%s/inc/sub", test_tmpdir());
    mkdir(dir, 0777);
    mkdir(sub, 0777);
    char p[800];
    snprintf(p, sizeof p, "%s/common.cntk", sub);
    FILE *f = fopen(p, "w");
    ASSERT(f);
    fputs("Dim = 4\nnet = (new ComputationNetwork include \"net.bs\")\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/net.bs", sub);
    f = fopen(p, "w");
    ASSERT(f);
    fputs("{ h = Sigmoid (W * x) }\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/main.cntk", dir);
    f = fopen(p, "w");
    ASSERT(f);
    fputs("include \"$Sub$/common.cntk\"\n"
          "reader = [ file = d.ctf; input = [ x = [ dim = $Dim$; format = dense ] ] ]\n",
          f);
    fclose(f);
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    const char *ov[] = {"Sub=sub"};
    ctf_config_init(&c);
    ASSERT_OK(ctf_bsconfig_load(p, NULL, ov, 1, &doc, &err), &err);
    ASSERT_OK(ctf_bsconfig_apply(doc, &c, &err), &err);
    ASSERT_EQ(c.streams[0].dim, 4);
    ctf_bsconfig_free(doc);
    /* CNTK's older form: include=FILE+FILE on a line, found next to the including file. */
    snprintf(p, sizeof p, "%s/a.cntk", sub);
    f = fopen(p, "w");
    ASSERT(f);
    fputs("Dim = 5\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/b.cntk", sub);
    f = fopen(p, "w");
    ASSERT(f);
    fputs("Name = \"b\"\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/old.cntk", sub);
    f = fopen(p, "w");
    ASSERT(f);
    fputs("include=a.cntk+ b.cntk  # two files\n"
          "reader = [ file = $Name$.ctf; input = [ x = [ dim = $Dim$; format = dense ] ] ]\n",
          f);
    fclose(f);
    ctf_config_init(&c);
    ASSERT_OK(ctf_bsconfig_load(p, NULL, NULL, 0, &doc, &err), &err);
    ASSERT_OK(ctf_bsconfig_apply(doc, &c, &err), &err);
    ASSERT_EQ(c.streams[0].dim, 5);
    ASSERT_STR_EQ(c.path, "b.ctf");
    ctf_bsconfig_free(doc);
    ASSERT(fails_at("include=/nonexistent/a.cntk\nreader = [ file = $Q$; input = [ x = [ dim = 1;"
                    " format = dense ] ] ]\n",
                    NULL, "could not be included", 2, 19));
    /* A missing include matters only where its content is needed. */
    ASSERT_OK(parse_apply("include \"/nonexistent/x.cntk\"\n" READER_X, NULL, NULL, 0, &doc, &c,
                          &err),
              &err);
    ctf_bsconfig_free(doc);
    ASSERT(fails_at("include \"/nonexistent/x.cntk\"\nreader = [ file = $Dir$/d; input = [ x = "
                    "[ dim = 1; format = dense ] ] ]\n",
                    NULL, "could not be included (line 1: include \"/nonexistent/x.cntk\"", 2, 19));
    ASSERT(fails_at("include 3\n", NULL, "'include' must be followed by a quoted file name", 1, 9));
}

TEST(bs_sections)
{
    static const char text[] =
        "Train = { reader = { file = a.ctf; input = { x = { dim = 1; format = dense } } }\n"
        "          cvreader = { file = cv.ctf; input = { x = { dim = 1; format = dense } } } }\n"
        "Test = { reader = { file = b.ctf; input = { x = { dim = 1; format = dense } } } }\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_EQ(parse_apply(text, NULL, NULL, 0, &doc, &c, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "several blocks hold a 'reader' ('Train' (line 1), 'Test' "
                                     "(line 3))");
    ASSERT_OK(parse_apply(text, "test", NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "b.ctf");
    ctf_bsconfig_free(doc);
    ASSERT_OK(parse_apply(text, "Train.cvreader", NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "cv.ctf");
    ctf_bsconfig_free(doc);
    const char *ovr[] = {"Dir=/d", "reader=[ file = \"$Dir$/r.ctf\"; input = [ x = [ dim = 1; "
                                   "format = dense ] ] ]"};
    ASSERT_OK(parse_apply(text, NULL, ovr, 2, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/d/r.ctf");
    ctf_bsconfig_free(doc);
    /* A block on the command line is merged into the block of the same name. */
    const char *merge[] = {"Test=[ reader = [ file = m.ctf ] ]"};
    ASSERT_OK(parse_apply(text, "Test", merge, 1, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "m.ctf");
    ASSERT_EQ(c.num_streams, 1);
    ctf_bsconfig_free(doc);
    const char *ov[] = {"Test.reader.file=c.ctf"};
    ASSERT_OK(parse_apply(text, "Test", ov, 1, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "c.ctf");
    ctf_bsconfig_free(doc);
}

TEST(bs_composite_joins_and_corpora)
{
    static const char text[] =
        "DataDir = /d\n"
        "reader = {\n"
        "  verbosity = 0; randomize = false\n"
        "  deserializers = (\n"
        "    [ type = \"CNTKTextFormatDeserializer\"; module = \"CNTKTextFormatReader\"\n"
        "      file = (\"$DataDir$/f1.ctf\" : \"$DataDir$/f2.ctf\")\n"
        "      input = [ features = [ dim = 3; format = dense ] ] ]\n"
        "    :\n"
        "    [ type = \"CNTKTextFormatDeserializer\"; skipSequenceIds = false\n"
        "      file = \"$DataDir$/labels-*.ctf\"\n"
        "      input = [ labels = [ dim = 2; format = sparse; alias = l ] ] ]\n"
        "  )\n"
        "}\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(text, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/d/f1.ctf");
    ASSERT_EQ(c.num_paths, 2);
    ASSERT_STR_EQ(c.paths[1], "/d/f2.ctf");
    ASSERT_EQ(c.num_streams, 1);
    ASSERT_STR_EQ(c.streams[0].name, "features");
    ASSERT_EQ(c.num_joins, 1);
    ASSERT_EQ(c.joins[0].num_paths, 1);
    ASSERT_STR_EQ(c.joins[0].paths[0], "/d/labels-*.ctf");
    ASSERT_EQ(c.joins[0].num_streams, 1);
    ASSERT_STR_EQ(c.joins[0].streams[0].name, "labels");
    ASSERT(c.joins[0].streams[0].is_sparse);
    ASSERT_STR_EQ(c.joins[0].origin, "x.cntk:9:5");
    ASSERT(!c.randomize);
    ASSERT(!c.joins[0].skip_sequence_ids);
    ctf_bsconfig_free(doc);
    /* skipSequenceIds at the reader level applies to every deserializer that does not say. */
    static const char lines[] =
        "reader = { skipSequenceIds = true; deserializers = (\n"
        "  { type = \"CNTKTextFormatDeserializer\"; file = a; input = { x = { dim = 1;"
        " format = dense } } } :\n"
        "  { type = \"CNTKTextFormatDeserializer\"; file = b; input = { y = { dim = 1;"
        " format = dense } } } :\n"
        "  { type = \"CNTKTextFormatDeserializer\"; file = c; skipSequenceIds = false\n"
        "    input = { z = { dim = 1; format = dense } } } ) }\n";
    ASSERT_OK(parse_apply(lines, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT(c.skip_sequence_ids);
    ASSERT_EQ(c.num_joins, 2);
    ASSERT(c.joins[0].skip_sequence_ids);
    ASSERT(!c.joins[1].skip_sequence_ids);
    ctf_bsconfig_free(doc);
    /* Unquoted patterns are words too. */
    ASSERT_OK(parse_apply("reader = [ file = data/*.ctf /* a comment */; input = [ x = [ dim = 1;"
                          " format = dense ] ] ]\n",
                          NULL, NULL, 0, &doc, &c, &err),
              &err);
    ASSERT_STR_EQ(c.path, "data/*.ctf");
    ASSERT_EQ(c.num_paths, 1);
    ctf_bsconfig_free(doc);
    /* A glob alone is a one-entry corpus; an unsupported deserializer is named with its place. */
    ASSERT_OK(parse_apply("reader = [ file = \"part-*.ctf\"; input = [ x = [ dim = 1; format = "
                          "dense ] ] ]\n",
                          NULL, NULL, 0, &doc, &c, &err),
              &err);
    ASSERT_EQ(c.num_paths, 1);
    ASSERT_STR_EQ(c.paths[0], "part-*.ctf");
    ctf_bsconfig_free(doc);
    ASSERT(fails_at("reader = { deserializers = (\n"
                    "  { type = \"CNTKTextFormatDeserializer\"; file = a; input = { x = { dim = 1;"
                    " format = dense } } } :\n"
                    "  { type = \"HTKFeatureDeserializer\"; file = b } ) }\n",
                    NULL, "deserializers[1].type: \"HTKFeatureDeserializer\" is not supported", 3,
                    12));
    ASSERT(fails_at("reader = { deserializers = (\n"
                    "  { type = \"CNTKTextFormatDeserializer\"; file = a; input = { x = { dim = 1;"
                    " format = dense } } } :\n"
                    "  { type = \"CNTKTextFormatDeserializer\"; file = b; maxErrors = 3\n"
                    "    input = { x = { dim = 1; format = dense } } } ) }\n",
                    NULL,
                    "deserializers[1].maxErrors: reader parameters apply to all deserializers", 3,
                    52));
    ASSERT(fails_at("reader = { deserializers = (\n"
                    "  { type = \"CNTKTextFormatDeserializer\"; file = a; input = { x = { dim = 1;"
                    " format = dense } } } :\n"
                    "  { type = \"CNTKTextFormatDeserializer\"; file = b\n"
                    "    input = { x = { dim = 1; format = dense } } } ) }\n",
                    NULL,
                    "deserializers[1].input.x: the stream name is also used by deserializers[0]", 4,
                    15));
}

/* The real CNTK configuration files, with small data files in a temporary DataDir. */
static const char *write_data(const char *name, const char *text)
{
    return test_write_str(name, text);
}

static void check_config(const char *file, const char *section, const char *want_file,
                         size_t streams, size_t dim0)
{
    char path[300], dd[700];
    snprintf(path, sizeof path, "tests/configs/%s", file);
    snprintf(dd, sizeof dd, "DataDir=%s", test_tmpdir());
    const char *ov[] = {dd};
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ctf_config_init(&c);
    int rc = ctf_bsconfig_load(path, section, ov, 1, &doc, &err);
    if (!rc) rc = ctf_bsconfig_apply(doc, &c, &err);
    if (rc)
        fprintf(stderr, "  %s [%s]: %s:%llu:%llu: %s\n", file, section ? section : "", err.path,
                (unsigned long long)err.line, (unsigned long long)err.column, err.message);
    ASSERT_OK(rc, &err);
    const char *base = strrchr(c.path, '/');
    if (strcmp(base ? base + 1 : c.path, want_file) || c.num_streams != streams ||
        c.streams[0].dim != dim0) {
        fprintf(stderr, "  %s [%s]: got %s, %zu streams, dim %zu\n", file, section, c.path,
                c.num_streams, c.streams[0].dim);
        ASSERT(0);
    }
    /* The reader opens on the data the section names. */
    ctf_reader *r = NULL;
    c.num_threads = 0;
    rc = ctf_reader_open(&c, &r, &err);
    ASSERT_OK(rc, &err);
    ctf_reader_free(r);
    ctf_bsconfig_free(doc);
}

TEST(bs_real_cntk_configs)
{
    char dense[4000] = "|features";
    for (int i = 0; i < 784; i++) strcat(dense, " 1");
    strcat(dense, " |labels 1 0 0 0 0 0 0 0 0 0\n");
    write_data("Train-28x28_cntk_text.txt", dense);
    write_data("Test-28x28_cntk_text.txt", dense);
    write_data("ATIS.train.cntk.sparse", "0 |PW 1:1 |CW 2:1 |NW 3:1 |L 4:1\n");
    write_data("ATIS.test.cntk.sparse", "0 |PW 1:1 |CW 2:1 |NW 3:1 |L 4:1\n");
    write_data("cmudict-0.7b.train-dev-20-21.ctf", "0 |S0 3:1 |S1 4:1\n");
    write_data("cmudict-0.7b.train-dev-1-21.ctf", "0 |S0 3:1 |S1 4:1\n");
    write_data("cmudict-0.7b.test.ctf", "0 |S0 3:1 |S1 4:1\n");
    check_config("01_OneHidden.cntk", "trainNetwork", "Train-28x28_cntk_text.txt", 2, 784);
    check_config("01_OneHidden.cntk", "testNetwork", "Test-28x28_cntk_text.txt", 2, 784);
    check_config("ATIS.cntk", "Train", "ATIS.train.cntk.sparse", 4, 944);
    check_config("ATIS.cntk", "Output", "ATIS.test.cntk.sparse", 4, 944);
    check_config("ATIS.cntk", "Test", "ATIS.test.cntk.sparse", 4, 944);
    check_config("G2P.cntk", "train", "cmudict-0.7b.train-dev-20-21.ctf", 2, 69);
    check_config("G2P.cntk", "write", "cmudict-0.7b.test.ctf", 2, 69);
    check_config("G2P.cntk", "train.cvreader", "cmudict-0.7b.train-dev-1-21.ctf", 2, 69);
    /* lr_bs names its files relative to the working directory. */
    char cwd[600];
    ASSERT(getcwd(cwd, sizeof cwd));
    char lr[800];
    snprintf(lr, sizeof lr, "%s/tests/configs/lr_bs.cntk", cwd);
    write_data("Train_cntk_text.txt", "|features 1 2 |labels 1\n");
    write_data("Test_cntk_text.txt", "|features 1 2 |labels 0\n");
    ASSERT_EQ(chdir(test_tmpdir()), 0);
    static const char *const secs[] = {"Train", "Test", "Output"};
    for (int i = 0; i < 3; i++) {
        ctf_bsconfig *doc = NULL;
        ctf_config c;
        ctf_error err;
        ctf_config_init(&c);
        int rc = ctf_bsconfig_load(lr, secs[i], NULL, 0, &doc, &err);
        if (!rc) rc = ctf_bsconfig_apply(doc, &c, &err);
        if (!rc) ASSERT_STR_EQ(c.path, i ? "Test_cntk_text.txt" : "Train_cntk_text.txt");
        if (!rc) ASSERT_EQ(c.streams[0].dim, 2);
        ctf_bsconfig_free(doc);
        if (rc) {
            ASSERT_EQ(chdir(cwd), 0);
            ASSERT_OK(rc, &err);
        }
    }
    ASSERT_EQ(chdir(cwd), 0);
    /* Without a section, the candidates are listed. */
    ctf_bsconfig *doc = NULL;
    ctf_error err;
    ASSERT_EQ(ctf_bsconfig_load("tests/configs/ATIS.cntk", NULL, NULL, 0, &doc, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "several blocks hold a 'reader' ('Train' (line 22), "
                                     "'Output' (line 138), 'Test' (line 185))");
}

static int load_own(const char *file, const char *section, ctf_bsconfig **doc, ctf_config *c,
                    ctf_error *err)
{
    char path[300];
    snprintf(path, sizeof path, "tests/configs/ctfio/%s", file);
    const char *ov[] = {"DataDir=/data"};
    ctf_config_init(c);
    int rc = ctf_bsconfig_load(path, section, ov, 1, doc, err);
    if (!rc) rc = ctf_bsconfig_apply(*doc, c, err);
    return rc;
}

TEST(bs_own_cntk_style_configs)
{
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    /* Inline NDL (with a construct BrainScript lacks), unquoted paths, randomize auto/none. */
    ASSERT_OK(load_own("ndl_inline.cntk", "Train", &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/Train-28x28.txt");
    ASSERT(c.randomize);
    ASSERT_EQ(c.num_streams, 2);
    ASSERT_EQ(c.streams[0].dim, 784);
    ctf_bsconfig_free(doc);
    ASSERT_OK(load_own("ndl_inline.cntk", "test", &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/Test-28x28.txt");
    ASSERT(!c.randomize);
    ctf_bsconfig_free(doc);
    /* Include, a block named by its definition, a corpus and a joined deserializer. */
    ASSERT_OK(load_own("composite.cntk", NULL, &doc, &c, &err), &err);
    ASSERT_EQ(c.num_paths, 2);
    ASSERT_STR_EQ(c.paths[0], "/data/features-a.ctf");
    ASSERT_STR_EQ(c.paths[1], "/data/features-b.ctf");
    ASSERT_EQ(c.num_streams, 1);
    ASSERT_EQ(c.streams[0].dim, 8);
    ASSERT_EQ(c.num_joins, 1);
    ASSERT_STR_EQ(c.joins[0].paths[0], "/data/labels.ctf");
    ASSERT_STR_EQ(c.joins[0].streams[0].alias, "l");
    ASSERT_STR_CONTAINS(c.joins[0].origin, "composite.cntk:28:17");
    ASSERT(!c.randomize);
    ASSERT_EQ(c.trace_level, 0);
    ctf_bsconfig_free(doc);
    /* Values computed from definitions of enclosing blocks. */
    ASSERT_OK(load_own("functions.cntk", NULL, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/sparse.ctf");
    ASSERT_U64_EQ(c.max_errors, 2);
    ASSERT_U64_EQ(c.chunk_size_bytes, 1048576);
    ASSERT_EQ(c.streams[0].dim, 33);
    ASSERT(c.streams[0].is_sparse);
    ASSERT_STR_EQ(c.streams[1].alias, "T");
    ctf_bsconfig_free(doc);
    /* The same from the command line tool. */
    const char *cli = getenv("CTFIO_CLI");
    if (cli) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd,
                 "%s stats --config tests/configs/ATIS.cntk DataDir=/nonexistent "
                 "2>&1 | grep -q \"select one by its section name\"",
                 cli);
        ASSERT_EQ(system(cmd), 0);
        snprintf(cmd, sizeof cmd,
                 "%s stats --config tests/configs/ATIS.cntk --section Test "
                 "DataDir=/nonexistent 2>&1 | grep -q \"/nonexistent/ATIS.test.cntk.sparse\"",
                 cli);
        ASSERT_EQ(system(cmd), 0);
    }
}

TEST(bs_reader_by_reference_and_old_arrays)
{
    static const char text[] =
        "common = [ file = c.ctf; input = [ x = [ dim = 1; format = dense ] ] ]\n"
        "byName = [ reader = common ]\n"
        "bySubst = [ reader = $common$ ]\n"
        "list = [ reader = [ file = (;a.ctf;b.ctf;c.ctf)\n"
        "  input = [ x = [ dim = 1; format = dense ] ] ] ]\n"
        "lines = [ reader = [ file = (a.ctf\n  b.ctf ; c.ctf)\n"
        "  input = [ x = [ dim = 1; format = dense ] ] ] ]\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(text, "byName", NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "c.ctf");
    ctf_bsconfig_free(doc);
    ASSERT_OK(parse_apply(text, "bySubst", NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "c.ctf");
    ctf_bsconfig_free(doc);
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(parse_apply(text, i ? "lines" : "list", NULL, 0, &doc, &c, &err), &err);
        ASSERT_EQ(c.num_paths, 3);
        ASSERT_STR_EQ(c.paths[0], "a.ctf");
        ASSERT_STR_EQ(c.paths[2], "c.ctf");
        ctf_bsconfig_free(doc);
    }
    /* A lambda or `new` in a reader is refused where it is written. */
    ASSERT(fails_at("reader = [ file = x => x; input = [ x = [ dim = 1; format = dense ] ] ]\n",
                    NULL, "a function cannot be evaluated in a reader section", 1, 19));
    ASSERT(fails_at("reader = [ file = new X [ ]; input = [ x = [ dim = 1; format = dense ] ] ]\n",
                    NULL, "a 'new' object cannot be evaluated in a reader section", 1, 19));
}

/* The forms CNTK's own configuration files use that a reader never needs, each in a file
 * written in CNTK's style: digit-leading section names, comma lists in parentheses, a comment
 * glued inside an expression, a call whose '(' opens on the next line, and a section closed
 * early whose reader is found through the enclosing blocks. */
TEST(bs_cntk_file_forms)
{
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    static const char *const digit_sections[] = {"1x1", "10x10_dense",
                                                 "5x10_and_5x5_jagged_composite"};
    static const char *const want[] = {"/data/1x1.txt", "/data/10x10_dense.txt",
                                       "/data/5x10_jagged.txt"};
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(load_own("reader_tests.cntk", digit_sections[i], &doc, &c, &err), &err);
        ASSERT_STR_EQ(c.path, want[i]);
        ASSERT_EQ(c.num_joins, i == 2 ? 1 : 0);
        ctf_bsconfig_free(doc);
    }
    /* Sample-based window without a size: the whole data set. */
    ASSERT_OK(load_own("reader_tests.cntk", "10x10_dense", &doc, &c, &err), &err);
    ASSERT(c.window_in_samples);
    ASSERT(c.randomization_window >= (UINT64_C(1) << 62));
    ctf_bsconfig_free(doc);

    ASSERT_OK(load_own("network_forms.cntk", "train", &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/train.ctf");
    ASSERT_U64_EQ(c.chunk_size_bytes, 1048576);
    ASSERT_EQ(c.num_streams, 2);
    ctf_bsconfig_free(doc);
    ASSERT_OK(load_own("network_forms.cntk", "write", &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/test.ctf");
    ctf_bsconfig_free(doc);

    ASSERT_OK(load_own("early_close.cntk", "Train", &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/early.ctf");
    ASSERT_EQ(c.streams[0].dim, 3);
    ctf_bsconfig_free(doc);
    ASSERT_OK(load_own("early_close.cntk", NULL, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/early.ctf");
    ctf_bsconfig_free(doc);

    /* The same forms inline, with what stays an error. */
    static const char forms[] =
        "1 = 2; 2x = (a, b,\n  c)\n"
        "net = [ m = f\n  (x, y = 2)\n  p = (1 : 2/*two*/) ; glob = data/*.ctf ]\n"
        "reader = [ file = data/*.ctf; input = [ x = [ dim = 1; format = dense ] ] ]\n";
    ASSERT_OK(parse_apply(forms, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_EQ(c.num_paths, 1);
    ASSERT_STR_EQ(c.path, "data/*.ctf");
    ctf_bsconfig_free(doc);
    /* Inside parentheses a line break still separates items: '(' there starts the next. */
    ASSERT_OK(parse_apply("reader = [ file = (a.ctf\n  (b.ctf)); input = [ x = [ dim = 1; "
                          "format = dense ] ] ]\n",
                          NULL, NULL, 0, &doc, &c, &err),
              &err);
    ASSERT_EQ(c.num_paths, 2);
    ctf_bsconfig_free(doc);
    ASSERT(fails_at("a = 1\n12ab\n" READER_X, NULL, "expected a name", 2, 1));
    ASSERT_OK(parse_apply("t = [ a = 1\n] ]\n" READER_X, "t", NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "d.ctf");
    ctf_bsconfig_free(doc);
    ASSERT(fails_at("t = [ a = (1 ] )\n" READER_X, NULL, "expected ')' to close", 1, 14));
}

/* Each definition is evaluated once; evaluation work and included bytes are bounded. */
TEST(bs_evaluation_is_bounded)
{
    char *text = malloc(16000);
    ASSERT(text);
    strcpy(text, "a = 1\n");
    static const char names[] = "abcde";
    for (int k = 1; k < 5; k++) {
        size_t n = strlen(text);
        n += (size_t)sprintf(text + n, "%c = %c", names[k], names[k - 1]);
        for (int i = 1; i < 200; i++) n += (size_t)sprintf(text + n, "+%c", names[k - 1]);
        text[n++] = '\n';
        text[n] = 0;
    }
    strcat(text, "reader = [ randomizationSeed = e; file = \"d.ctf\"\n"
                 "  input = [ x = [ dim = 1; format = dense ] ] ]\n");
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(text, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_U64_EQ(c.randomization_seed, UINT64_C(1600000000));
    ctf_bsconfig_free(doc);
    /* A value that is itself exponential in size is refused, not built. */
    strcpy(text, "l0 = [ x = 1 ]\n");
    for (int k = 1; k <= 7; k++) {
        sprintf(text + strlen(text), "l%d = [", k);
        for (int i = 0; i < 8; i++) sprintf(text + strlen(text), " q%d = $l%d$;", i, k - 1);
        strcat(text, " ]\n");
    }
    strcat(text, "reader = [ file = \"d.ctf\"; maxErrors = l7.q0.q1.q2.q3.q4.q5.q6.x\n"
                 "  input = [ x = [ dim = 1; format = dense ] ] ]\n");
    ctf_config_init(&c);
    int rc = ctf_bsconfig_parse(text, strlen(text), "x.cntk", NULL, NULL, 0, &doc, &err);
    free(text);
    ctf_bsconfig_free(doc);
    ASSERT_EQ(rc, CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "takes more than 200000 steps");
    ASSERT_STR_EQ(err.path, "x.cntk");

    /* Include fan-out: twelve files, each including the next four times. */
    char dir[] = "/tmp/ctfio_bs_fanXXXXXX";
    ASSERT(mkdtemp(dir));
    char path[300];
    for (int k = 0; k < 12; k++) {
        snprintf(path, sizeof path, "%s/f%d.inc", dir, k);
        FILE *f = fopen(path, "w");
        ASSERT(f);
        fprintf(f, "v%d = %d\n", k, k);
        if (k < 11)
            for (int i = 0; i < 4; i++) fprintf(f, "include \"f%d.inc\"\n", k + 1);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/main.cntk", dir);
    FILE *f = fopen(path, "w");
    ASSERT(f);
    fprintf(f, "include \"f0.inc\"\n" READER_X);
    fclose(f);
    rc = ctf_bsconfig_load(path, NULL, NULL, 0, &doc, &err);
    ctf_bsconfig_free(doc);
    ASSERT_EQ(rc, CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "more than 1024 includes");
    ASSERT_STR_CONTAINS(err.path, ".inc");
    for (int k = 0; k < 12; k++) {
        snprintf(path, sizeof path, "%s/f%d.inc", dir, k);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/main.cntk", dir);
    unlink(path);
    rmdir(dir);
}

/* A NUL inside a quoted value and integers beyond what a double holds exactly. */
TEST(bs_values_exact)
{
    static const char nul[] = "reader = [ file = \"a.ctf\0.evil\"\n"
                              "  input = [ x = [ dim = 1; format = dense ] ] ]\n";
    ctf_bsconfig *doc = NULL;
    ctf_error err;
    ASSERT_EQ(ctf_bsconfig_parse(nul, sizeof nul - 1, "n.cntk", NULL, NULL, 0, &doc, &err),
              CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "a NUL byte inside a string");
    ASSERT_EQ(err.line, 1);
    ASSERT_EQ(err.column, 25);
    ctf_bsconfig_free(doc);

    ctf_config c;
    ASSERT(fails_at("reader = [ randomizationSeed = 9223372036854775807 + 1 - "
                    "9223372036854775805\n  file = d.ctf; input = [ x = [ dim = 1; format = "
                    "dense ] ] ]\n",
                    NULL, "integer overflow", 1, 0));
    ASSERT(fails_at("reader = [ maxErrors = -9223372036854775807 - 2\n  file = d.ctf; "
                    "input = [ x = [ dim = 1; format = dense ] ] ]\n",
                    NULL, "integer overflow", 1, 0));
    ASSERT(fails_at("reader = [ maxErrors = 3 ** 40\n  file = d.ctf; input = [ x = [ dim = 1; "
                    "format = dense ] ] ]\n",
                    NULL, "integer overflow", 1, 0));
    ASSERT_OK(parse_apply("n = 9007199254740993\n"
                          "reader = [ randomizationSeed = 9223372036854775807 - "
                          "9223372036854775805 + 1\n  maxErrors = n - 0; chunkSizeInBytes = "
                          "(n + 1) / 2 * 2 - 1\n  traceLevel = 7 % 4 - 2 ** 0\n"
                          "  file = d.ctf; input = [ x = [ dim = 1; format = dense ] ] ]\n",
                          NULL, NULL, 0, &doc, &c, &err),
              &err);
    ASSERT_U64_EQ(c.randomization_seed, 3);
    ASSERT_U64_EQ(c.max_errors, UINT64_C(9007199254740993));
    ASSERT_U64_EQ(c.chunk_size_bytes, UINT64_C(9007199254740993));
    ASSERT_EQ(c.trace_level, 2);
    ctf_bsconfig_free(doc);
    /* A quotient with a remainder is still a real number, as in BrainScript. */
    ASSERT_OK(parse_apply("reader = [ randomizationWindow = 7 / 2 * 2\n  file = d.ctf; "
                          "input = [ x = [ dim = 1; format = dense ] ] ]\n",
                          NULL, NULL, 0, &doc, &c, &err),
              &err);
    ASSERT_U64_EQ(c.randomization_window, 7);
    ctf_bsconfig_free(doc);
}

TEST(bs_legacy_unquoted_values)
{
    /* CNTK's older syntax, as its own configuration files still write it: `RootDir = .` and a
     * writer's format, unquoted to the end of its line (spaces, '%', '|' and escapes kept as
     * written); a bracket that closes a section on the same line is not part of the value. */
    static const char text[] =
        "RootDir = .\n"
        "Prologue=%d\\t|w.shape %x\\n%d\\t|w\\s\n"
        "write = [\n"
        "  writer = [ format = [ type = category\n"
        "    sequencePrologue=%d\\t|w.shape %x\\n%d\\t|w\\s\n"
        "    sequenceEpilogue = \\n\n"
        "    elementSeparator = %s ] ]\n"
        "]\n"
        "reader = [\n"
        "  file = $RootDir$/data.ctf\n"
        "  input = [ x = [ dim = 3 ; format = dense ; alias = \"$Prologue$\" ] ]\n"
        "]\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(parse_apply(text, "reader", NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "./data.ctf");
    ASSERT_STR_EQ(c.streams[0].alias, "%d\\t|w.shape %x\\n%d\\t|w\\s");
    ctf_bsconfig_free(doc);
    /* Still an error where an expression is expected and the text is none. */
    ASSERT(fails_at("reader = { file = a % ; input = { x = { dim = 1; format = dense } } }\n", NULL,
                    "", 1, 0));
}
