#!/usr/bin/env bash
# The CPU's convolution engines end to end: DLSERVE_CPU_CONV picks im2col or
# oneDNN, or auto (the default) the faster one for the CPU (a wrong word
# stops dlserve with one clear line), the log and --bench name the engine
# in use, oneDNN reorders activations only where its blocked layout ends,
# and --threads N bounds the process's threads on either engine:
# one team computes (the pool's workers, or oneDNN's OpenMP team running
# dlserve's loops as well), OpenBLAS inside it.
. "$(dirname "$0")/../lib/lib.sh"

M=$(model_copy fashion-cnn)
engines=(im2col onednn)
DLSERVE_CPU_CONV=onednn "$DLSERVE" --train "$M" --limit 64 --epochs 1 --no-progress \
    > /dev/null 2> "$WORK/probe.err"
if grep -q "oneDNN is not built in" "$WORK/probe.err"; then
    echo "skip - oneDNN is not built in: im2col only"
    engines=(im2col)
fi

DLSERVE_CPU_CONV=fast "$DLSERVE" --train "$M" --limit 256 --epochs 1 --no-progress \
    > "$WORK/bad.out" 2> "$WORK/bad.err"; rc=$?
cat "$WORK/bad.err"
check "DLSERVE_CPU_CONV=fast is refused in one line" \
    fails_with "$WORK/bad.err" $rc "DLSERVE_CPU_CONV=fast: expected auto, im2col or onednn"

# Unset (or auto): oneDNN for a model with convolutions on a CPU with
# AVX-512, where it measured faster; im2col + OpenBLAS otherwise, and for a
# model without convolutions (oneDNN would bring it only its OpenMP team).
want=im2col
if [[ ${engines[*]} == *onednn* ]] && grep -qw avx512f /proc/cpuinfo; then want=onednn; fi
MLP=$(model_copy fashion-mlp)
for word in "" auto; do
    for m in "$M" "$MLP"; do
        env -u DLSERVE_CPU_CONV ${word:+DLSERVE_CPU_CONV=$word} "$DLSERVE" --bench "$m" \
            --threads 1 --steps 1 > "$WORK/auto.json" 2> "$WORK/auto.err"; rc=$?
        w=$want name=fashion-cnn
        if [[ $m == "$MLP" ]]; then w=im2col name=fashion-mlp; fi
        check "DLSERVE_CPU_CONV='$word', $name: --bench exits 0" test $rc -eq 0
        check "DLSERVE_CPU_CONV='$word' chooses $w for $name on this CPU" \
            test "$(json_get "$WORK/auto.json" conv)" = "$w"
    done
done

# OpenBLAS on a CPU it does not know would run its generic Prescott
# kernels: dlserve names the core the CPU's features match and starts
# again (--bench reports the core); a user's OPENBLAS_CORETYPE stands.
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    env -u OPENBLAS_CORETYPE "$DLSERVE" --bench "$MLP" --threads 1 --steps 1 \
        > "$WORK/blas.json" 2> "$WORK/blas.err"
    core=$(json_get "$WORK/blas.json" blas)
    echo "OpenBLAS core: $core"
    check "OpenBLAS runs a core of this CPU's vector width, not Prescott ($core)" \
        test -n "$core" -a "$core" != Prescott
else
    echo "skipped: no AVX2 and FMA, so no wider OpenBLAS core to name"
fi
OPENBLAS_CORETYPE=Nehalem "$DLSERVE" --bench "$MLP" --threads 1 --steps 1 \
    > "$WORK/blas-user.json" 2> "$WORK/blas-user.err"
check "a user's OPENBLAS_CORETYPE stands" test "$(json_get "$WORK/blas-user.json" blas)" = Nehalem

# peak_threads LOG CMD...: runs CMD, sampling /proc/PID/status every 50 ms;
# prints the largest thread count seen and returns CMD's exit status.
peak_threads() {
    local log=$1; shift
    "$@" > "$log.out" 2> "$log.err" &
    local pid=$! peak=0 n
    while kill -0 "$pid" 2> /dev/null; do
        n=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status" 2> /dev/null)
        if [[ -n $n && $n -gt $peak ]]; then peak=$n; fi
        sleep 0.05
    done
    wait "$pid"; local rc=$?
    echo "$peak"
    return $rc
}

for e in "${engines[@]}"; do
    for t in 1 3; do
        peak=$(DLSERVE_CPU_CONV=$e peak_threads "$WORK/$e-$t" "$DLSERVE" --train "$M" \
               --limit 2048 --epochs 1 --threads "$t" --no-progress); rc=$?
        check "$e, --threads $t: training exits 0" test $rc -eq 0
        check "$e, --threads $t: the log names the engine" \
            grep -q "$t threads\? per rank, convolution through $e" "$WORK/$e-$t.err"
        # main, the loader and t-1 workers: the pool's, or with oneDNN its
        # OpenMP team's (which then runs dlserve's loops too), plus one
        # OpenMP runtime thread.
        bound=$((t + 1))
        if [[ $e == onednn ]]; then bound=$((t + 2)); fi
        check "$e, --threads $t: at most $bound threads (peak $peak)" test "$peak" -le "$bound"
    done
    DLSERVE_CPU_CONV=$e "$DLSERVE" --bench "$M" --threads 1 --steps 3 > "$WORK/bench-$e.json" \
        2> "$WORK/bench-$e.err"; rc=$?
    check "$e: --bench exits 0" test $rc -eq 0
    check "$e: --bench reports \"conv\": \"$e\"" test "$(json_get "$WORK/bench-$e.json" conv)" = "$e"
done

# oneDNN keeps fashion-cnn's activations in its blocked layout from conv1
# to pool2: in training the only reorders of activations (the tensors whose
# first dimension is the batch, 50) are those at the run's edges, where
# there were eight a step around every layer: the flatten, one each way
# per step, and with oneDNN's AVX2 kernels the one-channel input too, once
# a step (conv1's weight gradient takes it blocked, nChw8c; the AVX-512
# kernels read it plain).
if [[ ${engines[*]} == *onednn* ]]; then
    DNNL_VERBOSE=1 DLSERVE_CPU_CONV=onednn "$DLSERVE" --train "$M" --limit 100 --batch-size 50 \
        --epochs 1 --threads 1 --no-progress > "$WORK/verbose.out" 2> "$WORK/verbose.err"; rc=$?
    check "DNNL_VERBOSE training run exits 0" test $rc -eq 0
    grep ',exec,cpu,reorder,' "$WORK/verbose.out" | awk -F, '{print $(NF-1)}' | grep '^50x' \
        > "$WORK/act-reorders"
    echo "activation reorders in 2 steps: $(sort "$WORK/act-reorders" | uniq -c | tr '\n' ' ')"
    check "2 steps reorder the flatten's activations 4 times" \
        test "$(grep -cx '50x64x4x4' "$WORK/act-reorders")" -eq 4
    check "2 steps reorder the input at most twice" \
        test "$(grep -cx '50x1x28x28' "$WORK/act-reorders")" -le 2
    check "only at the edges (50x64x4x4, 50x1x28x28)" \
        test "$(grep -cvx -e '50x64x4x4' -e '50x1x28x28' "$WORK/act-reorders")" -eq 0
fi
finish
