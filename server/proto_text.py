"""Which string field of a serialized protobuf message is not UTF-8, so the error can name it.

  request bytes --FromString--> DecodeError "String field had bad UTF-8" (names no field)
      --bad_utf8_field(descriptor, bytes)--> "text" | "sampling.stop" | ... | None

Walks the wire format (varint, 64-bit, length-delimited and 32-bit records) by the message's
descriptor, recursing into message fields. Anything it cannot read (a truncated record, an
unknown wire type) gives None: the caller then reports the message as malformed, naming no field.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]  # IndexError when truncated
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def bad_utf8_field(descriptor: Descriptor, data: bytes, prefix: str = "") -> str | None:
    """Dotted name of the first string field (in `descriptor`'s message) whose bytes are not UTF-8."""
    pos = 0
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            number, wire = key >> 3, key & 7
            if wire == _VARINT:
                _, pos = _varint(data, pos)
            elif wire in (_I64, _I32):
                pos += 8 if wire == _I64 else 4
            elif wire == _LEN:
                n, pos = _varint(data, pos)
                chunk, pos = data[pos:pos + n], pos + n
                field = descriptor.fields_by_number.get(number)
                if field is None or len(chunk) != n:
                    continue
                name = prefix + field.name
                if field.type == FieldDescriptor.TYPE_STRING:
                    try:
                        chunk.decode("utf-8")
                    except UnicodeDecodeError:
                        return name
                elif field.type == FieldDescriptor.TYPE_MESSAGE:
                    bad = bad_utf8_field(field.message_type, chunk, name + ".")
                    if bad is not None:
                        return bad
            else:
                return None
    except IndexError:
        return None
    return None
