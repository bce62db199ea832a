/*
 * test_config.c -- ctf_config defaults and validation, and the reader section of configuration
 * files: the three reader forms of CNTK's documentation, the conformance corpus, $var$
 * substitution, overrides, sections, every validation and parse error, and allocation failures
 * at every point of a parse. The language as whole files use it is tested in test_bs_lang.c.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <unistd.h>

#include <glob.h>
#include <stdlib.h>

/* Parses text (no section unless given) and applies it onto a fresh default config. */
static int load_apply(const char *text, const char *section, const char *const *ov, size_t nov,
                      ctf_bsconfig **doc, ctf_config *cfg, ctf_error *err)
{
    ctf_config_init(cfg);
    int rc = ctf_bsconfig_parse(text, strlen(text), "t.cntk", section, ov, nov, doc, err);
    if (rc) return rc;
    return ctf_bsconfig_apply(*doc, cfg, err);
}

/* Expects load_apply to fail with CTF_EINVAL, a message containing needle and line `line`. */
static bool fails_with(const char *text, const char *const *ov, size_t nov, const char *needle,
                       uint64_t line)
{
    ctf_bsconfig *doc = NULL;
    ctf_config cfg;
    ctf_error err;
    ctf__error_clear(&err);
    int rc = load_apply(text, NULL, ov, nov, &doc, &cfg, &err);
    ctf_bsconfig_free(doc);
    bool ok = rc == CTF_EINVAL && strstr(err.message, needle) && err.line == line &&
              strcmp(err.path, "t.cntk") == 0;
    if (!ok)
        fprintf(stderr,
                "  want EINVAL line %llu \"%s\"\n  got  %d t.cntk?%s line %llu col %llu "
                "\"%s\"\n",
                (unsigned long long)line, needle, rc, err.path, (unsigned long long)err.line,
                (unsigned long long)err.column, err.message);
    return ok;
}

#define EXPECT_FAIL(text, needle, line) ASSERT(fails_with(text, NULL, 0, needle, line))

/* A valid one-stream reader, with room for one extra line of parameters. */
#define READER(extra) \
    "reader = [\n readerType = \"CNTKTextFormatReader\"\n file = \"d.ctf\"\n" extra "\n" \
    " input = [ x = [ dim = 3; format = \"dense\" ] ]\n]\n"

/*======================================================================
 * ctf_config_init / ctf_config_validate
 *====================================================================*/

TEST(config_init_defaults)
{
    ctf_config c;
    memset(&c, 0xab, sizeof c);
    ctf_config_init(&c);
    ASSERT(c.path == NULL && c.streams == NULL && c.num_streams == 0);
    ASSERT_EQ(c.precision, CTF_FLOAT32);
    ASSERT(c.randomize);
    ASSERT_U64_EQ(c.randomization_seed, 0);
    ASSERT_U64_EQ(c.randomization_window, 128);
    ASSERT(!c.window_in_samples && !c.skip_sequence_ids);
    ASSERT_U64_EQ(c.max_errors, 0);
    ASSERT_EQ(c.trace_level, 1);
    ASSERT_U64_EQ(c.chunk_size_bytes, 33554432u);
    ASSERT(!c.keep_data_in_memory && !c.frame_mode && !c.cache_index);
    ASSERT_U64_EQ(c.max_samples, CTF_INFINITELY_REPEAT);
    ASSERT_U64_EQ(c.max_sweeps, CTF_INFINITELY_REPEAT);
    ASSERT_EQ(c.truncation_length, 0);
    ASSERT_EQ(c.num_workers, 1);
    ASSERT_EQ(c.worker_rank, 0);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ASSERT_EQ(c.num_threads, cores > 0 ? cores : 1); /* one parse thread per core */
    ASSERT_EQ(c.prefetch_chunks, CTF_PREFETCH_AUTO); /* 2 * num_threads + 2 at open */
    ASSERT(c.log == NULL && c.log_user == NULL);
    ctf_config_init(NULL);
}

static ctf_stream_def vstreams[CTF_MAX_STREAMS + 1];
static char vnames[CTF_MAX_STREAMS + 1][24];

static void valid_config(ctf_config *c, size_t n)
{
    ctf_config_init(c);
    c->path = "d.ctf";
    for (size_t i = 0; i < n; i++) {
        snprintf(vnames[i], sizeof vnames[i], "s%zu", i);
        vstreams[i] = (ctf_stream_def){vnames[i], NULL, 3, false, false};
    }
    c->streams = vstreams;
    c->num_streams = n;
}

static bool invalid(const ctf_config *c, const char *needle)
{
    ctf_error err;
    int rc = ctf_config_validate(c, &err);
    if (rc == CTF_EINVAL && strstr(err.message, needle)) return true;
    fprintf(stderr, "  want \"%s\", got %d \"%s\"\n", needle, rc, rc ? err.message : "");
    return false;
}

TEST(config_validate_ok)
{
    ctf_config c;
    ctf_error err;
    valid_config(&c, 2);
    ASSERT_OK(ctf_config_validate(&c, &err), &err);
    valid_config(&c, CTF_MAX_STREAMS);
    ASSERT_OK(ctf_config_validate(&c, &err), &err);
    valid_config(&c, 1);
    vstreams[0].is_sparse = true;
    vstreams[0].dim = INT32_MAX;
    c.max_samples = CTF_FULL_DATA_SWEEP;
    c.num_workers = 4;
    c.worker_rank = 3;
    c.precision = CTF_FLOAT64;
    c.trace_level = 2;
    ASSERT_OK(ctf_config_validate(&c, &err), &err);
}

TEST(config_validate_errors)
{
    ctf_config c;
    ASSERT(invalid(NULL, "NULL configuration"));
    valid_config(&c, 2);
    c.path = NULL;
    ASSERT(invalid(&c, "config.path: the data file is required (got NULL)"));
    c.path = "";
    ASSERT(invalid(&c, "config.path: the data file is required (got \"\")"));
    valid_config(&c, 0);
    ASSERT(invalid(&c, "config.streams: at least one input stream is required"));
    valid_config(&c, CTF_MAX_STREAMS + 1);
    ASSERT(invalid(&c, "config.num_streams: at most 64 streams are supported (got 65)"));
    valid_config(&c, 2);
    vstreams[1].name = NULL;
    ASSERT(invalid(&c, "config.streams[1].name: must be a non-empty string (got NULL)"));
    vstreams[1].name = "";
    ASSERT(invalid(&c, "config.streams[1].name: must be a non-empty string"));
    valid_config(&c, 2);
    vstreams[1].dim = 0;
    ASSERT(invalid(&c, "config.streams[1].dim: must be > 0 (got 0)"));
    valid_config(&c, 2);
    vstreams[1].is_sparse = true;
    vstreams[1].dim = (size_t)INT32_MAX + 1;
    ASSERT(invalid(&c, "config.streams[1].dim: a sparse dimension must be <= 2147483647"));
    valid_config(&c, 3);
    vstreams[2].name = "s0";
    ASSERT(invalid(&c, "config.streams[2].name: duplicate name 's0' (also used by "
                       "config.streams[0])"));
    valid_config(&c, 2);
    vstreams[0].name = "features";
    vstreams[0].alias = "x";
    vstreams[1].name = "labels";
    vstreams[1].alias = "x";
    ASSERT(invalid(&c, "input.labels.alias: duplicate alias 'x' (also used by input.features)"));
    vstreams[1].alias = "";  /* "" means the name */
    vstreams[0].alias = "labels";
    ASSERT(invalid(&c, "input.labels.alias: duplicate alias 'labels' (also used by "
                       "input.features)"));
    valid_config(&c, 2);
    vstreams[0].defines_mb_size = vstreams[1].defines_mb_size = true;
    ASSERT(invalid(&c, "input.s1.definesMBSize: only one stream may define the minibatch size "
                       "(also set on input.s0)"));
    valid_config(&c, 1);
    c.max_samples = 100;
    c.max_sweeps = 2;
    ASSERT(invalid(&c, "config.max_samples: cannot be combined with config.max_sweeps"));
    valid_config(&c, 1);
    c.chunk_size_bytes = 0; /* refused here, so Python, the CLI and BrainScript agree */
    ASSERT(invalid(&c, "config.chunk_size_bytes: must be a positive integer (got 0)"));
    valid_config(&c, 1);
    c.frame_mode = true;
    c.truncation_length = 20;
    ASSERT(invalid(&c, "config.truncation_length: truncation cannot be combined with "
                       "frame_mode (got 20)"));
    valid_config(&c, 1);
    c.num_workers = 0;
    ASSERT(invalid(&c, "config.num_workers: must be a positive integer (got 0)"));
    valid_config(&c, 1);
    c.num_workers = 2;
    c.worker_rank = 2;
    ASSERT(invalid(&c, "config.worker_rank: must be < num_workers (got rank 2 with 2 workers)"));
    valid_config(&c, 1);
    c.precision = (ctf_precision)3;
    ASSERT(invalid(&c, "config.precision: must be CTF_FLOAT32 (4) or CTF_FLOAT64 (8) (got 3)"));
    valid_config(&c, 1);
    c.trace_level = 3;
    ASSERT(invalid(&c, "config.trace_level: must be between 0 and 2 (got 3)"));
    c.trace_level = -1;
    ASSERT(invalid(&c, "config.trace_level: must be between 0 and 2 (got -1)"));
}

/*======================================================================
 * The seed's examples
 *====================================================================*/

static const char seed_simple[] =
    "reader = [\n"
    "    readerType = \"CNTKTextFormatReader\"\n"
    "    file = \"c:\\mydata\\SampleInput.txt\" # See the second example for Linux path example\n"
    "\n"
    "    # IMPORTANT!\n"
    "    # All inputs are grouped within \"input\" sub-section.\n"
    "    input = [\n"
    "        A = [\n"
    "            dim = 5\n"
    "            format = \"dense\"\n"
    "        ]\n"
    "        B = [\n"
    "            dim = 1000000\n"
    "            format = \"sparse\"\n"
    "        ]\n"
    "        C = [\n"
    "            dim = 1\n"
    "            format = \"dense\"\n"
    "        ]\n"
    "    ]\n"
    "]\n"
    "# the rest of the cntk config ...\n";

static const char seed_extended[] =
    "precision=\"double\"\n"
    "\n"
    "reader = [\n"
    "    readerType = \"CNTKTextFormatReader\"\n"
    "    file = \"/home/mydata/SampleInput.txt\" # See the first example for Windows style "
    "path example\n"
    "    randomize = true\n"
    "    randomizationWindow = 30\n"
    "    skipSequenceIds = false\n"
    "    maxErrors = 100\n"
    "    traceLevel = 2\n"
    "\n"
    "    chunkSizeInBytes = 1024\n"
    "\n"
    "    keepDataInMemory = true\n"
    "    frameMode = false\n"
    "\n"
    "    input = [\n"
    "        Some_very_long_input_name = [\n"
    "            alias = \"a\"\n"
    "            dim = 3\n"
    "            format = \"dense\"\n"
    "        ]\n"
    "        Some_other_also_very_long_input_name = [\n"
    "            alias = \"b\"\n"
    "            dim = 2\n"
    "            format = \"dense\"\n"
    "        ]\n"
    "    ]\n"
    "]\n"
    "# the rest of the cntk config ...\n";

static const char seed_composite[] =
    "reader = {\n"
    "        verbosity = 0 ;\n"
    "        randomize = true;\n"
    "        randomizationWindow=30\n"
    "        deserializers = ({\n"
    "            type = \"CNTKTextFormatDeserializer\" ; module = \"CNTKTextFormatReader\"\n"
    "            file = \"/home/mydata/SampleInput.txt\" # See the first example for Windows "
    "style path example\n"
    "            maxErrors = 100\n"
    "            skipSequenceIds = false\n"
    "            traceLevel = 2\n"
    "            input = {\n"
    "                qu1fea = {alias = \"qui\"; dim = 95589; format = \"sparse\"}\n"
    "                qu2fea = {alias = \"quj\"; dim = 95589; format = \"sparse\"}\n"
    "                pairweight = {alias = \"wij\"; dim = 1; format = \"dense\"}\n"
    "            }\n"
    "        })\n"
    "    }\n"
    "\n";

TEST(config_seed_simple)
{
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(load_apply(seed_simple, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "c:\\mydata\\SampleInput.txt");
    ASSERT_EQ(c.num_streams, 3);
    ASSERT_STR_EQ(c.streams[0].name, "A");
    ASSERT(c.streams[0].alias == NULL);
    ASSERT_EQ(c.streams[0].dim, 5);
    ASSERT(!c.streams[0].is_sparse);
    ASSERT_STR_EQ(c.streams[1].name, "B");
    ASSERT_EQ(c.streams[1].dim, 1000000);
    ASSERT(c.streams[1].is_sparse);
    ASSERT_STR_EQ(c.streams[2].name, "C");
    ASSERT_EQ(c.streams[2].dim, 1);
    ASSERT(!c.streams[2].defines_mb_size);
    /* Everything else keeps its default. */
    ASSERT_EQ(c.precision, CTF_FLOAT32);
    ASSERT(c.randomize);
    ASSERT_U64_EQ(c.randomization_window, 128);
    ASSERT(!c.window_in_samples);
    ASSERT_EQ(c.trace_level, 1);
    ASSERT_U64_EQ(c.chunk_size_bytes, CTF_DEFAULT_CHUNK_SIZE_BYTES);
    ctf_bsconfig_free(doc);
}

TEST(config_seed_extended)
{
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(load_apply(seed_extended, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/home/mydata/SampleInput.txt");
    ASSERT_EQ(c.precision, CTF_FLOAT64); /* inherited from the top level */
    ASSERT(c.randomize);
    ASSERT_U64_EQ(c.randomization_window, 30);
    ASSERT(!c.window_in_samples && !c.skip_sequence_ids);
    ASSERT_U64_EQ(c.max_errors, 100);
    ASSERT_EQ(c.trace_level, 2);
    ASSERT_U64_EQ(c.chunk_size_bytes, 1024);
    ASSERT(c.keep_data_in_memory && !c.frame_mode);
    ASSERT_EQ(c.num_streams, 2);
    ASSERT_STR_EQ(c.streams[0].name, "Some_very_long_input_name");
    ASSERT_STR_EQ(c.streams[0].alias, "a");
    ASSERT_EQ(c.streams[0].dim, 3);
    ASSERT_STR_EQ(c.streams[1].name, "Some_other_also_very_long_input_name");
    ASSERT_STR_EQ(c.streams[1].alias, "b");
    ASSERT_EQ(c.streams[1].dim, 2);
    ctf_bsconfig_free(doc);
}

TEST(config_seed_composite)
{
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(load_apply(seed_composite, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/home/mydata/SampleInput.txt");
    ASSERT(c.randomize);
    ASSERT_U64_EQ(c.randomization_window, 30);
    ASSERT_U64_EQ(c.max_errors, 100);
    ASSERT_EQ(c.trace_level, 2); /* traceLevel wins over verbosity */
    ASSERT_EQ(c.num_streams, 3);
    ASSERT_STR_EQ(c.streams[0].name, "qu1fea");
    ASSERT_STR_EQ(c.streams[0].alias, "qui");
    ASSERT_EQ(c.streams[0].dim, 95589);
    ASSERT(c.streams[0].is_sparse);
    ASSERT_STR_EQ(c.streams[1].alias, "quj");
    ASSERT_STR_EQ(c.streams[2].name, "pairweight");
    ASSERT_STR_EQ(c.streams[2].alias, "wij");
    ASSERT_EQ(c.streams[2].dim, 1);
    ASSERT(!c.streams[2].is_sparse);
    ctf_bsconfig_free(doc);
}

TEST(config_composite_levels)
{
    /* verbosity alone sets the trace level; the deserializer's value wins over the reader's. */
    static const char text[] = "reader = { verbosity = 7; randomize = false; maxErrors = 5\n"
                               "  deserializers = ({ type = \"CNTKTextFormatDeserializer\"\n"
                               "    module = \"CNTKTextFormatReader\"\n"
                               "    file = d.ctf; maxErrors = 9\n"
                               "    input = { x = { dim = 2; format = dense } } }) }\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(load_apply(text, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_EQ(c.trace_level, 2);
    ASSERT(!c.randomize);
    ASSERT_U64_EQ(c.max_errors, 9);
    ASSERT_STR_EQ(c.path, "d.ctf");
    ctf_bsconfig_free(doc);
    /* A single block without parentheses is accepted as a one-element list. */
    static const char single[] =
        "reader = { deserializers = { type = CNTKTextFormatDeserializer; file = d.ctf\n"
        "  input = { x = { dim = 2; format = dense } } } }\n";
    ASSERT_OK(load_apply(single, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_EQ(c.num_streams, 1);
    ctf_bsconfig_free(doc);
}

TEST(config_composite_errors)
{
    EXPECT_FAIL("reader = { deserializers = ({ type = \"CNTKTextFormatDeserializer\"; file = a\n"
                "  input = { x = { dim = 1; format = dense } } }\n"
                " : { type = \"CNTKTextFormatDeserializer\"; file = b } ) }\n",
                "deserializers[1]: missing the required parameter 'input'", 3);
    EXPECT_FAIL("reader = { deserializers = ({ type = \"CNTKTextFormatDeserializer\"; file = a\n"
                "  input = { x = { dim = 1; format = dense } } }\n"
                " : { type = \"ImageDeserializer\"; file = b } ) }\n",
                "deserializers[1].type: \"ImageDeserializer\" is not supported", 3);
    EXPECT_FAIL("reader = {\n deserializers = (\n { type = \"HTKFeatureDeserializer\" } ) }\n",
                "deserializers[0].type: \"HTKFeatureDeserializer\" is not supported", 3);
    EXPECT_FAIL("reader = {\n deserializers = ( { file = x } ) }\n",
                "deserializers[0].type: missing", 2);
    EXPECT_FAIL("reader = {\n deserializers = ( ) }\n", "deserializers: empty", 2);
    EXPECT_FAIL("reader = {\n deserializers = 3 }\n", "deserializers: must be an array", 2);
    EXPECT_FAIL("reader = {\n deserializers = ( 3 ) }\n",
                "deserializers: must be an array of blocks ({ type = ...; ... }) (got \"3\")", 2);
    EXPECT_FAIL("reader = {\n deserializers = ( 3 : 4 ) }\n",
                "deserializers[0]: must be a block { type = ...; ... } (got \"3\")", 2);
    EXPECT_FAIL("reader = { deserializers = ({ type = CNTKTextFormatDeserializer\n"
                "  file = d; deserializers = 1; input = { x = { dim = 1; format = dense } } }) }\n",
                "deserializer: unknown parameter 'deserializers'", 2);
    EXPECT_FAIL("reader = { deserializers = ({ type = CNTKTextFormatDeserializer\n"
                "  input = { x = { dim = 1; format = dense } } }) }\n",
                "deserializer: missing the required parameter 'file'", 1);
}

/*======================================================================
 * Conformance corpus and files on disk
 *====================================================================*/

TEST(config_conformance_cases)
{
    static const char *const dirs[] = {"tests/conformance/cases"};
    glob_t g;
    size_t found = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof *dirs && !found; d++) {
        char pattern[300];
        snprintf(pattern, sizeof pattern, "%s/*.cntk", dirs[d]);
        if (glob(pattern, 0, NULL, &g) != 0) continue;
        found = g.gl_pathc;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            ctf_bsconfig *doc = NULL;
            ctf_config c;
            ctf_error err;
            ctf_config_init(&c);
            int rc = ctf_bsconfig_load(g.gl_pathv[i], NULL, NULL, 0, &doc, &err);
            if (!rc) rc = ctf_bsconfig_apply(doc, &c, &err);
            if (!rc) rc = ctf_config_validate(&c, &err);
            if (rc) globfree(&g);
            ASSERT_OK(rc, &err);
            ASSERT(c.num_streams >= 1 && strstr(c.path, ".ctf"));
            if (strstr(g.gl_pathv[i], "case000.cntk")) {
                ASSERT_STR_EQ(c.path, "case000.ctf");
                ASSERT_EQ(c.precision, CTF_FLOAT32);
                ASSERT(c.randomize && c.window_in_samples);
                ASSERT_U64_EQ(c.randomization_seed, 7);
                ASSERT_U64_EQ(c.randomization_window, 27);
                ASSERT_STR_EQ(c.streams[0].name, "s0");
                ASSERT_STR_EQ(c.streams[0].alias, "feat0");
                ASSERT_EQ(c.streams[0].dim, 30);
                ASSERT(c.streams[0].is_sparse && c.streams[0].defines_mb_size);
            }
            if (strstr(g.gl_pathv[i], "case001.cntk")) {
                ASSERT_EQ(c.precision, CTF_FLOAT64);
                ASSERT(!c.randomize && !c.window_in_samples);
                ASSERT_U64_EQ(c.randomization_window, 128);
                ASSERT_U64_EQ(c.chunk_size_bytes, 40);
                ASSERT_EQ(c.num_streams, 2);
            }
            ctf_bsconfig_free(doc);
        }
        globfree(&g);
    }
    if (!found)
        fprintf(stderr, "  (config_conformance_cases: corpus not found, skipped)\n");
    else
        ASSERT_EQ(found, 60);
}

TEST(config_load_file)
{
    const char *path = test_write_str("extended.cntk", seed_extended);
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ctf_config_init(&c);
    ASSERT_OK(ctf_bsconfig_load(path, NULL, NULL, 0, &doc, &err), &err);
    ASSERT_OK(ctf_bsconfig_apply(doc, &c, &err), &err);
    ASSERT_EQ(c.num_streams, 2);
    ctf_bsconfig_free(doc);

    /* Errors name the file they came from. */
    path = test_write_str("bad.cntk", "reader = [\n  file = x\n  dim 3\n]\n");
    ASSERT_EQ(ctf_bsconfig_load(path, NULL, NULL, 0, &doc, &err), CTF_EINVAL);
    ASSERT(doc == NULL);
    ASSERT_STR_EQ(err.path, path);
    ASSERT_EQ(err.line, 3);
    ASSERT_EQ(err.column, 7);
    ASSERT_STR_CONTAINS(err.message, "expected '=' after 'dim', found '3'");
    char line[1200];
    ASSERT_STR_CONTAINS(ctf_error_format(&err, CTF_SEV_ERROR, line, sizeof line), ":3:7: error:");

    ASSERT_EQ(ctf_bsconfig_load("/nonexistent/x.cntk", NULL, NULL, 0, &doc, &err), CTF_EIO);
    ASSERT_STR_EQ(err.path, "/nonexistent/x.cntk");
    ASSERT_STR_CONTAINS(err.message, "cannot open the configuration file");
    ASSERT_EQ(ctf_bsconfig_load(test_tmpdir(), NULL, NULL, 0, &doc, &err), CTF_EIO);
    ASSERT_EQ(ctf_bsconfig_load(NULL, NULL, NULL, 0, &doc, &err), CTF_EINVAL);
    ctf_bsconfig_free(NULL);
}

/*======================================================================
 * Syntax
 *====================================================================*/

TEST(config_syntax_forms)
{
    /* Comments, ';' separators, single quotes, `name =` then '[' on the next line, unquoted
     * paths and words, arrays in both notations, a BOM, CRLF, nesting, duplicate keys. */
    static const char text[] =
        "\xEF\xBB\xBF# leading comment\r\n"
        "command = train:test ; stderr = out/log   # CNTK top-level noise\r\n"
        "mbSizes = (128 : 256\n 512; 1024)\n"
        "network = [ layers = [ a = [ b = [ c = 1 ] ] ] ]\n"
        "reader =\n"
        "[\n"
        "  readerType = 'CNTKTextFormatReader'; file = /data/x-1.ctf\n"
        "  randomize = false ; randomize = true   # the last definition wins\n"
        "  input =\n"
        "  {\n"
        "    f = [ dim = 3 ; format = 'dense' ; alias = 'F' ]\n"
        "    l = [ dim = 2 ; format = sparse\n"
        "          definesMBSize = TRUE ]\n"
        "  }\n"
        "]\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(load_apply(text, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/data/x-1.ctf");
    ASSERT(c.randomize);
    ASSERT_EQ(c.num_streams, 2);
    ASSERT_STR_EQ(c.streams[0].alias, "F");
    ASSERT(c.streams[1].is_sparse && c.streams[1].defines_mb_size);
    ctf_bsconfig_free(doc);

    /* Unquoted Windows drive paths survive ':' being the array separator. */
    ASSERT_OK(load_apply(READER("file = c:\\data\\train.ctf"), NULL, NULL, 0, &doc, &c, &err),
              &err);
    ASSERT_STR_EQ(c.path, "c:\\data\\train.ctf");
    ctf_bsconfig_free(doc);
    /* Keys are matched without regard to case, as in CNTK. */
    ASSERT_OK(load_apply(READER("RANDOMIZE = False; RandomizationWindow = 5"), NULL, NULL, 0, &doc,
                         &c, &err),
              &err);
    ASSERT(!c.randomize);
    ASSERT_U64_EQ(c.randomization_window, 5);
    ctf_bsconfig_free(doc);
}

TEST(config_parse_errors)
{
    EXPECT_FAIL("reader = [\n  file = x\n  dim 3\n]\n", "expected '=' after 'dim', found '3'", 3);
    EXPECT_FAIL("reader = [\n  file = \"x.ctf\n]\n",
                "unterminated string: no closing \" before the end of the file", 2);
    EXPECT_FAIL("reader = [\n  input = [\n    x = [ dim = 3 ]\n",
                "expected ']' to close the block opened on line 2, found the end of the file", 4);
    EXPECT_FAIL("reader = [\n  file = x\n}\n",
                "expected ']' to close the block opened on line 1, found '}'", 3);
    EXPECT_FAIL("reader = [\n  file = x; a = (1 : 2\n]\n",
                "expected ')' to close the '(' opened on line 2, found ']'", 3);
    EXPECT_FAIL("reader = [\n  file = x y\n]\n",
                "expected ';' or a line break after the value of 'file', found 'y'", 2);
    /* `name =` alone on its line is CNTK's empty value. */
    EXPECT_FAIL("reader = [\n  file =\n  input = [ ]\n]\n", "file: must not be empty", 2);
    EXPECT_FAIL("reader = [\n  file = x\n  b = c d = 3\n]\n",
                "expected ';' or a line break after the value of 'b', found 'd'", 3);
    EXPECT_FAIL("reader = [\n  \"file\" = x\n]\n",
                "expected a name (letters, digits, '_'), "
                "found a string",
                2);
    EXPECT_FAIL("reader = [\n  file = ]\n", "expected a value, found ']'", 2);
    EXPECT_FAIL("a = 1\nb = \x01\n", "unexpected character (byte 0x01)", 2);
    EXPECT_FAIL("a = (1 2)\n", "expected ')' to close the '(' opened on line 1, found '2'", 1);
    /* The column points at the offending token. */
    ctf_bsconfig *doc = NULL;
    ctf_error err;
    ASSERT_EQ(ctf_bsconfig_parse("a = 1\n  b c\n", 12, "t.cntk", NULL, NULL, 0, &doc, &err),
              CTF_EINVAL);
    ASSERT_EQ(err.line, 2);
    ASSERT_EQ(err.column, 5);
    /* Deep nesting is refused instead of exhausting the stack. */
    char deep[1200] = "a = ";
    for (int i = 0; i < 200; i++) strcat(deep, "[b=");
    EXPECT_FAIL(deep, "nesting deeper than 64 levels", 1);
    /* Empty and NULL input. */
    EXPECT_FAIL("", "no reader", 0);
    ASSERT_EQ(ctf_bsconfig_parse(NULL, 0, NULL, NULL, NULL, 0, &doc, &err), CTF_EINVAL);
    ASSERT_STR_EQ(err.path, "<config>");
    ASSERT_EQ(ctf_bsconfig_parse(NULL, 5, NULL, NULL, NULL, 0, &doc, &err), CTF_EINVAL);
    ASSERT_EQ(ctf_bsconfig_parse("a=1", 3, NULL, NULL, NULL, 0, NULL, &err), CTF_EINVAL);
}

/*======================================================================
 * Reader selection
 *====================================================================*/

static const char sections_text[] =
    "precision = float\n"
    "train = [\n"
    "  precision = double\n"
    "  reader = [ file = train.ctf; input = [ x = [ dim = 1; format = dense ] ] ]\n"
    "]\n"
    "test = [\n"
    "  reader = [ file = test.ctf; input = [ x = [ dim = 1; format = dense ] ] ]\n"
    "]\n"
    "other = [ a = 1 ]\n";

TEST(config_sections)
{
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(load_apply(sections_text, "train", NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "train.ctf");
    ASSERT_EQ(c.precision, CTF_FLOAT64); /* the innermost enclosing precision */
    ctf_bsconfig_free(doc);
    ASSERT_OK(load_apply(sections_text, "test", NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "test.ctf");
    ASSERT_EQ(c.precision, CTF_FLOAT32);
    ctf_bsconfig_free(doc);

    ASSERT_EQ(load_apply(sections_text, NULL, NULL, 0, &doc, &c, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "several blocks hold a 'reader' ('train' (line 2), 'test' "
                                     "(line 6)): select one by its section name");
    ASSERT_EQ(load_apply(sections_text, "nope", NULL, 0, &doc, &c, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "section 'nope': no top-level block of that name (blocks "
                                     "with a reader: 'train' (line 2), 'test' (line 6))");
    ASSERT_EQ(load_apply(sections_text, "other", NULL, 0, &doc, &c, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "section 'other' has no 'reader' block");
    ASSERT_EQ(err.line, 9);

    /* The only block holding a reader is chosen without a section; a top-level reader wins. */
    static const char one[] = "x = 1\nmain = [ reader = [ file = m.ctf\n"
                              "  input = [ a = [ dim = 1; format = dense ] ] ] ]\n";
    ASSERT_OK(load_apply(one, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "m.ctf");
    ctf_bsconfig_free(doc);
    char both[600];
    snprintf(both, sizeof both, "%s%s", sections_text, READER(""));
    ASSERT_OK(load_apply(both, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "d.ctf");
    ctf_bsconfig_free(doc);

    EXPECT_FAIL("a = [ b = 1 ]\n", "no reader: expected a top-level 'reader' block", 0);
    EXPECT_FAIL("x = 1\nreader = 3\n", "reader: must be a block [ ... ] or { ... } (got \"3\")", 2);
}

/*======================================================================
 * Substitution and overrides
 *====================================================================*/

TEST(config_substitution)
{
    static const char text[] =
        "RootDir = /data\n"
        "DataDir = $RootDir$/corpus\n"
        "Dim = 7\n"
        "train = [\n"
        "  DataDir = \"$DataDir$/train\"   # refines the outer DataDir\n"
        "  reader = [\n"
        "    file = \"$DataDir$/$Name$.ctf\"\n"
        "    maxErrors = $Errs$\n"
        "    note = 'cost$ and $$ stay'\n"
        "    input = [ x = [ dim = $Dim$; format = dense; alias = $Alias$ ] ]\n"
        "  ]\n"
        "]\n"
        "Errs = 3\n";
    /* Overrides are assignments at the top level: they define Name and Alias, and replace the
     * file's Dim. Inner scopes still shadow them (DataDir). */
    const char *ov[] = {"Name=part1", "Alias = 'xx'", "Dim=9", "DataDir=/elsewhere"};
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    /* `note` is not a reader key: check the expansion result through the error message. */
    ASSERT_EQ(load_apply(text, "train", ov, 4, &doc, &c, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "reader: unknown parameter 'note'");
    ASSERT_EQ(err.line, 9);
    ctf_bsconfig_free(doc);
    char fixed[sizeof text];
    strcpy(fixed, text);
    memcpy(strstr(fixed, "note"), "#ote", 4);
    ASSERT_OK(load_apply(fixed, "train", ov, 4, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "/elsewhere/train/part1.ctf");
    ASSERT_U64_EQ(c.max_errors, 3);
    ASSERT_EQ(c.streams[0].dim, 9);
    ASSERT_STR_EQ(c.streams[0].alias, "xx");
    ctf_bsconfig_free(doc);
    /* Without the overrides, the file's own values apply; a literal '$' stays. */
    ASSERT_EQ(load_apply("P = double\n" READER("precision = $P$; maxErrors = 1$"), NULL, NULL, 0,
                         &doc, &c, &err),
              CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "maxErrors: must be a non-negative integer (got \"1$\")");
    ctf_bsconfig_free(doc);

    EXPECT_FAIL(READER("maxErrors = $Missing$"),
                "undefined variable '$Missing$': not defined in an enclosing block or by a "
                "command-line override",
                4);
    EXPECT_FAIL("blk = [ a = 1 ]\n" READER("maxErrors = $blk$"),
                "maxErrors: must be a non-negative integer (got a block)", 1);
    EXPECT_FAIL("blk = [ a = 1 ]\n" READER("file = \"$blk$/x\""),
                "'$blk$' names a block (line 1); only single values can be substituted", 5);
    EXPECT_FAIL("a = $b$\nb = $a$\n" READER("maxErrors = $a$"),
                "substitutions nested more than 16 deep (is there a cycle?)", 2);
    EXPECT_FAIL("a = $b$\n" READER("maxErrors = $a$"), "undefined variable '$b$'", 1);
    /* Variables are only expanded in the reader: an undefined one elsewhere does not matter. */
    ASSERT_OK(load_apply("net = $UndefinedElsewhere$\n" READER(""), NULL, NULL, 0, &doc, &c, &err),
              &err);
    ctf_bsconfig_free(doc);
}

TEST(config_overrides)
{
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    const char *ov1[] = {"randomize=false",        "input.x.dim=10",        "reader.maxErrors=4",
                         "input.y.dim=2",          "input.y.format=sparse", "traceLevel = 0",
                         "file=\"/my data/x.ctf\""};
    ASSERT_OK(load_apply(READER("randomize = true"), NULL, ov1, 7, &doc, &c, &err), &err);
    ASSERT(!c.randomize);
    ASSERT_U64_EQ(c.max_errors, 4);
    ASSERT_EQ(c.trace_level, 0);
    ASSERT_STR_EQ(c.path, "/my data/x.ctf");
    ASSERT_EQ(c.num_streams, 2);
    ASSERT_EQ(c.streams[0].dim, 10);
    ASSERT_STR_EQ(c.streams[1].name, "y");
    ASSERT(c.streams[1].is_sparse);
    ctf_bsconfig_free(doc);

    /* SECTION.reader.KEY, block values, and the deserializer as the target in composite form. */
    const char *ov2[] = {"train.reader.file=other.ctf", "test.reader.file=ignored.ctf",
                         "reader.input=[ z = [ dim = 4; format = dense ] ]"};
    ASSERT_OK(load_apply(sections_text, "train", ov2, 3, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "other.ctf");
    ASSERT_EQ(c.num_streams, 1);
    ASSERT_STR_EQ(c.streams[0].name, "z");
    ctf_bsconfig_free(doc);
    const char *ov3[] = {"randomizationWindow=7", "input.qu1fea.dim=11", "maxErrors=1"};
    ASSERT_OK(load_apply(seed_composite, NULL, ov3, 3, &doc, &c, &err), &err);
    ASSERT_U64_EQ(c.randomization_window, 7);
    ASSERT_EQ(c.streams[0].dim, 11);
    ASSERT_U64_EQ(c.max_errors, 1);
    ctf_bsconfig_free(doc);
    /* An override may replace the whole reader before it is selected. */
    const char *ov4[] = {"reader=[ file = r.ctf; input = [ q = [ dim = 1; format = dense ] ] ]"};
    ASSERT_OK(load_apply(READER(""), NULL, ov4, 1, &doc, &c, &err), &err);
    ASSERT_STR_EQ(c.path, "r.ctf");
    ctf_bsconfig_free(doc);

    /* Errors. */
    const char *bad_value[] = {"input.x.dim=abc"};
    ASSERT(fails_with(READER(""), bad_value, 1,
                      "input.x.dim: must be a positive integer (got \"abc\") (from a "
                      "command-line override)",
                      0));
    const char *bad_key[] = {"reader.randomise=false"};
    ASSERT(fails_with(READER(""), bad_key, 1,
                      "reader: unknown parameter 'randomise' (did you "
                      "mean 'randomize'?) (from a command-line override)",
                      0));
    const char *cases[][2] = {
        {"randomize", "override 'randomize': expected KEY=VALUE"},
        {"a..b=1", "override 'a..b=1': KEY must be a name or a dotted path"},
        {"=1", "override '=1': KEY must be a name"},
        {"input.x.dim.more=1", "override 'input.x.dim.more=1': the path goes through a value "
                               "that is not a block"},
        {"input=[ x = [ dim = 1 ",
         "expected ']' to close the block opened on line 1, found the end"},
        {"input=[ ] x", "expected the end of the value, found 'x'"},
        {"train.reader=[ ]", "cannot replace the block that holds the selected reader"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ctf__error_clear(&err);
        int rc = load_apply(sections_text, "train", cases[i], 1, &doc, &c, &err);
        if (rc != CTF_EINVAL) fprintf(stderr, "  case %zu: rc %d\n", i, rc);
        ASSERT_EQ(rc, CTF_EINVAL);
        ASSERT_STR_CONTAINS(err.message, cases[i][1]);
        ASSERT_EQ(err.line, 0);
        ASSERT(doc == NULL);
    }
    const char *null_ov[] = {NULL};
    ASSERT_EQ(load_apply(READER(""), NULL, null_ov, 1, &doc, &c, &err), CTF_EINVAL);
}

/*======================================================================
 * Parameters, values and keys
 *====================================================================*/

TEST(config_all_parameters)
{
    static const char text[] =
        "reader = [ readerType = CNTKTextFormatReader; file = d.ctf\n"
        "  precision = DOUBLE; randomize = none; randomizationSeed = 18446744073709551615\n"
        "  randomizationWindow = 0; sampleBasedRandomizationWindow = 1; skipSequenceIds = 1\n"
        "  maxErrors = 12; traceLevel = 0; chunkSizeInBytes = +4096; keepDataInMemory = TRUE\n"
        "  frameMode = true; cacheIndex = true; maxSamples = 1000; maxSweeps = infinite\n"
        "  numThreads = 0; prefetchChunks = 9\n"
        "  input = [ x = [ dim = 1; format = dense ] ]\n"
        "]\n";
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(load_apply(text, NULL, NULL, 0, &doc, &c, &err), &err);
    ASSERT_EQ(c.precision, CTF_FLOAT64);
    ASSERT(!c.randomize);
    ASSERT_U64_EQ(c.randomization_seed, UINT64_MAX);
    ASSERT_U64_EQ(c.randomization_window, 0);
    ASSERT(c.window_in_samples && c.skip_sequence_ids && c.keep_data_in_memory);
    ASSERT(c.frame_mode && c.cache_index);
    ASSERT_U64_EQ(c.max_errors, 12);
    ASSERT_EQ(c.trace_level, 0);
    ASSERT_U64_EQ(c.chunk_size_bytes, 4096);
    ASSERT_U64_EQ(c.max_samples, 1000);
    ASSERT_U64_EQ(c.max_sweeps, CTF_INFINITELY_REPEAT);
    ASSERT_EQ(c.num_threads, 0);
    ASSERT_EQ(c.prefetch_chunks, 9);
    ctf_bsconfig_free(doc);
    ASSERT_OK(load_apply(READER("randomize = auto; maxSweeps = 3; truncationLength = 20"), NULL,
                         NULL, 0, &doc, &c, &err),
              &err);
    ASSERT(c.randomize);
    ASSERT_U64_EQ(c.max_sweeps, 3);
    ASSERT_EQ(c.truncation_length, 20);
    ctf_bsconfig_free(doc);
}

TEST(config_value_errors)
{
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ format = dense\n dim = \"abc\" ] ] ]\n",
                "input.x.dim: must be a positive integer (got \"abc\")", 3);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = -3; format = dense ] ] ]\n",
                "input.x.dim: must be a positive integer (got \"-3\")", 2);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = 0; format = dense ] ] ]\n",
                "input.x.dim: must be a positive integer (got \"0\")", 2);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = 99999999999999999999; format = "
                "dense ] ] ]\n",
                "input.x.dim: must be between 1 and", 2);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = [ a = 1 ]; format = dense ] ] ]\n",
                "input.x.dim: must be a positive integer (got a block)", 2);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = 2; format = csv ] ] ]\n",
                "input.x.format: must be \"dense\" or \"sparse\" (got \"csv\")", 2);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = 2147483648; format = sparse ] ] ]\n",
                "input.x.dim: a sparse dimension must be at most 2147483647", 2);
    EXPECT_FAIL("reader = [ file = d\n input = [\n x = [ format = dense ] ] ]\n",
                "input.x.dim: missing (required)", 3);
    EXPECT_FAIL("reader = [ file = d\n input = [\n x = [ dim = 1 ] ] ]\n",
                "input.x.format: missing (required: \"dense\" or \"sparse\")", 3);
    EXPECT_FAIL("reader = [ file = d\n input = [\n x = 3 ] ]\n",
                "input.x: must be a block [ dim = ...; format = ... ] (got \"3\")", 3);
    EXPECT_FAIL("reader = [ file = d\n"
                " input = [ x = [ dim = 1; format = dense; alias = [ ] ] ] ]\n",
                "input.x.alias: must be a string (got a block)", 2);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = 1; format = dense\n"
                " definesMBSize = maybe ] ] ]\n",
                "input.x.definesMBSize: must be true or false (got \"maybe\")", 3);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = 1; format = dense; alias = y ]\n"
                " y = [ dim = 1; format = dense ] ] ]\n",
                "input.y.alias: duplicate alias 'y' (also used by input.x)", 3);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = 1; format = dense; definesMBSize = "
                "true ]\n y = [ dim = 1; format = dense; definesMBSize = true ] ] ]\n",
                "input.y.definesMBSize: only one stream may define the minibatch size (also set "
                "on input.x)",
                3);
    EXPECT_FAIL("reader = [ file = d\n input = [ ] ]\n", "input: at least one stream is required",
                2);
    EXPECT_FAIL("reader = [ file = d\n input = 1 ]\n", "input: must be a block of streams", 2);
    EXPECT_FAIL("reader = [ file = d ]\n", "reader: missing the required parameter 'input'", 1);
    EXPECT_FAIL("reader = [\n input = [ x = [ dim = 1; format = dense ] ] ]\n",
                "reader: missing the required parameter 'file'", 1);
    EXPECT_FAIL(READER("precision = half"),
                "precision: must be \"float\" or \"double\" (got \"half\")", 4);
    EXPECT_FAIL("precision = half\n" READER(""), "precision: must be \"float\" or \"double\"", 1);
    EXPECT_FAIL(READER("randomize = maybe"),
                "randomize: must be true, false, \"auto\" or \"none\" (got \"maybe\")", 4);
    EXPECT_FAIL(READER("frameMode = yes"), "frameMode: must be true or false (got \"yes\")", 4);
    EXPECT_FAIL(READER("traceLevel = 5"), "traceLevel: must be between 0 and 2 (got \"5\")", 4);
    EXPECT_FAIL(READER("chunkSizeInBytes = 0"), "chunkSizeInBytes: must be a positive integer", 4);
    EXPECT_FAIL(READER("maxErrors = 1.5"),
                "maxErrors: must be a non-negative integer (got \"1.5\")", 4);
    EXPECT_FAIL(READER("file = \"\""), "file: must not be empty", 4);
    EXPECT_FAIL(READER("file = (a : [ b = 1 ])"),
                "file: must be a string or a list of strings (got a block)", 4);
    EXPECT_FAIL(READER("readerType = HTKMLFReader"),
                "readerType: \"HTKMLFReader\" is not supported; ctfio implements "
                "CNTKTextFormatReader",
                4);
    /* Combinations are checked by ctf_config_validate; the path still names the file. */
    EXPECT_FAIL(READER("maxSamples = 10; maxSweeps = 2"),
                "config.max_samples: cannot be combined with config.max_sweeps", 0);
    EXPECT_FAIL(READER("frameMode = true; truncationLength = 5"),
                "config.truncation_length: truncation cannot be combined with frame_mode", 0);
}

TEST(config_unknown_keys)
{
    EXPECT_FAIL(READER("randomise = false"),
                "reader: unknown parameter 'randomise' (did you mean 'randomize'?)", 4);
    EXPECT_FAIL(READER("miniBatchMode = partial"), "reader: unknown parameter 'miniBatchMode'", 4);
    EXPECT_FAIL("reader = [ file = d\n input = [ x = [ dim = 1; format = dense\n"
                "   dims = 3 ] ] ]\n",
                "input.x: unknown parameter 'dims' (did you mean 'dim'?)", 3);
    EXPECT_FAIL("reader = { deserializers = ({ type = CNTKTextFormatDeserializer; file = d\n"
                "  maxErrorz = 1; input = { x = { dim = 1; format = dense } } }) }\n",
                "deserializer: unknown parameter 'maxErrorz' (did you mean 'maxErrors'?)", 2);
    /* CNTK-only keys are accepted: readerType, type, module, verbosity; anything outside. */
    ctf_bsconfig *doc = NULL;
    ctf_config c;
    ctf_error err;
    ASSERT_OK(load_apply("command = x\nSGD = [ epochSize = 0 ]\n" READER(
                             "type = foo; module = bar; verbosity = 1"),
                         NULL, NULL, 0, &doc, &c, &err),
              &err);
    ctf_bsconfig_free(doc);
}

TEST(config_apply_is_atomic)
{
    /* A failing apply leaves the caller's configuration as it was. */
    ctf_bsconfig *doc = NULL;
    ctf_config c, before;
    ctf_error err;
    static const char text[] = "reader = [ file = d; maxErrors = 7; randomize = false\n"
                               " input = [ x = [ dim = 1; format = csv ] ] ]\n";
    ctf_config_init(&c);
    c.num_workers = 3;
    memcpy(&before, &c, sizeof c);
    ASSERT_OK(ctf_bsconfig_parse(text, strlen(text), "t", NULL, NULL, 0, &doc, &err), &err);
    ASSERT_EQ(ctf_bsconfig_apply(doc, &c, &err), CTF_EINVAL);
    ASSERT_MEM_EQ(&c, &before, sizeof c);
    ASSERT_EQ(ctf_bsconfig_apply(doc, NULL, &err), CTF_EINVAL);
    ASSERT_EQ(ctf_bsconfig_apply(NULL, &c, &err), CTF_EINVAL);
    ctf_bsconfig_free(doc);
}

/*======================================================================
 * Allocation failures
 *====================================================================*/

TEST(config_alloc_failures)
{
    static const char text[] =
        "V = $W$/q\nW = /p\nprecision = double\n"
        "reader = { randomize = true; deserializers = ({ type = \"CNTKTextFormatDeserializer\"\n"
        "  file = \"$V$/f.ctf\"; input = { a = { dim = 3; format = dense }\n"
        "  b = { alias = \"$W$\"; dim = 2; format = sparse }; c = { dim = 1; format = dense } }\n"
        "}) }\n";
    const char *ov[] = {"randomizationWindow=7", "input.a.dim=11", "V=x",
                        "input.n=[ dim = 1; format = dense ]"};
    const char *path = test_write_str("alloc.cntk", text);
    int successes = 0;
    long k = 1;
    for (; k < 5000; k++) {
        long live = atomic_load(&ctf__alloc.live);
        atomic_store(&ctf__alloc.count, 0);
        ctf__alloc.fail_at = k;
        ctf_bsconfig *doc = NULL;
        ctf_error err;
        ctf_config c;
        ctf_config_init(&c);
        int rc = ctf_bsconfig_load(path, NULL, ov, 4, &doc, &err);
        if (!rc) rc = ctf_bsconfig_apply(doc, &c, &err);
        long used = atomic_load(&ctf__alloc.count);
        ctf__alloc.fail_at = 0;
        if (rc == 0) {
            ASSERT_STR_EQ(c.path, "x/f.ctf");
            ASSERT_EQ(c.num_streams, 4);
            ASSERT_STR_EQ(c.streams[1].alias, "/p");
            ASSERT_EQ(c.streams[0].dim, 11);
        } else {
            ASSERT_EQ(rc, CTF_ENOMEM);
            ASSERT(doc == NULL);
        }
        ctf_bsconfig_free(doc);
        ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
        if (rc == 0 && used < k) break; /* no allocation was failed: all points are covered */
        successes += rc == 0;
    }
    ASSERT(k > 5 && k < 5000); /* every allocation point was failed once */
    ASSERT_EQ(successes, 0);
}
