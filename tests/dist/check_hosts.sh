#!/bin/sh
# check_hosts.sh - data-parallel `ptc train` on two hosts for real: two network namespaces on this
# machine, each with its own network stack, host name and sshd, joined by a veth pair; OpenMPI's
# hostfile launcher started in the first reaches the second through ssh, and the two ranks
# exchange their gradients over TCP on the veth only.
#
#   host 1: namespace ptc-h1-PID, 10.77.0.1/24   mpirun (rank 0 runs here, started directly)
#   host 2: namespace ptc-h2-PID, 10.77.0.2/24   sshd (rank 1 runs here, started through ssh)
#
# For each backend (ref, and dnnl when built) a few steps of `ptc train` with one rank per host
# must reach the same weights, bit for bit (`ptc diff --rtol 0 --atol 0`), as `mpirun -np 2` on
# one host. What shows that the run crossed the veth: each rank writes the namespace it runs in
# (rank 0 in host 1's, rank 1 in host 2's), host 2's sshd logs the login from 10.77.0.1, and the
# veth's byte counters grow in each direction by at least one gradient all-reduce per step.
#
# Needs root (network namespaces), ip (iproute2), sshd and ssh-keygen (openssh-server), ssh
# (openssh-client), unshare (util-linux). Without one of them the test is skipped (exit 77, with the
# reason), as every test that lacks what it needs; CI runs it as root with all of them installed
# and counts any skip as a failure. Once they are there, a namespace, veth or sshd that cannot be
# made is a failure. Exit status: 0 all held, 1 a failure, 77 skipped, 99 cannot run.
# Everything is made in a mktemp folder and undone on exit (namespaces, veth, sshd, files).
here=$(cd "$(dirname "$0")" && pwd) || exit 99
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
[ -x "$top_builddir/tests/dist/test_dist" ] ||
    { echo "SKIP: ptc was built without MPI (no tests/dist/test_dist)"; exit 77; }
PATH=$PATH:/usr/sbin:/sbin
ptc=$top_builddir/tools/ptc
steps=3
failures=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
die() { fail "$*"; echo "hosts: $failures failure(s)"; exit 1; }

# What this test needs (CI has all of it; a skip there is a failure).
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root (this runs as uid $(id -u))"
command -v "${MPIRUN:-mpirun}" >/dev/null || skip "mpirun not found (apt-get install openmpi-bin)"
for tool in ip:iproute2 unshare:util-linux ssh:openssh-client ssh-keygen:openssh-client \
    sshd:openssh-server; do
    [ -x "/usr/sbin/${tool%%:*}" ] || command -v "${tool%%:*}" >/dev/null ||
        skip "${tool%%:*} not found (apt-get install ${tool#*:})"
done
sshd=$(command -v sshd) || sshd=/usr/sbin/sshd
. "$top_srcdir/tests/dist/mpi_env.sh" || exit 99
backends=ref
grep -q '^#define PTC_HAVE_DNNL 1' "$top_builddir/config.h" 2>/dev/null && backends="ref dnnl"

# mpirun splits plm_rsh_agent at blanks, so the folder's path must have none.
tmp=$(mktemp -d /tmp/ptc-hosts.XXXXXX) || die "mktemp -d"
h1=ptc-h1-$$
h2=ptc-h2-$$
veth1=ptc$$a # at most 15 characters
veth2=ptc$$b
ip1=10.77.0.1
ip2=10.77.0.2
net=10.77.0.0/24
port=10022

running() { # running PID: true while PID exists and is not a zombie
    [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}
ns_pids() { # the live processes in the test's namespaces
    for pid in $(ip netns pids "$h1" 2>/dev/null) $(ip netns pids "$h2" 2>/dev/null); do
        running "$pid" && echo "$pid"
    done
}
cleanup() {
    # Every process in these namespaces was started by this test (sshd, its sessions, orted).
    for pid in $(ns_pids); do kill "$pid" 2>/dev/null; done
    i=0
    while [ -n "$(ns_pids)" ] && [ $i -lt 30 ]; do sleep 0.1; i=$((i + 1)); done
    for pid in $(ns_pids); do kill -9 "$pid" 2>/dev/null; done
    wait # for the sshds started in the background
    for ns in $h1 $h2; do
        ip netns del "$ns" 2>/dev/null # deletes the veth end inside it too
    done
    ip link del "$veth1" 2>/dev/null # only if it never left this namespace
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

# `in_host N CMD...`: CMD in host N's namespace with host N's own host name (a UTS namespace),
# so that OpenMPI's daemons on the two hosts do not share a node name and a session folder.
in_host() {
    ns=$(eval echo "\$h$1")
    shift
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

# 1. Two hosts and the wire between them.
ip netns add "$h1" && ip netns add "$h2" || die "ip netns add $h1 $h2"
ip link add "$veth1" type veth peer name "$veth2" &&
    ip link set "$veth1" netns "$h1" && ip link set "$veth2" netns "$h2" &&
    ip -n "$h1" addr add "$ip1/24" dev "$veth1" && ip -n "$h2" addr add "$ip2/24" dev "$veth2" &&
    ip -n "$h1" link set lo up && ip -n "$h2" link set lo up &&
    ip -n "$h1" link set "$veth1" up && ip -n "$h2" link set "$veth2" up ||
    die "a veth pair $veth1 ($ip1, in $h1) - $veth2 ($ip2, in $h2)"
ok "hosts $h1 ($ip1 on $veth1) and $h2 ($ip2 on $veth2), joined by a veth pair"

# 2. An sshd on each host with keys made here; root logs in with the client key only.
mkdir -p /run/sshd && chmod 755 /run/sshd || die "mkdir /run/sshd (sshd's privilege separation)"
ssh-keygen -q -t ed25519 -N '' -C ptc-hosts-client -f "$tmp/client_key" &&
    cp "$tmp/client_key.pub" "$tmp/authorized_keys" || die "ssh-keygen (client key)"
for n in 1 2; do
    ssh-keygen -q -t ed25519 -N '' -C "ptc-hosts-$n" -f "$tmp/host${n}_key" ||
        die "ssh-keygen (host key $n)"
    cat >"$tmp/sshd${n}_config" <<EOF
ListenAddress $(eval echo "\$ip$n"):$port
HostKey $tmp/host${n}_key
PidFile $tmp/sshd$n.pid
AuthorizedKeysFile $tmp/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel VERBOSE
EOF
    "$sshd" -t -f "$tmp/sshd${n}_config" || die "sshd -t: sshd_config of host $n"
    # In the foreground (-D) as a child of this script, which reaps it on exit; it writes its pid
    # file once it listens.
    in_host "$n" "$sshd" -D -f "$tmp/sshd${n}_config" -E "$tmp/sshd$n.log" &
    i=0
    while [ ! -s "$tmp/sshd$n.pid" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    [ -s "$tmp/sshd$n.pid" ] || die "sshd on host $n wrote no pid file: $(tail -3 "$tmp/sshd$n.log")"
done
ok "sshd listening on $ip1:$port (pid $(cat "$tmp/sshd1.pid")) and $ip2:$port (pid $(cat "$tmp/sshd2.pid"))"
cat >"$tmp/ssh_config" <<EOF
Host *
    Port $port
    IdentityFile $tmp/client_key
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR
EOF
ssh="ssh -F $tmp/ssh_config"
where=$(in_host 1 $ssh "$ip2" 'echo "$(hostname) $(ip netns identify $$)"' 2>&1)
[ "$where" = "$h2 $h2" ] || die "ssh from host 1 to $ip2 lands in host 2 (got: $where)"
where=$(in_host 2 $ssh "$ip1" 'echo "$(hostname) $(ip netns identify $$)"' 2>&1)
[ "$where" = "$h1 $h1" ] || die "ssh from host 2 to $ip1 lands in host 1 (got: $where)"
ok "ssh from each host to the other with the test's key, over the veth"

# 3. A small dataset in CIFAR-10's binary format (label byte, then 3072 image bytes); random
# images are enough, both runs read the same files.
mkdir "$tmp/data" || die "mkdir"
records() {
    i=0
    while [ "$i" -lt "$1" ]; do
        printf "\\$(printf %03o $((i % 10)))"
        head -c 3072 /dev/urandom
        i=$((i + 1))
    done
}
records 64 >"$tmp/data/data_batch_1.bin" && records 20 >"$tmp/data/test_batch.bin" ||
    die "the dataset"
printf '%s slots=1\n%s slots=1\n' "$ip1" "$ip2" >"$tmp/hostfile"
# The environment the ranks need travels with mpirun to host 2 (ptc itself is the libtool wrapper,
# which finds lib/.libs by itself; the folders are the same on both hosts, as on a shared file
# system).
xenv=
for v in LD_LIBRARY_PATH ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do
    eval "[ -n \"\${$v:-}\" ]" && xenv="$xenv -x $v"
done
cd "$tmp" || die "cd $tmp"

# 4. Per backend: one host, then two hosts; the same bits.
rx_tx() { # received and sent bytes of host 1's veth end
    ip netns exec "$h1" cat "/sys/class/net/$veth1/statistics/rx_bytes" \
        "/sys/class/net/$veth1/statistics/tx_bytes" | tr '\n' ' '
}
for b in $backends; do
    args="train --dataset cifar10 --data $tmp/data --epochs 1 --max-steps $steps --batch-size 8
          --threads 1 --no-shuffle --no-augment --seed 0 --eval-every 0 --no-progress
          --backend $b"
    # shellcheck disable=SC2086
    timeout 600 $MPIRUN_CMD -np 2 "$ptc" $args --save "$tmp/one-$b.pth" >"$tmp/one-$b.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        tail -20 "$tmp/one-$b.log"
        fail "$b: mpirun -np 2 on one host exits $rc"
        continue
    fi
    ok "$b: mpirun -np 2 on one host (shared memory), $steps steps"

    before=$(rx_tx)
    n0=$(grep -c 'Accepted publickey' "$tmp/sshd2.log")
    rm -f "$tmp"/rank*.ns
    # Each rank records the namespace it runs in, then becomes ptc train.
    # shellcheck disable=SC2086
    in_host 1 timeout 600 $MPIRUN_CMD --hostfile "$tmp/hostfile" -np 2 --map-by node \
        --mca plm_rsh_agent "$ssh" --mca btl tcp,self \
        --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net" $xenv \
        sh -c 'ip netns identify $$ >"$0/rank$OMPI_COMM_WORLD_RANK.ns" && exec "$@"' "$tmp" \
        "$ptc" $args --save "$tmp/hosts-$b.pth" >"$tmp/hosts-$b.log" 2>&1
    rc=$?
    after=$(rx_tx)
    cat "$tmp/hosts-$b.log"
    if [ $rc -ne 0 ]; then
        tail -10 "$tmp/sshd2.log"
        fail "$b: mpirun --hostfile (one rank on each host) exits $rc"
        continue
    fi
    ok "$b: mpirun --hostfile, one rank on each host, TCP over the veth only, $steps steps"
    r0=$(cat "$tmp/rank0.ns" 2>/dev/null)
    r1=$(cat "$tmp/rank1.ns" 2>/dev/null)
    if [ "$r0" = "$h1" ] && [ "$r1" = "$h2" ]; then
        ok "$b: rank 0 ran in $r0, rank 1 in $r1"
    else
        fail "$b: rank 0 ran in '$r0' (expected $h1), rank 1 in '$r1' (expected $h2)"
    fi
    n1=$(grep -c 'Accepted publickey' "$tmp/sshd2.log")
    if [ "$n1" -gt "$n0" ] && grep 'Accepted publickey' "$tmp/sshd2.log" | tail -1 | grep -q "from $ip1 "; then
        ok "$b: host 2's sshd let mpirun in: $(grep 'Accepted publickey' "$tmp/sshd2.log" | tail -1 | sed 's/^.*Accepted/Accepted/')"
    else
        fail "$b: host 2's sshd logged no login from $ip1 during the run"
    fi
    # Each step all-reduces every gradient: with 2 ranks each must receive all of the other's
    # (in the buckets, whatever MPI's algorithm), so each direction carries at least
    # steps x the bucket total that ptc prints (to 0.1 MiB) in its header.
    mib=$(sed -n 's/.*buckets of gradients, \([0-9.]*\) MiB).*/\1/p' "$tmp/hosts-$b.log" | head -1)
    verdict=$(echo "$before $after" | awk -v mib="$mib" -v steps=$steps '{
        need = steps * (mib - 0.05) * 1048576; rx = $3 - $1; tx = $4 - $2
        printf "%s received %.1f MB, sent %.1f MB (at least %.1f MB each way: %d x %s MiB)\n",
            (mib != "" && rx >= need && tx >= need) ? "ok" : "short", rx / 1e6, tx / 1e6,
            need / 1e6, steps, mib }')
    case $verdict in
    ok*) ok "$b: the veth of host 1 ${verdict#ok }" ;;
    *) fail "$b: the veth of host 1 ${verdict#short }" ;;
    esac
    if "$ptc" diff --rtol 0 --atol 0 "$tmp/one-$b.pth" "$tmp/hosts-$b.pth" >"$tmp/diff-$b.log" 2>&1; then
        ok "$b: two hosts reach the same weights as one host, bit for bit ($(tail -1 "$tmp/diff-$b.log"))"
    else
        tail -20 "$tmp/diff-$b.log"
        fail "$b: two hosts and one host differ (ptc diff --rtol 0 --atol 0)"
    fi
done
cd / || exit 99

# 5. Nothing is left behind.
sshd_pids="$(cat "$tmp/sshd1.pid" "$tmp/sshd2.pid" 2>/dev/null)"
cleanup
trap - EXIT
left=
for pid in $sshd_pids; do running "$pid" && left="$left sshd:$pid"; done
ip netns list | grep -q -e "^$h1\b" -e "^$h2\b" && left="$left namespaces"
ip link show "$veth1" >/dev/null 2>&1 && left="$left $veth1"
[ -e "$tmp" ] && left="$left $tmp"
if [ -z "$left" ]; then
    ok "cleaned up: namespaces, veth pair, sshd and $tmp are gone"
else
    fail "left behind:$left"
fi
echo "hosts: $failures failure(s)"
[ $failures -eq 0 ]
