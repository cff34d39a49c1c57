/* RFC 9110 5.6.2: the characters of a token (header names, methods, Connection options).
 * A table: every field name of every request and response is checked byte by byte. */
#pragma once
#include <stdbool.h>

static inline bool http_token_char(unsigned char c)
{
    /* bit c%64 of word c/64: DIGIT, ALPHA and !#$%&'*+-.^_`|~ */
    static const unsigned long long token[4] = {
        0x03ff6cfa00000000ULL, /* '!' '#'-'\'' '*' '+' '-' '.' '0'-'9' */
        0x57ffffffc7fffffeULL, /* 'A'-'Z' '^' '_' '`' 'a'-'z' '|' '~' */
        0, 0,
    };
    return (token[c >> 6] >> (c & 63)) & 1;
}
