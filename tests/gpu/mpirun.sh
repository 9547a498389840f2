#!/bin/bash
# tests/gpu/mpirun.sh: the bundle's bin/mpirun (make gpu-bundle copies it
# there), first on PATH when tests/gpu/lib.sh's gpu_env has run, so the
# checks, `planc calibrate` and scripts/validate-calib.sh start programs the
# same way whatever the borrowed machine has:
#   - PLANC_GPU_MPI=system (the machine has Open MPI): the real mpirun,
#     PLANC_REAL_MPIRUN, with the same arguments;
#   - otherwise (the bundle's libmpi): one rank runs as an MPI singleton,
#     the program started directly (OMPI_MCA_ess_singleton_isolated=1: no
#     daemon); more ranks need Open MPI's launcher, so they are refused
#     with a message.
# Understands the options the checks pass: -np/-n N, --oversubscribe,
# --bind-to X, --map-by X, -x VAR, --mca KEY VALUE.
set -u
if [ "${PLANC_GPU_MPI:-}" = system ] && [ -n "${PLANC_REAL_MPIRUN:-}" ]; then
    exec "$PLANC_REAL_MPIRUN" "$@"
fi
np=1
while [ $# -gt 0 ]; do
    case $1 in
        -np|-n|--np|-c) np=${2:-}; shift 2 || break ;;
        --oversubscribe|--allow-run-as-root) shift ;;
        --bind-to|--map-by|--rank-by) shift 2 || break ;;
        -x) shift 2 || break ;;    # the environment is passed on as it is
        --mca|-mca) export "OMPI_MCA_$2=$3"; shift 3 || break ;;
        --) shift; break ;;
        -*) echo "mpirun (planc bundle): option '$1' is not understood without Open MPI's mpirun" >&2; exit 2 ;;
        *) break ;;
    esac
done
if [ $# = 0 ]; then
    echo "mpirun (planc bundle): no program given" >&2; exit 2
fi
if [ "$np" != 1 ]; then
    echo "mpirun (planc bundle): $np ranks need Open MPI's mpirun, which this machine lacks;" \
         "the bundle runs one rank as an MPI singleton" >&2
    exit 1
fi
export OMPI_MCA_ess_singleton_isolated=1
exec "$@"
