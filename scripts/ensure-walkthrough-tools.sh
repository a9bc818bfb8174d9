#!/usr/bin/env bash
# Makes sure curl and jq exist: the README walk-through test runs the
# README's commands as written, and they use both. Installs Debian's
# packages when it can (as root with apt-get); otherwise says exactly what
# to install.
set -euo pipefail
missing=()
for tool in curl jq; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing ${missing[*]} (apt-get install ${missing[*]})…" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  ok=1
  for tool in "${missing[@]}"; do command -v "$tool" >/dev/null 2>&1 || ok=0; done
  [ "$ok" = 1 ] && exit 0
fi
if command -v brew >/dev/null 2>&1; then
  brew install "${missing[@]}" && exit 0
fi
echo "${missing[*]} not found: install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}; macOS: brew install ${missing[*]})" >&2
exit 1
