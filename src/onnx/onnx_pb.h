/* onnx_pb.h: the protobuf field numbers and enums of onnx.proto (ONNX IR
 * version 8, as Debian's python3-onnx ships it) that dlserve reads and
 * writes. One table for the reader (onnx_read.c) and the writer
 * (onnx_write.c), so both speak the same schema. */
#ifndef DL_ONNX_PB_H
#define DL_ONNX_PB_H

/* Protobuf wire types. */
enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_I32 = 5 };

/* ModelProto */
enum {
    MODEL_IR_VERSION = 1, MODEL_PRODUCER_NAME = 2, MODEL_PRODUCER_VERSION = 3,
    MODEL_DOMAIN = 4, MODEL_MODEL_VERSION = 5, MODEL_DOC_STRING = 6, MODEL_GRAPH = 7,
    MODEL_OPSET_IMPORT = 8, MODEL_METADATA_PROPS = 14, MODEL_FUNCTIONS = 25,
};

/* OperatorSetIdProto, StringStringEntryProto */
enum { OPSET_DOMAIN = 1, OPSET_VERSION = 2 };
enum { ENTRY_KEY = 1, ENTRY_VALUE = 2 };

/* GraphProto */
enum {
    GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INITIALIZER = 5, GRAPH_DOC_STRING = 10,
    GRAPH_INPUT = 11, GRAPH_OUTPUT = 12, GRAPH_VALUE_INFO = 13, GRAPH_SPARSE_INITIALIZER = 15,
};

/* NodeProto */
enum {
    NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5,
    NODE_DOC_STRING = 6, NODE_DOMAIN = 7,
};

/* AttributeProto and its AttributeType */
enum {
    ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_S = 4, ATTR_T = 5, ATTR_G = 6,
    ATTR_FLOATS = 7, ATTR_INTS = 8, ATTR_STRINGS = 9, ATTR_TENSORS = 10, ATTR_GRAPHS = 11,
    ATTR_DOC_STRING = 13, ATTR_TYPE = 20, ATTR_REF_ATTR_NAME = 21,
};
enum {
    ATTR_TYPE_UNDEFINED = 0, ATTR_TYPE_FLOAT = 1, ATTR_TYPE_INT = 2, ATTR_TYPE_STRING = 3,
    ATTR_TYPE_TENSOR = 4, ATTR_TYPE_GRAPH = 5, ATTR_TYPE_FLOATS = 6, ATTR_TYPE_INTS = 7,
    ATTR_TYPE_STRINGS = 8, ATTR_TYPE_TENSORS = 9, ATTR_TYPE_GRAPHS = 10,
};

/* ValueInfoProto, TypeProto, TypeProto.Tensor, TensorShapeProto(.Dimension) */
enum { VALUE_NAME = 1, VALUE_TYPE = 2, VALUE_DOC_STRING = 3 };
enum { TYPE_TENSOR = 1, TYPE_DENOTATION = 6 };
enum { TTYPE_ELEM_TYPE = 1, TTYPE_SHAPE = 2 };
enum { SHAPE_DIM = 1 };
enum { DIM_VALUE = 1, DIM_PARAM = 2, DIM_DENOTATION = 3 };

/* TensorProto and its DataType */
enum {
    TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_SEGMENT = 3, TENSOR_FLOAT_DATA = 4,
    TENSOR_INT32_DATA = 5, TENSOR_STRING_DATA = 6, TENSOR_INT64_DATA = 7, TENSOR_NAME = 8,
    TENSOR_RAW_DATA = 9, TENSOR_DOUBLE_DATA = 10, TENSOR_UINT64_DATA = 11,
    TENSOR_DOC_STRING = 12, TENSOR_EXTERNAL_DATA = 13, TENSOR_DATA_LOCATION = 14,
};
enum {
    DT_UNDEFINED = 0, DT_FLOAT = 1, DT_UINT8 = 2, DT_INT8 = 3, DT_UINT16 = 4, DT_INT16 = 5,
    DT_INT32 = 6, DT_INT64 = 7, DT_STRING = 8, DT_BOOL = 9, DT_FLOAT16 = 10, DT_DOUBLE = 11,
    DT_UINT32 = 12, DT_UINT64 = 13, DT_BFLOAT16 = 16,
};
enum { DATA_LOCATION_DEFAULT = 0, DATA_LOCATION_EXTERNAL = 1 };

#endif
