#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium and its WebDriver for tests/test_browser.py.
# Idempotent: does nothing when both are already there. Needs root (CI containers are).
set -euo pipefail
if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    echo "chromium and chromedriver already installed: $(/usr/bin/chromium --version)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium chromium-driver
/usr/bin/chromium --version
