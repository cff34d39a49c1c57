/* SIGPIPE ignored for the length of a tool's Redis conversation. See redis_sigpipe.h. */
#include "store/redis/redis_sigpipe.h"

#include <string.h>

void redis_sigpipe_ignore(struct redis_sigpipe *s)
{
    struct sigaction ignore;
    memset(&ignore, 0, sizeof(ignore));
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    s->held = sigaction(SIGPIPE, &ignore, &s->saved) == 0;
}

/* An ignored signal is discarded when raised, so none is pending to meet the old action. */
void redis_sigpipe_restore(struct redis_sigpipe *s)
{
    if (s->held)
        sigaction(SIGPIPE, &s->saved, NULL);
    s->held = 0;
}
