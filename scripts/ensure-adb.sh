#!/usr/bin/env bash
# Makes sure the adb command exists: the tests run the real adb server
# against the Go device daemon (internal/adbsim), and `make run` with
# SERVICE_ADB_SIM_DEVICES starts one. Installs Debian's adb package when it
# can (as root with apt-get); otherwise says exactly what to install.
set -euo pipefail
if command -v adb >/dev/null 2>&1; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing adb (apt-get install adb)…" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq adb >/dev/null
  command -v adb >/dev/null 2>&1 && exit 0
fi
if command -v brew >/dev/null 2>&1; then
  brew install android-platform-tools && exit 0
fi
echo "adb not found: install it (Debian/Ubuntu: sudo apt-get install adb; macOS: brew install android-platform-tools), or set PHONEFLEET_TEST_ADB=skip to skip the tests that need it" >&2
exit 1
