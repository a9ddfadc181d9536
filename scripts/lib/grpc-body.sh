# Sourced by scripts that load the service's gRPC API with h2load or rls_load
# (scripts/bench-service.sh, scripts/bench-fleet.sh, scripts/count-service-instructions.sh,
# scripts/build-pgo.sh).

# write_bench_rules FILE [REQUESTS_PER_UNIT [UNIT [DOMAIN]]]: the benchmarks' rules, domain
# DOMAIN ("bench") with the descriptor key `key`, a fixed window of one UNIT (second) per value.
# By default every key is allowed: the benchmarks measure the cost of a decision, not of a
# denial; scripts/bench-fleet.sh gives a limit its load passes.
write_bench_rules() {
  cat >"$1" <<EOF
domain: ${4:-bench}
descriptors:
  - key: key
    rate_limit: {unit: ${3:-second}, requests_per_unit: ${2:-1000000000}}
EOF
}

# write_grpc_body FILE DOMAIN KEY VALUE: writes the framed protobuf of a ShouldRateLimit
# request with one descriptor of one entry, encoded here by hand so that the load shares no
# code with the service. Lengths are written in one byte: DOMAIN at most 127 bytes, KEY and
# VALUE at most 121 together.
write_grpc_body() {
  python3 - "$@" <<'EOF'
import struct, sys
path, domain, key, value = sys.argv[1:5]
def field(number, payload):
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload
entry = field(1, key.encode()) + field(2, value.encode())
descriptor = field(1, entry)
request = field(1, domain.encode()) + field(2, descriptor)
with open(path, "wb") as out:
    out.write(b"\x00" + struct.pack(">I", len(request)) + request)
EOF
}
