#!/usr/bin/env python3
"""A foreign Dubbo Triple *client* for interop tests.

Calls the unary `org.apache.dubbo.metadata.MetadataServiceV2/GetMetadataInfo`
through apache-dubbo (dubbo-python 3.0.0b1)'s own client API
(`dubbo.Client(ReferenceConfig(...)).unary(...)`), with raw bytes in and out:
MetadataRequest is encoded and MetadataInfoV2 decoded by hand (helpers shared
with peer.py; no protoc, no protobuf package). Run it with the venv python
made by setup.sh.

    client.py --addr 127.0.0.1:PORT --revision REV [--group APP] [--timeout SECS]

stdout: exactly one JSON line, exit status 0 in both cases:
    {"ok": true, "client": "apache-dubbo <v>", "app": ..., "version": ...,
     "services": {matchKey: {"name", "group", "version", "protocol", "port",
                             "path", "params"}}}
    {"ok": false, "client": "apache-dubbo <v>", "error": "<text>"}
Exit status 2 on usage errors (argparse). apache-dubbo's logs, and anything
else the library might write to stdout, go to stderr.

Headers. apache-dubbo 3.0.0b1's public client API can NOT set request
headers or attachments: ReferenceConfig has only protocol/service/host/port,
the callable returned by Client.unary() builds its RpcInvocation without
attachments, and TripleInvoker._create_metadata never fills the group/version
fields of RequestMetadata (nor copies invocation attachments) even though
RequestMetadata.to_headers() knows how to emit them as `tri-service-group` /
`tri-service-version`. So this script wraps the private
TripleInvoker._create_metadata (class attribute, this process only) to set
metadata.version = "2.0.0" (-> `tri-service-version: 2.0.0`) and, with
--group, metadata.group (-> `tri-service-group: <group>`). --no-service-headers
turns the hook off (then neither header is sent).

Wire shape of a unary call from this library (read from its source): headers
`:method POST`, `:scheme http`, `:path /<service>/<method>`,
`:authority host:port`, `content-type: application/grpc+data` (sic),
[`tri-service-version`], [`tri-service-group`], `te: trailers` (in that
order); then the gRPC-framed request followed by a second, *empty* gRPC
message (00 00000000) and END_STREAM (seen as a single DATA frame,
`00000000090a077265762d616263 0000000000`, for --revision rev-abc). A
server must tolerate that trailing zero-length message.

Timeout: the library has none for a unary call (the connect alone is bounded
at 3 s internally), so the whole client setup + call runs in a daemon thread
and is abandoned after --timeout seconds (ok=false). The process ends with
os._exit so that apache-dubbo's non-daemon worker threads cannot keep it
alive.
"""

import argparse
import importlib.metadata
import json
import os
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in tests/dubbo_peer
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer import METHOD_NAME, SERVICE_NAME, _read_varint, _str_field  # noqa: E402

TRI_SERVICE_VERSION = "2.0.0"


# ---------------------------------------------------------------------------
# Protobuf (proto3) by hand.
# ---------------------------------------------------------------------------


def encode_metadata_request(revision: str) -> bytes:
    """MetadataRequest { string revision = 1; } (RevisionV2 {value = 1} is byte-identical)."""
    return _str_field(1, revision)


def _fields(buf: bytes):
    """Yields (field, wire_type, value); value is an int (varint/fixed) or bytes (len-delimited)."""
    pos = 0
    n = len(buf)
    while pos < n:
        key, pos = _read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire_type == 0:
            value, pos = _read_varint(buf, pos)
        elif wire_type == 1:
            if pos + 8 > n:
                raise ValueError("truncated fixed64")
            value = int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire_type == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > n:
                raise ValueError("truncated length-delimited field")
            value = buf[pos : pos + length]
            pos += length
        elif wire_type == 5:
            if pos + 4 > n:
                raise ValueError("truncated fixed32")
            value = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        yield field, wire_type, value


def _want(field: int, wire_type: int, expected: int, what: str) -> None:
    if wire_type != expected:
        raise ValueError(f"{what} (field {field}): wire type {wire_type}, expected {expected}")


def _string(field, wire_type, value, what) -> str:
    _want(field, wire_type, 2, what)
    return bytes(value).decode("utf-8")


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _map_entry(buf: bytes, decode_value, default_value):
    key, val = "", default_value
    for field, wire_type, value in _fields(buf):
        if field == 1:
            key = _string(field, wire_type, value, "map key")
        elif field == 2:
            _want(field, wire_type, 2, "map value")
            val = decode_value(bytes(value))
    return key, val


def decode_service_info(buf: bytes) -> dict:
    svc = {"name": "", "group": "", "version": "", "protocol": "", "port": 0, "path": "", "params": {}}
    names = {1: "name", 2: "group", 3: "version", 4: "protocol", 6: "path"}
    for field, wire_type, value in _fields(buf):
        if field in names:
            svc[names[field]] = _string(field, wire_type, value, f"ServiceInfoV2.{names[field]}")
        elif field == 5:
            _want(field, wire_type, 0, "ServiceInfoV2.port")
            svc["port"] = _int32(value)
        elif field == 7:
            _want(field, wire_type, 2, "ServiceInfoV2.params")
            k, v = _map_entry(bytes(value), lambda b: b.decode("utf-8"), "")
            svc["params"][k] = v
    return svc


def decode_metadata_info(buf: bytes) -> dict:
    info = {"app": "", "version": "", "services": {}}
    for field, wire_type, value in _fields(buf):
        if field == 1:
            info["app"] = _string(field, wire_type, value, "MetadataInfoV2.app")
        elif field == 2:
            info["version"] = _string(field, wire_type, value, "MetadataInfoV2.version")
        elif field == 3:
            _want(field, wire_type, 2, "MetadataInfoV2.services")
            k, v = _map_entry(bytes(value), decode_service_info, None)
            info["services"][k] = v if v is not None else decode_service_info(b"")
    return info


# ---------------------------------------------------------------------------
# The call.
# ---------------------------------------------------------------------------


def parse_addr(text: str):
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"want HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port_num = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad port in {text!r}") from None
    if not 0 < port_num < 65536:
        raise argparse.ArgumentTypeError(f"port out of range in {text!r}")
    return host, port_num


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def install_header_hook(group: str) -> None:
    """See the module docstring: private hook, the public API has no headers."""
    from dubbo.protocol.triple.invoker import TripleInvoker

    original = TripleInvoker._create_metadata

    def _create_metadata(self, invocation):
        metadata = original(self, invocation)
        metadata.version = TRI_SERVICE_VERSION
        if group:
            metadata.group = group
        return metadata

    TripleInvoker._create_metadata = _create_metadata


def call(host: str, port: int, revision: str, group: str, service_headers: bool) -> dict:
    import dubbo
    from dubbo.configs import ReferenceConfig

    if service_headers:
        install_header_hook(group)

    reference = ReferenceConfig(protocol="tri", service=SERVICE_NAME, host=host, port=port)
    # Connects at once (raises RemotingError after <= 3 s if it cannot).
    client = dubbo.Client(reference)
    # No (de)serializers: DirectSerializer sends our bytes as they are and
    # DirectDeserializer hands back the raw response message bytes.
    get_metadata_info = client.unary(METHOD_NAME)
    response = get_metadata_info(encode_metadata_request(revision))
    if response is None:
        raise RuntimeError("status OK but no response message")
    try:
        return decode_metadata_info(bytes(response))
    except Exception as exc:
        raise ValueError(f"bad MetadataInfoV2 ({len(response)} bytes): {exc}") from exc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="apache-dubbo Triple MetadataServiceV2 test client")
    ap.add_argument("--addr", type=parse_addr, required=True, help="server HOST:PORT")
    ap.add_argument("--revision", required=True, help="MetadataRequest.revision")
    ap.add_argument("--group", default="", help="tri-service-group header (default: not sent)")
    ap.add_argument("--timeout", type=positive_float, default=10.0,
                    help="give up after this many seconds (default 10)")
    ap.add_argument("--no-service-headers", action="store_true",
                    help="send neither tri-service-version nor tri-service-group")
    args = ap.parse_args(argv)
    host, port = args.addr

    # From here on fd 1 is stderr for everybody (apache-dubbo, C code, stray
    # prints); the JSON line goes to the saved original stdout.
    sys.stdout.flush()
    json_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    try:
        client_name = f"apache-dubbo {importlib.metadata.version('apache-dubbo')}"
    except importlib.metadata.PackageNotFoundError:
        client_name = "apache-dubbo <not installed>"

    outcome = {}

    def run():
        try:
            outcome["info"] = call(host, port, args.revision, args.group, not args.no_service_headers)
        except BaseException as exc:  # noqa: BLE001 - everything becomes ok=false
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    started = time.monotonic()
    worker = threading.Thread(target=run, name="dubbo-peer-client-call", daemon=True)
    worker.start()
    worker.join(args.timeout)
    elapsed = time.monotonic() - started

    if "info" in outcome:
        info = outcome["info"]
        result = {"ok": True, "client": client_name, "app": info["app"],
                  "version": info["version"], "services": info["services"]}
    elif "error" in outcome:
        result = {"ok": False, "client": client_name, "error": outcome["error"]}
    else:
        result = {"ok": False, "client": client_name,
                  "error": f"timeout: no answer from {host}:{port} within {args.timeout:g}s"}

    sys.stderr.write(f"client: {'ok' if result['ok'] else 'failed'} after {elapsed:.3f}s\n")
    json_out.write(json.dumps(result, sort_keys=False) + "\n")
    json_out.flush()
    sys.stderr.flush()
    # apache-dubbo leaves non-daemon executor threads (and maybe our worker)
    # behind; do not wait for them.
    os._exit(0)


if __name__ == "__main__":
    main()
