/* Unit tests for proxy/scratch.c: a request's bump allocator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdalign.h>
#include <string.h>

#include "proxy/scratch.h"

static void test_allocations_are_aligned_and_distinct(void **state)
{
    (void)state;
    struct scratch s = { 0 };
    char *prev = NULL;
    for (size_t n = 1; n < 200; n++) {
        char *p = scratch_alloc(&s, n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % alignof(max_align_t), 0);
        memset(p, (int)n, n);
        if (prev != NULL)
            assert_int_equal((unsigned char)prev[0], (unsigned char)(n - 1)); /* not overwritten */
        prev = p;
    }
    scratch_free(&s);
}

static void test_strndup_copies_and_terminates(void **state)
{
    (void)state;
    struct scratch s = { 0 };
    char *a = scratch_strndup(&s, "Content-Typexyz", 12);
    char *b = scratch_strndup(&s, "", 0);
    assert_string_equal(a, "Content-Type");
    assert_string_equal(b, "");
    scratch_free(&s);
}

static void test_bigger_than_a_chunk(void **state)
{
    (void)state;
    struct scratch s = { 0 };
    char *small = scratch_strndup(&s, "kept", 4);
    char big[100000];
    memset(big, 'x', sizeof(big));
    char *copy = scratch_strndup(&s, big, sizeof(big));
    assert_non_null(copy);
    assert_int_equal(strlen(copy), sizeof(big));
    assert_string_equal(small, "kept"); /* earlier allocations stay where they were */
    assert_null(scratch_alloc(&s, SIZE_MAX - 8));
    scratch_free(&s);
}

static void test_reset_keeps_one_chunk_for_reuse(void **state)
{
    (void)state;
    struct scratch s = { 0 };
    char *first = scratch_alloc(&s, 16);
    for (int i = 0; i < 100; i++)
        assert_non_null(scratch_alloc(&s, 1000));
    scratch_reset(&s);
    assert_int_equal(s.used, 0);
    /* the kept chunk is the first one: the next request starts where the last one did */
    assert_ptr_equal(scratch_alloc(&s, 16), first);
    scratch_reset(&s);
    scratch_free(&s);
    assert_null(s.chunks);
    scratch_free(&s); /* twice is harmless */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocations_are_aligned_and_distinct),
        cmocka_unit_test(test_strndup_copies_and_terminates),
        cmocka_unit_test(test_bigger_than_a_chunk),
        cmocka_unit_test(test_reset_keeps_one_chunk_for_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
