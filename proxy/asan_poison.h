/* Memory the proxy keeps for reuse (pooled requests, scratch) is poisoned under
 * AddressSanitizer, so that a use after its owner's end is still reported; elsewhere the
 * marks cost nothing. */
#pragma once
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif
