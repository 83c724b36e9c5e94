#!/usr/bin/env bash
# Makes sure /usr/bin/chromium exists for browser tests, installing Debian's `chromium` package when it does not.
# Debian's package rather than a browser downloaded by a test library: the machines reach Debian's mirrors, and
# apt keeps it patched along with the rest of the system.
set -euo pipefail

chromium=/usr/bin/chromium
if [ -x "$chromium" ]; then
  echo "chromium present: $("$chromium" --version 2>/dev/null || echo "$chromium")"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  # -n: fail rather than wait for a password nobody in CI can type.
  as_root=(sudo -n)
else
  echo "error: $chromium is missing and installing it needs root; run as root, install sudo, or: apt-get install chromium" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: $chromium is missing and this machine has no apt-get; install Chromium so that $chromium exists" >&2
  exit 1
fi

echo "installing Debian's chromium package (no recommends)..."
# Through env, because sudo drops the caller's environment; noninteractive keeps debconf from waiting on a prompt.
apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
"${apt[@]}" update -q
"${apt[@]}" install -y -q --no-install-recommends chromium
if [ ! -x "$chromium" ]; then
  echo "error: the chromium package installed, but $chromium is still missing" >&2
  exit 1
fi
echo "chromium installed: $("$chromium" --version 2>/dev/null || echo "$chromium")"
