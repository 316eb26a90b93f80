#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks for building and testing rpcrdma.
# Usage: tools/deps.sh DEBIAN-PACKAGE...
# As root, missing packages are installed with apt-get; otherwise the script lists them and fails.
set -euo pipefail

missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "deps: missing Debian packages: ${missing[*]}" >&2
    echo "deps: run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

if ! command -v cargo >/dev/null; then
  echo "deps: no Rust toolchain (cargo) on PATH; install one with rustup (https://rustup.rs)" >&2
  exit 1
fi
for c in rustfmt clippy; do
  sub=$c; [ "$c" = rustfmt ] && sub=fmt
  if ! cargo "$sub" --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then
      echo "deps: adding the $c component"
      rustup component add "$c"
    else
      echo "deps: the $c component is missing and rustup is not available" >&2
      exit 1
    fi
  fi
done
