// Package typo finds the name a misspelt one was meant to be, so that an
// error can say "did you mean ?sslmode=".
package typo

import "strings"

// Nearest returns the name in names closest to word, compared without
// case, when it is near enough to be a typo of it (one edit for a name
// shorter than six letters, else two); "" when none is.
func Nearest(word string, names []string) string {
	word = strings.ToLower(word)
	best, bestDist := "", 3
	for _, name := range names {
		d := Distance(word, strings.ToLower(name))
		if d < bestDist && d <= min(2, len(name)/3) {
			best, bestDist = name, d
		}
	}
	return best
}

// Distance is the optimal-string-alignment distance between a and b:
// letters changed, added, dropped or swapped with their neighbour.
func Distance(a, b string) int {
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
