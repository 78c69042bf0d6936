// Package policyhook lets the pool simulator (internal/harness/poolsim) run
// package tenure's real engine with another balance policy: the reference
// design's, which it compares Tenure's against. Users tune Tenure's policy
// through tenure.Pool's fields; there is no public way to replace it.
package policyhook

import "github.com/tenure-dev/tenure/internal/engine/balance"

// WithPolicy returns pool, a tenure.Pool, with its balance policy replaced
// by p. Package tenure sets it when it is initialised; it is nil in a
// program that does not link package tenure.
var WithPolicy func(pool any, p balance.Policy) any
