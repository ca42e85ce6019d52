/* trace.c: W3C Trace Context: the traceparent format check and the trace
 * context a request carries through the daemon. */
#define _POSIX_C_SOURCE 200809L   /* strnlen */
#include "serve/oip/trace.h"

#include <string.h>

static bool lower_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* n lowercase hex digits at s, not all zeros when nonzero is set. */
static bool hex_field(const char *s, size_t n, bool nonzero)
{
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (!lower_hex(s[i]))
            return false;
        any |= s[i] != '0';
    }
    return any || !nonzero;
}

bool trace_parent_valid(const char *s, size_t len)
{
    /* vv-<32>-<16>-ff: dashes at 2, 35 and 52 */
    if (!s || len < TRACE_PARENT_LEN || len > TRACE_PARENT_MAX)
        return false;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return false;
    if (!hex_field(s, 2, false) || memcmp(s, "ff", 2) == 0)
        return false;
    if (!hex_field(s + 3, 32, true) || !hex_field(s + 36, 16, true) ||
        !hex_field(s + 53, 2, false))
        return false;
    if (memcmp(s, "00", 2) == 0)
        return len == TRACE_PARENT_LEN;
    /* A later version: what follows the flags starts with '-'. */
    if (len == TRACE_PARENT_LEN)
        return true;
    if (s[TRACE_PARENT_LEN] != '-')
        return false;
    for (size_t i = TRACE_PARENT_LEN; i < len; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

bool trace_state_valid(const char *s, size_t len)
{
    if (!s || len > TRACE_STATE_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return false;
    return true;
}

bool trace_set(trace_ctx *t, const char *parent, size_t parent_len, const char *state,
               size_t state_len)
{
    t->parent[0] = t->state[0] = '\0';
    if (!parent)
        return false;
    if (parent_len == (size_t)-1)
        parent_len = strnlen(parent, TRACE_PARENT_MAX + 1);
    if (!trace_parent_valid(parent, parent_len))
        return false;
    memcpy(t->parent, parent, parent_len);
    t->parent[parent_len] = '\0';
    if (state) {
        if (state_len == (size_t)-1)
            state_len = strnlen(state, TRACE_STATE_MAX + 1);
        if (trace_state_valid(state, state_len)) {
            memcpy(t->state, state, state_len);
            t->state[state_len] = '\0';
        }
    }
    return true;
}

void trace_id_of(const trace_ctx *t, char id[33])
{
    if (!trace_present(t)) {
        id[0] = '\0';
        return;
    }
    memcpy(id, t->parent + 3, 32);
    id[32] = '\0';
}
