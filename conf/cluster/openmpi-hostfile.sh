#!/usr/bin/env bash
# openmpi-hostfile.sh: dlserve data-parallel training on 64 ranks over 8
# nodes with Open MPI's mpirun (no batch system; nodes reached over ssh).
#
#   conf/cluster/openmpi-hostfile.sh            writes ./hosts, runs mpirun
#   DRY_RUN=1 conf/cluster/openmpi-hostfile.sh  prints the hostfile and the
#                                               command instead
#
# What to adapt (environment variables, or edit the defaults below):
#   NODES        the 8 host names (as `ssh NAME` reaches them without a password)
#   SLOTS        ranks per node (8): 8 x 8 = 64 ranks
#   THREADS      dlserve --threads per rank: cores per node / SLOTS (here 4,
#                for 32-core nodes); every rank gets THREADS cores (PE=)
#   DLSERVE      the dlserve binary, at the same path on every node
#   MODEL_DIR    the model repository folder (model.json), on a file system
#                every node sees (NFS, Lustre, ...): every rank reads
#                model.json, rank 0 writes MODEL_DIR/<version>/ and
#                MODEL_DIR/checkpoints/
#   DATA         the data folder, readable on every node (shared or a local
#                copy at the same path); every rank loads it and takes its shard
#   NET          Open MPI transport: the default below is TCP over the
#                interface named in IFACE (shared memory within a node); on
#                InfiniBand / RoCE use "--mca pml ucx" instead
#   DIST         --dist mode and its options (see `dlserve --help`); for
#                ps-sync / ps-async the LAST --ps-servers ranks are servers,
#                i.e. with this mapping they land on the last node(s)
#   CHECKPOINT   default "--checkpoint-every 1000" (with avg:K a multiple
#                of K); set it empty (CHECKPOINT=) for ps-sync / ps-async,
#                which refuse checkpoints
# Run as an ordinary user: --allow-run-as-root is only for containers.
set -euo pipefail

NODES=${NODES:-"node01 node02 node03 node04 node05 node06 node07 node08"}
SLOTS=${SLOTS:-8}
THREADS=${THREADS:-4}
DLSERVE=${DLSERVE:-/opt/dlserve/bin/dlserve}
MODEL_DIR=${MODEL_DIR:-/shared/models/fashion-mlp}
DATA=${DATA:-/shared/datasets/fashion-mnist}
IFACE=${IFACE:-eth0}
NET=${NET:-"--mca btl self,vader,tcp --mca btl_tcp_if_include $IFACE --mca oob_tcp_if_include $IFACE"}
DIST=${DIST:-"--dist allreduce"}
CHECKPOINT=${CHECKPOINT---checkpoint-every 1000}
HOSTFILE=${HOSTFILE:-./hosts}

# The hostfile: one line per node, "slots" = ranks mpirun may place there.
#   node01 slots=8
#   node02 slots=8
#   ...
#   node08 slots=8
hostfile() {
    for n in $NODES; do
        echo "$n slots=$SLOTS"
    done
}

nodes=$(wc -w <<< "$NODES")
np=$((nodes * SLOTS))

# -np 64                    all ranks (8 nodes x 8 slots)
# --map-by ppr:8:node:PE=4  8 ranks per node, 4 cores (processing elements)
#                           each, so --threads 4 does not oversubscribe
# --bind-to core            pin each rank to its cores
# --report-bindings         print the pinning once, to check it
#                           (dlserve's --threads is all its parallelism: it
#                           keeps OpenBLAS at 1 thread and uses its own pool)
# dlserve options: the batch size is per rank (global batch = 64 x 64 =
# 4096 here: consider a larger --lr or a warm-up in model.json);
# --stall-timeout: a rank that waits longer names the missing ranks and
# ends the job; --checkpoint-every (CHECKPOINT): rank 0 writes
# MODEL_DIR/checkpoints, restart the same command with --resume after a
# failure.
cmd=(mpirun -np "$np" --hostfile "$HOSTFILE"
     --map-by "ppr:$SLOTS:node:PE=$THREADS" --bind-to core --report-bindings
     $NET
     "$DLSERVE" --train "$MODEL_DIR" --data "$DATA"
     $DIST --threads "$THREADS" --batch-size 64 --epochs 15
     --stall-timeout 300 $CHECKPOINT --no-progress)

if [[ ${DRY_RUN:-0} == 1 ]]; then
    echo "# $HOSTFILE"
    hostfile
    echo "# command"
    printf '%q ' "${cmd[@]}"
    echo
    exit 0
fi
hostfile > "$HOSTFILE"
# stdout: the one-line JSON summary of the job (rank 0); stderr: progress.
exec "${cmd[@]}"
