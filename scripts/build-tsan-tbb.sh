#!/usr/bin/env bash
# Builds oneTBB's libtbb with ThreadSanitizer into build/tsan-tbb (lib/libtbb.so.12), from the Debian
# source of the very libtbb-dev installed here, for the tsan preset (docs/reliability.md says why:
# with Debian's uninstrumented libtbb, TSan cannot see how the task scheduler hands a task from one
# thread to another, and reports every flow graph hand-off as a race in ferry's code).
#
# The tsan preset compiles against Debian's TBB headers and links its executables with a run path to
# build/tsan-tbb/lib, so they load this library instead of Debian's; the headers are the same source.
# Does nothing when build/tsan-tbb already holds the installed version. Needs the Debian mirror (the
# source package is fetched with apt-get source, through a private list of deb-src entries: the
# system's apt configuration is not touched), dpkg-dev, g++-12, cmake and ninja.
# FERRY_TSAN_TBB_SOURCE=<folder> builds from an unpacked oneTBB source of the same version instead.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/tsan-tbb
work=$root/build/tsan-tbb-work

version=$(dpkg-query -W -f='${Version}' libtbb-dev 2> /dev/null || true)
[ -n "$version" ] || { echo "ferry: libtbb-dev is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
upstream=${version%%-*}
upstream=${upstream#*:}
if [ -f "$out/lib/libtbb.so.12" ] && [ "$(cat "$out/debian-version" 2> /dev/null)" = "$version" ]; then
  echo "ferry: ThreadSanitizer libtbb $version already in $out"
  exit 0
fi

rm -rf "$work" "$out"
mkdir -p "$work"
if [ -n "${FERRY_TSAN_TBB_SOURCE:-}" ]; then
  source_dir=$FERRY_TSAN_TBB_SOURCE
else
  package=$(dpkg-query -W -f='${source:Package}' libtbb-dev)
  # A private apt state: one deb-src entry of the suite the installed package came from, signed by
  # Debian's archive key as the system's own entries are.
  suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
  apt_dir=$work/apt
  mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  {
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s %s-updates\n' "$suite" "$suite"
    printf 'Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n'
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian-security\nSuites: %s-security\n' "$suite"
    printf 'Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  } > "$apt_dir/parts/ferry-src.sources"
  apt_options=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/parts"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
  echo "ferry: fetching the source of $package $version"
  apt-get "${apt_options[@]}" -qq update
  (cd "$work" && apt-get "${apt_options[@]}" -qq source "$package=$version" > /dev/null)
  source_dir=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name "$package-*" | head -n 1)
  [ -n "$source_dir" ] || { echo "ferry: apt-get source $package=$version unpacked nothing" >&2; exit 1; }
fi

# libtbb alone (ferry links nothing else of oneTBB): oneTBB's own TSan switch, no -Werror and no
# -Wtsan (gcc 12 warns, for every use, that TSan ignores atomic_thread_fence), no tests, no tbbmalloc
# (libtbb then allocates with malloc, which TSan intercepts).
echo "ferry: building libtbb $upstream with -fsanitize=thread"
cmake -S "$source_dir" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=g++-12 -DCMAKE_CXX_FLAGS=-Wno-tsan -DTBB_SANITIZE=thread -DTBB_STRICT=OFF \
  -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF -DTBBMALLOC_BUILD=OFF -DTBB_ENABLE_IPO=OFF -DTBB4PY_BUILD=OFF \
  -DCMAKE_INSTALL_PREFIX="$out" -DCMAKE_INSTALL_LIBDIR=lib > "$work/configure.log"
cmake --build "$work/build" --target tbb -j "$(nproc)"
cmake --install "$work/build" --component runtime > /dev/null
[ -f "$out/lib/libtbb.so.12" ] || { echo "ferry: no $out/lib/libtbb.so.12 after the build" >&2; exit 1; }
echo "$version" > "$out/debian-version"
echo "$upstream" > "$out/version"
rm -rf "$work"
echo "ferry: ThreadSanitizer libtbb $version in $out/lib"
