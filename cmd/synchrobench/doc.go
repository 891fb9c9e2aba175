// Command synchrobench measures capture on this machine and prints one table:
// fenced write rate (pgbench, 2 clients), raw pgoutput decode rate of the same
// WAL (bare pglogrepl reader), sustained materialization throughput for 1-row
// and 10-row transactions, and commit-to-materialized latency at a fixed offered
// load. It needs a superuser URL of a scratch cluster (scripts/bench.sh starts one).
package main
