# Emulated hosts on one machine, for tests of what crosses a network. Sourced:
#
#   source testing/hosts/emulated_hosts.sh
#   hosts_up 2              # host1, host2 joined by a bridge
#   on_host 1 CMD ARGS...   # CMD on host1
#   link_down 2             # host2's cable pulled
#
# Host i has its own network (interface eth<i>, address 10.77.0.<i>/24, a
# bridge in a namespace of its own between them), hostname (host<i>),
# /etc/hosts (every host's name at its address) and /dev/shm: what a rank
# sees of the machine it runs on. The namespaces are held by a process each,
# so they go when those processes go; hosts_up arranges for that at the
# caller's exit (an EXIT trap, replacing the caller's), however it exits
# short of SIGKILL, and the holders are in the caller's process group, which
# a test runner's timeout kills whole.
# Only addresses of these hosts are used; nothing else is contacted.
#
# Variables that change what hosts_up builds:
#   EMULATED_HOSTS_LOOPBACK_NAME=1: each host's /etc/hosts maps its own
#     name to 127.0.1.1, as Debian's installer writes it.

readonly EMULATED_HOSTS_SUBNET=10.77.0
EMULATED_HOSTS_DIR=""
EMULATED_HOSTS_FABRIC=""
EMULATED_HOSTS_HOLDERS=()
EMULATED_HOSTS_JOBS=()  # start_logged's: "NAME:PID"

# The address of host $1.
host_address() { echo "$EMULATED_HOSTS_SUBNET.$1"; }

# Waits (at most $2 seconds, default 10, in 50 ms sleeps) until file $1 exists.
await_file() {
  local tries=$((${2:-10} * 20))
  until [[ -e $1 ]]; do
    ((tries-- > 0)) || { echo "emulated_hosts: $1 never appeared" >&2; return 1; }
    sleep 0.05
  done
}

# Starts a child that holds new namespaces ($1: unshare's flags), runs the
# shell commands $2 inside them, then sleeps until killed; appends its pid to
# EMULATED_HOSTS_HOLDERS (a child of this shell, so that hosts_down reaps it).
_hosts_hold() {
  local flags=$1 setup=$2 ready
  ready="$EMULATED_HOSTS_DIR/ready.${#EMULATED_HOSTS_HOLDERS[@]}"
  # shellcheck disable=SC2086
  unshare $flags -- sh -c "$setup && touch '$ready' && exec sleep infinity" &
  EMULATED_HOSTS_HOLDERS+=($!)
  await_file "$ready"
}

_hosts_in_fabric() { nsenter -t "$EMULATED_HOSTS_FABRIC" -n -- "$@"; }

_hosts_file() {
  local count=$1 self=$2 i
  echo "127.0.0.1 localhost"
  if [[ ${EMULATED_HOSTS_LOOPBACK_NAME:-0} == 1 ]]; then echo "127.0.1.1 host$self"; fi
  for ((i = 1; i <= count; i++)); do
    [[ ${EMULATED_HOSTS_LOOPBACK_NAME:-0} == 1 && $i == "$self" ]] || echo "$(host_address "$i") host$i"
  done
}

# Builds hosts host1..host$1 (at most 9).
hosts_up() {
  local count=$1 i
  EMULATED_HOSTS_DIR=$(mktemp -d)
  trap hosts_down EXIT
  EMULATED_HOSTS_HOLDERS=()
  _hosts_hold "--net" "ip link add fabric type bridge && ip link set fabric up" || return 1
  EMULATED_HOSTS_FABRIC=${EMULATED_HOSTS_HOLDERS[0]}
  for ((i = 1; i <= count; i++)); do
    _hosts_file "$count" "$i" >"$EMULATED_HOSTS_DIR/hosts.$i"
    _hosts_hold "--net --uts --mount --propagation private" \
      "hostname host$i && mount --bind $EMULATED_HOSTS_DIR/hosts.$i /etc/hosts && mount -t tmpfs tmpfs /dev/shm" || return 1
    local holder=${EMULATED_HOSTS_HOLDERS[$i]}
    _hosts_in_fabric ip link add "port$i" type veth peer name "eth$i"
    _hosts_in_fabric ip link set "eth$i" netns "$holder"
    _hosts_in_fabric ip link set "port$i" master fabric up
    nsenter -t "$holder" -n -- ip addr add "$(host_address "$i")/24" dev "eth$i"
    nsenter -t "$holder" -n -- ip link set "eth$i" up
    nsenter -t "$holder" -n -- ip link set lo up
  done
}

# "host1=PID host2=PID ...": which holder's namespaces are which host's, for
# enter_host.sh (the rsh agent through which mpirun starts a host's daemon).
host_map() {
  local i map=""
  for ((i = 1; i < ${#EMULATED_HOSTS_HOLDERS[@]}; i++)); do
    map+="${map:+ }host$i=${EMULATED_HOSTS_HOLDERS[$i]}"
  done
  echo "$map"
}

# Runs a command on host $1, in the caller's working directory.
on_host() {
  local host=$1
  shift
  nsenter -t "${EMULATED_HOSTS_HOLDERS[$host]}" -n -u -m --wd="$PWD" -- "$@"
}

# start_logged NAME COMMAND...: runs COMMAND in the background, its output
# kept under NAME until await_logged prints it.
start_logged() {
  local name=$1
  shift
  "$@" >"$EMULATED_HOSTS_DIR/log.$name" 2>&1 &
  EMULATED_HOSTS_JOBS+=("$name:$!")
}

# Waits for every command start_logged started, in order, and prints each
# one's exit status and output; fails unless every status was $1 (default 0).
await_logged() {
  local expected=${1:-0} job status failed=0
  for job in "${EMULATED_HOSTS_JOBS[@]}"; do
    status=0
    wait "${job#*:}" || status=$?
    echo "=== ${job%%:*}: exited $status"
    cat "$EMULATED_HOSTS_DIR/log.${job%%:*}"
    ((status == expected)) || failed=1
  done
  EMULATED_HOSTS_JOBS=()
  return "$failed"
}

# Pulls host $1's cable: its frames no longer reach the bridge.
link_down() { _hosts_in_fabric ip link set "port$1" down; }

hosts_down() {
  local holder
  for holder in "${EMULATED_HOSTS_HOLDERS[@]}"; do kill "$holder" 2>/dev/null || true; done
  for holder in "${EMULATED_HOSTS_HOLDERS[@]}"; do wait "$holder" 2>/dev/null || true; done
  EMULATED_HOSTS_HOLDERS=()
  [[ -z $EMULATED_HOSTS_DIR ]] || rm -rf "$EMULATED_HOSTS_DIR"
}
