#!/usr/bin/env bash
# The installed library as a program outside the tree sees it: `cmake --install` into a
# temporary prefix, then
#  - the installed headers are the public ones only, and libinferd.so exports no internal symbol;
#  - examples/cpp, configured on its own with find_package(inferd), builds and generates;
#  - examples/c/generate.c, compiled as C with pkg-config's flags, builds, and its greedy text
#    equals the installed `inferd run`'s.
# Usage: install_consumer.sh BUILD_DIR SOURCE_DIR [GENERATOR]. The generating steps need
# INFERD_MODEL; without it the builds are still checked and the test then skips (77).
set -euo pipefail
build="$(cd "$1" && pwd)"
source_dir="$(cd "$2" && pwd)"
generator="${3:-Ninja}"  # the tree's own, so the consumer needs no other build tool
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir="$(dirname "$(find "$prefix" -name 'libinferd.so' | head -1)")"
[[ -f "$libdir/libinferd.so" ]] || fail "no libinferd.so installed"
[[ -f "$libdir/cmake/inferd/inferdConfig.cmake" ]] || fail "no CMake package config"
[[ -f "$libdir/pkgconfig/inferd.pc" ]] || fail "no pkg-config file"
headers="$(cd "$prefix/include" && find . -type f | sort | tr '\n' ' ')"
[[ "$headers" == "./inferd/engine.h ./inferd/error.h ./inferd/inferd.h ./inferd/outputs.h ./inferd/sampling_params.h " ]] ||
  fail "installed headers: $headers"
# The dynamic symbols: the C ABI and the C++ API, nothing of the engine's internals.
leaked="$(nm -D --defined-only "$libdir/libinferd.so" | awk '{print $3}' | c++filt |
  grep -v -E '^(inferd_|inferd::(Engine::|version|finish_reason_name)|(typeinfo|typeinfo name|vtable) for inferd::Error)' |
  grep -v -E '^_(init|fini|edata|end|_bss_start)$|^__bss_start$|^_edata$|^_end$' || true)"
leaked+="$(nm -D --defined-only "$libdir/libinferd.so" | awk '{print $3}' | c++filt | grep 'Engine::Impl' || true)"
[[ -z "$leaked" ]] || fail "libinferd.so exports internals: $(head -5 <<<"$leaked")"
echo "ok: install: $(nm -D --defined-only "$libdir/libinferd.so" | wc -l) exported symbols, headers $headers"

# A C++ program with find_package(inferd), configured and built on its own.
cmake -S "$source_dir/examples/cpp" -B "$tmp/cpp-build" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/cpp-build" >/dev/null
echo "ok: examples/cpp built against the installed package"
# The C example with pkg-config's flags, as C.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$source_dir/examples/c/generate.c" \
  $(pkg-config --cflags --libs inferd) -Wl,-rpath,"$libdir" -o "$tmp/c-generate"
echo "ok: examples/c built with pkg-config ($(pkg-config --modversion inferd))"

model="${INFERD_MODEL:-}"
if [[ -z "$model" || ! -f "$model" ]]; then echo "SKIP: no model (set INFERD_MODEL) to generate"; exit 77; fi
out="$("$tmp/cpp-build/inferd-cpp-example" "$model")"
echo "$out"
grep -q "^\[0\] The capital of France is.*Paris" <<<"$out" || fail "the C++ example's first answer"
[[ "$(grep -c '^\[choice [0-3]\] ' <<<"$out")" == 4 ]] || fail "the C++ example's n = 4"
json="$(sed -n 's/^\[json\] //p' <<<"$out")"
python3 -c 'import json, sys; assert isinstance(json.loads(sys.argv[1])["city"], str)' "$json" ||
  fail "the C++ example's JSON: '$json'"
run_out="$("$prefix/bin/inferd" run -m "$model" -p "The capital of France is" -n 24 --temp 0 --no-stats)"
c_out="$("$tmp/c-generate" "$model" "The capital of France is" -n 24 --temp 0 2>/dev/null)"
[[ "$run_out" == "$c_out" ]] || fail "installed C example '$c_out' != inferd run '$run_out'"
echo "ok: installed C example's greedy text equals inferd run's: $c_out"
