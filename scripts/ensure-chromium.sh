#!/usr/bin/env bash
# Makes sure a Chromium exists: the console's browser tests
# (testutil.Browser, internal/app/console_*_test.go) drive a headless
# chromium with chromedp. It is looked for in PHONEFLEET_CHROMIUM (which,
# when set, must name it), then as chromium or chromium-browser on PATH
# (Debian's package installs /usr/bin/chromium). When missing it installs
# Debian's chromium package when it can (as root with apt-get); otherwise
# it says exactly what to install. PHONEFLEET_TEST_BROWSER=skip lets a
# machine that cannot have it skip the browser tests instead.
set -euo pipefail

find_chromium() {
  if [ -n "${PHONEFLEET_CHROMIUM:-}" ]; then
    command -v "$PHONEFLEET_CHROMIUM" 2>/dev/null || return 1
    return 0
  fi
  command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null
}

if find_chromium >/dev/null; then exit 0; fi
if [ -n "${PHONEFLEET_CHROMIUM:-}" ]; then
  echo "PHONEFLEET_CHROMIUM=$PHONEFLEET_CHROMIUM does not name an executable: point it at a Chromium or Chrome binary, or unset it" >&2
  exit 1
fi
if [ "${PHONEFLEET_TEST_BROWSER:-}" = skip ]; then
  echo "chromium not found; PHONEFLEET_TEST_BROWSER=skip: the browser tests will be skipped" >&2
  exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing chromium (apt-get install chromium)…" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  find_chromium >/dev/null && exit 0
fi
echo "chromium not found: install it (Debian: sudo apt-get install chromium; Ubuntu: a chromium or Google Chrome package; macOS: install Chrome and set PHONEFLEET_CHROMIUM=\"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome\"), or set PHONEFLEET_TEST_BROWSER=skip to skip the tests that need it" >&2
exit 1
