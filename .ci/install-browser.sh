#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium and its WebDriver for tests/test_browser.py.
# Idempotent: does nothing when both are already there. Needs root (CI containers are).
# Another apt process may hold the package lock for a while (unattended upgrades on a new
# machine): apt waits for it, up to ten minutes, rather than failing.
set -euo pipefail
if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    echo "chromium and chromedriver already installed: $(/usr/bin/chromium --version)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
lock=(-o DPkg::Lock::Timeout=600)
for attempt in 1 2 3; do
    if apt-get "${lock[@]}" update && apt-get "${lock[@]}" install -y --no-install-recommends chromium chromium-driver; then
        /usr/bin/chromium --version
        exit 0
    fi
    echo "apt-get failed (attempt $attempt of 3); retrying in 20 s" >&2
    sleep 20
done
exit 1
