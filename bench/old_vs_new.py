#!/usr/bin/env python3
"""The compose entry points side by side, at the same shape and thread count:

  old_c    tokpos_compose_forward / tokpos_compose_backward (raw pointers)
  op_c     tokpos_op_compose_forward / tokpos_op_compose_backward (DLTensors)
  op_plan  tokpos::ops::compose_forward / compose_backward with one reused
           RowPlan and Context

Runs tokpos_bench on those benchmarks only (bench/bench_kernels.cc names them
BM_<what>/<entry point>/<arguments>) and the parallel copy, five repetitions
each, and prints the median wall time of each entry point and its ratio to
old_c, with the CPU model and the copy line. It prints; it does not judge: timings on a shared machine move by tens
of percent from run to run, so no ratio fails anything. The exit status is
non-zero only when tokpos_bench itself fails or a benchmark reports an error.

    python3 bench/old_vs_new.py [--bench build/bin/tokpos_bench] [--min-time 0.2] [--json out.json]

Standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys

from machine import cpu_model  # bench/machine.py

HERE = os.path.dirname(os.path.abspath(__file__))
APIS = ["old_c", "op_c", "op_plan"]
# The old/new pairs, and the parallel copy (the bandwidth line, printed after
# the table: when the 2-thread copy is no faster than the 1-thread one, the
# second core was busy with something else during the run).
FILTER = r"^BM_(Forward|Backward|BackwardHotRow|Decode)/(old_c|op_c|op_plan)/|^BM_ParallelCopy/"
NAME = re.compile(r"^(BM_\w+)/(old_c|op_c|op_plan)/(.*?)(/real_time)?$")
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}



def fmt_time(ms):
    if ms is None:
        return "-"
    if ms < 0.1:
        return f"{ms * 1e3:.2f} us"
    return f"{ms:.3f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bin", "tokpos_bench"))
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds per repetition (--benchmark_min_time)")
    ap.add_argument("--filter", default=FILTER, help="benchmark regex (default: every old/new pair)")
    ap.add_argument("--json", help="also write tokpos_bench's JSON report here")
    args = ap.parse_args()

    cmd = [os.path.abspath(args.bench), f"--benchmark_filter={args.filter}",
           f"--benchmark_repetitions={args.repetitions}", "--benchmark_report_aggregates_only=true",
           "--benchmark_format=json", f"--benchmark_min_time={args.min_time}"]
    print("old vs new: " + " ".join(cmd[:1] + [f"'{c}'" if "|" in c else c for c in cmd[1:]]), file=sys.stderr)
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        raise SystemExit(f"old vs new: tokpos_bench exited with status {run.returncode}")
    report = json.loads(run.stdout)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)

    # (benchmark, arguments) -> {entry point: median ms}, in the order tokpos_bench ran them.
    rows, copies, errors = {}, {}, []
    for b in report["benchmarks"]:
        if b.get("error_occurred"):
            errors.append(f"{b['name']}: {b.get('error_message', '')}")
            continue
        if b.get("run_type") != "aggregate" or b.get("aggregate_name") != "median":
            continue
        ms = b["real_time"] * TO_MS[b.get("time_unit", "ns")]
        if b["run_name"].startswith("BM_ParallelCopy/"):
            copies[b["run_name"].split("/", 1)[1].replace("/real_time", "")] = ms
            continue
        m = NAME.match(b["run_name"])
        if not m:
            continue
        what, api, arguments = m.group(1), m.group(2), m.group(3)
        rows.setdefault((what, arguments), {})[api] = ms

    ctx = report.get("context", {})
    print(f"CPU: {cpu_model()} ({ctx.get('num_cpus', os.cpu_count())} logical CPUs); "
          f"load average at start {', '.join(f'{x:.2f}' for x in ctx.get('load_avg', []))}")
    print(f"median wall time of {args.repetitions} repetitions (--benchmark_min_time={args.min_time}); "
          "ratio = entry point / old_c (below 1: faster than old_c)")
    header = (f"{'benchmark':<18} {'arguments':<26} {'old_c':>11} {'op_c':>11} {'op_c/old':>8} "
              f"{'op_plan':>11} {'plan/old':>8}")
    print(header)
    print("-" * len(header))
    for (what, arguments), t in rows.items():
        old = t.get("old_c")

        def ratio(api):
            return f"{t[api] / old:.2f}" if old and t.get(api) else "-"

        print(f"{what:<18} {arguments:<26} {fmt_time(old):>11} {fmt_time(t.get('op_c')):>11} {ratio('op_c'):>8} "
              f"{fmt_time(t.get('op_plan')):>11} {ratio('op_plan'):>8}")
    if not rows:
        print("(no benchmark matched the filter)")
    if copies:
        print("parallel copy of the forward's output bytes (the bandwidth line), median: " +
              "; ".join(f"{k} {fmt_time(v)}" for k, v in copies.items()))
    for e in errors:
        print(f"error: {e}")
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
