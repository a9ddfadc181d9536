#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs the format
# check, clippy with warnings as errors, and every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# The admin page's browser test (crates/sluicegate-server/tests/admin_page.rs).
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# The proxy's equivalence test against nginx (crates/sluicegate-server/tests/proxy_nginx.rs).
[ -x /usr/sbin/nginx ] || need_apt+=(nginx)
# The proxy's TLS listener tests (crates/sluicegate-server/tests/proxy_tls_listener.rs): real TLS
# clients.
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v h2load >/dev/null 2>&1 || need_apt+=(nghttp2-client)
# The check that no two public types share a name (scripts/unique-type-names.py), and the gRPC
# conformance suite's independent client (crates/sluicegate-server/tests/grpc_conformance.rs):
# Python, with grpcio from PyPI below.
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -c "import grpc" >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1 ||
  need_apt+=(python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing: ${need_apt[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! python3 -c "import grpc" >/dev/null 2>&1; then
  echo "installing: grpcio (pip)"
  # A Debian python3 refuses pip installs into itself unless told.
  python3 -m pip install --quiet grpcio ||
    python3 -m pip install --quiet --break-system-packages grpcio
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== the core crate stays light"
if cargo tree -e normal -p sluicegate --prefix none | grep -E '^(tonic|axum|hyper|redis) '; then
  echo "the core crate (sluicegate) must not depend on tonic, axum, hyper or redis" >&2
  exit 1
fi
echo "== the tower layers stay apart from the applications"
if cargo tree -e normal -p sluicegate-http --all-features --prefix none | grep -E '^(sluicegate-rules|sluicegate-redis|sluicegate-server) '; then
  echo "sluicegate-http (the tower layers) must not depend on the rules crate, the Redis crate or the applications" >&2
  exit 1
fi
echo "== cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet
echo "== no two public types with the same name"
python3 scripts/unique-type-names.py
echo "== cargo test"
cargo test --workspace --all-features
