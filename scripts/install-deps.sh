#!/usr/bin/env bash
# Installs the Debian 12 packages ferry builds and tests with, if any are missing (as root, or
# through sudo). Does nothing when FERRY_NO_APT=1, when CMAKE_PREFIX_PATH is set (dependencies come
# from elsewhere), or where there is no apt-get.
set -euo pipefail
packages=(
  build-essential cmake ninja-build git
  libtorch-dev libtbb-dev libconcurrentqueue-dev libyaml-cpp-dev libgtest-dev libbenchmark-dev
  libturbojpeg0-dev libpng-dev libwebp-dev libsentencepiece-dev libsimdjson-dev libjemalloc-dev pybind11-dev python3-dev python3-torch python3-numpy python3-pil python3-matplotlib python3-sentencepiece python3-pytest
  python3-venv python3-pip python3-setuptools python3-wheel
  libcurl4-openssl-dev zlib1g-dev libzstd-dev liblzma-dev
)
# The servers the remote-data tests start (tests/servers/): nginx, OpenStack Swift's S3 API, and the
# tools that make their data; without their recommendations (Swift's would bring a syslog daemon).
servers=(nginx-light python3-swift curl openssl zstd xz-utils iproute2)
if [ "${FERRY_NO_APT:-0}" = 1 ] || [ -n "${CMAKE_PREFIX_PATH:-}" ]; then
  echo "ferry: not installing packages (FERRY_NO_APT=1 or CMAKE_PREFIX_PATH is set)"
  exit 0
fi
if ! command -v apt-get > /dev/null || ! command -v dpkg-query > /dev/null; then
  echo "ferry: no apt-get here: install ${packages[*]} (or their equivalents) yourself"
  exit 0
fi
installed() { dpkg-query -W -f='${Status}' "$1" 2> /dev/null | grep -q "install ok installed"; }
missing=()
for package in "${packages[@]}"; do installed "$package" || missing+=("$package"); done
missing_servers=()
for package in "${servers[@]}"; do installed "$package" || missing_servers+=("$package"); done
[ ${#missing[@]} -eq 0 ] && [ ${#missing_servers[@]} -eq 0 ] && exit 0
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo > /dev/null || {
    echo "ferry: missing ${missing[*]} ${missing_servers[*]}; run as root or install sudo" >&2
    exit 1
  }
  sudo="sudo"
fi
echo "ferry: installing ${missing[*]} ${missing_servers[*]}"
$sudo apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"; fi
if [ ${#missing_servers[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing_servers[@]}"
fi
