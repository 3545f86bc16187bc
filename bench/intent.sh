#!/bin/bash
# Part of the benchmarks (make bench-intent). Root; about 4 minutes with ROUNDS=2.
# Write-intent log cost: the same fio jobs through a 2-leg mirror with write_intent=on and off,
# alternated, in one run. Prints MB/s per job and the on/off ratio.
set -euo pipefail
B=${MIRRORFS:?set MIRRORFS to the binary}
R=${ROUNDS:-2}
run() { # $1 = on|off, $2 = job name, rest = fio args
  local mode=$1 name=$2; shift 2
  local D; D=$(mktemp -d /var/tmp/intent.XXXXXX); mkdir $D/a $D/b $D/m
  $B "$D/a:$D/b" $D/m -o write_intent=$mode,minfreespace=0
  local bw
  bw=$(cd $D && fio --name=$name --directory=$D/m --output-format=json "$@" | jq '[.jobs[].write.bw_bytes] | add / 1e6')
  umount $D/m; sleep 2; rm -rf $D
  echo "$bw"
}
printf "%-28s %10s %10s %8s\n" job "on MB/s" "off MB/s" "on/off"
for job in seqwrite randwrite manyfiles; do
  case $job in
    seqwrite)  args=(--rw=write --bs=1M --size=512m --numjobs=1 --end_fsync=1) ;;
    randwrite) args=(--rw=randwrite --bs=4k --size=128m --numjobs=4 --ioengine=psync --end_fsync=1) ;;
    manyfiles) args=(--rw=write --bs=64k --nrfiles=2000 --filesize=64k --size=125m --numjobs=1 --file_service_type=sequential --end_fsync=1 --create_on_open=1) ;;
  esac
  on=0; off=0
  for r in $(seq $R); do
    a=$(run on $job "${args[@]}"); b=$(run off $job "${args[@]}")
    on=$(awk -v x="$on" -v y="$a" 'BEGIN { print x + y }'); off=$(awk -v x="$off" -v y="$b" 'BEGIN { print x + y }')
  done
  awk -v j=$job -v on="$on" -v off="$off" -v r=$R 'BEGIN { printf "%-28s %10.1f %10.1f %8.2f\n", j, on / r, off / r, on / off }'
done
