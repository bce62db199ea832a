/*
 * test_parse.c -- the CTF format and its errors (rules 1 and 2), driven through the public API:
 * write a file, open a reader in file order, read every sequence, and inspect the delivered
 * views, the keys, the counters and every problem that reached the log callback, with its
 * exact line, column and byte offset.
 *
 * One test per rule and per error kind; the error-kind tests run each file twice: with
 * maxErrors 0 (the reader must stop at the error, naming it) and with maxErrors 1 (the error is
 * logged, the sample or row is dropped and the rest of the sequence is delivered).
 * The rules of the format itself (BOM, line ends, comments, modes, samples, budgets) are in
 * test_parse_format.c; both use parse_harness.h.
 */
#include "parse_harness.h"

/*======================================================================
 * Error kinds: exact location, maxErrors 0 stops, maxErrors 1 drops and goes on
 *====================================================================*/

/* text: a file whose only problem is one error at (line, col, off) with a message containing
 * needle. dropped: the stream whose sample it drops (-1: none); row_dropped: the row yields
 * no sample. With maxErrors 1 the file's sequences (nseq) are all delivered. */
static bool expect_error(const char *name, const char *text, uint64_t line, uint64_t col,
                         int64_t off, const char *needle, int dropped, bool row_dropped,
                         size_t nseq)
{
    const char *path = run_text(name, text, AB, 2, 0);
    char want[700];
    snprintf(want, sizeof want, "; reached the maximum number of allowed errors (0) reading %s",
             path);
    bool ok = true;
    if (R.open_rc != 0 || R.next_rc != CTF_EPARSE || R.nmb != 0 || R.log.n != 0) {
        fprintf(stderr, "  maxErrors 0: open %d next %d, %zu minibatches, %zu logged: %s\n",
                R.open_rc, R.next_rc, R.nmb, R.log.n, R.open_rc ? R.open_err.message : "");
        ok = false;
    }
    if (!at(&R.next_err, line, col, off)) ok = false;
    if (!strstr(R.next_err.message, needle) || !strstr(R.next_err.message, want) ||
        strcmp(R.next_err.path, path) != 0 || R.next_err.code != CTF_EPARSE) {
        fprintf(stderr, "  maxErrors 0 message: '%s' (code %d), want '%s' and '%s'\n",
                R.next_err.message, R.next_err.code, needle, want);
        ok = false;
    }
    if (R.stats.errors != 1) {
        fprintf(stderr, "  maxErrors 0: %llu errors counted\n", (unsigned long long)R.stats.errors);
        ok = false;
    }
    run_clear(&R);

    run_text(name, text, AB, 2, 1);
    if (R.open_rc != 0 || R.next_rc != 0 || R.nmb != nseq || R.log.count[CTF_SEV_ERROR] != 1 ||
        R.log.count[CTF_SEV_WARNING] != 0) {
        fprintf(stderr,
                "  maxErrors 1: open %d next %d (%s), %zu minibatches, %zu errors %zu "
                "warnings logged\n",
                R.open_rc, R.next_rc, R.next_err.message, R.nmb, R.log.count[CTF_SEV_ERROR],
                R.log.count[CTF_SEV_WARNING]);
        dump_log(&R.log);
        ok = false;
    } else {
        const ctf_error *e = &R.log.e[0];
        if (!at(e, line, col, off)) ok = false;
        if (!strstr(e->message, needle) || strstr(e->message, "reached the maximum") ||
            strcmp(e->path, path) != 0) {
            fprintf(stderr, "  maxErrors 1 message: '%s', want '%s'\n", e->message, needle);
            ok = false;
        }
    }
    for (int k = 0; k < 2; k++) {
        uint64_t want_drop = k == dropped ? 1 : 0;
        if (R.stats.streams[k].dropped_samples != want_drop) {
            fprintf(stderr, "  stream %d: %llu dropped samples, want %llu\n", k,
                    (unsigned long long)R.stats.streams[k].dropped_samples,
                    (unsigned long long)want_drop);
            ok = false;
        }
    }
    if (R.stats.errors != 1 || R.stats.dropped_rows != (row_dropped ? 1u : 0u) ||
        R.stats.dropped_sequences != 0) {
        fprintf(stderr, "  maxErrors 1: errors %llu, dropped rows %llu, dropped sequences %llu\n",
                (unsigned long long)R.stats.errors, (unsigned long long)R.stats.dropped_rows,
                (unsigned long long)R.stats.dropped_sequences);
        ok = false;
    }
    return ok;
}

/* The first line of every error file: sequence 1 with a good sample in both streams (18 bytes,
 * so the second line starts at byte 18). */
#define GOOD1 "1 |a 1 2 3 |b 0:1\n"

TEST(parse_error_value_dot_exponent)
{
    ASSERT(expect_error("e_dotexp.ctf", GOOD1 "1 |b 1:1 |a 1 1.e5 3\n", 2, 15, 32,
                        "stream 'feat': expected a number (value 2 of the dense sample), found "
                        "'1.e5'",
                        0, false, 1));
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 1); /* the bad sample is dropped... */
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 2); /* ...the rest of the sequence delivered */
    const float want[] = {1, 2, 3};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 3));
    run_clear(&R);
}

TEST(parse_error_value_leading_dot)
{
    ASSERT(expect_error("e_dot.ctf", GOOD1 "1 |a .5 2 3 |b 1:1\n", 2, 6, 23,
                        "stream 'feat': expected a number (value 1 of the dense sample), found "
                        "'.5'",
                        0, false, 1));
    run_clear(&R);
}

TEST(parse_error_value_word)
{
    ASSERT(expect_error("e_abc.ctf", GOOD1 "1 |a 1 2 abc |b 1:1\n", 2, 10, 27,
                        "stream 'feat': expected a number (value 3 of the dense sample), found "
                        "'abc'",
                        0, false, 1));
    run_clear(&R);
}

TEST(parse_error_value_decimal_comma)
{
    ASSERT(expect_error("e_comma.ctf", GOOD1 "1 |a 1,5 2 3 |b 1:1\n", 2, 6, 23,
                        "stream 'feat': expected a number (value 1 of the dense sample), found "
                        "'1,5'",
                        0, false, 1));
    run_clear(&R);
}

/* The other malformed numbers of rules 1.6 fail the same way; the valid odd ones parse. */
TEST(parse_error_value_other_malformed_numbers)
{
    static const char *bad[] = {"1e", "1e+",  "inf",   "nan",   "-inf",    "0x10",
                                "+",  "-",    "1.5.2", "1e5.5", "--1",     "1..2",
                                "e5", "1.5e", "1f",    "NaN",   "Infinity"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[128], needle[128];
        snprintf(text, sizeof text, GOOD1 "1 |b 1:1 |a %s 2 3\n", bad[i]);
        snprintf(needle, sizeof needle, "(value 1 of the dense sample), found '%s'", bad[i]);
        if (!expect_error("e_num.ctf", text, 2, 13, 30, needle, 0, false, 1)) {
            fprintf(stderr, "  for '%s'\n", bad[i]);
            ASSERT(0);
        }
        run_clear(&R);
    }
    /* In a sparse value too. */
    ASSERT(expect_error("e_spnum.ctf", GOOD1 "1 |a 4 5 6 |b 2:1.e5\n", 2, 17, 34,
                        "stream 'lab': expected a number directly after '2:', found '1.e5'", 1,
                        false, 1));
    run_clear(&R);
    static const ctf_stream_def X[] = {{"x", NULL, 8, false, false}};
    run_text("e_numok.ctf", "|x 45. +3.5 -0 1.5e-3 1E5 007 1e+2 -2.5E-1\n", X, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    const float want[] = {45.f, 3.5f, -0.f, 1.5e-3f, 1e5f, 7.f, 100.f, -0.25f};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 8));
    ASSERT(signbit(fval(&v, 2)));
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
}

TEST(parse_error_dense_oversize)
{
    /* The error points at the first value beyond dim. */
    ASSERT(expect_error("e_over.ctf", GOOD1 "1 |b 1:1 |a 1 2 3 4 5\n", 2, 19, 36,
                        "stream 'feat': dense sample has more than dim=3 values; sample dropped", 0,
                        false, 1));
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 1);
    run_clear(&R);
}

TEST(parse_error_sparse_index_out_of_range)
{
    /* dim 5: index 5 is the first out of range; the error points at the entry. */
    ASSERT(expect_error("e_spdim.ctf", GOOD1 "1 |a 4 5 6 |b 4:1 5:2\n", 2, 19, 36,
                        "stream 'lab': sparse index 5 is out of range (dim=5)", 1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 1); /* the whole sample is dropped */
    ASSERT_EQ(view_of(&R, 0, 1).nnz, 1);
    run_clear(&R);
    /* A huge index does not wrap around. */
    ASSERT(expect_error("e_spbig.ctf", GOOD1 "1 |a 4 5 6 |b 4294967296:1\n", 2, 15, 32,
                        "stream 'lab': sparse index", 1, false, 1));
    run_clear(&R);
}

TEST(parse_error_sparse_missing_colon)
{
    ASSERT(expect_error("e_spcolon.ctf", GOOD1 "1 |a 4 5 6 |b 3 1\n", 2, 16, 33,
                        "stream 'lab': expected ':' directly after sparse index 3, found ' 1'", 1,
                        false, 1));
    run_clear(&R);
    /* A blank between the index and ':' is the same error. */
    ASSERT(expect_error("e_spcolon2.ctf", GOOD1 "1 |a 4 5 6 |b 3 :1\n", 2, 16, 33,
                        "expected ':' directly after sparse index 3", 1, false, 1));
    run_clear(&R);
}

TEST(parse_error_sparse_missing_value)
{
    /* At the end of the line... */
    ASSERT(expect_error("e_spval.ctf", GOOD1 "1 |a 4 5 6 |b 3:\n", 2, 17, 34,
                        "stream 'lab': expected a number directly after '3:', found 'end of "
                        "line'",
                        1, false, 1));
    run_clear(&R);
    /* ...and before a blank: what was found is named, not "end of line". */
    ASSERT(expect_error("e_spval2.ctf", GOOD1 "1 |b 3: 4:1 |a 4 5 6\n", 2, 8, 25,
                        "stream 'lab': expected a number directly after '3:', found ' 4:1'", 1,
                        false, 1));
    run_clear(&R);
}

TEST(parse_error_sparse_negative_index)
{
    ASSERT(expect_error("e_spneg.ctf", GOOD1 "1 |a 4 5 6 |b -3:1\n", 2, 15, 32,
                        "stream 'lab': expected a sparse index (an unsigned integer before "
                        "':'), found '-3:1' (indices cannot be negative)",
                        1, false, 1));
    run_clear(&R);
}

TEST(parse_error_empty_alias)
{
    /* '| x': the error points at the '|'; the next sample is parsed as usual. */
    ASSERT(expect_error("e_alias1.ctf", GOOD1 "1 |a 4 5 6 | x |b 1:1\n", 2, 12, 29,
                        "expected an input name directly after '|'", -1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 2);
    run_clear(&R);
    /* '||b': the first '|' has an empty name; the second starts sample b. */
    ASSERT(expect_error("e_alias2.ctf", GOOD1 "1 |a 4 5 6 ||b 1:1\n", 2, 12, 29,
                        "expected an input name directly after '|'", -1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 2);
    run_clear(&R);
}

TEST(parse_error_text_before_first_bar)
{
    ASSERT(expect_error("e_text.ctf", GOOD1 "1 xyz |a 4 5 6 |b 1:1\n", 2, 3, 20,
                        "expected '|' and an input name, found 'xyz'", -1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 2);
    run_clear(&R);
    /* In line mode too (digits at a line start are ignored, other text is not). */
    ASSERT(expect_error("e_text2.ctf", "|a 1 2 3 |b 0:1\n7 x |a 4 5 6 |b 1:1\n", 2, 3, 18,
                        "expected '|' and an input name, found 'x'", -1, false, 2));
    run_clear(&R);
}

TEST(parse_error_stream_twice_on_a_line)
{
    ASSERT(expect_error("e_twice.ctf", GOOD1 "1 |a 4 5 6 |b 1:1 |a 7 8 9\n", 2, 19, 36,
                        "stream 'feat' appears twice on one line (one sample per stream per "
                        "line); the second sample is dropped",
                        0, false, 1));
    const float want[] = {1, 2, 3, 4, 5, 6}; /* the first occurrence is kept */
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 6));
    run_clear(&R);
}

TEST(parse_error_empty_row_in_sequence)
{
    /* A blank line, a blank-only line, a comment-only line, a line with only unknown inputs and
     * a line with only the id: each is a row of the sequence that yields no sample. */
    static const char *rows[] = {"", "  \t", "1 |# just a comment", "|zz 1 2", "1", "1 \r"};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char text[128];
        snprintf(text, sizeof text, GOOD1 "%s\n1 |a 4 5 6 |b 1:1\n", rows[i]);
        if (!expect_error("e_row.ctf", text, 2, 1, 18,
                          "row yields no sample (blank, comment-only or unknown inputs only) "
                          "inside sequence 1",
                          -1, true, 1)) {
            fprintf(stderr, "  for row '%s'\n", rows[i]);
            ASSERT(0);
        }
        ASSERT_EQ(view_of(&R, 0, 0).num_samples, 2);
        ASSERT_EQ(R.info.samples, 3); /* the empty row still counts as an index sample */
        run_clear(&R);
    }
    /* A row whose only sample is in error costs one error, not two. */
    ASSERT(expect_error("e_row1.ctf", GOOD1 "1 |a 1 x 3\n1 |a 4 5 6 |b 1:1\n", 2, 8, 25,
                        "found 'x'", 0, true, 1));
    run_clear(&R);
}

TEST(parse_error_longest_stream_too_short)
{
    /* Two rows with data, but no stream has two samples. */
    ASSERT(expect_error("e_short.ctf", "1 |a 1 2 3\n1 |b 0:1\n", 1, 1, 0,
                        "sequence 1 has 2 rows with data but its longest stream has only 1 "
                        "samples",
                        -1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 1); /* the sequence is still delivered */
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 1);
    run_clear(&R);
    /* Located at the sequence's first line, wherever it is. */
    ASSERT(expect_error("e_short2.ctf", GOOD1 "2 |a 1 2 3\n2 |b 0:1\n", 2, 1, 18,
                        "sequence 2 has 2 rows with data", -1, false, 2));
    run_clear(&R);
}

/* A stream absent from a whole sequence is fatal whatever maxErrors says. */
TEST(parse_error_absent_stream_is_fatal)
{
    const char *text = GOOD1 "2 |a 4 5 6\n2 |a 7 8 9\n3 |a 1 2 3 |b 1:1\n";
    for (uint64_t me = 0; me <= 100; me += 100) {
        const char *path = test_write_str("e_absent.ctf", text);
        ctf_config cfg;
        cfg_for(&cfg, path, AB, 2);
        cfg.max_errors = me;
        cfg.chunk_size_bytes = 1; /* every sequence its own chunk: sequence 1 is delivered */
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.open_rc, 0);
        ASSERT_EQ(R.nmb, 1);
        ASSERT_EQ(key_of(&R, 0), 1);
        ASSERT_EQ(R.next_rc, CTF_EPARSE);
        ASSERT(at(&R.next_err, 2, 1, 18));
        ASSERT_STR_CONTAINS(R.next_err.message,
                            "malformed input file: stream 'lab' is absent from sequence 2 "
                            "(lines 2-3)");
        ASSERT(!strstr(R.next_err.message, "maximum number of allowed errors"));
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 0);
        ASSERT_EQ(R.stats.errors, 0); /* fatal errors are not counted against the budget */
        run_clear(&R);
    }
}

/* A sample dropped for an error can leave its stream with no sample in the sequence: the
 * sequence is dropped (counted, with a warning), not a fatal "absent stream", so that maxErrors
 * also works for one-line sequences; with maxErrors 0 the error itself stops the reader. */
TEST(parse_error_absent_after_dropped_sample)
{
    run_text("e_absent2.ctf", "|a 1 2 3 |b 0:1\n|a 1 x 3 |b 1:1\n", AB, 2, 10);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(key_of(&R, 0), 0);
    ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 1);
    ASSERT(at(&R.log.e[0], 2, 6, 21));
    ASSERT_EQ(R.log.count[CTF_SEV_WARNING], 1);
    ASSERT_STR_CONTAINS(R.log.e[1].message,
                        "sequence 1 dropped: every sample of stream 'feat' in it was in error");
    ASSERT_EQ(R.stats.dropped_sequences, 1);
    ASSERT_EQ(R.stats.errors, 1);
    run_clear(&R);
    run_text("e_absent3.ctf", "|a 1 2 3 |b 0:1\n|a 1 x 3 |b 1:1\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT_STR_CONTAINS(R.next_err.message, "maximum number of allowed errors (0)");
    run_clear(&R);
}

/* Fatal problems found by the index: ctf_reader_open fails with the location. */
static bool expect_open_fatal(const char *name, const void *data, size_t len, uint64_t line,
                              uint64_t col, int64_t off, const char *needle)
{
    const char *path = test_write_file(name, data, len);
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    bool ok = true;
    for (uint64_t me = 0; me <= 1000; me += 1000) {
        ctf_config cfg;
        cfg_for(&cfg, p, AB, 2);
        cfg.max_errors = me;
        run_cfg(&cfg, &R);
        if (R.open_rc != CTF_EPARSE) {
            fprintf(stderr, "  open returned %d, want CTF_EPARSE\n", R.open_rc);
            ok = false;
        }
        if (!at(&R.open_err, line, col, off)) ok = false;
        if (!strstr(R.open_err.message, needle) || strcmp(R.open_err.path, p) != 0 ||
            R.open_err.code != CTF_EPARSE) {
            fprintf(stderr, "  message '%s' (path %s), want '%s'\n", R.open_err.message,
                    R.open_err.path, needle);
            ok = false;
        }
        run_clear(&R);
    }
    return ok;
}
#define OPEN_FATAL(name, lit, line, col, off, needle) \
    ASSERT(expect_open_fatal(name, lit, sizeof(lit) - 1, line, col, off, needle))

TEST(parse_fatal_id_overflow)
{
    /* UINT64_MAX itself is a valid id; one more is fatal, located at the line start. */
    OPEN_FATAL("f_ovf.ctf", "18446744073709551615 |a 1 2 3 |b 0:1\n18446744073709551616 |a 1\n", 2,
               1, 37, "sequence id '18446744073709551616' does not fit in 64 bits");
    OPEN_FATAL("f_ovf2.ctf", "99999999999999999999999 |a 1 2 3 |b 0:1\n", 1, 1, 0,
               "sequence id '99999999999999999999999' does not fit in 64 bits");
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("f_max.ctf", "18446744073709551615 |a 1\n1 |a 2\n"), A1, 1);
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.nmb, 2);
    ASSERT_U64_EQ(key_of(&R, 0), UINT64_MAX);
    run_clear(&R);
}

TEST(parse_fatal_utf16_bom)
{
    OPEN_FATAL("f_u16le.ctf", "\xff\xfe|\0a\0 \0001\0\n\0", 1, 1, 0, "UTF-16 is not supported");
    OPEN_FATAL("f_u16be.ctf", "\xfe\xff\0|\0a\0 \0001\0\n", 1, 1, 0, "UTF-16 is not supported");
}

TEST(parse_fatal_empty_and_blank_files)
{
    ASSERT(expect_open_fatal("f_empty.ctf", "", 0, 0, 0, -1, "the file is empty"));
    OPEN_FATAL("f_blank.ctf", "  \n\t\n\r\n\n   ", 0, 0, -1, "the file holds only blank lines");
    OPEN_FATAL("f_bom.ctf", "\xef\xbb\xbf", 0, 0, -1, "blank");
}

TEST(parse_fatal_first_char)
{
    OPEN_FATAL("f_first.ctf", "x |a 1 2 3\n", 1, 1, 0,
               "expected a sequence id or '|' at the start of the file, found 'x'");
    /* After blank lines, at the first non-blank character. */
    OPEN_FATAL("f_first2.ctf", "\n  \n  # |a 1 2 3\n", 3, 3, 6,
               "expected a sequence id or '|' at the start of the file, found '#'");
    OPEN_FATAL("f_first3.ctf", "-1 |a 1 2 3\n", 1, 1, 0, "found '-'");
    OPEN_FATAL("f_first4.ctf", "\xc3\xa9 |a 1 2 3\n", 1, 1, 0, "found byte 0xc3");
    /* A first id after a blank is a first line without an id. */
    OPEN_FATAL("f_first5.ctf", " 1 |a 1 2 3 |b 0:1\n", 1, 1, 0,
               "expected a sequence id at the start of the first line");
}

/* Line mode needs some line with a configured input. */
TEST(parse_fatal_no_configured_input)
{
    OPEN_FATAL("f_noinput.ctf", "|zz 1\n|# c\n", 0, 0, -1,
               "no line holds any of the configured inputs");
}

/*======================================================================
 * Robustness: every truncation of valid lines
 *====================================================================*/

/* Every prefix of a valid file, as a whole file, either parses or fails cleanly with a
 * located CTF_EPARSE (never a crash, never an unlocated data error). */
static bool truncations_clean(const char *name, const char *text, const ctf_stream_def *s,
                              size_t ns, uint64_t max_lines)
{
    const size_t len = strlen(text);
    bool ok = true;
    char p[512];
    for (size_t cut = 0; cut <= len; cut++) {
        snprintf(p, sizeof p, "%s", test_write_file(name, text, cut));
        for (uint64_t me = 0; me <= 50; me += 50) {
            for (int prec = 0; prec <= 1; prec++) {
                ctf_config cfg;
                cfg_for(&cfg, p, s, ns);
                cfg.max_errors = me;
                cfg.precision = prec ? CTF_FLOAT64 : CTF_FLOAT32;
                cfg.trace_level = 2;
                run_cfg(&cfg, &R);
                const ctf_error *e = R.open_rc ? &R.open_err : &R.next_err;
                int rc = R.open_rc ? R.open_rc : R.next_rc;
                bool blank = true;
                size_t from = cut >= 3 && !memcmp(text, "\xef\xbb\xbf", 3) ? 3 : 0;
                for (size_t i = from; i < cut; i++)
                    if (!strchr(" \t\r\n", text[i])) blank = false;
                bool good;
                if (rc == 0) {
                    /* A broken last sample can drop its (only) sequence: counted, not lost. */
                    good = (R.nmb >= 1 || R.stats.dropped_sequences > 0) && !blank;
                } else if (blank || strstr(e->message, "no line holds any")) {
                    /* File-level fatal errors name the file only. */
                    good = rc == CTF_EPARSE && e->line == 0 && strcmp(e->path, p) == 0;
                } else {
                    good = rc == CTF_EPARSE && e->line >= 1 && e->line <= max_lines &&
                           e->column >= 1 && e->offset >= 0 && (size_t)e->offset <= cut &&
                           strcmp(e->path, p) == 0 && e->message[0];
                }
                for (size_t i = 0; i < R.log.n; i++) {
                    const ctf_error *l = &R.log.e[i];
                    if (l->line && (l->offset < 0 || (size_t)l->offset > cut || !l->column))
                        good = false;
                }
                if (!good) {
                    fprintf(stderr,
                            "  prefix %zu of '%s' (maxErrors %llu): rc %d, %zu mbs, "
                            "%llu:%llu (byte %lld) %s\n",
                            cut, name, (unsigned long long)me, rc, R.nmb,
                            (unsigned long long)e->line, (unsigned long long)e->column,
                            (long long)e->offset, e->message);
                    ok = false;
                }
                run_clear(&R);
            }
        }
    }
    return ok;
}

TEST(parse_every_truncation_of_a_valid_line)
{
    static const ctf_stream_def S[] = {{"A", "a", 3, false, false},
                                       {"B", "bb", 8, true, false},
                                       {"C", "c", 2, false, false}};
    ASSERT(truncations_clean("trunc1.ctf",
                             "12 |a 1.5 -2e-3 45. |# c |# |bb 0:1 7:2.5e+1 |zz 9\t|c 3 +4\r\n", S,
                             3, 1));
    ASSERT(truncations_clean("trunc2.ctf",
                             "|bb 3:1e-7 |a 0.5 1 2\t|c -1 -2 |#x\n|c 1 2 |a 3 4 5 |bb\n", S, 3,
                             2));
    ASSERT(truncations_clean("trunc3.ctf",
                             "\xef\xbb\xbf"
                             "7 |a 1 2 3 |bb 1:1 |c 1 2\n7 |a 4 5 6\n8 |a 1 2 3 |bb "
                             "2:2 |c 3 4\n",
                             S, 3, 3));
}

/*======================================================================
 * More of rules 1.2 and 2.4
 *====================================================================*/

/* Any control byte other than '\n' separates values and ends names, like a blank. */
TEST(parse_control_bytes_are_delimiters)
{
    run_text("ctl.ctf",
             "|a\x01"
             "1\x02"
             "2\x1f"
             "3\x7f|b\x0b"
             "0:1\x0c"
             "4:2\n",
             AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(R.log.n, 0);
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, (const float[]){1, 2, 3}, 3));
    v = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v, 0, (const int32_t[]){0, 4}, (const float[]){1, 2}, 2));
    run_clear(&R);
}

/* A file that changes on disk under an open reader is fatal (CTF_ECHANGED), never misread. */
TEST(parse_file_changed_since_indexed_is_fatal)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    char p[512];
    snprintf(p, sizeof p, "%s", test_write_str("changed.ctf", "1 |a 1\n2 |a 2\n3 |a 3\n"));
    for (int grow = 0; grow <= 1; grow++) {
        FILE *f = fopen(p, "wb");
        ASSERT(f);
        fputs("1 |a 1\n2 |a 2\n3 |a 3\n", f);
        fclose(f);
        ctf_config cfg;
        cfg_for(&cfg, p, A1, 1);
        cfg.chunk_size_bytes = 1;
        cfg.num_threads = 0;
        cfg.prefetch_chunks = 0;
        ctf_error err;
        ctf_reader *r;
        ASSERT_OK(ctf_reader_open(&cfg, &r, &err), &err);
        ctf_minibatch *mb = NULL;
        ASSERT_OK(ctf_reader_next(r, 1, &mb), ctf_reader_error(r));
        ASSERT(mb);
        ctf_minibatch_free(mb);
        /* Same size with a new mtime, or a different size. */
        f = fopen(p, "r+b");
        ASSERT(f);
        fputs(grow ? "1 |a 1\n2 |a 9\n3 |a 3\n4 |a 4\n" : "1 |a 1\n2 |a 9\n", f);
        fclose(f);
        struct timespec ts[2] = {{1600000000, 1}, {1600000000, 1}};
        utimensat(AT_FDCWD, p, ts, 0);
        int rc = ctf_reader_next(r, 1, &mb);
        if (rc != CTF_ECHANGED) {
            ctf_minibatch_free(mb);
            ctf_reader_free(r);
            ASSERT_EQ(rc, CTF_ECHANGED);
        }
        ASSERT(mb == NULL);
        ASSERT_STR_EQ(ctf_reader_error(r)->path, p);
        ASSERT_EQ(ctf_reader_next(r, 1, &mb), CTF_ECHANGED); /* and it stays dead */
        ctf_reader_free(r);
    }
}
