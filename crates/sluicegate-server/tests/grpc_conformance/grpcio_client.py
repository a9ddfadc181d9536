"""An independent gRPC client of the rate limit service: Python's grpcio (gRPC's C core).

Usage: grpcio_client.py HOST:PORT FROZEN_HOST:PORT [strict|lenient]. Runs every check against the service
listening at the first address (serving the suite's rules, tests/grpc_conformance/
serve_process.rs), and the deadline check against the second (the same rules on a frozen
Redis, so a counted call cannot be decided in time); prints `ok NAME` for each, and exits
non-zero at the first that fails. `strict` (the lean server): a late call must end
DEADLINE_EXCEEDED, whichever side ends it; `lenient` (tonic's server) also takes tonic's own
CANCELLED "Timeout expired". The messages are written by hand (a few
protobuf fields), so no generated stubs and no .proto files are needed.
"""

import sys
import grpc

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OK, OVER_LIMIT = 1, 2


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):
    """A length-delimited field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def request(domain, descriptors):
    """A RateLimitRequest of one-entry descriptors (key, value)."""
    body = field(1, domain.encode())
    for key, value in descriptors:
        entry = field(1, key.encode()) + field(2, value.encode())
        body += field(2, field(1, entry))
    return body


def read_varint(data, at):
    shift = value = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def answer(data):
    """A RateLimitResponse's overall code and number of descriptor statuses."""
    overall, statuses, at = 0, 0, 0
    while at < len(data):
        key, at = read_varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = read_varint(data, at)
            if number == 1:
                overall = value
        elif wire == 2:
            length, at = read_varint(data, at)
            at += length
            statuses += number == 2
        else:
            raise ValueError(f"unexpected wire type {wire}")
    return overall, statuses


def expect_error(call, code):
    try:
        result = call()
    except grpc.RpcError as error:
        assert error.code() == code, f"{error.code()} ({error.details()}), {code} expected"
        return error
    raise AssertionError(f"answered {result!r}, {code} expected")


def main(address, frozen_address, deadline="lenient"):
    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=20)
    should_rate_limit = channel.unary_unary(METHOD)
    bound = 20  # seconds against a hang, never an assertion on time

    overall, statuses = answer(should_rate_limit(request("conformance", [("user", "ann")]), timeout=bound))
    assert (overall, statuses) == (OK, 1), (overall, statuses)
    print("ok normal call")

    reply = should_rate_limit(request("conformance", [("user", "ann"), ("blocked", "x")]), timeout=bound)
    assert answer(reply) == (OVER_LIMIT, 2), answer(reply)
    print("ok over limit")

    expect_error(
        lambda: should_rate_limit(request("", [("user", "ann")]), timeout=bound),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    print("ok invalid argument")

    frozen = grpc.insecure_channel(frozen_address)
    late = frozen.unary_unary(METHOD)
    try:
        late(request("conformance", [("counted", "late")]), timeout=0.2)
        raise AssertionError("a call on a frozen Redis answered within its deadline")
    except grpc.RpcError as error:
        # The client's own timer ends the call first: the service's deadline starts when the
        # request arrives. On a badly loaded machine the service's own end of the call may come
        # first: DEADLINE_EXCEEDED from the lean server, CANCELLED "Timeout expired" from tonic.
        ended = (error.code(), error.details())
        tonic_end = (grpc.StatusCode.CANCELLED, "Timeout expired")
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED or (
            deadline == "lenient" and ended == tonic_end
        ), ended
    print("ok deadline")

    huge = request("x" * (5 << 20), [("user", "ann")])
    expect_error(lambda: should_rate_limit(huge, timeout=bound), grpc.StatusCode.RESOURCE_EXHAUSTED)
    print("ok oversized message")

    unknown = channel.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod")
    expect_error(lambda: unknown(request("conformance", [("user", "ann")]), timeout=bound), grpc.StatusCode.UNIMPLEMENTED)
    print("ok unknown method")

    # The service takes identity only: a gzip call is refused as the gRPC compression spec
    # says, UNIMPLEMENTED (grpcio keeps the grpc-accept-encoding header to itself; the raw h2
    # check reads it).
    error = expect_error(
        lambda: should_rate_limit(
            request("conformance", [("user", "ann")]),
            timeout=bound,
            compression=grpc.Compression.Gzip,
        ),
        grpc.StatusCode.UNIMPLEMENTED,
    )
    assert "gzip" in error.details(), error.details()
    print("ok gzip refused")

    # All in flight at once on the one connection, then each answer checked against its own
    # request (the overall code and the number of statuses tell them apart).
    calls = []
    for i in range(200):
        key = "user" if i % 2 == 0 else "blocked"
        descriptors = [(key, "many")] * (i % 5 + 1)
        calls.append(should_rate_limit.future(request("conformance", descriptors), timeout=bound))
    for i, future in enumerate(calls):
        expected = (OK if i % 2 == 0 else OVER_LIMIT, i % 5 + 1)
        got = answer(future.result())
        assert got == expected, (i, got)
    print("ok concurrent calls")

    # Still serving after all of that, on the same channel.
    assert answer(should_rate_limit(request("conformance", [("user", "ann")]), timeout=bound)) == (OK, 1)
    print("ok still serving")


if __name__ == "__main__":
    main(*sys.argv[1:4])
