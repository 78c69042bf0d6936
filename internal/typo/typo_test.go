package typo

import "testing"

func TestDistanceCountsChangesAddsDropsAndSwaps(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"sslmode", "sslmode", 0},
		{"sslmod", "sslmode", 1},   // dropped
		{"sslmodee", "sslmode", 1}, // added
		{"sslmdoe", "sslmode", 1},  // swapped
		{"sslmaxe", "sslmode", 2},  // two changed
		{"", "abc", 3},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestNearestSuggestsOnlyATypo(t *testing.T) {
	names := []string{"table", "sslmode", "search_path"}
	for word, want := range map[string]string{
		"tabel":      "table",
		"SSLMod":     "sslmode",
		"serch_path": "search_path",
		"tab":        "", // two edits from a five-letter name is another word
		"frobnicate": "",
	} {
		if got := Nearest(word, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", word, got, want)
		}
	}
}
