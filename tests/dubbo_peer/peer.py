#!/usr/bin/env python3
"""A foreign Dubbo Triple peer for interop tests.

Runs an apache-dubbo (dubbo-python 3.0.0b1) Triple server on 127.0.0.1 that
exports `org.apache.dubbo.metadata.MetadataServiceV2` with the unary method
`GetMetadataInfo` (raw bytes in and out; the protobuf is encoded and decoded
by hand below, no protoc and no protobuf package).

    message MetadataRequest { string revision = 1; }
    message MetadataInfoV2  { string app = 1; string version = 2;
                              map<string, ServiceInfoV2> services = 3; }
    message ServiceInfoV2   { string name = 1; string group = 2; string version = 3;
                              string protocol = 4; int32 port = 5; string path = 6;
                              map<string,string> params = 7; }

stdout protocol (each line flushed at once):
    peer: apache-dubbo <version> listening 127.0.0.1:<port>   (once, after bind)
    call revision=<rev> served=<true|false>                   (one per call)
Logs of apache-dubbo go to stderr.

Failures: while the --serve-after file does not exist, and for any revision
other than --revision, the method raises; apache-dubbo turns that into
HTTP 200 + trailers grpc-status 13 (INTERNAL),
grpc-message "Invoke method failed: <exception text>".

Exits with status 0 on SIGTERM or SIGINT.
"""

import argparse
import hashlib
import importlib.metadata
import os
import signal
import sys
import threading

SERVICE_NAME = "org.apache.dubbo.metadata.MetadataServiceV2"
METHOD_NAME = "GetMetadataInfo"
DEFAULT_INTERFACE = "org.apache.dubbo.samples.api.GreetingsService"

# ---------------------------------------------------------------------------
# Minimal protobuf wire format (proto3 semantics: default values are omitted).
# ---------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    if value < 0:
        # int32/int64 negatives are encoded as 10-byte two's complement.
        value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint((field << 3) | wire_type)


def _len_field(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def _str_field(field: int, value: str) -> bytes:
    if not value:
        return b""
    return _len_field(field, value.encode("utf-8"))


def _int_field(field: int, value: int) -> bytes:
    if not value:
        return b""
    return _key(field, 0) + _varint(value)


def _map_entry(field: int, key: str, value_bytes: bytes) -> bytes:
    # Map entries are always written (even when key and value are empty).
    return _len_field(field, _str_field(1, key) + value_bytes)


def encode_service_info(svc: dict) -> bytes:
    out = bytearray()
    out += _str_field(1, svc["name"])
    out += _str_field(2, svc["group"])
    out += _str_field(3, svc["version"])
    out += _str_field(4, svc["protocol"])
    out += _int_field(5, svc["port"])
    out += _str_field(6, svc["path"])
    for k in sorted(svc["params"]):
        out += _map_entry(7, k, _str_field(2, svc["params"][k]))
    return bytes(out)


def encode_metadata_info(app: str, revision: str, services: dict) -> bytes:
    out = bytearray()
    out += _str_field(1, app)
    out += _str_field(2, revision)
    for match_key in sorted(services):
        out += _map_entry(3, match_key, _len_field(2, encode_service_info(services[match_key])))
    return bytes(out)


def _read_varint(buf: bytes, pos: int):
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ValueError("varint too long")


def decode_metadata_request(buf: bytes) -> str:
    """Returns MetadataRequest.revision (field 1); unknown fields are skipped."""
    revision = ""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos = _read_varint(buf, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated length-delimited field")
            if field == 1:
                revision = buf[pos : pos + length].decode("utf-8")
            pos += length
        elif wire_type == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        if pos > len(buf):
            raise ValueError("truncated field")
    return revision


# ---------------------------------------------------------------------------
# The served metadata.
# ---------------------------------------------------------------------------


def match_key(interface: str, group: str, version: str, protocol: str) -> str:
    """Java ServiceInfo.getMatchKey: [group/]interface[:version]:protocol."""
    key = interface
    if group:
        key = f"{group}/{key}"
    if version:
        key = f"{key}:{version}"
    return f"{key}:{protocol}"


def java_revision(app: str, services: dict) -> str:
    """Java MetadataInfo.calAndGetRevision (used only when --revision is absent)."""
    if not services:
        return "0"
    parts = [app]
    for mk in sorted(services):
        svc = services[mk]
        params = ", ".join(f"{k}={svc['params'][k]}" for k in sorted(svc["params"]))
        port = svc["port"] if svc["port"] else -1
        parts.append(f"{mk}{port}{svc['path']}{{{params}}}")
    return hashlib.md5("".join(parts).encode("utf-8")).hexdigest()


def parse_params(text: str) -> dict:
    params = {}
    if not text:
        return params
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise argparse.ArgumentTypeError(f"bad --params item (want k=v): {item!r}")
        k, v = item.split("=", 1)
        params[k.strip()] = v.strip()
    return params


_stdout_lock = threading.Lock()


def emit(line: str) -> None:
    with _stdout_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="apache-dubbo Triple MetadataServiceV2 test peer")
    ap.add_argument("--port", type=int, required=True, help="Triple listen port on 127.0.0.1 (1-65535)")
    ap.add_argument("--app", default="dubbo-python-peer", help="application name (MetadataInfoV2.app)")
    ap.add_argument("--revision", default=None,
                    help="the one revision served (default: Java-style MD5 of the metadata)")
    ap.add_argument("--service-port", type=int, default=None,
                    help="ServiceInfoV2.port of the served service (default: --port)")
    ap.add_argument("--interface", default=DEFAULT_INTERFACE, help="served interface (name and path)")
    ap.add_argument("--protocol", default="tri", help="ServiceInfoV2.protocol")
    ap.add_argument("--service-group", default="", help="ServiceInfoV2.group (default empty)")
    ap.add_argument("--service-version", default="", help="ServiceInfoV2.version (default empty)")
    ap.add_argument("--params", type=parse_params, default={}, help="ServiceInfoV2.params as k=v,k=v")
    ap.add_argument("--serve-after", default=None, metavar="PATH",
                    help="fail every call until the file PATH exists")
    args = ap.parse_args(argv)

    if not 0 < args.port < 65536:
        ap.error("--port must be in 1..65535 (apache-dubbo treats 0 as its default 50051)")

    service_port = args.port if args.service_port is None else args.service_port
    svc = {
        "name": args.interface,
        "group": args.service_group,
        "version": args.service_version,
        "protocol": args.protocol,
        "port": service_port,
        "path": args.interface,
        "params": dict(args.params),
    }
    services = {match_key(args.interface, args.service_group, args.service_version, args.protocol): svc}
    revision = args.revision if args.revision is not None else java_revision(args.app, services)
    response = encode_metadata_info(args.app, revision, services)
    serve_after = args.serve_after

    def get_metadata_info(request: bytes) -> bytes:
        try:
            requested = decode_metadata_request(bytes(request or b""))
        except Exception as exc:  # malformed protobuf
            emit("call revision=<undecodable> served=false")
            raise ValueError(f"bad MetadataRequest: {exc}") from exc
        if serve_after is not None and not os.path.exists(serve_after):
            emit(f"call revision={requested} served=false")
            raise RuntimeError(f"not serving yet: {serve_after} does not exist")
        if requested != revision:
            emit(f"call revision={requested} served=false")
            raise LookupError(f"revision not found: {requested}")
        emit(f"call revision={requested} served=true")
        return response

    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # Imported late so that --help and argument errors need no venv.
    import dubbo
    from dubbo.configs import ServiceConfig
    from dubbo.proxy.handlers import RpcMethodHandler, RpcServiceHandler

    # apache-dubbo 3.0.0b1: a unary method without (de)serializers gets the raw
    # message bytes (DirectDeserializer) and must return bytes-like
    # (DirectSerializer). Routing is by the HTTP/2 :path only.
    handler = RpcServiceHandler(
        service_name=SERVICE_NAME,
        method_handlers=[RpcMethodHandler.unary(get_metadata_info, method_name=METHOD_NAME)],
    )
    config = ServiceConfig(service_handler=handler, host="127.0.0.1", port=args.port, protocol="tri")
    server = dubbo.Server(config)
    # start() returns once the asyncio server is bound (it raises on bind failure).
    server.start()

    version = importlib.metadata.version("apache-dubbo")
    emit(f"peer: apache-dubbo {version} listening 127.0.0.1:{args.port}")

    while not stop.wait(1.0):
        pass

    # Best effort: stop apache-dubbo's event loop (private attributes; the
    # public Server has no stop()). Its loop thread is a daemon anyway.
    try:
        server._protocol._server.close()
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
