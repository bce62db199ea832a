/*
 * test_io.c -- the I/O seam: SHA-256 and HMAC-SHA-256 on their published test vectors, AWS
 * Signature V4 on AWS's own worked examples, and the local backend behind ctf__io_* (range
 * reads, the end of a file, the fault hooks, a remote path without options).
 */

#include "test.h"

#include "io/io.h"

static void hex_of(const unsigned char *d, char *out) { ctf__hex(d, 32, out); }

TEST(io_sha256_vectors)
{
    unsigned char d[32];
    char h[65];
    ctf__sha256("", 0, d);
    hex_of(d, h);
    ASSERT_STR_EQ(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    ctf__sha256("abc", 3, d);
    hex_of(d, h);
    ASSERT_STR_EQ(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ctf__sha256(m, strlen(m), d);
    hex_of(d, h);
    ASSERT_STR_EQ(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* A million 'a' fed in uneven pieces: the block boundary logic. */
    ctf__sha256_ctx s;
    ctf__sha256_init(&s);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    for (size_t step = 1; left; step = step % 983 + 7) {
        size_t n = step < left ? step : left;
        ctf__sha256_update(&s, a, n);
        left -= n;
    }
    ctf__sha256_final(&s, d);
    hex_of(d, h);
    ASSERT_STR_EQ(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(io_hmac_sha256_vectors)
{
    unsigned char d[32];
    char h[65];
    const char *msg = "what do ya want for nothing?";
    ctf__hmac_sha256("Jefe", 4, msg, strlen(msg), d);
    hex_of(d, h);
    ASSERT_STR_EQ(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* A key longer than the block is hashed first. */
    unsigned char key[131];
    memset(key, 0xaa, sizeof key);
    const char *m2 = "Test Using Larger Than Block-Size Key - Hash Key First";
    ctf__hmac_sha256(key, sizeof key, m2, strlen(m2), d);
    hex_of(d, h);
    ASSERT_STR_EQ(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

TEST(io_sigv4_s3_get_object_example)
{
    /* AWS's S3 documentation: GET /test.txt with a Range header. */
    const ctf__hdr h[] = {{"host", "examplebucket.s3.amazonaws.com"},
                          {"range", "bytes=0-9"},
                          {"x-amz-content-sha256", EMPTY_SHA},
                          {"x-amz-date", "20130524T000000Z"}};
    const ctf__sigv4 req = {"GET",
                            "/test.txt",
                            "",
                            h,
                            4,
                            EMPTY_SHA,
                            "20130524T000000Z",
                            "us-east-1",
                            "s3",
                            "AKIAIOSFODNN7EXAMPLE",
                            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
    char auth[512];
    ASSERT_EQ(ctf__sigv4_authorization(&req, auth, sizeof auth), 0);
    ASSERT_STR_EQ(auth, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                        "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                        "Signature="
                        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(io_sigv4_s3_list_example)
{
    /* AWS's S3 documentation: a listing with a query string (max-keys=2&prefix=J). */
    const ctf__hdr h[] = {{"host", "examplebucket.s3.amazonaws.com"},
                          {"x-amz-content-sha256", EMPTY_SHA},
                          {"x-amz-date", "20130524T000000Z"}};
    const ctf__sigv4 req = {"GET",
                            "/",
                            "max-keys=2&prefix=J",
                            h,
                            3,
                            EMPTY_SHA,
                            "20130524T000000Z",
                            "us-east-1",
                            "s3",
                            "AKIAIOSFODNN7EXAMPLE",
                            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
    char auth[512];
    ASSERT_EQ(ctf__sigv4_authorization(&req, auth, sizeof auth), 0);
    ASSERT(
        strstr(auth, "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"));
}

TEST(io_sigv4_test_suite_get_vanilla)
{
    /* The Signature V4 test suite's get-vanilla request (service "service"). */
    const ctf__hdr h[] = {{"host", "example.amazonaws.com"}, {"x-amz-date", "20150830T123600Z"}};
    const ctf__sigv4 req = {"GET",
                            "/",
                            "",
                            h,
                            2,
                            EMPTY_SHA,
                            "20150830T123600Z",
                            "us-east-1",
                            "service",
                            "AKIDEXAMPLE",
                            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};
    char auth[512];
    ASSERT_EQ(ctf__sigv4_authorization(&req, auth, sizeof auth), 0);
    ASSERT_STR_EQ(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                        "aws4_request, SignedHeaders=host;x-amz-date, "
                        "Signature="
                        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
    /* A buffer too small is refused, not cut. */
    char small[40];
    ASSERT_EQ(ctf__sigv4_authorization(&req, small, sizeof small), -1);
}

TEST(io_uri_encode)
{
    char out[64];
    ASSERT_EQ(ctf__uri_encode("a b/c~d*é", true, out, sizeof out), 18);
    ASSERT_STR_EQ(out, "a%20b/c~d%2A%C3%A9");
    ctf__uri_encode("a/b", false, out, sizeof out);
    ASSERT_STR_EQ(out, "a%2Fb");
}

TEST(io_local_backend_reads)
{
    const char *path = test_write_file("io_local.txt", "0123456789abcdef", 16);
    ctf_error err;
    ctf__file_id id;
    ASSERT_EQ(ctf__io_stat(NULL, path, &id, &err), 0);
    ASSERT_U64_EQ(id.size, 16);
    ASSERT_STR_EQ(id.etag, "");
    ctf__io *h;
    ASSERT_EQ(ctf__io_open(NULL, path, &id, &h, &err), 0);
    char buf[8] = {0};
    ASSERT_EQ(ctf__io_read(h, buf, 4, 10, &err), 0);
    ASSERT(!memcmp(buf, "abcd", 4));
    /* Past the end: the file changed under the index. */
    ASSERT_EQ(ctf__io_read(h, buf, 8, 12, &err), CTF_ECHANGED);
#ifdef CTF_TESTING
    /* The fault hooks still sit under the seam's local reads. */
    atomic_store(&ctf__io_count, 0);
    atomic_store(&ctf__io_fail_at, 1);
    ASSERT_EQ(ctf__io_read(h, buf, 4, 0, &err), CTF_EIO);
    atomic_store(&ctf__io_fail_at, 0);
    atomic_store(&ctf__io_short_at, 2);
    ASSERT_EQ(ctf__io_read(h, buf, 8, 0, &err), 0);
    ASSERT(!memcmp(buf, "01234567", 8));
    atomic_store(&ctf__io_short_at, 0);
#endif
    ctf__io_close(h);
    ctf__io_close(NULL);
    ASSERT_EQ(ctf__io_open(NULL, "/nonexistent/ctfio/io", NULL, &h, &err), CTF_EIO);
    ASSERT(strstr(err.path, "/nonexistent/ctfio/io"));
}

TEST(io_remote_paths_need_options)
{
    ctf_error err;
    ctf__file_id id;
    ASSERT(ctf__io_is_remote("s3://b/k"));
    ASSERT(ctf__io_is_remote("https://h/x"));
    ASSERT(!ctf__io_is_remote("s3:/b/k"));
    ASSERT_EQ(ctf__io_stat(NULL, "s3://b/k", &id, &err), CTF_EINVAL);
    /* A malformed S3 URL is named as such, before any request. */
    ctf__remote *rem;
    ctf_remote_options o = {0};
    ASSERT_EQ(ctf__remote_new(&o, &rem, &err), 0);
    int rc = ctf__io_stat(rem, "s3://bucket-only", &id, &err);
    ASSERT(rc == CTF_EINVAL || rc == CTF_EIO); /* EIO: a build without libcurl */
    ctf__remote_unref(rem);
    /* An access key without its secret is refused. */
    o.access_key_id = "AKID";
    ASSERT_EQ(ctf__remote_new(&o, &rem, &err), CTF_EINVAL);
}

TEST(io_sigv4_signs_a_session_token_of_any_length)
{
    /* A 10,000-character token is signed whole (the canonical request is hashed as written). */
    static char token[10001];
    memset(token, 'T', sizeof token - 1);
    const ctf__hdr h[] = {{"host", "examplebucket.s3.amazonaws.com"},
                          {"x-amz-content-sha256", EMPTY_SHA},
                          {"x-amz-date", "20130524T000000Z"},
                          {"x-amz-security-token", token}};
    const ctf__sigv4 req = {"GET",
                            "/test.txt",
                            "",
                            h,
                            4,
                            EMPTY_SHA,
                            "20130524T000000Z",
                            "us-east-1",
                            "s3",
                            "AKIAIOSFODNN7EXAMPLE",
                            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
    char a1[512], a2[512];
    ASSERT_EQ(ctf__sigv4_authorization(&req, a1, sizeof a1), 0);
    token[9999] = 'U'; /* the last character counts */
    ASSERT_EQ(ctf__sigv4_authorization(&req, a2, sizeof a2), 0);
    ASSERT(strcmp(a1, a2) != 0);
}

TEST(io_redact_urls_leaves_out_credentials_and_queries)
{
    char b[256];
    ASSERT_STR_EQ(ctf_redact_urls("http://user:PW@host:80/a/b.ctf", b, sizeof b),
                  "http://***@host:80/a/b.ctf");
    ASSERT_STR_EQ(ctf_redact_urls("reading 'https://h/k.ctf?X-Amz-Signature=ab&t=1': HTTP 403", b,
                                  sizeof b),
                  "reading 'https://h/k.ctf?***': HTTP 403");
    /* An s3:// '?' is a pattern's; a path without a URL stays. */
    ASSERT_STR_EQ(ctf_redact_urls("s3://b/p?.ctf and /tmp/x?.ctf", b, sizeof b),
                  "s3://b/p?.ctf and /tmp/x?.ctf");
    ASSERT_STR_EQ(ctf_redact_urls("s3://k:s@b/x", b, sizeof b), "s3://***@b/x");
    /* Every error record goes through it. */
    ctf_error e;
    ctf__fail(&e, CTF_EIO, (ctf__where){"http://u:PW@h/x?sig=1", 0, 0, -1}, "at %s",
              "https://u:PW@h/y?tok=2");
    ASSERT_STR_EQ(e.path, "http://***@h/x?***");
    ASSERT_STR_EQ(e.message, "at https://***@h/y?***");
}

TEST(io_query_of_an_http_url_is_no_pattern)
{
    ASSERT(!ctf__io_is_pattern("https://h/k.ctf?X-Amz-Signature=ab"));
    ASSERT(ctf__io_is_pattern("https://h/*.ctf?x=1"));
    ASSERT(ctf__io_is_pattern("s3://b/part-?.ctf"));
    ASSERT(ctf__io_is_pattern("/data/part-?.ctf"));
    ASSERT(!ctf__io_is_pattern("/data/part.ctf"));
}
