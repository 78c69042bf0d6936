// Package shrink gives a Go map back the room its deleted entries took.
package shrink

// Map is a map that counts what is deleted from it, so that it can be
// copied once most of it is gone: a Go map keeps the room it grew to, and
// the orphans of one worker that left, thousands of keys that are soon
// claimed, or a view's entries moved elsewhere would otherwise stay
// allocated for good. The count runs across calls, so a map emptied a
// little at a time is copied too. Read and write M; delete through
// Delete, and call Compact after the deletes.
type Map[K comparable, V any] struct {
	M       map[K]V
	dropped int // deleted since M was made
}

// Make returns an empty map.
func Make[K comparable, V any]() Map[K, V] { return Map[K, V]{M: make(map[K]V)} }

// Delete deletes k. It never copies the map, so it is safe inside a
// range over M.
func (m *Map[K, V]) Delete(k K) {
	if _, ok := m.M[k]; ok {
		delete(m.M, k)
		m.dropped++
	}
}

// Compact copies the map once more entries were deleted since it was
// made than it still has. The copy costs no more than the deletes did.
func (m *Map[K, V]) Compact() {
	if m.dropped <= len(m.M) {
		return
	}
	kept := make(map[K]V, len(m.M))
	for k, v := range m.M {
		kept[k] = v
	}
	m.M, m.dropped = kept, 0
}
