/* pb_json.h (private to serve/grpc/): protobuf-c messages from JSON values
 * by their descriptors (pb_json.c), so that an answer dlserve already
 * builds as JSON for HTTP (model metadata, configuration, statistics, the
 * repository index) goes out over gRPC as the same message, field by field.
 * Pure functions: no I/O, thread-safe. */
#ifndef DL_SERVE_GRPC_PB_JSON_H
#define DL_SERVE_GRPC_PB_JSON_H

#include "util/dl_util.h"

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

/* A new message of descriptor d (free with protobuf_c_message_free_unpacked(m,
 * NULL)) holding j, a JSON object read by the protobuf JSON mapping's
 * rules with the proto's own field names: strings, bools, integers (JSON
 * integers, or strings of digits for 64-bit ones), floats, enums by name
 * (or number), nested messages, repeated fields from arrays, maps from
 * objects (a map's message values read as messages), oneofs (the member
 * present). Keys the message does not have are skipped. NULL with err
 * set (DL_ERR_INVALID naming the field, "config.input[0].data_type: ..."
 * or DL_ERR_NOMEM) when a value does not fit its field. */
ProtobufCMessage *pb_from_json(const ProtobufCMessageDescriptor *d, const json_t *j,
                               dl_err *err);

/* Appends m packed to *out (DL_ERR_NOMEM and out->oom when out of memory). */
dl_status pb_pack(const ProtobufCMessage *m, dl_sbuf *out, dl_err *err);

#endif /* DL_SERVE_GRPC_PB_JSON_H */
