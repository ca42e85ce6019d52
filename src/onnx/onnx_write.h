/* onnx_write.h (private to onnx/): a protobuf wire-format writer. A
 * message is built bottom-up: each submessage in its own dl_sbuf, then
 * appended to its parent as a length-delimited field. Out of memory is
 * sticky in the buffer (dl_sbuf's oom), so callers check it once. */
#ifndef DL_ONNX_WRITE_H
#define DL_ONNX_WRITE_H

#include "util/dl_util.h"

#include <stdint.h>

/* Base-128 varint of v, and a field's key (field number, wire type). */
void pb_varint(dl_sbuf *b, uint64_t v);
void pb_key(dl_sbuf *b, int field, int wire);

/* A varint field (negative values as 10-byte two's complement, as
 * protobuf's int64 does). */
void pb_int(dl_sbuf *b, int field, int64_t v);
/* A float field (fixed 32 bits, little-endian). */
void pb_float(dl_sbuf *b, int field, float v);
/* Length-delimited fields: bytes, a NUL-terminated string, a finished
 * submessage (sub is only read). */
void pb_bytes(dl_sbuf *b, int field, const void *data, size_t n);
void pb_str(dl_sbuf *b, int field, const char *s);
void pb_msg(dl_sbuf *b, int field, const dl_sbuf *sub);
/* A packed repeated int64 field. */
void pb_ints(dl_sbuf *b, int field, const int64_t *v, int n);

#endif /* DL_ONNX_WRITE_H */
