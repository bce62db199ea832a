/*
 * test_parse_format.c -- the rules of the CTF format (rules 1, 2.3, 2.5): BOM and line ends,
 * delimiters, comments, aliases, unknown inputs, id and line mode, zero fill, duplicates,
 * precision, the maxErrors budget, trace levels, frame mode and the dropped-sample counters.
 * Driven through the public API with the harness of parse_harness.h.
 */
#include "dump_json.h"
#include "parse_harness.h"

/*======================================================================
 * The format: BOM, line ends, delimiters, comments, aliases, unknown inputs
 *====================================================================*/

TEST(parse_utf8_bom_skipped_offsets_absolute)
{
    run_text("bom.ctf", "\xef\xbb\xbf|a 1 2 3 |b 0:1\n|a 4 x 6 |b 1:1\n", AB, 2, 0);
    ASSERT_EQ(R.open_rc, 0);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    /* Line 2 starts at byte 3 + 16 = 19; 'x' is its 6th byte. */
    ASSERT(at(&R.next_err, 2, 6, 24));
    run_clear(&R);
    /* On the first line the byte offset counts the BOM, the column does not. */
    run_text("bom1.ctf", "\xef\xbb\xbf|a 1 x 3 |b 0:1\n", AB, 2, 0);
    ASSERT(at(&R.next_err, 1, 6, 8));
    run_clear(&R);
    /* And a valid file reads as without the BOM, in line mode (first character '|'). */
    run_text("bom2.ctf", "\xef\xbb\xbf|a 1 2 3 |b 0:1\n|a 4 5 6 |b 1:1\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    ASSERT(R.info.line_mode);
    ASSERT_EQ(key_of(&R, 0), 0);
    ASSERT_EQ(key_of(&R, 1), 1);
    run_clear(&R);
    run_text("bom3.ctf",
             "\xef\xbb\xbf"
             "7 |a 1 2 3 |b 0:1\n",
             AB, 2, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT(!R.info.line_mode);
    ASSERT_EQ(key_of(&R, 0), 7);
    run_clear(&R);
}

TEST(parse_crlf_and_lf_mixed)
{
    run_text("crlf.ctf", "1 |a 1 2 3 |b 0:1\r\n1 |a 4 5 6\n1 |b 4:2.5 |a 7 8 9\r\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    const float want[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 9));
    v = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v, 1, (const int32_t[]){4}, (const float[]){2.5f}, 1));
    ASSERT_EQ(R.log.n, 0);
    ASSERT_EQ(R.info.lines, 3);
    run_clear(&R);
    /* Offsets count the '\r' bytes. */
    run_text("crlf2.ctf", "1 |a 1 2 3 |b 0:1\r\n1 |a 4 5 6\n1 |a 7 x 9\r\n", AB, 2, 0);
    ASSERT(at(&R.next_err, 3, 8, 37));
    run_clear(&R);
    /* A '\r' directly after a value ends it (no "1\r" number error), also in sparse values. */
    static const ctf_stream_def X[] = {{"x", NULL, 1, false, false}, {"y", NULL, 3, true, false}};
    run_text("crlf3.ctf", "|x 1\r\n|y 2:3\r\n", X, 2, 0);
    ASSERT_EQ(R.open_rc, 0);
    /* Line mode: line 1 lacks y, which is fatal; but no value error was reported. */
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT_STR_CONTAINS(R.next_err.message, "absent");
    run_clear(&R);
    run_text("crlf4.ctf", "|x 1\r|y 2:3\r\n|y 1:1\r|x -1\r\r\n", X, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    ctf_stream_view v2 = view_of(&R, 1, 0);
    ASSERT_DBL_EQ(fval(&v2, 0), -1.0);
    v2 = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v2, 0, (const int32_t[]){2}, (const float[]){3}, 1));
    run_clear(&R);
}

TEST(parse_tabs_and_spaces)
{
    run_text("tabs.ctf", "5\t|a\t1 \t2\t\t3  |b\t0:1\t 4:2 \t\n5 |b 1:1|a 4\t5 6|# c\t\n", AB, 2,
             0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(key_of(&R, 0), 5);
    const float want[] = {1, 2, 3, 4, 5, 6};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 6));
    v = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v, 0, (const int32_t[]){0, 4}, (const float[]){1, 2}, 2));
    ASSERT(sparse_is(&v, 1, (const int32_t[]){1}, (const float[]){1}, 1));
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
}

TEST(parse_last_line_without_newline)
{
    run_text("nonl.ctf", "1 |a 1 2 3 |b 0:1\n1 |b 1:1 |a 4 5 6", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    const float want[] = {1, 2, 3, 4, 5, 6};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 6));
    ASSERT_EQ(R.info.lines, 2);
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
    /* Sparse at the very end, and a value ending the file. */
    run_text("nonl2.ctf", "|a 1 2 3 |b 0:1 3:7", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    v = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v, 0, (const int32_t[]){0, 3}, (const float[]){1, 7}, 2));
    run_clear(&R);
    /* An error on the unterminated last line is located as usual. */
    run_text("nonl3.ctf", "1 |a 1 2 3 |b 0:1\n1 |b 1:1 |a 4 5 6e", AB, 2, 0);
    ASSERT(at(&R.next_err, 2, 17, 34));
    ASSERT_STR_CONTAINS(R.next_err.message, "found '6e'");
    run_clear(&R);
}

/* A trailing run of blanks without a newline is not a line; a blank line is one. */
TEST(parse_trailing_blanks_at_eof)
{
    run_text("trail.ctf", "1 |a 1 2 3 |b 0:1\n \t ", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(R.info.lines, 1);
    ASSERT_EQ(R.info.samples, 1);
    run_clear(&R);
    run_text("trail2.ctf", "1 |a 1 2 3 |b 0:1\n \t \n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT(at(&R.next_err, 2, 1, 18));
    ASSERT_STR_CONTAINS(R.next_err.message, "row yields no sample");
    run_clear(&R);
    /* In line mode neither is a sequence. */
    run_text("trail3.ctf", "|a 1 2 3 |b 0:1\n\n \t ", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(R.info.sequences, 1);
    run_clear(&R);
}

TEST(parse_comments)
{
    run_text("comm.ctf",
             "|# leading comment |a 1 2 3 |# middle |b 0:1 |#trailing\n"
             "|b 2:2|#no blank before|a 4 5 6|#\n"
             "|#|#|a 7 8 9 |b 1:3\n",
             AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 3);
    ASSERT_EQ(R.log.n, 0);
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, (const float[]){1, 2, 3}, 3));
    v = view_of(&R, 1, 0);
    ASSERT(dense_is(&v, (const float[]){4, 5, 6}, 3));
    v = view_of(&R, 2, 0);
    ASSERT(dense_is(&v, (const float[]){7, 8, 9}, 3));
    run_clear(&R);
    /* "|#|a 9 9 9": the comment body is empty, it ends at the next '|', and "|a 9 9 9" is a
     * sample. */
    run_text("comm2.ctf", "|#|a 9 9 9 |b 1:3\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, (const float[]){9, 9, 9}, 3));
    run_clear(&R);
    /* A comment-only line in id mode inside a sequence is an empty row (tested above); as the
     * first line of a file it makes the file line mode. */
    run_text("comm3.ctf", "|# header\n1 |a 1 2 3 |b 0:1\n2 |a 1 2 3 |b 0:1\n", AB, 2, 0);
    ASSERT(R.info.line_mode);
    ASSERT_EQ(R.nmb, 2);
    ASSERT_EQ(key_of(&R, 0), 1);
    ASSERT_EQ(key_of(&R, 1), 2);
    run_clear(&R);
}

/* The seed's simple example, verbatim, including the "escaped pipe" comment: '|#' inside a
 * comment starts another comment, which ends at the next '|'. */
TEST(parse_seed_simple_example_escaped_pipe)
{
    static const ctf_stream_def S[] = {{"A", NULL, 5, false, false},
                                       {"B", NULL, 1000000, true, false},
                                       {"C", NULL, 1, false, false}};
    run_text("seed_simple.ctf",
             "|B 100:3 123:4 |C 8 |A 0 1 2 3 4 |# a CTF comment\n"
             "|# another comment |A 0 1.1 22 0.3 54 |C 123917 |B 1134:1.911 13331:0.014\n"
             "|C -0.001 |# a comment with an escaped pipe: '|#' |A 3.9 1.11 121.2 99.13 0.04 "
             "|B 999:0.001 918918:-9.19\n",
             S, 3, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 3);
    ASSERT_EQ(R.log.n, 0);
    ASSERT(R.info.line_mode);
    ctf_stream_view a = view_of(&R, 2, 0), b = view_of(&R, 2, 1), c = view_of(&R, 2, 2);
    ASSERT(dense_is(&a, (const float[]){3.9f, 1.11f, 121.2f, 99.13f, 0.04f}, 5));
    ASSERT(sparse_is(&b, 0, (const int32_t[]){999, 918918}, (const float[]){0.001f, -9.19f}, 2));
    ASSERT(dense_is(&c, (const float[]){-0.001f}, 1));
    b = view_of(&R, 0, 1);
    ASSERT(sparse_is(&b, 0, (const int32_t[]){100, 123}, (const float[]){3, 4}, 2));
    c = view_of(&R, 1, 2);
    ASSERT(dense_is(&c, (const float[]){123917}, 1));
    run_clear(&R);
}

TEST(parse_aliases)
{
    static const ctf_stream_def S[] = {{"Some_very_long_input_name", "a", 3, false, false},
                                       {"Some_other_also_very_long_input_name", "b", 2, false,
                                        false}};
    /* The file uses the aliases; a name is then an unknown input, skipped. */
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("alias.ctf", "|a 1 2 3 |b 4 5 |Some_very_long_input_name 9 9 9\n"),
            S, 2);
    cfg.trace_level = 2;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT_STR_EQ(v.name, "Some_very_long_input_name");
    ASSERT(dense_is(&v, (const float[]){1, 2, 3}, 3));
    v = view_of(&R, 0, 1);
    ASSERT_STR_EQ(v.name, "Some_other_also_very_long_input_name");
    ASSERT(dense_is(&v, (const float[]){4, 5}, 2));
    ASSERT_EQ(R.log.count[CTF_SEV_INFO] >= 1, 1);
    bool found = false;
    for (size_t i = 0; i < R.log.n; i++)
        if (strstr(R.log.e[i].message, "unknown input 'Some_very_long_input_name'")) found = true;
    ASSERT(found);
    run_clear(&R);
    /* A prefix or extension of an alias is another name. */
    run_text("alias2.ctf", "|a 1 2 3 |b 0:1 |ab 7 |bb 1:1 |aa\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
}

TEST(parse_unknown_inputs_info_at_trace_level_2_only)
{
    const char *text = "|a 1 2 3 |zz 1 2 3 4 x y |b 0:1 |q\n";
    for (int tl = 0; tl <= 2; tl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("unk.ctf", text), AB, 2);
        cfg.trace_level = tl;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 1);
        ASSERT_EQ(R.stats.errors, 0);
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR] + R.log.count[CTF_SEV_WARNING], 0);
        size_t unknown = 0;
        for (size_t i = 0; i < R.log.n; i++)
            if (R.log.sev[i] == CTF_SEV_INFO && strstr(R.log.e[i].message, "unknown input")) {
                if (unknown == 0) {
                    ASSERT(at(&R.log.e[i], 1, 10, 9));
                    ASSERT_STR_CONTAINS(R.log.e[i].message, "'zz'");
                } else {
                    ASSERT(at(&R.log.e[i], 1, 33, 32));
                    ASSERT_STR_CONTAINS(R.log.e[i].message, "'q'");
                }
                unknown++;
            }
        ASSERT_EQ(unknown, tl == 2 ? 2 : 0);
        ctf_stream_view v = view_of(&R, 0, 0);
        ASSERT(dense_is(&v, (const float[]){1, 2, 3}, 3));
        run_clear(&R);
    }
}

/*======================================================================
 * Id mode and line mode
 *====================================================================*/

TEST(parse_id_mode_grouping_no_id_lines_join)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    run_text("group.ctf", "5 |a 1\n|a 2\n  |a 3\n5 |a 4\n6 |a 5\n\t|a 6\n007|a 7\n", A1, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 3);
    ASSERT_EQ(key_of(&R, 0), 5);
    ASSERT_EQ(key_of(&R, 1), 6);
    ASSERT_EQ(key_of(&R, 2), 7);
    ASSERT_EQ(line_of(&R, 0), 1);
    ASSERT_EQ(line_of(&R, 1), 5);
    ASSERT_EQ(line_of(&R, 2), 7);
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, (const float[]){1, 2, 3, 4}, 4));
    v = view_of(&R, 1, 0);
    ASSERT(dense_is(&v, (const float[]){5, 6}, 2));
    ASSERT_EQ(R.info.samples, 7);
    ASSERT(!R.info.line_mode);
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
    /* Blank lines before the first id belong to no sequence. */
    run_text("group2.ctf", "\n  \n5 |a 1\n5 |a 2\n", A1, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(line_of(&R, 0), 3);
    ASSERT_EQ(R.info.samples, 2);
    run_clear(&R);
}

TEST(parse_non_consecutive_repeated_id)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    const char *text = "1 |a 1\n2 |a 2\n1 |a 3\n2 |a 4\n3 |a 5\n1 |a 6\n";
    for (int tl = 0; tl <= 1; tl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("repeat.ctf", text), A1, 1);
        cfg.trace_level = tl;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 6); /* every reappearance is a separate sequence */
        const uint64_t keys[] = {1, 2, 1, 2, 3, 1};
        for (size_t i = 0; i < 6; i++) {
            ASSERT_U64_EQ(key_of(&R, i), keys[i]);
            ASSERT_U64_EQ(line_of(&R, i), i + 1);
            ctf_stream_view v = view_of(&R, i, 0);
            ASSERT_DBL_EQ(fval(&v, 0), (double)(i + 1));
        }
        ASSERT_EQ(R.stats.errors, 0);
        ASSERT_EQ(R.stats.warnings, 1); /* counted whether shown or not */
        if (tl == 0) {
            ASSERT_EQ(R.log.n, 0);
        } else {
            /* One warning per file, naming both lines. */
            ASSERT_EQ(R.log.n, 1);
            ASSERT_EQ(R.log.sev[0], CTF_SEV_WARNING);
            ASSERT(at(&R.log.e[0], 3, 1, 14));
            ASSERT_STR_CONTAINS(R.log.e[0].message,
                                "sequence id 1 reappears here after other ids (first used on "
                                "line 1)");
        }
        run_clear(&R);
    }
}

TEST(parse_skip_sequence_ids)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("skip.ctf", "1 |a 1\n1 |a 2\n2 |a 3\n|a 4\n"), A1, 1);
    cfg.skip_sequence_ids = true;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT(R.info.line_mode);
    ASSERT_EQ(R.nmb, 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_U64_EQ(key_of(&R, i), i);
        ctf_stream_view v = view_of(&R, i, 0);
        ASSERT_EQ(v.num_samples, 1);
        ASSERT_DBL_EQ(fval(&v, 0), (double)(i + 1));
    }
    run_clear(&R);
    /* With skipSequenceIds the mode is line mode whatever the first character: text before
     * the first '|' is then an error of that line, not a fatal "expected a sequence id". */
    cfg_for(&cfg, test_write_str("skip2.ctf", "x |a 1\n"), A1, 1);
    cfg.skip_sequence_ids = true;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.open_rc, 0);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT(at(&R.next_err, 1, 1, 0));
    ASSERT_STR_CONTAINS(R.next_err.message, "expected '|' and an input name, found 'x'");
    run_clear(&R);
}

TEST(parse_line_mode_ignores_leading_digits)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    run_text("lm.ctf", "|a 1\n100 |a 2\n100 |a 3\n7|a 4\n", A1, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT(R.info.line_mode);
    ASSERT_EQ(R.nmb, 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_U64_EQ(key_of(&R, i), i);
        ASSERT_U64_EQ(line_of(&R, i), i + 1);
        ctf_stream_view v = view_of(&R, i, 0);
        ASSERT_EQ(v.num_samples, 1);
    }
    run_clear(&R);
}

TEST(parse_line_mode_skips_lines_without_input)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    const char *text = "|a 1\n\n100 |a 2\n|# only a comment\n|zz 5\n   \n\r\n7|a 3\n|# x |zz 1\n";
    for (int tl = 1; tl <= 2; tl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("lmskip.ctf", text), A1, 1);
        cfg.trace_level = tl;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 3);
        /* Keys are physical 0-based line numbers. */
        ASSERT_EQ(key_of(&R, 0), 0);
        ASSERT_EQ(key_of(&R, 1), 2);
        ASSERT_EQ(key_of(&R, 2), 7);
        ASSERT_EQ(line_of(&R, 2), 8);
        ASSERT_EQ(R.info.sequences, 3);
        ASSERT_EQ(R.info.samples, 3);
        ASSERT_EQ(R.info.lines, 9);
        ASSERT_EQ(R.stats.errors, 0);
        ASSERT_EQ(R.stats.dropped_rows, 0);
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR] + R.log.count[CTF_SEV_WARNING], 0);
        if (tl == 2) {
            /* Non-blank skipped lines are named at traceLevel 2. */
            size_t skipped = 0;
            for (size_t i = 0; i < R.log.n; i++)
                if (strstr(R.log.e[i].message, "line holds no configured input")) {
                    const uint64_t lines[] = {4, 5, 9};
                    if (skipped < 3) ASSERT_U64_EQ(R.log.e[i].line, lines[skipped]);
                    skipped++;
                }
            ASSERT_EQ(skipped, 3);
        } else {
            ASSERT_EQ(R.log.n, 0);
        }
        run_clear(&R);
    }
}

/*======================================================================
 * Samples: zero fill, duplicates, precision
 *====================================================================*/

TEST(parse_dense_zero_fill_with_warning)
{
    static const ctf_stream_def A3[] = {{"a", NULL, 3, false, false}};
    run_text("zero.ctf", "|a 1\n|a 1 2 \n|a\n|a 1 2 3\n|a 7 |# c\n", A3, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 5);
    const float want[5][3] = {{1, 0, 0}, {1, 2, 0}, {0, 0, 0}, {1, 2, 3}, {7, 0, 0}};
    for (size_t i = 0; i < 5; i++) {
        ctf_stream_view v = view_of(&R, i, 0);
        ASSERT(dense_is(&v, want[i], 3));
    }
    ASSERT_EQ(R.stats.warnings, 4);
    ASSERT_EQ(R.stats.errors, 0);
    ASSERT_EQ(R.log.count[CTF_SEV_WARNING], 4);
    const uint64_t lines[] = {1, 2, 3, 5};
    const int64_t offs[] = {0, 5, 13, 25};
    for (size_t i = 0; i < 4; i++) {
        ASSERT(at(&R.log.e[i], lines[i], 1, offs[i]));
        ASSERT_STR_CONTAINS(R.log.e[i].message, "stream 'a': dense sample has");
        ASSERT_STR_CONTAINS(R.log.e[i].message, "of dim=3 values; the rest are zeros");
    }
    ASSERT_STR_CONTAINS(R.log.e[2].message, "has 0 of dim=3");
    run_clear(&R);
}

/* The last sample of an unterminated last line is delivered zero-padded without a warning, and
 * the JSON dump prints only its values (CNTK compatibility). */
TEST(parse_dense_short_at_end_of_file)
{
    static const ctf_stream_def A3[] = {{"a", NULL, 3, false, false}};
    run_text("short_eof.ctf", "|a 1 2 3\n|a 4", A3, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    ASSERT_EQ(R.log.n, 0);
    ASSERT_EQ(R.stats.warnings, 0);
    ctf_stream_view v = view_of(&R, 1, 0);
    ASSERT(dense_is(&v, (const float[]){4, 0, 0}, 3));
    FILE *f = tmpfile();
    ASSERT(f);
    ASSERT_EQ(dump_json_sequences(R.mb[1], f, true), 0);
    char buf[256] = "";
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    ASSERT_STR_EQ(buf, "{\"key\": 1, \"line\": 2, \"streams\": {\"a\": [[4]]}}\n");
    run_clear(&R);
    /* Not the last sample of the line: padded with a warning as usual. */
    static const ctf_stream_def AB1[] = {{"a", NULL, 3, false, false},
                                         {"b", NULL, 1, false, false}};
    run_text("short_eof2.ctf", "|a 4 |b 1", AB1, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.log.count[CTF_SEV_WARNING], 1);
    ASSERT(at(&R.log.e[0], 1, 1, 0));
    run_clear(&R);
}

TEST(parse_sparse_duplicate_indices_kept_with_warning)
{
    static const ctf_stream_def B[] = {{"b", NULL, 10, true, false}};
    run_text("dup.ctf", "|b 1:1 3:2 1:3 3:4\n|b\n|b 2:5 0:6\n", B, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 3);
    ctf_stream_view v = view_of(&R, 0, 0);
    /* Kept in file order; one warning per sample. */
    ASSERT(sparse_is(&v, 0, (const int32_t[]){1, 3, 1, 3}, (const float[]){1, 2, 3, 4}, 4));
    v = view_of(&R, 1, 0);
    ASSERT(sparse_is(&v, 0, NULL, NULL, 0)); /* an empty sparse sample is valid */
    v = view_of(&R, 2, 0);
    ASSERT(sparse_is(&v, 0, (const int32_t[]){2, 0}, (const float[]){5, 6}, 2)); /* unsorted ok */
    ASSERT_EQ(R.log.n, 1);
    ASSERT_EQ(R.log.sev[0], CTF_SEV_WARNING);
    ASSERT(at(&R.log.e[0], 1, 12, 11));
    ASSERT_STR_CONTAINS(R.log.e[0].message,
                        "stream 'b': sparse index 1 appears more than once in the sample; all "
                        "entries are kept");
    ASSERT_EQ(R.stats.warnings, 1);
    ASSERT_EQ(R.stats.errors, 0);
    ASSERT_EQ(R.stats.streams[0].nonzeros, 6);
    run_clear(&R);
}

static const char *const number_texts[] = {
    "0.1",
    "0.2",
    "0.3",
    "1",
    "-1",
    "3.14159265358979323846",
    "2.718281828459045",
    "1.00000005960464477539062500000001",
    "1.000000059604644775390625",
    "9007199254740993",
    "9007199254740992.5",
    "123456789.123456789",
    "1e-40",
    "1.4e-45",
    "3.4028234663852886e38",
    "1.17549435e-38",
    "2.2250738585072011e-308",
    "4.9406564584124654e-324",
    "1.7976931348623157e308",
    "0.000001",
    "1234567890123456789012",
    "45.",
    "-0",
    "+0.5",
    "6.02214076e23",
    "1.5e-3",
    "7E-10",
    "0.30000000000000004",
    "100000000000000000000000000000000000000",
    "0.9999999999999999999999999999",
};
#define NUM_TEXTS (sizeof number_texts / sizeof *number_texts)

/* Values are correctly rounded to the configured precision: bit-equal to strtof / strtod. */
TEST(parse_precision_float_and_double)
{
    char text[2048] = "|x";
    for (size_t i = 0; i < NUM_TEXTS; i++) {
        strcat(text, i % 2 ? "\t" : " ");
        strcat(text, number_texts[i]);
    }
    strcat(text, "\n");
    static const ctf_stream_def X[] = {{"x", NULL, NUM_TEXTS, false, false}};
    static const ctf_stream_def XS[] = {{"x", NULL, NUM_TEXTS, true, false}};
    for (int dbl = 0; dbl <= 1; dbl++) {
        run_text_prec("prec.ctf", text, X, 1, dbl);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 1);
        ctf_stream_view v = view_of(&R, 0, 0);
        ASSERT_EQ(v.precision, dbl ? CTF_FLOAT64 : CTF_FLOAT32);
        ASSERT_EQ(v.num_samples, 1);
        for (size_t i = 0; i < NUM_TEXTS; i++) {
            if (dbl) {
                double want = strtod(number_texts[i], NULL), got = dval(&v, i);
                if (memcmp(&want, &got, 8)) {
                    fprintf(stderr, "  double '%s': got %.17g want %.17g\n", number_texts[i], got,
                            want);
                    ASSERT(0);
                }
            } else {
                float want = strtof(number_texts[i], NULL), got = fval(&v, i);
                if (memcmp(&want, &got, 4)) {
                    fprintf(stderr, "  float '%s': got %.9g want %.9g\n", number_texts[i],
                            (double)got, (double)want);
                    ASSERT(0);
                }
            }
        }
        run_clear(&R);
    }
    /* Sparse values as well. */
    char stext[2048] = "|x";
    for (size_t i = 0; i < NUM_TEXTS; i++) {
        char e[80];
        snprintf(e, sizeof e, " %zu:%s", i, number_texts[i]);
        strcat(stext, e);
    }
    strcat(stext, "\n");
    for (int dbl = 0; dbl <= 1; dbl++) {
        run_text_prec("precs.ctf", stext, XS, 1, dbl);
        ASSERT_EQ(R.next_rc, 0);
        ctf_stream_view v = view_of(&R, 0, 0);
        ASSERT_EQ(v.nnz, NUM_TEXTS);
        for (size_t i = 0; i < NUM_TEXTS; i++) {
            ASSERT_EQ(v.indices[i], (int32_t)i);
            if (dbl) {
                double want = strtod(number_texts[i], NULL);
                ASSERT(!memcmp(&want, (const double *)v.values + i, 8));
            } else {
                float want = strtof(number_texts[i], NULL);
                ASSERT(!memcmp(&want, (const float *)v.values + i, 4));
            }
        }
        run_clear(&R);
    }
}

/* A number beyond the precision's range becomes its correctly rounded value, an infinity, and a
 * warning says so (never silently), in dense and sparse samples, for float32 and float64, on the
 * tokenized and the reference paths alike (parse_diff compares the two). */
TEST(parse_out_of_range_warns)
{
    static const ctf_stream_def XS[] = {{"x", NULL, 3, false, false}, {"s", NULL, 4, true, false}};
    const char *text = "|x 1 1e39 -2e400 |s 3:-1e39\n|x 3.4e38 1e-50 1e309 |s\n";
    typedef struct range_warning {
        uint64_t line, col;
        int64_t off;
        const char *msg;
    } range_warning;
    static const range_warning w32[] = {
        {1, 6, 5, "stream 'x': 1e39 is beyond the range of float32; the value is inf"},
        {1, 11, 10, "stream 'x': -2e400 is beyond the range of float32; the value is -inf"},
        {1, 23, 22, "stream 's': -1e39 is beyond the range of float32; the value is -inf"},
        {2, 17, 44, "stream 'x': 1e309 is beyond the range of float32; the value is inf"}};
    static const range_warning w64[] = {
        {1, 11, 10, "stream 'x': -2e400 is beyond the range of float64; the value is -inf"},
        {2, 17, 44, "stream 'x': 1e309 is beyond the range of float64; the value is inf"}};
    for (int dbl = 0; dbl <= 1; dbl++) {
        run_text_prec("range.ctf", text, XS, 2, dbl);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 2);
        ASSERT_EQ(R.stats.errors, 0);
        ctf_stream_view x0 = view_of(&R, 0, 0), s0 = view_of(&R, 0, 1), x1 = view_of(&R, 1, 0);
        if (!dbl) {
            /* 1e39, -2e400, -1e39 (sparse) on line 1; 1e309 on line 2. 3.4e38 fits, 1e-50
             * underflows to 0 (a rounding, not a loss of range: no warning). */
            ASSERT(isinf(fval(&x0, 1)) && fval(&x0, 1) > 0);
            ASSERT(isinf(fval(&x0, 2)) && fval(&x0, 2) < 0);
            ASSERT(isinf(((const float *)s0.values)[0]) && ((const float *)s0.values)[0] < 0);
            ASSERT(!isinf(fval(&x1, 0)) && fval(&x1, 1) == 0.0f && isinf(fval(&x1, 2)));
        } else {
            ASSERT(dval(&x0, 1) == 1e39 && isinf(dval(&x0, 2)) && dval(&x0, 2) < 0);
            ASSERT(((const double *)s0.values)[0] == -1e39);
            ASSERT(isinf(dval(&x1, 2)));
        }
        const size_t nw = dbl ? 2 : 4;
        const range_warning *w = dbl ? w64 : w32;
        ASSERT_EQ(R.stats.warnings, nw);
        ASSERT_EQ(R.log.count[CTF_SEV_WARNING], nw);
        for (size_t i = 0; i < nw; i++) {
            ASSERT(at(&R.log.e[i], w[i].line, w[i].col, w[i].off));
            ASSERT_STR_CONTAINS(R.log.e[i].message, w[i].msg);
        }
        run_clear(&R);
    }
    /* After a value out of range the sample goes on and is counted as before: one value more
     * than dim is still an error (the sample is dropped), one at dim is fine. */
    static const ctf_stream_def X2[] = {{"x", NULL, 2, false, false}};
    run_text("range2.ctf", "|x 1e39 2 3\n|x 1 1e39\n", X2, 1, 5);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(R.stats.errors, 1);
    ASSERT_EQ(R.stats.warnings, 3); /* the two values, and "sequence 0 dropped" */
    ASSERT(at(&R.log.e[1], 1, 11, 10));
    ASSERT_STR_CONTAINS(R.log.e[1].message, "more than dim=2 values; sample dropped");
    ASSERT(at(&R.log.e[3], 2, 6, 17));
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(fval(&v, 0) == 1.0f && isinf(fval(&v, 1)));
    ASSERT_EQ(key_of(&R, 0), 1);
    run_clear(&R);
}

/*======================================================================
 * maxErrors, traceLevel, frame mode, counters
 *====================================================================*/

/* Three errors, each in its own sequence (and chunk): maxErrors 3 reads everything, maxErrors
 * 2 stops at the third error with the budget message and its location. */
TEST(parse_max_errors_tolerates_exactly_n)
{
    const char *text = "1 |a 1 2 3 |b 0:1\n1 |a x 2 3 |b 1:1\n"      /* error 1 */
                       "2 |a 1 2 3 |b 0:1\n2 |a 1 2 3 |b 9:1\n"      /* error 2 */
                       "3 |a 1 2 3 |b 0:1\n3 |a 1 2 3 4 |b 1:1\n"    /* error 3 */
                       "4 |a 1 2 3 |b 0:1\n";
    const char *path = NULL;
    char p[512];
    for (uint64_t me = 0; me <= 4; me++) {
        path = test_write_str("maxerr.ctf", text);
        snprintf(p, sizeof p, "%s", path);
        ctf_config cfg;
        cfg_for(&cfg, p, AB, 2);
        cfg.max_errors = me;
        cfg.chunk_size_bytes = 1;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.open_rc, 0);
        const size_t errs = me < 3 ? (size_t)me : 3;
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR], errs); /* the tolerated ones are logged */
        if (me >= 3) {
            ASSERT_EQ(R.next_rc, 0);
            ASSERT_EQ(R.nmb, 4);
            ASSERT_EQ(R.stats.errors, 3);
        } else {
            ASSERT_EQ(R.next_rc, CTF_EPARSE);
            ASSERT_EQ(R.nmb, (size_t)me); /* the sequences before the failing one */
            ASSERT_EQ(R.stats.errors, me + 1);
            const uint64_t lines[] = {2, 4, 6};
            const uint64_t cols[] = {6, 15, 12};
            const int64_t offs[] = {18 + 5, 54 + 14, 90 + 11};
            ASSERT(at(&R.next_err, lines[me], cols[me], offs[me]));
            char want[700];
            snprintf(want, sizeof want,
                     "; reached the maximum number of allowed errors (%llu) reading %s",
                     (unsigned long long)me, p);
            ASSERT_STR_CONTAINS(R.next_err.message, want);
        }
        run_clear(&R);
    }
}

/* Errors are counted once per chunk over the reader's life, not again in later sweeps. */
TEST(parse_errors_counted_once_per_chunk)
{
    const char *text = "1 |a 1 2 3 |b 0:1\n1 |a x 2 3 |b 1:1\n2 |a 1 2 |b 0:1\n";
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("once.ctf", text), AB, 2);
    cfg.max_errors = 1;
    cfg.max_sweeps = 3;
    cfg.keep_data_in_memory = false;
    cfg.chunk_size_bytes = 1;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 6);
    ASSERT_EQ(R.stats.errors, 1);
    ASSERT_EQ(R.stats.warnings, 1);
    ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 1);
    ASSERT_EQ(R.log.count[CTF_SEV_WARNING], 1);
    ASSERT_EQ(R.stats.streams[0].dropped_samples, 1);
    run_clear(&R);
}

TEST(parse_trace_level_filtering)
{
    /* One tolerated error, one warning (zero fill), one info (unknown input). */
    const char *text = "1 |a 1 2 3 |b 0:1\n1 |a 1 x 3 |b 1:1\n2 |a 1 |b 0:1 |zz 1\n";
    size_t want_e[3] = {1, 1, 1}, want_w[3] = {0, 1, 1}, want_i[3] = {0, 0, 2};
    for (int tl = 0; tl <= 2; tl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("trace.ctf", text), AB, 2);
        cfg.max_errors = 1;
        cfg.trace_level = tl;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 2);
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR], want_e[tl]);
        ASSERT_EQ(R.log.count[CTF_SEV_WARNING], want_w[tl]);
        /* At level 2: the unknown input and the index summary. */
        ASSERT_EQ(R.log.count[CTF_SEV_INFO], want_i[tl]);
        /* Counters do not depend on the level. */
        ASSERT_EQ(R.stats.errors, 1);
        ASSERT_EQ(R.stats.warnings, 1);
        /* File order. */
        if (tl == 2) {
            ASSERT_EQ(R.log.sev[0], CTF_SEV_INFO);
            ASSERT_STR_CONTAINS(R.log.e[0].message, "indexed 2 sequences");
            ASSERT_EQ(R.log.sev[1], CTF_SEV_ERROR);
            ASSERT(at(&R.log.e[1], 2, 8, 25));
            ASSERT_EQ(R.log.sev[2], CTF_SEV_WARNING);
            ASSERT(at(&R.log.e[2], 3, 3, 38));
            ASSERT_EQ(R.log.sev[3], CTF_SEV_INFO);
            ASSERT(at(&R.log.e[3], 3, 15, 50));
        }
        run_clear(&R);
    }
    /* Dying at traceLevel 0 with suppressed warnings says so. */
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("trace0.ctf", "|a 1 |b 0:1\n|a 1 2 3 |b 1:1 9\n"), AB, 2);
    cfg.trace_level = 0;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT_EQ(R.log.n, 0);
    ASSERT_STR_CONTAINS(R.next_err.message,
                        "(1 warnings were not shown: set traceLevel = 1 to see them)");
    run_clear(&R);
}

TEST(parse_frame_mode_multi_sample_sequence)
{
    const char *text = "1 |a 1 2 3 |b 0:1\n2 |a 1 2 3 |b 0:1\n2 |a 4 5 6\n3 |a 1 2 3 |b 0:1\n";
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("frame.ctf", text), AB, 2);
    cfg.frame_mode = true;
    cfg.max_errors = 1;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2); /* sequence 2 is dropped as a whole */
    ASSERT_EQ(R.empty_mb, 1); /* (its minibatch is empty: positions still count it) */
    ASSERT_EQ(key_of(&R, 0), 1);
    ASSERT_EQ(key_of(&R, 1), 3);
    ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 1);
    ASSERT(at(&R.log.e[0], 2, 1, 18));
    ASSERT_STR_CONTAINS(R.log.e[0].message,
                        "frame mode: sequence 2 has 2 samples in stream 'feat' (must be exactly "
                        "1); sequence dropped");
    ASSERT_EQ(R.stats.dropped_sequences, 1);
    ASSERT_EQ(R.stats.sequences, 2);
    ASSERT_EQ(R.stats.streams[0].dropped_samples, 2);
    ASSERT_EQ(R.stats.streams[1].dropped_samples, 1);
    run_clear(&R);
    cfg.max_errors = 0;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT(at(&R.next_err, 2, 1, 18));
    run_clear(&R);
    /* One-sample sequences are fine in frame mode. */
    cfg_for(&cfg, test_write_str("frame2.ctf", "|a 1 2 3 |b 0:1\n|a 1 2 3 |b 0:1\n"), AB, 2);
    cfg.frame_mode = true;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    run_clear(&R);
}

TEST(parse_dropped_counters)
{
    const char *text = "1 |a 1 2 3 |b 0:1\n"
                       "1 |a 1 2 x |b 1:1\n"       /* dense sample dropped */
                       "1 |a 1 2 3 |b 7:1\n"       /* sparse sample dropped */
                       "\n"                        /* empty row */
                       "1 |a 1 2 3 |b 1:1 |b 2:2\n" /* second b dropped */
                       "1 |a 1 x 3\n"              /* row with only an error: no extra error */
                       "2 |a 1 2 3 |b 0:1 |zz 3\n";
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("drop.ctf", text), AB, 2);
    cfg.max_errors = 100;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    /* Five row errors, and sequence 1 has 4 rows with data but 3 samples per stream. */
    ASSERT_EQ(R.stats.errors, 6);
    ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 6);
    ASSERT_STR_CONTAINS(R.log.e[5].message,
                        "sequence 1 has 4 rows with data but its longest stream has only 3");
    ASSERT_EQ(R.stats.dropped_rows, 2);
    ASSERT_EQ(R.stats.dropped_sequences, 0);
    ASSERT_EQ(R.stats.streams[0].dropped_samples, 2);
    ASSERT_EQ(R.stats.streams[1].dropped_samples, 2);
    ASSERT_EQ(R.stats.sequences, 2);
    ASSERT_EQ(R.stats.streams[0].samples, 4);
    ASSERT_EQ(R.stats.streams[1].samples, 4);
    ASSERT_EQ(R.stats.streams[1].nonzeros, 4);
    ASSERT_EQ(R.stats.streams[0].nonzeros, 12);
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 3);
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 3);
    /* The log is in file order. */
    const uint64_t lines[] = {2, 3, 4, 5, 6, 1};
    for (size_t i = 0; i < 6; i++) ASSERT_U64_EQ(R.log.e[i].line, lines[i]);
    run_clear(&R);
}

/* Problems are reported in file order whatever the number of parse threads and prefetch. */
TEST(parse_log_order_independent_of_threads)
{
    char text[8192] = "";
    for (int i = 0; i < 60; i++) {
        char line[80];
        snprintf(line, sizeof line, "%d |a 1 2 3 |b 0:1\n%d |a %s 2 |b 1:1\n", i, i,
                 i % 3 ? "1" : "x");
        strcat(text, line);
    }
    const char *path = test_write_str("order.ctf", text);
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    uint64_t first_lines[MAX_LOG];
    size_t first_n = 0;
    for (size_t threads = 0; threads <= 4; threads += 2) {
        ctf_config cfg;
        cfg_for(&cfg, p, AB, 2);
        cfg.max_errors = 1000;
        cfg.chunk_size_bytes = 64;
        cfg.num_threads = threads;
        cfg.prefetch_chunks = threads ? 8 : 1;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 60);
        ASSERT_EQ(R.stats.errors, 20);
        ASSERT_EQ(R.stats.warnings, 40);
        for (size_t i = 1; i < R.log.n; i++) ASSERT(R.log.e[i].offset > R.log.e[i - 1].offset);
        if (threads == 0) {
            first_n = R.log.n;
            for (size_t i = 0; i < R.log.n; i++) first_lines[i] = R.log.e[i].line;
        } else {
            ASSERT_EQ(R.log.n, first_n);
            for (size_t i = 0; i < R.log.n; i++) ASSERT_U64_EQ(R.log.e[i].line, first_lines[i]);
        }
        run_clear(&R);
    }
}
