// Package poolkey is the layout of a pool in the lease table: where its
// keys and its members' leases live, and how to read them back. The engine,
// the pool simulator and `tenure status` all go through it, so the layout
// is written down once.
//
// Under a supervisor's namespace prefix P (Config.Prefix, often empty):
//
//	P~pool/NAME/KEY          key KEY of pool NAME
//	P~workers/NAME/OWNER@W          the membership of OWNER, weight W, in pool NAME
//	P~workers/NAME/OWNER@W,max=M    the same, for a worker that holds at most M keys
//
// Each pool's keys live in the pool's own namespace, so two pools — or a
// pool and a singleton — that use the same key name never share a lease.
// P holds no '~' and singleton keys hold neither segment, so the first '~'
// of a lease key is where a pool's part begins.
package poolkey

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The reserved segments.
const (
	KeysSegment    = "~pool/"
	WorkersSegment = "~workers/"
)

// Key is the lease key of key k of pool in namespace prefix.
func Key(prefix, pool, k string) string { return KeysPrefix(prefix, pool) + k }

// KeysPrefix is what every lease key of pool's keys starts with.
func KeysPrefix(prefix, pool string) string { return prefix + KeysSegment + pool + "/" }

// MembersPrefix is what every membership lease key of pool starts with.
func MembersPrefix(prefix, pool string) string { return prefix + WorkersSegment + pool + "/" }

// ParseKey splits a pool key's lease key into its namespace, pool and key.
func ParseKey(leaseKey string) (prefix, pool, k string, ok bool) {
	prefix, rest, ok := split(leaseKey, KeysSegment)
	if !ok {
		return "", "", "", false
	}
	pool, k, ok = strings.Cut(rest, "/")
	if !ok || pool == "" || k == "" {
		return "", "", "", false
	}
	return prefix, pool, k, true
}

// Member is one worker's membership in a pool.
type Member struct {
	Prefix, Pool string
	Owner        string
	Weight       float64
	// MaxKeys is the most keys the worker holds (Pool.MaxKeys), 0 for no
	// limit. It is in the key so that every worker computes the same
	// shares: a peer that assumed its own limit for the others saw a
	// worker capped below that worker's band as low for good, and kept
	// handing it keys it shed again.
	MaxKeys int
}

// maxTag introduces a membership's key limit, after its weight.
const maxTag = ",max="

// Key is the membership's lease key. A worker without a key limit has
// the form older versions wrote and read, so a rollout mixes versions
// unharmed unless it also sets a limit.
func (m Member) Key() string {
	k := MembersPrefix(m.Prefix, m.Pool) + m.Owner + "@" + strconv.FormatFloat(m.Weight, 'g', -1, 64)
	if m.MaxKeys > 0 {
		k += maxTag + strconv.Itoa(m.MaxKeys)
	}
	return k
}

// ErrNotMember: a lease key is not a membership key.
var ErrNotMember = errors.New("poolkey: not a membership key")

// ParseMember reads a membership lease key. It fails for a key that is not
// one, and for one whose weight is not a finite positive number or whose
// key limit is not a positive whole number: a peer that sent such a value
// must be ignored, not let into the arithmetic every other worker does
// with it.
func ParseMember(leaseKey string) (Member, error) {
	prefix, rest, ok := split(leaseKey, WorkersSegment)
	if !ok {
		return Member{}, ErrNotMember
	}
	pool, member, ok := strings.Cut(rest, "/")
	at := strings.LastIndexByte(member, '@')
	if !ok || pool == "" || at <= 0 {
		return Member{}, fmt.Errorf("membership key %q: want %sPOOL/OWNER@WEIGHT: %w", leaseKey, WorkersSegment, ErrNotMember)
	}
	weight, limit, limited := strings.Cut(member[at+1:], maxTag)
	w, err := strconv.ParseFloat(weight, 64)
	if err != nil || !ValidWeight(w) {
		return Member{}, fmt.Errorf("membership key %q: weight %q is not a finite positive number", leaseKey, weight)
	}
	m := Member{Prefix: prefix, Pool: pool, Owner: member[:at], Weight: w}
	if limited {
		// Digits only: Atoi would also take a sign.
		n, err := strconv.Atoi(limit)
		if err != nil || n <= 0 || strings.TrimLeft(limit, "0123456789") != "" {
			return Member{}, fmt.Errorf("membership key %q: key limit %q is not a positive whole number", leaseKey, limit)
		}
		m.MaxKeys = n
	}
	return m, nil
}

// ValidWeight reports whether w is a finite positive number.
func ValidWeight(w float64) bool { return w > 0 && !math.IsInf(w, 0) && !math.IsNaN(w) }

// Reserved reports whether key holds a segment reserved for pools, so it
// cannot be a singleton's key.
func Reserved(key string) bool {
	return strings.Contains(key, KeysSegment) || strings.Contains(key, WorkersSegment)
}

// split cuts leaseKey at its first '~' and checks that the segment seg
// starts there.
func split(leaseKey, seg string) (prefix, rest string, ok bool) {
	i := strings.IndexByte(leaseKey, '~')
	if i < 0 {
		return "", "", false
	}
	rest, ok = strings.CutPrefix(leaseKey[i:], seg)
	return leaseKey[:i], rest, ok
}
