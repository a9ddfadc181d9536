#!/usr/bin/env bash
# limitador-server (Kuadrant's Envoy rate limit service), the peer the service benchmarks run
# beside ours, built once from its published source into a cache outside this repository.
# Nothing of limitador is kept in this repository: only this script.
#
#   scripts/lib/limitador.sh              builds if needed, prints the binary's path
#   source scripts/lib/limitador.sh       defines limitador_build (same, as a function) and
#                                         limitador_limit (a limits file's entry)
#
# Inputs (environment):
#   LIMITADOR_SRC           a git directory (bare or not) or checkout of limitador that holds
#                           LIMITADOR_COMMIT (a clone of github.com/Kuadrant/limitador);
#                           needed only while the cache holds no binary for the commit
#   LIMITADOR_COMMIT        the commit to build (default: the pinned one below)
#   SLUICEGATE_BENCH_CACHE  the cache (default ~/.cache/sluicegate-bench); this script writes
#                           only under its limitador/ folder:
#                             src/                 the checkout at the commit
#                             target/              cargo's target dir (about 1.1 GB; delete
#                                                  it freely once bin/ is filled)
#                             bin/limitador-server the binary, beside .commit, the commit built
#   CARGO_BUILD_JOBS        passed to cargo as usual (1 on a shared machine)
#
# What the build needs: git, cargo (rustc 1.88 or newer), protoc (Debian: protobuf-compiler)
# for the gRPC protos, clang and libclang (Debian: clang, libclang-dev) for RocksDB's bindings
# (limitador's library builds its disk storage by default), a C/C++ compiler, perl and make
# (OpenSSL is built vendored), and crates.io for the dependencies (its Cargo.lock is used as is,
# `--locked`). The Envoy protos are vendored inside limitador's own tree at this commit: no
# submodule to fetch.
#
# How long: limitador's release profile is `lto = true, codegen-units = 1`. On this project's
# 2-core machines, under `nice -n 19` with CARGO_BUILD_JOBS=1 beside two other builds (load
# about 4), the first build took about 56 minutes: 16 for the crates before RocksDB, 33 for
# RocksDB's C++ (one file at a time), 7 for the rest and the final LTO link (3.5). It leaves
# about 1.1 GB in target/. A second call with the binary present returns at once (10 ms).
#
# Storages: the plain build (no extra feature) offers `memory`, `disk`, `redis` and
# `redis_cached`; `--features distributed_storage` only adds the experimental replicated
# in-memory storage, which the benchmarks do not use.

# The limitador commit the benchmarks measure (its main branch, 2026-05-07).
LIMITADOR_PINNED_COMMIT=2981b2bd389d42cf668519f9aa981a53541c4278

limitador_fail() { echo "limitador.sh: $*" >&2; return 1; }

# The commands and libraries the build needs; names every one that is missing.
limitador_check_tools() {
  local missing=() tool
  for tool in git cargo protoc perl make cc c++; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if [ -z "${LIBCLANG_PATH:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libclang\(-[0-9.]*\)\?\.so'; then
    missing+=("libclang (Debian: libclang-dev; or set LIBCLANG_PATH)")
  fi
  [ ${#missing[@]} -eq 0 ] || limitador_fail "missing to build limitador-server: ${missing[*]}"
}

# limitador_build: builds limitador-server unless the cache already holds it for the commit;
# prints the binary's path.
limitador_build() {
  local commit="${LIMITADOR_COMMIT:-$LIMITADOR_PINNED_COMMIT}"
  local root="${SLUICEGATE_BENCH_CACHE:-$HOME/.cache/sluicegate-bench}/limitador"
  local bin="$root/bin/limitador-server"
  if [ -x "$bin" ] && [ "$(cat "$bin.commit" 2>/dev/null)" = "$commit" ]; then
    echo "$bin"; return 0
  fi

  local src="${LIMITADOR_SRC:-}"
  [ -n "$src" ] || limitador_fail "no limitador source: set LIMITADOR_SRC to a git directory or checkout of limitador holding commit $commit" || return 1
  git -C "$src" rev-parse --git-dir >/dev/null 2>&1 \
    || limitador_fail "LIMITADOR_SRC=$src is not a git directory or checkout" || return 1
  git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null \
    || limitador_fail "LIMITADOR_SRC=$src does not hold commit $commit (fetch it there first)" || return 1
  limitador_check_tools || return 1

  mkdir -p "$root/bin"
  # One build at a time: a second caller fails at once rather than waiting for the first.
  exec {lock}>"$root/.lock"
  flock -n "$lock" || { exec {lock}>&-; limitador_fail "another limitador build holds $root/.lock"; return 1; }

  local checkout="$root/src"
  if [ "$(git -C "$checkout" rev-parse HEAD 2>/dev/null)" != "$commit" ]; then
    rm -rf "$checkout"
    echo "limitador.sh: checking out $commit from $src into $checkout" >&2
    GIT_TERMINAL_PROMPT=0 git clone --quiet --no-checkout "$src" "$checkout" \
      && git -C "$checkout" -c advice.detachedHead=false checkout --quiet --detach "$commit" \
      || { exec {lock}>&-; limitador_fail "could not check out $commit from $src"; return 1; }
  fi
  # A partial mirror may lack some blobs (git then leaves those files out and still succeeds):
  # name them, and let the build fail if it needs one. They are marked skip-worktree because
  # limitador's build.rs runs `git diff --stat`, which fails on a file whose blob is absent.
  local absent
  absent=$(git -C "$checkout" ls-files --deleted)
  if [ -n "$absent" ]; then
    echo "limitador.sh: absent from $src, left out of the checkout:" $absent >&2
    git -C "$checkout" ls-files -z --deleted | xargs -0 git -C "$checkout" update-index --skip-worktree --
  fi
  # Later limitador commits might move the vendored protos to submodules: say so rather than
  # letting protoc fail deep in the build.
  local proto="$checkout/limitador-server/vendor/protobufs/data-plane-api/envoy/service/ratelimit/v3/rls.proto"
  [ -f "$proto" ] || { exec {lock}>&-; limitador_fail "the checkout lacks the vendored Envoy protos ($proto); fill limitador-server/vendor/protobufs at the commits its README names"; return 1; }

  echo "limitador.sh: building limitador-server $commit in release (long: see this script's top)" >&2
  local started=$SECONDS
  if ! (cd "$checkout" && CARGO_TARGET_DIR="$root/target" cargo build --release --locked -p limitador-server >&2); then
    exec {lock}>&-
    limitador_fail "cargo build of limitador-server failed (output above)"; return 1
  fi
  cp "$root/target/release/limitador-server" "$bin.tmp"
  mv "$bin.tmp" "$bin"
  echo "$commit" > "$bin.commit"
  exec {lock}>&-
  echo "limitador.sh: built $bin in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s" >&2
  echo "$bin"
}

# limitador_limit NAMESPACE MAX_VALUE SECONDS: prints one entry of a limitador limits file,
# the benchmarks' rule as limitador writes it (docs/limitador-peer.md): in the namespace the
# request's domain names, per value of the first descriptor's entry `key`, at most MAX_VALUE
# in a fixed window of SECONDS. On Redis the window starts at the counter's first hit (its key
# is given that TTL when created), not at a multiple of SECONDS.
limitador_limit() {
  cat <<EOF
- namespace: $1
  max_value: $2
  seconds: $3
  conditions: []
  variables:
    - "descriptors[0]['key']"
EOF
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  limitador_build
fi
