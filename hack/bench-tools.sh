#!/usr/bin/env bash
# The load generator `make bench` uses: vegeta, built from its Go module into a cache outside the
# repository (~/.cache/migops/bench-bin), once. Prints the binary's path.
set -euo pipefail
VEGETA_VERSION="v12.13.0"
BIN="${MIGOPS_BENCH_BIN:-$HOME/.cache/migops/bench-bin}"
if [ ! -x "$BIN/vegeta-$VEGETA_VERSION" ]; then
  mkdir -p "$BIN"
  GOBIN="$BIN" GOFLAGS=-mod=mod go install "github.com/tsenart/vegeta/v12@$VEGETA_VERSION" >&2
  mv "$BIN/vegeta" "$BIN/vegeta-$VEGETA_VERSION"
fi
echo "$BIN/vegeta-$VEGETA_VERSION"
