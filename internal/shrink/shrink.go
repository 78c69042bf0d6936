// Package shrink gives a Go map back the room its deleted entries took.
package shrink

// Map returns m, or a copy of it once more entries were just dropped
// from it than it still has. A Go map keeps the room it grew to: the
// orphans of one worker that left, thousands of keys that are soon
// claimed, or a view's entries moved elsewhere would otherwise stay
// allocated for good. The copy costs no more than the deletes did.
func Map[K comparable, V any](m map[K]V, dropped int) map[K]V {
	if dropped <= len(m) {
		return m
	}
	kept := make(map[K]V, len(m))
	for k, v := range m {
		kept[k] = v
	}
	return kept
}
