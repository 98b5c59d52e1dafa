#!/bin/bash
# Starts the dev cluster and stays in the foreground; on SIGTERM cancels every job (a
# slurmstepd outlives slurmd) and stops the daemons.
set -euo pipefail
STATE=/var/lib/ignara-slurm      # keys and slurmctld's saved state (volume slurm-state)
TOKEN_DIR=/run/ignara-slurm      # the gateway's JWT (volume slurm-token, read-only there)
OUTPUT=/var/spool/ignara-slurm   # the jobs' output (volume slurm-output)
GPUS=/opt/fakegpus
HOST=$(hostname -s)
mkdir -p "$STATE/state" "$STATE/spool" "$TOKEN_DIR" "$OUTPUT" "$GPUS" /run/munge /var/log/slurm
chmod 755 "$OUTPUT"

[ -s "$STATE/munge.key" ] || head -c 1024 /dev/urandom > "$STATE/munge.key"
[ -s "$STATE/jwt_hs256.key" ] || head -c 32 /dev/urandom > "$STATE/jwt_hs256.key"
install -o munge -g munge -m 400 "$STATE/munge.key" /etc/munge/munge.key
chmod 600 "$STATE/jwt_hs256.key"
chown munge:munge /run/munge
for i in 0 1 2 3 4 5 6 7; do
  # The major/minor of /dev/null: a character device slurmd accepts as a GPU.
  [ -e "$GPUS/fakegpu$i" ] || mknod -m 666 "$GPUS/fakegpu$i" c 1 3
done

NODE=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //; s/ UpTime=.*//')
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=ignara
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$STATE/jwt_hs256.key
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
GresTypes=gpu
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.txt
MinJobAge=3600
KillWait=5
MailProg=/bin/true
ReturnToService=2
SchedulerParameters=sched_interval=2
NodeName=$HOST NodeAddr=127.0.0.1 $NODE Gres=gpu:8 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat > /etc/slurm/gres.conf <<CONF
AutoDetect=off
NodeName=$HOST Name=gpu File=$GPUS/fakegpu[0-7]
CONF

runuser -u munge -- munged
slurmctld
slurmd
for _ in $(seq 120); do
  case "$(sinfo -h -N -o %T 2>/dev/null)" in idle|mixed|allocated) break ;; esac
  sleep 0.5
done

stop() {
  scancel --user=root 2>/dev/null || true
  for _ in $(seq 20); do
    squeue -h -o %T 2>/dev/null | grep -qE 'RUNNING|PENDING|COMPLETING' || break
    sleep 0.5
  done
  kill "$REST" 2>/dev/null || true
  for pid in /run/slurmd.pid /run/slurmctld.pid; do
    [ -s "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
  done
  exit 0
}
trap stop TERM INT

# slurmrestd refuses to run as root: it binds, then drops to the slurm user. In a container
# it may not unshare its System V IPC namespace or file table (docker's seccomp profile
# allows unshare only with CAP_SYS_ADMIN); nothing else runs here to be kept from.
SLURMRESTD_SECURITY=disable_unshare_sysv,disable_unshare_files SLURM_JWT=daemon \
  slurmrestd -u slurm -a rest_auth/jwt -s openapi/v0.0.38 0.0.0.0:6820 &
REST=$!
token=$(scontrol token username=root lifespan=2592000)
umask 077
printf '%s' "${token#SLURM_JWT=}" > "$TOKEN_DIR/token.new"
# The gateway runs as uid 10001 (the gateway image's user) and reads it from its volume.
chown 10001 "$TOKEN_DIR/token.new"
mv "$TOKEN_DIR/token.new" "$TOKEN_DIR/token"
echo "slurm-dev: up ($(sinfo -h -o '%D nodes, %G'))"
wait "$REST"
