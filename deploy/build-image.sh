#!/usr/bin/env sh
# Builds the onecharge image from the Containerfile with podman, buildah or docker
# (whichever is found first), tagged onecharge:<version of Cargo.toml> unless a tag is given:
#
#   deploy/build-image.sh                      # onecharge:0.1.0
#   deploy/build-image.sh registry.example.com/payments/onecharge:0.1.0
#
# The build pulls docker.io/library/rust and gcr.io/distroless/cc-debian12: a machine that
# cannot reach those registries (or a mirror serving them under the same names) cannot build
# the image, and this script fails with the builder's own error. It builds nothing else and
# never falls back to another base image.
set -eu
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
tag=${1:-onecharge:$version}
if command -v podman >/dev/null 2>&1; then
  builder="podman build"
elif command -v buildah >/dev/null 2>&1; then
  builder="buildah bud"
elif command -v docker >/dev/null 2>&1; then
  builder="docker build"
else
  echo "no podman, buildah or docker found: install one (Debian: apt-get install podman)" >&2
  exit 2
fi
echo "building $tag with $builder" >&2
exec $builder -t "$tag" -f Containerfile .
