#!/bin/sh
# A stand-in for ssh as Open MPI's launch agent (--mca plm_rsh_agent), so that one machine can play
# several hosts of a hostfile: it drops ssh's options and the host name and runs the daemon's
# command here. Each "host" then gets a daemon of its own, and Open MPI places ranks, numbers
# local ranks and groups shared-memory communicators per host exactly as it would across machines.
# Each stand-in host keeps its session directory apart (under $MESHNN_LOCAL_RSH_TMP, else /tmp), as
# separate machines would: daemons of one machine creating the same job-family directory at once
# now and then fail with "File exists".
host=localhost
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) host=$1; shift; break ;;
  esac
done
base="${MESHNN_LOCAL_RSH_TMP:-/tmp}/meshnn-host-$host"
mkdir -p "$base"
exec env OMPI_MCA_orte_tmpdir_base="$base" sh -c "$*"
