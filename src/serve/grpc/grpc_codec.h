/* grpc_codec.h (private to serve/grpc/): the Open Inference Protocol's
 * protobuf messages read and written as pure functions (grpc_codec.c), no
 * I/O and no libgrpc: the fuzz harness and the unit tests call them alone.
 *
 * A ModelInferRequest is read through the same scanner as an HTTP body
 * (oip_scan_infer): its inputs, typed `contents` or `raw_input_contents`,
 * become the binary tensor data extension's raw tensors behind a small
 * JSON header, so every rule of docs/serving.md ("What an infer request
 * may hold") holds on both transports alike. An answer is written as the
 * binary extension writes it (oip_write_infer, every output binary) and
 * its tensors become raw_output_contents, bit for bit the HTTP binary
 * answer's bytes. */
#ifndef DL_SERVE_GRPC_CODEC_H
#define DL_SERVE_GRPC_CODEC_H

#include "serve/oip/oip.h"

#include "grpc_service.pb-c.h"

/* Reads m into req (oip_scan_infer's result: oip_request_fini it either
 * way) without its model: the caller then checks it with oip_check_infer.
 * Inputs: name, datatype ("FP32", "UINT8", "INT32", "INT64", "BYTES"),
 * shape, and their values either all in raw_input_contents (one entry an
 * input, little-endian, BYTES as 4-byte lengths and bytes) or each in its
 * `contents` field of its datatype (fp32_contents, uint_contents,
 * int_contents, int64_contents, bytes_contents); both, a count that does
 * not fit the shape, or another field than the datatype's are refused.
 * Parameters: the request's "timeout" and "priority" (int64),
 * "sequence_id", "sequence_start", "sequence_end" (refused later as over
 * HTTP); an output's "classification" (int64) and "binary_data" (bool,
 * ignored: gRPC outputs are raw). m->id becomes req->id ("" none).
 * DL_ERR_INVALID (INVALID_ARGUMENT) with err naming the field at fault;
 * DL_ERR_NOMEM. Thread-safe. */
dl_status grpc_read_infer(const Inference__ModelInferRequest *m, oip_request *req, dl_err *err);

/* Unpacks a ModelInferRequest from len bytes then grpc_read_infer: *m is
 * new (inference__model_infer_request__free_unpacked(*m, NULL)) on
 * success, NULL on failure; an undecodable message is DL_ERR_INVALID
 * ("not a ModelInferRequest"). */
dl_status grpc_unpack_infer(const uint8_t *data, size_t len, Inference__ModelInferRequest **m,
                            oip_request *req, dl_err *err);

/* Appends to *out the packed ModelInferResponse of res: model_name,
 * model_version (decimal), id (res->id when non-NULL), parameters
 * (res->params), and each output (res->out or the defaults, every one
 * written raw whatever its binary flag) as name, datatype and shape with
 * its bytes in raw_output_contents, in order: FP32 and INT64 little-endian,
 * BYTES each a 4-byte little-endian length then the bytes, exactly the
 * bytes oip_write_infer puts after the JSON of an HTTP binary answer.
 * stream: wrap it as a ModelStreamInferResponse (error_message "").
 * DL_ERR_NOMEM (out->oom) otherwise DL_OK. Thread-safe. */
dl_status grpc_write_infer(const oip_result *res, bool stream, dl_sbuf *out, dl_err *err);

/* Appends a packed ModelStreamInferResponse that reports a failed request:
 * error_message msg, infer_response with model_name, model_version ("" for
 * 0) and id (NULL: none) only. */
dl_status grpc_write_stream_error(const char *msg, const char *model, int64_t version,
                                  const char *id, dl_sbuf *out, dl_err *err);

/* Model versions as the protocol writes them: "" or a positive decimal
 * integer without leading zeros ("" is 0, the newest). DL_ERR_INVALID
 * otherwise ("model version 'x' is not a positive integer"). */
dl_status grpc_parse_version(const char *text, int64_t *version, dl_err *err);

#endif /* DL_SERVE_GRPC_CODEC_H */
