#!/usr/bin/env bash
# The project's whole test suite. Installs the system packages the end-to-end tests drive for real, if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for pkg in $(cat scripts/system-packages.txt 2>/dev/null); do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing system packages: ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo test --workspace "$@"
python3 -m unittest discover -s bench -p "test_*.py"
python3 -m unittest discover -s scripts -p "test_*.py"
