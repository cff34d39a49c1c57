/* UTF-8 as RFC 3629 defines it: no overlong forms, no UTF-16 surrogates, nothing past
 * U+10FFFF. For names and labels that must stay writable as JSON text (jansson refuses
 * strings that are not UTF-8), and for messages that quote input. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

/* Whether s[0, n) is valid UTF-8. */
bool utf8_valid(const char *s, size_t n);

/* Replaces each byte of s[0, n) that is not part of a valid UTF-8 sequence with '?', in
 * place (the length is kept, so a label within its limit stays within it). Returns how
 * many bytes were replaced. */
size_t utf8_repair(char *s, size_t n);
