/* trace.h (private to serve/): W3C Trace Context (traceparent and
 * tracestate), taken from HTTP request headers and Kafka record headers
 * and carried to answers, outputs and dead letters. Pure functions, no
 * I/O: thread-safe and unit-tested on their own (tests/unit/test_trace.c). */
#ifndef DL_SERVE_TRACE_H
#define DL_SERVE_TRACE_H

#include <stdbool.h>
#include <stddef.h>

/* The header names, lowercase as Kafka headers carry them (HTTP header
 * names are case-insensitive). */
#define TRACE_PARENT_HEADER "traceparent"
#define TRACE_STATE_HEADER  "tracestate"

/* Version 00's traceparent length: 2 + 1 + 32 + 1 + 16 + 1 + 2. Later
 * versions may append "-..." fields; those are kept up to TRACE_PARENT_MAX. */
#define TRACE_PARENT_LEN 55
#define TRACE_PARENT_MAX 128
/* tracestate: the W3C list holds at most 32 entries and propagators must
 * carry at least 512 characters; a longer one is dropped. */
#define TRACE_STATE_MAX 512

/* A request's trace context. Empty (parent[0] == '\0') when the request
 * carried no valid traceparent; state is then empty too. */
typedef struct trace_ctx {
    char parent[TRACE_PARENT_MAX + 1];
    char state[TRACE_STATE_MAX + 1];
} trace_ctx;

/* True when s[0..len) is a traceparent W3C Trace Context level 1 accepts:
 * version-traceid-parentid-flags, all lowercase hex, of 2, 32, 16 and 2
 * digits; version not "ff"; trace id and parent id not all zeros; version
 * 00 exactly 55 characters, a later version 55 or more with '-' after the
 * flags (and at most TRACE_PARENT_MAX). */
bool trace_parent_valid(const char *s, size_t len);

/* True when s[0..len) is a tracestate worth carrying: at most
 * TRACE_STATE_MAX characters, printable ASCII (0x20..0x7e). Its list
 * syntax is the next hop's to check. */
bool trace_state_valid(const char *s, size_t len);

/* Fills t from a traceparent and a tracestate value (each may be NULL; a
 * len of (size_t)-1 means NUL-terminated). An invalid traceparent leaves
 * t empty (the request starts no trace of ours: it is ignored); a
 * tracestate is kept only beside a valid traceparent. Returns whether t
 * holds a trace. */
bool trace_set(trace_ctx *t, const char *parent, size_t parent_len, const char *state,
               size_t state_len);

/* True when t holds a trace. */
static inline bool trace_present(const trace_ctx *t)
{
    return t->parent[0] != '\0';
}

/* The trace id (32 hex digits) of t as a NUL-terminated string in id, or
 * "" when t is empty. */
void trace_id_of(const trace_ctx *t, char id[33]);

#endif /* DL_SERVE_TRACE_H */
