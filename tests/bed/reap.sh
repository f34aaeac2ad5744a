#!/usr/bin/env bash
# The test bed's reaper: waits until the test process PID has exited (passed, failed,
# panicked or was killed), then kills every process whose command line mentions RUN_DIR
# (etcd, kube-apiserver and each squid are started with paths inside it) and removes RUN_DIR.
# One mechanism for every way a test run can end, so nothing is ever left running.
set -u
pid=$1 run_dir=$2
while kill -0 "$pid" 2>/dev/null; do sleep 0.3; done
for _ in 1 2 3; do
  pkill -KILL -f -- "$run_dir/" 2>/dev/null || break
  sleep 0.2
done
rm -rf -- "$run_dir"
