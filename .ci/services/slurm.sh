#!/usr/bin/env bash
# Debian's Slurm and munge for the Slurm runtime's tests (tests/slurm_lab.py starts a throw-away
# cluster per test session with scripts/slurm-lab.sh; under CI=true a test fails when it cannot).
# Installs once (idempotent, quiet), then checks that a lab starts and stops, and prints the
# version. Nothing in /etc is used: the lab writes its own slurm.conf and munge key.
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
for binary in slurmctld slurmd sbatch munged mungekey; do
    command -v "$binary" >/dev/null || need=(slurmctld slurmd slurm-client munge)
done
if [ ${#need[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
lab=$(mktemp -d /tmp/lowcostgpu-ci-slurm-XXXXXX)
chmod 755 "$lab"
trap 'scripts/slurm-lab.sh stop "$lab" >/dev/null 2>&1 || true; rm -rf "$lab"' EXIT
started=
for base in 29917 31917 33917; do  # a port base of its own; the next if one is taken
    if scripts/slurm-lab.sh start "$lab" 1 1 "$base" >/dev/null 2>"$lab/start.err"; then
        started=$base; break
    fi
done
[ -n "$started" ] || { cat "$lab/start.err" >&2; echo "slurm: a lab did not start" >&2; exit 1; }
export SLURM_CONF=$lab/slurm.conf
scontrol ping | grep -q 'is UP'
sinfo --version
scripts/slurm-lab.sh stop "$lab"
