/* onnx_write.c: the protobuf wire format for writing ONNX: varints,
 * fixed 32-bit floats and length-delimited fields (bytes, strings,
 * submessages), appended to dl_sbuf buffers. */
#include "onnx/onnx_write.h"
#include "onnx/onnx_pb.h"

#include <string.h>

void pb_varint(dl_sbuf *b, uint64_t v)
{
    char buf[10];
    size_t n = 0;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        buf[n++] = (char)(byte | (v ? 0x80 : 0));
    } while (v);
    dl_sbuf_add(b, buf, n);
}

void pb_key(dl_sbuf *b, int field, int wire)
{
    pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire);
}

void pb_int(dl_sbuf *b, int field, int64_t v)
{
    pb_key(b, field, PB_VARINT);
    pb_varint(b, (uint64_t)v);
}

void pb_float(dl_sbuf *b, int field, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    char le[4] = { (char)(u & 0xff), (char)((u >> 8) & 0xff), (char)((u >> 16) & 0xff),
                   (char)(u >> 24) };
    pb_key(b, field, PB_I32);
    dl_sbuf_add(b, le, sizeof(le));
}

void pb_bytes(dl_sbuf *b, int field, const void *data, size_t n)
{
    pb_key(b, field, PB_LEN);
    pb_varint(b, n);
    if (n)
        dl_sbuf_add(b, data, n);
}

void pb_str(dl_sbuf *b, int field, const char *s)
{
    pb_bytes(b, field, s, strlen(s));
}

void pb_msg(dl_sbuf *b, int field, const dl_sbuf *sub)
{
    if (sub->oom)
        b->oom = true;
    pb_bytes(b, field, sub->s, sub->len);
}

void pb_ints(dl_sbuf *b, int field, const int64_t *v, int n)
{
    dl_sbuf packed = {0};
    for (int i = 0; i < n; i++)
        pb_varint(&packed, (uint64_t)v[i]);
    pb_msg(b, field, &packed);
    dl_sbuf_free(&packed);
}
