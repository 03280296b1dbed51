#!/usr/bin/env bash
# The emulated hosts themselves (emulated_hosts.sh): each has its own name,
# address, /etc/hosts and /dev/shm; they reach each other until a cable is
# pulled; nothing of them is left once they are taken down.
set -euo pipefail
source "$(dirname "$0")/emulated_hosts.sh"

fail() { echo "FAILED: $*"; exit 1; }

# Whether host $1 reaches host $2's port 9 (nothing listens: a refusal is an
# answer; a pulled cable gives none, and the 2 s bound ends the wait).
reaches() {
  local answer
  answer=$(on_host "$1" timeout 2 bash -c "echo >/dev/tcp/host$2/9" 2>&1) && return 0
  [[ $answer == *"Connection refused"* ]]
}

hosts_up 3
for host in 1 2 3; do
  [[ $(on_host $host hostname) == "host$host" ]] || fail "host$host is named $(on_host $host hostname)"
  on_host $host ip -brief addr show "eth$host" | grep -q "$(host_address $host)/24" ||
    fail "host$host lacks $(host_address $host) on eth$host"
  for other in 1 2 3; do
    [[ $(on_host $host getent hosts "host$other" | awk '{print $1}') == "$(host_address $other)" ]] ||
      fail "host$host does not resolve host$other to $(host_address $other)"
  done
done
on_host 1 touch /dev/shm/emulated-hosts-test
on_host 2 test ! -e /dev/shm/emulated-hosts-test || fail "host2 sees host1's /dev/shm"
test ! -e /dev/shm/emulated-hosts-test || fail "this machine sees host1's /dev/shm"

reaches 1 2 || fail "host1 does not reach host2"
reaches 3 1 || fail "host3 does not reach host1"
link_down 2
! reaches 1 2 || fail "host1 reaches host2 with host2's cable pulled"
reaches 1 3 || fail "host1 does not reach host3 once host2's cable is pulled"

holders=("${EMULATED_HOSTS_HOLDERS[@]}")
hosts_down
for holder in "${holders[@]}"; do
  ! kill -0 "$holder" 2>/dev/null || fail "the namespace holder $holder outlived hosts_down"
done
echo "ok"
