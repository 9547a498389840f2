#!/bin/bash
# p2p_deadlock.sh: the regression test of NCCL's point-to-point rules on
# the CPU (tests/test_p2p_deadlock.c says what each pattern does). Under
# PLANRT_P2P=rendezvous with a 3 s deadline, the old pipeline orders must be
# reported, not hung — every rank returns PRT_ERR_TIMEOUT naming NCCL's
# rules and prints its pending operations (its started send and the receive
# queued behind it) — well within the harness's own `timeout`; the grouped
# orders must complete.
#
#   usage: p2p_deadlock.sh EXE   (MPIRUN from the environment)
set -u
# (no ^ in the patterns: mpirun forwards the two ranks' stderr through one
# pipe, and a line of one may start in the middle of the other's)
exe=$1
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
fails=0

# Run pattern $1 on 2 ranks; $2 = deadlock|complete is what must happen.
check() {
    local mode=$1 want=$2 out rc=0 t0=$SECONDS bad=
    out=$(PLANRT_P2P=rendezvous PLANRT_TIMEOUT_S=3 timeout 60 \
          $mpirun -x PLANRT_P2P -x PLANRT_TIMEOUT_S -np 2 "$exe" "$mode" 2>&1) || rc=$?
    local took=$((SECONDS - t0))
    [ "$rc" = 0 ] || bad="exit $rc"
    for r in 0 1; do
        grep -q "rank $r: $mode as expected" <<<"$out" || bad="$bad; rank $r did not say 'as expected'"
        if [ "$want" = deadlock ]; then
            grep -q "planrt: rank $r: deadlock under NCCL's rules" <<<"$out" ||
                bad="$bad; rank $r printed no deadlock report"
            grep -q "planrt: rank $r:   entry [0-9]* started prt_send on pp, peer" <<<"$out" ||
                bad="$bad; rank $r's report lacks its started send"
            grep -q "planrt: rank $r:   entry [0-9]* queued  prt_recv on pp, peer" <<<"$out" ||
                bad="$bad; rank $r's report lacks the receive queued behind it"
        elif grep -q "deadlock" <<<"$out"; then
            bad="$bad; a deadlock was reported"
        fi
    done
    if [ -n "$bad" ]; then
        echo "FAIL p2p $mode (want $want, ${took} s): ${bad#; }"; echo "$out" | head -30
        fails=$((fails + 1))
    else
        local what="completes"
        [ "$want" = deadlock ] && what="deadlock reported on both ranks, not hung"
        echo "ok   p2p $mode: $what (${took} s)"
    fi
}

check ungrouped deadlock
check grouped   complete
check pipe-old  deadlock
check pipe      complete
[ "$fails" = 0 ]
