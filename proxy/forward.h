/* Forwarding a request to the upstream with libcurl's multi interface on the worker's
 * loop, and streaming the response back through libmicrohttpd. */
#pragma once
#include "proxy/request.h"

struct worker;

/* The largest upstream response head taken (SPEC: over it, 502 bad_upstream_response). */
#define FORWARD_UPSTREAM_HEAD_MAX (64 * 1024)

/* libmicrohttpd's per-connection memory pool (MHD_OPTION_CONNECTION_MEMORY_LIMIT in
 * worker.c; the one size for every use of it). The request head (its bytes, and 64 bytes
 * of list entry per field) and the response head MHD writes must fit in it together, or
 * MHD drops the connection without an answer: 64 KiB of upstream head (SPEC) + the 16 KiB
 * request head limit (head_screen.h) + 16 KiB for MHD's field entries (a 16 KiB head of
 * up to ~250 fields) and its own lines. Being over 32 KiB, libmicrohttpd 0.9.75 maps it
 * with mmap, so pages never written cost no memory; it zeroes the whole pool after each
 * request, so a kept-alive connection holds all of it (pool_trim.c gives idle ones back). */
#define FORWARD_CLIENT_POOL_BYTES (96 * 1024)

/* Sets up the worker's curl multi handle on its event loop. Returns 0 or -ENOMEM. */
int forward_init(struct worker *w);
void forward_destroy(struct worker *w);

/* Starts forwarding r upstream. On failure to start, a 502 is made pending. */
void forward_start(struct request *r);

/* Stops a transfer that is still running (the client went away). */
void forward_abort(struct request *r);

/* Frees the upstream side of r (headers, buffers, timer). */
void forward_release(struct request *r);

/* Builds r->upstream_headers from what gate_upstream_headers says the upstream receives
 * (gate.h). For curl (websocket false) it adds the lines that keep curl from inventing
 * headers. Returns 0 or -ENOMEM. */
int forward_build_headers(struct request *r, bool websocket);


/* Called when MHD asks for r's response after its upstream head is in: makes it r->pending
 * (the whole body at once when it has all arrived, else streamed), or r->stashed when a
 * bodiless response must wait for the slots' release, or a 502 when memory runs out. */
void forward_respond(struct request *r);
