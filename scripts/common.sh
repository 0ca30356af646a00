# Sourced by the other scripts: paths, and the two things mpirun needs on small or CI machines.
MESHNN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MESHNN_BUILD="${MESHNN_BUILD:-$MESHNN_ROOT/build}"

# OpenMPI refuses to run as root unless told; CI machines and containers run as root.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# More ranks than cores is fine for correctness runs; OpenMPI needs to be told.
export OMPI_MCA_rmaps_base_oversubscribe=1

meshnn_cores() { nproc 2>/dev/null || echo 1; }
