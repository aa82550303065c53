#!/bin/sh
# Installs Debian's chromium for the dashboard's browser test
# (cmd/leasehold/browser_test.go) when it is missing. Needs root (CI runs as
# root) and the Debian package mirror; prints where the browser is.
set -eu
for b in chromium chromium-browser; do
	if command -v "$b" >/dev/null 2>&1; then
		command -v "$b"
		exit 0
	fi
done
if [ "$(id -u)" != 0 ]; then
	echo "install-chromium: not root: run 'apt-get install -y chromium' as root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
command -v chromium
