package memstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/store"
)

var _ store.Pruner = (*Store)(nil)

// Prune implements store.Pruner: records whose term ended at least
// olderThan ago go, and the epoch floor keeps their epochs.
func (s *Store) Prune(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	if err := store.ValidatePrune(olderThan); err != nil {
		return 0, fmt.Errorf("memstore: prune: %w", err)
	}
	if err := s.begin(ctx, OpPrune); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	n := 0
	for key, r := range s.records {
		if !strings.HasPrefix(key, prefix) || now.Before(r.expiry.Add(olderThan)) {
			continue
		}
		s.floor = max(s.floor, r.epoch)
		delete(s.records, key)
		n++
	}
	if n > 0 {
		s.unsorted = true
	}
	return n, nil
}
