#!/usr/bin/env bash
# Installs Debian's Chromium for the dashboard's browser test (packages/cli/test/dashboard-browser.test.ts),
# which drives it with playwright-core and never downloads a browser. Does nothing when it is installed.
# About 70 s on a 2-core machine with a warm package index (apt-get update not counted).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-chromium: /usr/bin/chromium is missing; run as root: apt-get install -y chromium" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends chromium || { apt-get update && apt-get install -y --no-install-recommends chromium; }
