#!/bin/sh
# shbench: N "tokens" of busy work, each a row of bmoe's per-token CSV, then bmoe's summary.
#   --tokens N   how many (default 4)
#   --csv FILE   the per-token CSV
#   --work K     loop iterations per token (default 2000)
n=4 csv=/dev/null work=2000
while [ $# -gt 0 ]; do
  case $1 in
    --tokens) n=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) shift ;;
  esac
done
echo "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms" > "$csv"
i=1
while [ "$i" -le "$n" ]; do
  j=0
  while [ "$j" -lt "$work" ]; do j=$((j + 1)); done
  echo "$i,$n,20.000,0.000,20.000,0,-1.00,0.000,0.000" >> "$csv"
  i=$((i + 1))
done
echo "# summary tokens=$n s/tok=0.020 tok/s=50.000 read_MiB=0.0 io_s=0.0 compute_s/tok=0.020 io_s/tok=0.000 cache_hit_pct=-1.0" >> "$csv"
echo "shbench done"
echo "generation: $n tokens, 0.020 s/token (50.000 tok/s)"
