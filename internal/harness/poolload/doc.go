// Package poolload measures pools at scale on real stores: many worker
// processes, each a tenure.Supervisor with one Pool of the same keys, on
// PostgreSQL and Redis, with what the store does (rows read, statements
// or commands, its CPU) and what each worker costs (CPU, memory per held
// key) over a steady window, once with the pools following the push
// channel (the default Config.FullReadEvery) and once reading the whole
// table every round.
//
// Everything is in the package's tests; TestPoolLoadReport runs only when
// named:
//
//	go test ./internal/harness/poolload -run TestPoolLoadReport -v -count=1 -timeout 60m
//
// See report_test.go for the knobs (POOLLOAD_* environment variables).
package poolload
