package etcd

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Each lease key K owns three etcd keys under the store's root
// "/<prefix>/leases/". Keys never hold control characters, so the NUL
// separator cannot occur inside K, and it sorts before every byte a key
// may continue with: etcd's byte order of these names is the byte order
// of the lease keys.
//
//	root K "\x00g"  grace key of a term moved off its session without ending,
//	                or written before sessions; value: epoch (0 when unknown)
//	root K "\x00l"  live key, on the owner's session (or, written before
//	                sessions, a lease of ttl seconds); value: "epoch\towner"
//	root K "\x00m"  prune mark, no lease: "record revision\ttimer\ttimer TTL"
//	                (see prune.go)
//	root K "\x00r"  record, no lease, deleted only by Prune:
//	                "epoch\towner\tstate\trunning\tgrace seconds"
//
// A term acquired by one transaction, without reading the key first
// (acquireUnread), writes 0 in its epoch's place in both its record and
// its live key: its epoch is the revision of that transaction, which
// created both keys, so it is each key's create revision. etcd keeps a
// key's create revision until the key is deleted, so re-putting either
// key keeps the epoch, and any write that changes the term (a new term, a
// release, a revocation) writes the epoch out. Epochs are revisions (this
// form) or revisions + 1 or more (written out), never 0, so the two forms
// cannot be confused; a Tenure that predates this form reads such a term
// as epoch 0, which makes it neither acquire unsafely nor fence with a
// wrong epoch (it only shows 0).
const (
	kindGrace  = 'g'
	kindLive   = 'l'
	kindMark   = 'm'
	kindRecord = 'r'
)

// Record states. A revoked record has the empty owner.
const (
	stateHeld     = "held"
	stateReleased = "released"
	stateRevoked  = "revoked"
)

// maxNestedOps bounds what the nested per-key transactions below the top
// level hold. etcd gives each level what --max-txn-ops leaves after the
// levels above it, each counted as the most of its compares, its then
// and its else. Every per-key level holds at most 3 (three compares, or
// three puts, or a put and two deletes), and only a release nests two
// such levels (one per form of the term, since etcd compares have no
// "or"). A fourth compare anywhere must raise this.
const maxNestedOps = 6

func (s *Store) keyPrefix(key string) string { return s.root + key + "\x00" }
func (s *Store) recordKey(key string) string { return s.root + key + "\x00r" }
func (s *Store) liveKey(key string) string   { return s.root + key + "\x00l" }
func (s *Store) graceKey(key string) string  { return s.root + key + "\x00g" }
func (s *Store) markKey(key string) string   { return s.root + key + "\x00m" }

// splitKey returns the lease key and the kind of an etcd key under root.
func (s *Store) splitKey(k []byte) (key string, kind byte, ok bool) {
	rest, found := strings.CutPrefix(string(k), s.root)
	i := strings.IndexByte(rest, 0)
	if !found || i < 0 || i+2 != len(rest) {
		return "", 0, false
	}
	return rest[:i], rest[i+1], true
}

// record is a lease key's permanent state.
type record struct {
	epoch int64
	// implicit: the epoch is the record's create revision, written as 0.
	implicit bool
	owner    string // "" once revoked
	state    string
	running  bool
	// grace is the term's grace in seconds, rounded up and fixed at
	// acquisition: the last part of its session.
	grace int64
}

func (r record) encode() string {
	run := "0"
	if r.running {
		run = "1"
	}
	return strconv.FormatInt(r.epochField(), 10) + "\t" + r.owner + "\t" + r.state + "\t" + run + "\t" + strconv.FormatInt(r.grace, 10)
}

// epochField is what the record's keys hold in the epoch's place.
func (r record) epochField() int64 {
	if r.implicit {
		return 0
	}
	return r.epoch
}

// decodeRecord decodes a record key's value; kv must carry the key's
// create revision, the epoch of an implicit record.
func decodeRecord(key string, kv *mvccpb.KeyValue) (record, error) {
	f := strings.Split(string(kv.Value), "\t")
	if len(f) != 5 {
		return record{}, fmt.Errorf("corrupt record for key %q", key)
	}
	epoch, err1 := strconv.ParseInt(f[0], 10, 64)
	grace, err2 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return record{}, fmt.Errorf("corrupt record for key %q: %w", key, err)
	}
	switch f[2] {
	case stateHeld, stateReleased, stateRevoked:
	default:
		return record{}, fmt.Errorf("corrupt record for key %q: state %q", key, f[2])
	}
	rec := record{epoch: epoch, owner: f[1], state: f[2], running: f[3] == "1", grace: grace}
	if epoch == 0 {
		rec.epoch, rec.implicit = kv.CreateRevision, true
	}
	return rec, nil
}

// heldPrefix starts the encoding of the held term (epoch, owner) and no
// other record: owners hold no tab. A value v has this prefix exactly when
// heldPrefix < v < heldPrefixEnd, since every encoding continues past it —
// which is how a transaction tests "this term is still held" without
// knowing its running flag or grace.
func heldPrefix(epoch int64, owner string) string {
	return strconv.FormatInt(epoch, 10) + "\t" + owner + "\t" + stateHeld + "\t"
}

// heldPrefixEnd is heldPrefix with its final tab raised to the next byte.
func heldPrefixEnd(epoch int64, owner string) string {
	p := heldPrefix(epoch, owner)
	return p[:len(p)-1] + "\n"
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// liveValue is the value of a live key: the term it keeps alive.
func liveValue(epoch int64, owner string) string {
	return strconv.FormatInt(epoch, 10) + "\t" + owner
}

// view is what one read saw of a lease key's three etcd keys.
type view struct {
	key    string
	rec    *record
	recRev int64 // the record's mod revision; 0 without a record
	live   *mvccpb.KeyValue
	grace  *mvccpb.KeyValue
	mark   *mvccpb.KeyValue
}

// current reports whether (owner, epoch) is the key's held term and its
// live key is still there.
func (v *view) current(owner string, epoch int64) bool {
	if v.rec == nil || v.rec.state != stateHeld || v.rec.owner != owner || v.rec.epoch != epoch || v.live == nil {
		return false
	}
	return string(v.live.Value) == liveValue(v.rec.epochField(), owner) && (!v.rec.implicit || v.live.CreateRevision == epoch)
}

// term names one term of a key the way its keys do: by its epoch, or
// implicitly by their create revision.
type term struct {
	key      string
	epoch    int64
	implicit bool
}

// liveHolds compares key's live key with term t of owner. Every caller
// knows t from a record or a session member: its epoch is at least 1.
func (s *Store) liveHolds(t term, owner string) []clientv3.Cmp {
	live := s.liveKey(t.key)
	if !t.implicit {
		return []clientv3.Cmp{clientv3.Compare(clientv3.Value(live), "=", liveValue(t.epoch, owner))}
	}
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(live), "=", liveValue(0, owner)),
		clientv3.Compare(clientv3.CreateRevision(live), "=", t.epoch),
	}
}

// recordHolds compares key's record with the held term t of owner, whatever
// its running flag and grace.
func (s *Store) recordHolds(t term, owner string) []clientv3.Cmp {
	rk := s.recordKey(t.key)
	if !t.implicit && t.epoch < 1 {
		// A caller's epoch 0 would name every implicit term: it names
		// none (no key has a create revision below 0).
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(rk), "<", 0)}
	}
	field := t.epoch
	if t.implicit {
		field = 0
	}
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(rk), ">", heldPrefix(field, owner)),
		clientv3.Compare(clientv3.Value(rk), "<", heldPrefixEnd(field, owner)),
	}
	if t.implicit {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(rk), "=", t.epoch))
	}
	return cmps
}

// views groups the key-ordered entries of a range read by lease key.
func (s *Store) views(kvs []*mvccpb.KeyValue, into []*view) ([]*view, error) {
	for _, kv := range kvs {
		key, kind, ok := s.splitKey(kv.Key)
		if !ok {
			continue // not ours: someone wrote under the namespace
		}
		if n := len(into); n == 0 || into[n-1].key != key {
			into = append(into, &view{key: key})
		}
		v := into[len(into)-1]
		switch kind {
		case kindRecord:
			rec, err := decodeRecord(key, kv)
			if err != nil {
				return nil, err
			}
			v.rec, v.recRev = &rec, kv.ModRevision
		case kindLive:
			v.live = kv
		case kindGrace:
			v.grace = kv
		case kindMark:
			v.mark = kv
		}
	}
	return into, nil
}

// ceilSeconds rounds d up to whole seconds, the resolution of etcd leases:
// up, so a term never ends before the holder's deadline and a grace never
// ends early.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
