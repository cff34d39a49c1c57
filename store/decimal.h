/* Unsigned integers in decimal, without printf: the forwarded request's path writes several
 * (the draft and x RateLimit numbers, an IPv4 client's octets) and each Redis check its
 * keys and arguments, and snprintf cost about 0.9k instructions each
 * (etc/bench/proxy_cost.py). A leaf header: it includes nothing of the project's. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* The longest text decimal_write writes, its NUL included (UINT64_MAX has 20 digits). */
#define DECIMAL_MAX 21

/* Writes v in decimal at buf (DECIMAL_MAX - 1 bytes at most), no NUL; returns its length. */
static inline size_t decimal_digits(char *buf, uint64_t v)
{
    char digits[DECIMAL_MAX - 1];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        buf[i] = digits[n - 1 - i];
    return n;
}

/* Writes v in decimal with its NUL into buf (DECIMAL_MAX bytes at most); returns its length
 * without the NUL. */
static inline size_t decimal_write(char *buf, uint64_t v)
{
    size_t n = decimal_digits(buf, v);
    buf[n] = '\0';
    return n;
}
