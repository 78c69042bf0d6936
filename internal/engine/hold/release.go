package hold

import (
	"context"

	"github.com/tenure-dev/tenure/store"
)

// A release that fails (a reset connection, a timeout) used to leave its
// term to expire: a peer waited TTL + grace for a key given up on
// purpose, and a peer that follows the push channel, hearing of no
// release, waited for its next whole read of the table. The keeper keeps
// such terms and RetryReleases sends them again, until the store answers
// or the term is over anyway.

// recordUnreleased keeps terms whose release failed, unless the key is
// held again meanwhile, under a newer term.
func (k *Keeper) recordUnreleased(terms []Term) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, t := range terms {
		if _, held := k.held[t.Key]; !held {
			k.unreleased[t.Key] = t
		}
	}
}

// Unreleased is how many terms whose release failed are still to be sent
// again.
func (k *Keeper) Unreleased() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.unreleased)
}

// RetryReleases sends again, in one call, the release of every term whose
// release failed and that may still block a peer: until its deadline plus
// the call timeout (the latest the store can have stamped its expiry)
// plus grace. It returns the terms the store has now released.
func (k *Keeper) RetryReleases(ctx context.Context) ([]Term, error) {
	now := k.now()
	var terms []Term
	var toRelease []store.Term
	k.mu.Lock()
	for key, t := range k.unreleased {
		if now.After(t.Deadline.Add(k.timing.CallTimeout + k.timing.Grace)) {
			delete(k.unreleased, key) // over: the store would refuse it too
			continue
		}
		terms = append(terms, t)
		toRelease = append(toRelease, store.Term{Key: t.Key, Epoch: t.Epoch})
	}
	k.mu.Unlock()
	if len(terms) == 0 {
		return nil, nil
	}
	_, err := bounded(ctx, k.timing.CallTimeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, k.st.Release(ctx, k.owner, toRelease)
	})
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	for _, t := range terms {
		if cur, ok := k.unreleased[t.Key]; ok && cur.Epoch == t.Epoch {
			delete(k.unreleased, t.Key)
		}
	}
	k.mu.Unlock()
	return terms, nil
}
