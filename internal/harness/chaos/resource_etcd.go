package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// An etcd resource is one etcd key per lease key, under /<Table>/, whose
// value is the epoch that wrote it last, zero-padded to 20 digits, a tab
// and the owner. The fence is the store's own comparison: a write is one
// transaction that puts the new value only if the key does not exist yet
// or its value sorts below the next epoch's padded digits — that is, its
// epoch is at most the writer's — and otherwise reads the newer epoch
// back. Nothing is decided on the client, so a frozen holder that thaws
// mid-write is refused by etcd itself. The revision of the put numbers
// the accepted writes in commit order (etcd's revisions only grow), and
// the previous value gives the epoch it replaced.

// etcdResourcePrefix is the prefix the resource's keys live under.
func etcdResourcePrefix(rs resourceSpec) string { return "/" + rs.Table + "/" }

// epochDigits is wide enough for every positive int64, so padded epochs
// sort as numbers.
const epochDigits = 20

func paddedEpoch(epoch int64) string { return fmt.Sprintf("%0*d", epochDigits, epoch) }

func openEtcdResource(rs resourceSpec) (resource, error) {
	c, err := rs.Server.etcdClient()
	if err != nil {
		return nil, fmt.Errorf("chaos: resource: %w", err)
	}
	return &etcdResource{c: c, prefix: etcdResourcePrefix(rs)}, nil
}

type etcdResource struct {
	c      *clientv3.Client
	prefix string
}

func (r *etcdResource) read(ctx context.Context, key string) error {
	_, err := r.c.Get(ctx, r.prefix+key)
	return err
}

func (r *etcdResource) write(ctx context.Context, key string, epoch int64, owner string) (writeResult, error) {
	k := r.prefix + key
	put := clientv3.OpPut(k, paddedEpoch(epoch)+"\t"+owner, clientv3.WithPrevKV())
	notNewer := clientv3.Compare(clientv3.Value(k), "<", paddedEpoch(epoch+1))
	resp, err := r.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(put).
		Else(clientv3.OpTxn([]clientv3.Cmp{notNewer}, []clientv3.Op{put}, []clientv3.Op{clientv3.OpGet(k)})).
		Commit()
	if err != nil {
		return writeResult{}, err
	}
	if resp.Succeeded { // the key's first write
		return writeResult{accepted: true, seq: resp.Header.Revision}, nil
	}
	if len(resp.Responses) != 1 || resp.Responses[0].GetResponseTxn() == nil {
		return writeResult{}, errors.New("chaos: etcd resource: unexpected transaction response")
	}
	inner := resp.Responses[0].GetResponseTxn()
	if len(inner.Responses) != 1 {
		return writeResult{}, errors.New("chaos: etcd resource: unexpected nested response")
	}
	if inner.Succeeded {
		out := writeResult{accepted: true, seq: resp.Header.Revision}
		if pk := inner.Responses[0].GetResponsePut().GetPrevKv(); pk != nil {
			if out.prev, err = storedEpoch(pk.Value); err != nil {
				return writeResult{}, err
			}
		}
		return out, nil
	}
	kvs := inner.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 {
		return writeResult{}, errors.New("chaos: etcd resource: refused, but the newer value is gone")
	}
	cur, err := storedEpoch(kvs[0].Value)
	return writeResult{cur: cur}, err
}

// storedEpoch reads the epoch from a resource value.
func storedEpoch(v []byte) (int64, error) {
	digits, _, _ := strings.Cut(string(v), "\t")
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || len(digits) != epochDigits {
		return 0, fmt.Errorf("chaos: etcd resource: bad value %q", v)
	}
	return n, nil
}

func (r *etcdResource) close() { _ = r.c.Close() }
