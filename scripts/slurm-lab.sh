#!/usr/bin/env bash
# A throw-away Slurm cluster on loopback, for tests, `lowcostgpu demo --runtime slurm` and trying
# the Slurm runtime without a site cluster (docs/slurm.md). Adapted from ../shared/recipes/slurm.
#
#   scripts/slurm-lab.sh start DIR [NODES [GPUS [PORT_BASE]]]   # ~0.5 s; prints SLURM_CONF=...
#   scripts/slurm-lab.sh stop DIR                               # cancels jobs, stops daemons
#
# DIR holds everything (slurm.conf, gres.conf, munge key and socket, state, logs, the shared
# directory `shared/`): nothing in /etc is read or written, and two labs in two directories with
# two port bases do not meet. NODES slurmd processes (`node1`..), GPUS fake GPUs each (symlinks to
# /dev/null, which slurmd accepts as GPU devices), PORT_BASE for slurmctld, slurmd PORT_BASE+1..
# Must run as root (slurmd setuids to the job's user). Needs Debian's packages:
#   apt-get install --no-install-recommends slurmctld slurmd slurm-client munge
#
# The cluster is the one a site would give lowcostgpu (docs/slurm.md): a partition `lowcostgpu`
# of every node with Slurm's own preemption off (lowcostgpu decides victims and timing), GPUs as
# gres, the default `cred_expire` and `MinJobAge` (the runtime must not depend on them).
set -euo pipefail

cmd=${1:-}; LAB=${2:-}
[ -n "$cmd" ] && [ -n "$LAB" ] || { echo "usage: $0 start|stop DIR [NODES [GPUS [PORT_BASE]]]" >&2; exit 2; }
LAB=$(mkdir -p "$LAB" && cd "$LAB" && pwd)
VAR=$LAB/var
export SLURM_CONF=$LAB/slurm.conf

pid_of() {  # $1 pid file, $2 binary: the pid only while it still runs that binary
    local p; p=$(cat "$1" 2>/dev/null) || return 0
    case "$(readlink "/proc/$p/exe" 2>/dev/null)" in */"$2"|*/"$2"-wlm) echo "$p";; esac
}
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

stop() {
    local ctld p pf
    ctld=$(pid_of "$VAR/run/slurmctld.pid" slurmctld)
    if alive "$ctld"; then
        jobs=$(squeue -h -o %A 2>/dev/null | sort -u)
        [ -n "$jobs" ] && scancel --signal=KILL --full $jobs 2>/dev/null || true
        [ -n "$jobs" ] && scancel $jobs 2>/dev/null || true
        for _ in $(seq 1 100); do
            [ -z "$(squeue -h -t R,CG,CF,S -o %A 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
    local pids=()
    for pf in "$VAR"/run/slurmd-*.pid; do p=$(pid_of "$pf" slurmd); alive "$p" && pids+=("$p"); done
    if alive "$ctld"; then
        pids+=("$ctld")
        for d in /proc/[0-9]*; do  # slurmctld's helper, slurmscriptd
            [ "$(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null)" = "$ctld" ] && pids+=("${d#/proc/}")
        done
    fi
    [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
    for _ in $(seq 1 100); do
        left=0; for p in "${pids[@]}"; do alive "$p" && left=1; done
        [ $left = 0 ] && break; sleep 0.1
    done
    for p in "${pids[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
    # slurmstepd outlives slurmd: kill this lab's (they hold our slurmd log open) and their children
    for d in /proc/[0-9]*; do
        case "$(readlink "$d/exe" 2>/dev/null)" in */slurmstepd*) ;; *) continue;; esac
        if ls -l "$d/fd/" 2>/dev/null | grep -q -- "-> $VAR/log/slurmd-"; then
            pkill -KILL -s "$(ps -o sid= -p "${d#/proc/}" | tr -d ' ')" 2>/dev/null || true
            kill -KILL "${d#/proc/}" 2>/dev/null || true
        fi
    done
    p=$(pid_of "$VAR/munge/munged.pid" munged); alive "$p" && kill -TERM "$p"
    for _ in $(seq 1 50); do alive "$p" || break; sleep 0.1; done
    return 0
}

start() {
    local nodes=${1:-3} gpus=${2:-4} base=${3:-26817} n
    [ "$(id -u)" = 0 ] || { echo "slurm-lab: must run as root (slurmd setuids to job owners)" >&2; exit 1; }
    for b in munged mungekey slurmctld slurmd scontrol sinfo sbatch; do
        command -v "$b" >/dev/null || { echo "slurm-lab: missing $b; apt-get install --no-install-recommends slurmctld slurmd slurm-client munge" >&2; exit 1; }
    done
    [ -f "$VAR/run/slurmctld.pid" ] && alive "$(pid_of "$VAR/run/slurmctld.pid" slurmctld)" && {
        echo "slurm-lab: already running in $LAB; stop it first" >&2; exit 1; }
    rm -rf "$VAR"; mkdir -p "$VAR"/{state,spool,log,run,munge} "$LAB/fakedev" "$LAB/shared"
    chmod 755 "$LAB" "$VAR" "$VAR/munge"; chmod 1777 "$LAB/shared"
    for i in $(seq 0 $((gpus - 1))); do ln -sfn /dev/null "$LAB/fakedev/nvidia$i"; done
    cat > "$LAB/slurm.conf" <<EOF
# written by scripts/slurm-lab.sh: a throw-away cluster, see that script and docs/slurm.md
ClusterName=lcglab
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$base
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$VAR/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$VAR/state
SlurmdSpoolDir=$VAR/spool/%n
SlurmctldPidFile=$VAR/run/slurmctld.pid
SlurmdPidFile=$VAR/run/slurmd-%n.pid
SlurmctldLogFile=$VAR/log/slurmctld.log
SlurmdLogFile=$VAR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
JobRequeue=0
JobFileAppend=1
KillWait=5
InactiveLimit=0
MessageTimeout=10
# Slurm's own preemption is off: lowcostgpu chooses victims and times the drain.
PreemptType=preempt/none
EOF
    for n in $(seq 1 "$nodes"); do
        echo "NodeName=node$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + n)) CPUs=$gpus RealMemory=4000 Gres=gpu:$gpus State=UNKNOWN" >> "$LAB/slurm.conf"
        mkdir -p "$VAR/spool/node$n"
    done
    echo "PartitionName=lowcostgpu Nodes=ALL Default=YES PreemptMode=OFF MaxTime=INFINITE State=UP" >> "$LAB/slurm.conf"
    printf 'AutoDetect=off\nNodeName=node[1-%d] Name=gpu File=%s/fakedev/nvidia[0-%d]\n' \
        "$nodes" "$LAB" $((gpus - 1)) > "$LAB/gres.conf"
    echo "CgroupPlugin=cgroup/v1" > "$LAB/cgroup.conf"   # v1's init touches nothing: no systemd

    mungekey --create --keyfile="$VAR/munge/munge.key" --bits=1024 --force
    chmod 600 "$VAR/munge/munge.key"
    munged --socket="$VAR/munge/munge.socket" --key-file="$VAR/munge/munge.key" \
        --pid-file="$VAR/munge/munged.pid" --log-file="$VAR/munge/munged.log" \
        --seed-file="$VAR/munge/munged.seed"
    slurmctld -i || { stop; echo "slurm-lab: slurmctld failed; see $VAR/log/slurmctld.log" >&2; exit 1; }
    for _ in $(seq 1 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
    for n in $(seq 1 "$nodes"); do slurmd -N "node$n"; done
    for _ in $(seq 1 300); do
        [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$' || true)" -ge "$nodes" ] && break
        sleep 0.2
    done
    [ "$(sinfo -h -N -o '%T' | grep -c '^idle$' || true)" -ge "$nodes" ] || {
        sinfo -N >&2; tail -n 20 "$VAR"/log/*.log >&2; stop; exit 1; }
    echo "SLURM_CONF=$SLURM_CONF"
}

case "$cmd" in
    start) shift 2; start "$@";;
    stop) stop;;
    *) echo "usage: $0 start|stop DIR [NODES [GPUS [PORT_BASE]]]" >&2; exit 2;;
esac
