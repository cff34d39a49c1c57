/* floor_mhd: MHD external-epoll + libevent, answers every request with the fixed 96-byte
 * JSON body from a persistent buffer. Usage: floor_mhd PORT */
#include "floor_common.h"

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **req_cls)
{
    static int marker;
    (void)cls; (void)url; (void)method; (void)version; (void)upload_data;
    /* first call (headers only): queueing here makes MHD 0.9.75 close the connection */
    if (*req_cls == NULL) { *req_cls = &marker; return MHD_YES; }
    if (*upload_data_size) { *upload_data_size = 0; return MHD_YES; }
    struct MHD_Response *r = MHD_create_response_from_buffer(sizeof BODY - 1, (void *)BODY, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode t)
{
    (void)cls; (void)c; (void)req_cls; (void)t;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    g_base = event_base_new();
    mhd_start(argc > 1 ? (unsigned)atoi(argv[1]) : 19010, handler, completed);
    event_base_dispatch(g_base);
    return 0;
}
