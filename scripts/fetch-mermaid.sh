#!/usr/bin/env bash
# Mermaid for the docs' diagrams, served by the site itself: docs/js/mermaid.min.js
# from npm's mermaid package, cached once per machine in ~/.cache/trizre. Without
# npm (or the registry) the site still builds and the theme loads Mermaid from its
# CDN when a page is viewed: the diagrams then need a network in the browser.
set -euo pipefail
version=11.12.0
here="$(cd "$(dirname "$0")/.." && pwd)"
target="$here/docs/js/mermaid.min.js"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/trizre/mermaid-$version/mermaid.min.js"
[ -f "$target" ] && exit 0
if [ ! -f "$cache" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "fetch-mermaid: no npm; the site's diagrams will load Mermaid from its CDN" >&2
        exit 0
    fi
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    if ! (cd "$work" && npm pack --silent "mermaid@$version" >/dev/null 2>&1); then
        echo "fetch-mermaid: npm pack mermaid@$version failed; diagrams will use the CDN" >&2
        exit 0
    fi
    tar -xzf "$work"/mermaid-*.tgz -C "$work" package/dist/mermaid.min.js
    mkdir -p "$(dirname "$cache")"
    mv "$work/package/dist/mermaid.min.js" "$cache"
fi
mkdir -p "$(dirname "$target")"
cp "$cache" "$target"
