#!/usr/bin/env bash
# Installs Debian's Slurm (controller, node daemon, client) and munge when they
# are missing. The slurm test needs them; CI runs as root with Debian's mirror.
# Nothing is started here: start_slurm.sh configures and starts the daemons.
set -euo pipefail
packages=(slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "install_slurm.sh: ${missing[*]} missing and not root: install them (apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "install_slurm.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The package scripts try to start the daemons through systemd; a policy-rc.d
# that answers 101 keeps them stopped (there may be no init system at all, and
# the test starts its own daemons from its own configuration).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
# Bounded: the test that calls this must end in its own time limit.
install_missing() {
  timeout 480 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
if ! install_missing; then
  # A stale package index is the usual cause on a fresh machine.
  echo "install_slurm.sh: install failed; updating the package index and trying again"
  timeout 240 apt-get update -qq
  install_missing
fi
