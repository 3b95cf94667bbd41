# Pieces the benchmarks share (sourced, not run): wall time of a command, a daemon's CPU in
# all and by thread, its peak RSS, the time until a vikingfs daemon has settled, medians.
# Used by bench-rm.sh and bench-workloads.sh.
# shellcheck shell=bash

# secs CMD... -> wall seconds of CMD (its output discarded), to the millisecond
secs() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l | xargs printf '%.3f'
}

# median < numbers (one a line or space-separated) -> the median (the lower of the two
# middle ones for an even count)
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# pid_cpu_ms PID -> CPU time (user + system) process PID has used, in ms (all its threads,
# live and exited)
pid_cpu_ms() {
    awk -v hz="$(getconf CLK_TCK)" '{print int(($14 + $15) * 1000 / hz)}' "/proc/$1/stat"
}

# pid_threads_ms PID -> "name ms" per thread of PID, numbered threads of one kind (fuser-0,
# fuser-1) summed under the kind: what each part of a daemon spent
pid_threads_ms() {
    local t
    for t in /proc/"$1"/task/*; do
        echo "$(sed 's/-[0-9]*$//' "$t/comm" 2>/dev/null) $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null)"
    done | awk -v hz="$(getconf CLK_TCK)" 'NF == 2 {ms[$1] += $2 * 1000 / hz} END {for (n in ms) print n, int(ms[n])}'
}

# threads_delta BEFORE AFTER -> "name N ms" for each thread kind that spent >= 30 ms between
# two pid_threads_ms readings, on one line
threads_delta() {
    join -a 2 -e 0 -o 0,1.2,2.2 <(echo "$1" | sort) <(echo "$2" | sort) |
        awk '$3 - $2 >= 30 {printf "%s %d ms  ", $1, $3 - $2} END {print ""}'
}

# peak_reset PID: start PID's peak RSS (VmHWM) over from its RSS now (clear_refs 5)
peak_reset() { echo 5 >"/proc/$1/clear_refs"; }
# peak_kib PID -> PID's peak RSS in KiB since it started or since peak_reset
peak_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }

# vk_settle BIN HOME WORKSPACE [TIMEOUT] -> seconds until the vikingfs daemon serving WORKSPACE
# has drained its queues (records, intents and summaries current: `vikingfs wait`); fails
# when TIMEOUT (1200 s) passes first
vk_settle() {
    local bin=$1 home=$2 ws=$3 limit=${4:-1200}
    secs env HOME="$home" timeout $((limit + 30)) "$bin" --workspace "$ws" wait --timeout "$limit"
}
