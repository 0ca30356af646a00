#!/usr/bin/env bash
# The multi-node layout on one machine: hostfiles/t3000.txt (two hosts of 4 slots), and the same
# with hostfiles/t3000.rankfile, launched through a stand-in for ssh (local_rsh.sh) so that each
# host has its own Open MPI daemon, and with the TCP transport between ranks, as between machines.
# Checks, from each rank's own report (MESHNN_SHOW_BINDING): 4 ranks per host, and rank r is local
# rank r % 4 of its host, so mesh row k = ranks 4k..4k+3 shares one host. Then runs a 2-D Falcon
# MLP across the two hosts against its single-device result (--check).
#   multinode_layout.sh BUILD_DIR
set -euo pipefail
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Shared memory between "hosts" that are one machine is not what separate nodes have (and Open MPI's
# vader faults on it): TCP, as between machines.
# Each daemon shares its hwloc topology through a shared mapping it places in a hole of its address
# space; two daemons of one machine now and then crashed writing it (hwloc_shmem_topology_write,
# seen in full test runs): the stand-in hosts do without the sharing (rtc_hwloc_vmhole none).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MESHNN_LOCAL_RSH_TMP="$work"  # the stand-in hosts' session directories (local_rsh.sh)
launch=(mpirun --mca plm_rsh_agent "$root/tests/system/local_rsh.sh" --mca pml ob1 --mca btl tcp,self
        --mca rtc_hwloc_vmhole none --hostfile "$root/hostfiles/t3000.txt" -np 8)

check_layout() {  # check_layout NAME EXTRA_MPIRUN_ARGS...
  local name=$1
  shift
  local out rc=0
  out=$(MESHNN_SHOW_BINDING=1 "${launch[@]}" "$@" "$build/apps/meshnn-demo" --mesh 2x4 2>&1) || rc=$?
  [ "$rc" = 0 ] || { echo "$name: mpirun exited with $rc"; echo "$out"; exit 1; }
  echo "$out" | grep -q 'PCC vs single-device result = .* (PASS)' || { echo "$name: the demo failed"; echo "$out"; exit 1; }
  local seen=0
  while read -r rank local_rank local_ranks; do
    if [ "$local_ranks" != 4 ] || [ "$local_rank" != $((rank % 4)) ]; then
      echo "$name: rank $rank is local rank $local_rank of $local_ranks on its host, expected $((rank % 4)) of 4"
      exit 1
    fi
    seen=$((seen + 1))
  done < <(echo "$out" | sed -n 's/^\[meshnn rank \([0-9]*\)\] host .* local rank \([0-9]*\)\/\([0-9]*\):.*/\1 \2 \3/p')
  [ "$seen" = 8 ] || { echo "$name: $seen of 8 ranks reported their binding"; echo "$out"; exit 1; }
  echo "$name: mesh rows 0 and 1 on hosts of 4 ranks each, as the hostfile says"
}

check_layout hostfile
# The rankfile's slots are cores of each host: this machine may have fewer than 4, so slot j
# becomes j mod (cores here); which host each rank goes to is the file's.
cores=$(nproc)
awk -v cores="$cores" '/^rank/ { split($3, a, "="); print $1, $2, "slot=" (a[2] % cores); next } { print }' \
  "$root/hostfiles/t3000.rankfile" > "$work/t3000.rankfile"
check_layout rankfile --rankfile "$work/t3000.rankfile"
mlp=$("${launch[@]}" "$build/apps/meshnn-mlp" --mesh 2x4 --mode 2d --check 2>&1) || true
echo "$mlp" | grep -q 'check vs single-device result: .*PASS' ||
  { echo "2-D Falcon MLP across the two hosts failed its check:"; echo "$mlp"; exit 1; }
echo "2-D Falcon MLP across two hosts: PASS"
