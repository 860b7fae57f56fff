#!/usr/bin/env bash
# install-deps.sh makes the node software of `opzero cluster up` ready from
# Debian's packages: containerd (and its ctr), runc, the CNI plugins
# (bridge, host-local, loopback, portmap), iptables, iproute2 and conntrack;
# and Debian's python3 and nodejs, the interpreters `opzero cluster apply`
# puts into the images of hooks annotated dev.opzero.dev/command
# (examples/metacontroller's hook.py and hook.js).
# Embedded in the opzero CLI and run by `opzero install cluster` as root;
# nothing happens when every command is already there. The packages'
# service units are not used (opzero starts containerd itself), and no
# package's post-install may start one (policy-rc.d says no while it runs).
set -euo pipefail

need() {
	command -v containerd >/dev/null && command -v ctr >/dev/null && command -v runc >/dev/null &&
		command -v iptables >/dev/null && command -v ip >/dev/null && command -v conntrack >/dev/null &&
		[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback && -x /usr/lib/cni/portmap ]] &&
		[[ -x /usr/bin/python3 && -x /usr/bin/node ]]
}

if need; then
	echo "install-deps: containerd, runc, CNI plugins, iptables, python3, node: present" >&2
	exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
	cat >&2 <<'MSG'
install-deps: the node needs containerd (with ctr), runc, the CNI plugins (bridge, host-local, loopback, portmap in /usr/lib/cni), iptables, iproute2 and conntrack; hooks' images need /usr/bin/python3 and /usr/bin/node.
  Debian/Ubuntu, as root: apt-get install containerd runc containernetworking-plugins iptables iproute2 conntrack python3 nodejs
MSG
	exit 1
fi
echo "install-deps: installing Debian's containerd, runc, containernetworking-plugins, iptables, conntrack, python3, nodejs (those missing)" >&2
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
made=""
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made=1
fi
trap '[[ -n $made ]] && rm -f "$policy"' EXIT
apt-get update -qq >&2
pkgs=(containerd runc containernetworking-plugins iptables iproute2 conntrack)
[[ -x /usr/bin/python3 ]] || pkgs+=(python3)
[[ -x /usr/bin/node ]] || pkgs+=(nodejs) # kept when another source's nodejs is installed
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2
need || { echo "install-deps: apt-get ran but a command is still missing" >&2; exit 1; }
