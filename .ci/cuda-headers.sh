#!/usr/bin/env bash
# cuda-headers.sh [DIR] — put the CUDA driver API header (cuda.h) and its link stub (libcuda.so)
# under DIR (default: $HOME/.cache/cuda-headers), taken from Debian's nvidia-cuda-dev package
# (non-free), and print the cgo variables that build gorgonia.org/cu against them:
#   eval "$(.ci/cuda-headers.sh)" && go build -tags cu ./...
# Needs root for apt. The package is large (about 0.8 GB); the two files are cached in DIR.
set -euo pipefail
dest=${1:-$HOME/.cache/cuda-headers}
if [[ ! -f $dest/include/cuda.h || ! -f $dest/lib/libcuda.so ]]; then
  base=/etc/apt/sources.list.d/debian.sources
  [[ -f $base ]] || { echo "cuda-headers: $base not found" >&2; exit 1; }
  uri=$(awk '/^URIs:/{print $2; exit}' "$base")
  extra=/etc/apt/sources.list.d/zz-cuda-headers-nonfree.sources
  work=$(mktemp -d)
  chmod 755 "$work"
  trap 'rm -f "$extra"; rm -rf "$work"' EXIT
  printf 'Types: deb\nURIs: %s\nSuites: bookworm\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" >"$extra"
  apt-get -qq update >&2
  (cd "$work" && apt-get -qq download nvidia-cuda-dev >&2)
  dpkg-deb --fsys-tarfile "$work"/nvidia-cuda-dev_*.deb |
    tar -x -C "$work" ./usr/include/cuda.h ./usr/include/cudaTypedefs.h ./usr/lib/x86_64-linux-gnu/stubs/libcuda.so
  mkdir -p "$dest/include" "$dest/lib"
  cp "$work/usr/include/cuda.h" "$work/usr/include/cudaTypedefs.h" "$dest/include/"
  cp "$work/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" "$dest/lib/"
  rm -f "$extra"
  apt-get -qq update >&2 || true
fi
echo "export CGO_ENABLED=1 CGO_CFLAGS=-I$dest/include CGO_LDFLAGS=-L$dest/lib"
