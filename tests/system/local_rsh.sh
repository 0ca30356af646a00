#!/bin/sh
# A stand-in for ssh as Open MPI's launch agent (--mca plm_rsh_agent), so that one machine can play
# several hosts of a hostfile: it drops ssh's options and the host name and runs the daemon's
# command here. Each "host" then gets a daemon of its own, and Open MPI places ranks, numbers
# local ranks and groups shared-memory communicators per host exactly as it would across machines.
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) shift; break ;;  # the host name
  esac
done
exec sh -c "$*"
