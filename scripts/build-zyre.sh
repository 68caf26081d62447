#!/usr/bin/env bash
# Build zyre (the C reference implementation of ZRE) from ../shared/vendor as a
# test peer, once per machine: the result is cached under $ZYRE_CACHE and
# reused while the tarball is unchanged. zyre is never part of trizre.
#
# Prints nothing and exits 0 when the cache is current. Exits non-zero with a
# reason when zyre cannot be built here; the zyre tests then skip, loudly.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ZYRE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trizre/zyre}"
stamp="$cache/.built-from"
agent_src="$here/tests/interop/zyre_agent.c"

# The vendored source: beside the checkout (../shared/vendor), or where a
# clone elsewhere (CI's) finds the workplace's copy.
tarball="${ZYRE_TARBALL:-}"
if [ -z "$tarball" ]; then
    for candidate in "$here/../shared/vendor" /work/shared/vendor; do
        if [ -f "$candidate/zyre-d8370f7.tar.gz" ]; then
            tarball="$candidate/zyre-d8370f7.tar.gz"
            break
        fi
    done
fi

# czmq with its DRAFT API, when its source is here too (optional). zyre's
# gossip over CURVE (zyre_gossip_connect_curve, a hub with a certificate)
# lives in czmq's draft zgossip: against a czmq built without drafts (as
# Debian's libczmq is) zyre silently gossips in the clear, and the gossip
# CURVE interop tests skip, saying so.
czmq_tarball="${CZMQ_TARBALL:-}"
if [ -z "$czmq_tarball" ]; then
    for candidate in "$here/tests/interop/vendor" "$here/../shared/vendor" /work/shared/vendor; do
        if [ -f "$candidate/czmq-4.2.1.tar.gz" ]; then
            czmq_tarball="$candidate/czmq-4.2.1.tar.gz"
            break
        fi
    done
fi

# Our own test driver against libzyre: rebuilt whenever its source changes.
build_agent() {
    local agent_stamp="$cache/.agent-from" agent_want
    agent_want="$(sha256sum "$agent_src" | cut -d' ' -f1)"
    if [ -f "$agent_stamp" ] && [ "$(cat "$agent_stamp")" = "$agent_want" ] \
        && [ -x "$cache/bin/zyre_agent" ]; then
        return 0
    fi
    gcc -O2 -Wall -o "$cache/bin/zyre_agent" "$agent_src" -I"$cache/include" \
        -L"$cache/lib" -Wl,-rpath,"$cache/lib" -lzyre -lczmq -lzmq \
        || { echo "build-zyre: zyre_agent did not compile" >&2; exit 6; }
    echo "$agent_want" >"$agent_stamp"
}

# The benchmark's zyre worker (benchmarks/zyre_worker.c), likewise. Only
# `make bench` needs it: if it does not compile, say so and go on (the
# bench then skips its zyre column, saying why); the tests do not care.
worker_src="$here/benchmarks/zyre_worker.c"
build_worker() {
    local worker_stamp="$cache/.worker-from" worker_want
    [ -f "$worker_src" ] || return 0
    worker_want="$(sha256sum "$worker_src" | cut -d' ' -f1)"
    if [ -f "$worker_stamp" ] && [ "$(cat "$worker_stamp")" = "$worker_want" ] \
        && [ -x "$cache/bin/zyre_worker" ]; then
        return 0
    fi
    if gcc -O2 -Wall -o "$cache/bin/zyre_worker" "$worker_src" -I"$cache/include" \
        -L"$cache/lib" -Wl,-rpath,"$cache/lib" -lzyre -lczmq -lzmq; then
        echo "$worker_want" >"$worker_stamp"
    else
        rm -f "$cache/bin/zyre_worker" "$worker_stamp"
        echo "build-zyre: warning: zyre_worker did not compile; make bench skips zyre" >&2
    fi
}

if [ -z "$tarball" ] || [ ! -f "$tarball" ]; then
    if [ -f "$stamp" ] && [ -x "$cache/bin/zpinger" ]; then
        build_agent  # the source is not here, but zyre was built from it before
        build_worker
        exit 0
    fi
    echo "build-zyre: no zyre source (../shared/vendor/zyre-d8370f7.tar.gz; set ZYRE_TARBALL)" >&2
    exit 3
fi
want="$(sha256sum "$tarball" | cut -d' ' -f1)"
if [ -n "$czmq_tarball" ]; then
    [ -f "$czmq_tarball" ] || { echo "build-zyre: no czmq source at $czmq_tarball" >&2; exit 3; }
    want="$want+czmq-drafts-$(sha256sum "$czmq_tarball" | cut -d' ' -f1)"
fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$cache/bin/zpinger" ]; then
    build_agent
    build_worker
    exit 0
fi

need=()
for pkg in libczmq-dev libzmq3-dev pkg-config cmake build-essential; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "build-zyre: installing ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "build-zyre: missing ${need[*]} and cannot install them (not root with apt)" >&2
        exit 4
    fi
fi

echo "build-zyre: building zyre into $cache (about 2 minutes, once per machine)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
src="$(find "$work" -maxdepth 1 -mindepth 1 -type d | head -n1)"
rm -rf "$cache"
mkdir -p "$cache"
zyre_flags=()
if [ -n "$czmq_tarball" ]; then
    echo "build-zyre: building czmq with its DRAFT API first (gossip over CURVE)"
    mkdir -p "$work/czmq"
    tar -xzf "$czmq_tarball" -C "$work/czmq"
    czmq_src="$(find "$work/czmq" -maxdepth 1 -mindepth 1 -type d | head -n1)"
    cmake -S "$czmq_src" -B "$work/czmq-build" -DCMAKE_BUILD_TYPE=Release -DENABLE_DRAFTS=ON \
        -DCZMQ_BUILD_STATIC=OFF -DCMAKE_INSTALL_PREFIX="$cache" -DCMAKE_INSTALL_LIBDIR=lib \
        >"$work/czmq-cmake.log" 2>&1 || { tail -n 30 "$work/czmq-cmake.log" >&2; exit 5; }
    cmake --build "$work/czmq-build" -j2 >"$work/czmq-build.log" 2>&1 \
        || { tail -n 30 "$work/czmq-build.log" >&2; exit 5; }
    cmake --install "$work/czmq-build" >/dev/null 2>&1 \
        || { echo "build-zyre: czmq did not install" >&2; exit 5; }
    # zyre finds this czmq first, and its library keeps a run path to it.
    zyre_flags=(-DCMAKE_PREFIX_PATH="$cache" -DCMAKE_INSTALL_RPATH="$cache/lib")
fi
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DENABLE_DRAFTS=ON \
    -DCMAKE_INSTALL_PREFIX="$cache" -DCMAKE_INSTALL_LIBDIR=lib "${zyre_flags[@]}" \
    >"$work/cmake.log" 2>&1 || { tail -n 30 "$work/cmake.log" >&2; exit 5; }
cmake --build "$work/build" -j2 >"$work/build.log" 2>&1 \
    || { tail -n 30 "$work/build.log" >&2; exit 5; }
cmake --install "$work/build" >/dev/null
# zpinger is a test program cmake builds but does not install.
for tool in zpinger ztester_beacon ztester_gossip perf_local perf_remote; do
    [ -x "$work/build/$tool" ] && install -m 0755 "$work/build/$tool" "$cache/bin/"
done
[ -x "$cache/bin/zpinger" ] || { echo "build-zyre: zpinger was not built" >&2; exit 5; }
echo "$want" >"$stamp"
build_agent
build_worker
echo "build-zyre: done"
